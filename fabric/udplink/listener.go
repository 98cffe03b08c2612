package udplink

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/fabric"
)

// ErrFull is returned by an Acceptor that has no port left.
var ErrFull = errors.New("switch full")

// maxRefusalsLogged bounds Listener.refusals: past it, the reasons it remembers are
// forgotten (each GUID's next refusal is logged at WARN again).
const maxRefusalsLogged = 1024

// Acceptor gives connecting hosts their local ports.
type Acceptor interface {
	// Accept returns the port the host port guid plugs into and its number. An error
	// refuses the host; its text goes to the host in the refuse message.
	Accept(guid uint64, from netip.AddrPort) (port fabric.Port, num int, err error)
	// Release says that port num's session ended.
	Release(num int)
}

// Listener is the switch end of UDP links: it accepts connects, gives each session a port
// through its Acceptor and attaches the session's Link to it.
type Listener struct {
	e   *endpoint
	acc Acceptor

	peers atomic.Pointer[map[netip.AddrPort]*peer] // copy on write, under mu

	mu       sync.Mutex
	byPort   map[int]*peer
	lastConn map[uint64]uint64 // GUID → time of its last accepted connect (replay guard)
	// refusals is the reason last logged for each GUID refused since it last had a port:
	// a host retries every ReconnectMax, and its refusal is logged at WARN only when
	// the reason changes (DEBUG otherwise), as the host logs it.
	refusals map[uint64]string

	lastHint atomic.Int64 // clock time of the last stale-session answer
}

// Listen opens addr (host:port) and serves hosts through acc.
func Listen(addr string, acc Acceptor, cfg Config) (*Listener, error) {
	cfg.setDefaults()
	uc, fam, err := listenUDP(addr)
	if err != nil {
		return nil, err
	}
	l, err := newListener(uc, fam, acc, cfg)
	if err != nil {
		uc.Close()
		return nil, err
	}
	l.e.start()
	return l, nil
}

// newListener makes a Listener on uc without starting its receive loop.
func newListener(uc *net.UDPConn, fam int, acc Acceptor, cfg Config) (*Listener, error) {
	e, err := newEndpoint(uc, fam, cfg)
	if err != nil {
		return nil, err
	}
	l := &Listener{e: e, acc: acc, byPort: map[int]*peer{}, lastConn: map[uint64]uint64{}, refusals: map[uint64]string{}}
	l.peers.Store(&map[netip.AddrPort]*peer{})
	e.role = l
	return l, nil
}

// Addr is the address the listener receives on.
func (l *Listener) Addr() netip.AddrPort { return l.e.LocalAddr() }

// Counters returns the listener's counters.
func (l *Listener) Counters() Counters { return l.e.Counters() }

// Peers lists the live sessions by switch port.
func (l *Listener) Peers() []PeerInfo {
	l.mu.Lock()
	out := make([]PeerInfo, 0, len(l.byPort))
	for _, p := range l.byPort {
		out = append(out, p.info())
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// Close tells every host the switch is going, unplugs their ports and closes the socket.
func (l *Listener) Close() {
	l.mu.Lock()
	ps := make([]*peer, 0, len(l.byPort))
	for _, p := range l.byPort {
		ps = append(ps, p)
	}
	l.mu.Unlock()
	for _, p := range ps {
		p.sendControl(MsgDisconnect, []byte{ReasonShutdown})
		l.ended(p, false)
	}
	l.e.close()
}

func (l *Listener) lookup(src netip.AddrPort) *peer { return (*l.peers.Load())[src] }

// staleHintGap spaces the listener's stale-session answers, so that a flood of datagrams
// from unknown sources cannot make it send more than a trickle.
const staleHintGap = 5 * time.Millisecond

// stale answers a session message from a host the listener has no session with (it
// restarted, or declared the host dead) with a disconnect naming that session, sealed
// with the handshake key: the host reconnects at once instead of after its link
// timeout. The answer is never longer than what it answers.
func (l *Listener) stale(src netip.AddrPort, d []byte) {
	e := l.e
	if len(d) < HeaderLen {
		return
	}
	h := Header(d)
	if h.Version() != Version || (h.Type() != MsgKeepalive && h.Type() != MsgData) || h.Session() == 0 {
		return
	}
	now := e.cfg.Clock.Now().UnixNano()
	last := l.lastHint.Load()
	if time.Duration(now-last) < staleHintGap || !l.lastHint.CompareAndSwap(last, now) {
		return
	}
	to, err := makeRawAddr(src, e.fam)
	if err != nil {
		return
	}
	e.sendControl(&to, e.hs, MsgDisconnect, h.Session(), randUint64(), []byte{ReasonUnknownSession})
	e.ctr.hints.Add(1)
}

// handshake takes a connect: IBA has no such message; this is the link's own training.
func (l *Listener) handshake(src netip.AddrPort, h Header, body []byte) {
	e := l.e
	if h.Type() != MsgConnect { // a disconnect under the handshake key is for hosts
		e.ctr.drop(DropType)
		return
	}
	if len(body) != connectLen || h.Session() != 0 {
		e.ctr.drop(DropMalformed)
		return
	}
	guid := binary.BigEndian.Uint64(body)
	ts := binary.BigEndian.Uint64(body[8:])
	crand := body[16:32]
	to, err := makeRawAddr(src, e.fam)
	if err != nil {
		e.ctr.drop(DropMalformed)
		return
	}
	// The answer goes out after the lock is released (no lock across I/O).
	var reply func()
	defer func() {
		if reply != nil {
			reply()
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	// A replayed connect must not move a host's port to the replayer's address: each
	// GUID's connects must carry increasing times (as WireGuard's handshake timestamps).
	if last, ok := l.lastConn[guid]; ok && ts <= last {
		e.ctr.drop(DropStale)
		return
	}
	l.lastConn[guid] = ts
	// Whatever this address had before is over (the host restarted, or its ack was lost).
	if old := (*l.peers.Load())[src]; old != nil {
		l.endLocked(old)
	}
	port, num, err := l.acc.Accept(guid, src)
	if err != nil {
		code := byte(ReasonRejected)
		if errors.Is(err, ErrFull) {
			code = ReasonFull
		}
		msg := err.Error()
		if len(msg) > 255 {
			msg = msg[:255]
		}
		rb := make([]byte, 0, refuseMinLen+len(msg))
		rb = append(append(append(rb, crand...), code, byte(len(msg))), msg...)
		reply = func() { e.sendControl(&to, e.hs, MsgRefuse, 0, randUint64(), rb) }
		e.ctr.refused.Add(1)
		level := slog.LevelDebug
		if l.refusals[guid] != msg {
			level = slog.LevelWarn
			if len(l.refusals) >= maxRefusalsLogged {
				clear(l.refusals)
			}
			l.refusals[guid] = msg
		}
		e.log.Log(context.Background(), level, "udplink: refused host", "from", src,
			"port_guid", fmt.Sprintf("%#016x", guid), "reason", msg)
		return
	}
	delete(l.refusals, guid)
	if old := l.byPort[num]; old != nil {
		l.endLocked(old) // the same GUID from a new address
	}
	p := &peer{e: e, addr: src, raw: to, port: port, num: num, guid: guid}
	for p.session == 0 {
		p.session = uint32(randUint64())
	}
	var srand [randLen]byte
	rand.Read(srand[:])
	if e.hs != nil {
		p.rx, p.tx = e.keys.session(crand, srand[:])
	}
	ack := make([]byte, connectAckLen)
	binary.BigEndian.PutUint16(ack, uint16(num))
	copy(ack[8:], crand)
	copy(ack[24:], srand[:])
	l.setPeerLocked(src, p)
	l.byPort[num] = p
	// The port goes through Down even when a session replaces one, so that the switch
	// reports PortStateChange and the SM sweeps the host's retrained port (IBA 14.4.1).
	p.startTimer()
	port.Attach(nil)
	port.Attach(p)
	reply = func() { e.sendControl(&to, e.hs, MsgConnectAck, p.session, randUint64(), ack) }
	e.ctr.connects.Add(1)
	e.log.Info("udplink: host connected", "from", src, "port_guid", fmt.Sprintf("%#016x", guid), "switch_port", num)
}

func (l *Listener) setPeerLocked(a netip.AddrPort, p *peer) {
	old := *l.peers.Load()
	m := make(map[netip.AddrPort]*peer, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if p == nil {
		delete(m, a)
	} else {
		m[a] = p
	}
	l.peers.Store(&m)
}

// ended takes a session that died or was disconnected.
func (l *Listener) ended(p *peer, dead bool) {
	l.mu.Lock()
	live := l.endLocked(p)
	l.mu.Unlock()
	if live {
		l.e.log.Info("udplink: host gone", "from", p.addr, "port_guid", fmt.Sprintf("%#016x", p.guid),
			"switch_port", p.num, "dead", dead)
	}
}

// endLocked ends p, unplugs its port and releases it; it reports whether p was live.
func (l *Listener) endLocked(p *peer) bool {
	if !p.end() {
		return false
	}
	if (*l.peers.Load())[p.addr] == p {
		l.setPeerLocked(p.addr, nil)
	}
	if l.byPort[p.num] == p {
		delete(l.byPort, p.num)
		p.port.Attach(nil)
		l.acc.Release(p.num)
	}
	return true
}

func randUint64() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}
