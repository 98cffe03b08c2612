package udplink

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
)

// Dialer is the host end of a UDP link: it plugs one local port (an HCA port) into a
// remote switch. It connects with back-off until the switch answers, attaches the port
// when it does, unplugs it when the session dies, and connects again.
type Dialer struct {
	e      *endpoint
	remote netip.AddrPort
	raw    rawAddr
	guid   uint64
	port   fabric.Port

	cur atomic.Pointer[peer]

	firstUp chan struct{} // closed when the first session comes up
	upOnce  sync.Once

	mu         sync.Mutex
	closed     bool
	crand      [randLen]byte // of the connect in flight
	delay      time.Duration // before the next connect
	timer      clock.Timer
	refusal    string // the switch's last refusal
	attempts   uint64
	unanswered uint64 // connects since the switch last answered
	connected  time.Time
}

// Dial plugs port, whose port GUID is guid, into the switch at remote (host:port). It
// returns once the socket is open; the session comes up in the background.
func Dial(remote string, guid uint64, port fabric.Port, cfg Config) (*Dialer, error) {
	cfg.setDefaults()
	ra, err := net.ResolveUDPAddr("udp", remote)
	if err != nil {
		return nil, fmt.Errorf("udplink: switch address %q: %w", remote, err)
	}
	rap := ra.AddrPort()
	rap = netip.AddrPortFrom(rap.Addr().Unmap(), rap.Port())
	local := "0.0.0.0:0"
	if !rap.Addr().Is4() {
		local = "[::]:0"
	}
	uc, fam, err := listenUDP(local)
	if err != nil {
		return nil, err
	}
	e, err := newEndpoint(uc, fam, cfg)
	if err != nil {
		uc.Close()
		return nil, err
	}
	raw, err := makeRawAddr(rap, fam)
	if err != nil {
		uc.Close()
		return nil, err
	}
	if cfg.PSK == nil {
		// The switch must be allowed to answer.
		if !allowed(e.cfg.Allow, rap.Addr()) {
			e.cfg.Allow = append(append([]netip.Prefix(nil), e.cfg.Allow...), netip.PrefixFrom(rap.Addr(), rap.Addr().BitLen()))
		}
	}
	d := &Dialer{e: e, remote: rap, raw: raw, guid: guid, port: port, delay: cfg.ReconnectMin, firstUp: make(chan struct{})}
	e.role = d
	e.start()
	d.connect()
	return d, nil
}

// connect sends a connect (outside d.mu: no lock across I/O) and arms the retry timer,
// unless a session is up.
func (d *Dialer) connect() {
	d.mu.Lock()
	if p := d.cur.Load(); p != nil && !p.gone.Load() {
		d.mu.Unlock()
		return
	}
	send := d.connectLocked()
	d.mu.Unlock()
	send()
}

// DialStatus is a dialer's state.
type DialStatus struct {
	Remote     netip.AddrPort
	Local      netip.AddrPort
	GUID       uint64
	Up         bool
	SwitchPort int       // while up
	Since      time.Time // when the session came up
	Attempts   uint64    // connects sent
	Refusal    string    // the switch's last refusal, if any
	RxPackets  uint64    // IB packets of the current session, each way
	TxPackets  uint64
	LastRx     time.Time
}

// Status reports the dialer's state.
func (d *Dialer) Status() DialStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := DialStatus{Remote: d.remote, Local: d.e.LocalAddr(), GUID: d.guid, Attempts: d.attempts, Refusal: d.refusal}
	if p := d.cur.Load(); p != nil && !p.gone.Load() {
		s.Up, s.SwitchPort, s.Since = true, p.num, d.connected
		s.RxPackets, s.TxPackets, s.LastRx = p.rxPkts.Load(), p.txPkts.Load(), time.Unix(0, p.lastRx.Load())
	}
	return s
}

// Counters returns the dialer's counters.
func (d *Dialer) Counters() Counters { return d.e.Counters() }

// FirstUp is closed when the dialer's first session comes up.
func (d *Dialer) FirstUp() <-chan struct{} { return d.firstUp }

// Close disconnects from the switch, unplugs the port and closes the socket.
func (d *Dialer) Close() {
	d.mu.Lock()
	d.closed = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
	if p := d.cur.Load(); p != nil && !p.gone.Load() {
		p.sendControl(MsgDisconnect, []byte{ReasonShutdown})
		d.endSession(p, false)
	}
	d.e.close()
}

// connectLocked prepares a connect, arms the retry timer with the back-off, and returns
// the function that sends the connect.
func (d *Dialer) connectLocked() (send func()) {
	if d.closed {
		return func() {}
	}
	rand.Read(d.crand[:])
	var body [connectLen]byte
	binary.BigEndian.PutUint64(body[:], d.guid)
	binary.BigEndian.PutUint64(body[8:], uint64(d.e.cfg.Clock.Now().UnixNano()))
	copy(body[16:], d.crand[:])
	send = func() { d.e.sendControl(&d.raw, d.e.hs, MsgConnect, 0, randUint64(), body[:]) }
	d.attempts++
	d.unanswered++
	if d.unanswered == 10 || d.unanswered%100 == 0 {
		// A switch that drops our connects as unauthenticated cannot say so.
		d.e.log.Warn("udplink: the switch does not answer; is it running, and does it have the same PSK?",
			"switch", d.remote, "port_guid", fmt.Sprintf("%#016x", d.guid), "connects", d.unanswered, "psk", d.e.hs != nil)
	}
	wait := d.delay
	d.delay = min(2*d.delay, d.e.cfg.ReconnectMax)
	if d.timer == nil {
		d.timer = d.e.cfg.Clock.AfterFunc(wait, d.retry)
	} else {
		d.timer.Reset(wait)
	}
	return send
}

func (d *Dialer) retry() { d.connect() }

func (d *Dialer) lookup(src netip.AddrPort) *peer {
	if src != d.remote {
		return nil
	}
	return d.cur.Load()
}

// handshake takes the switch's connect-ack or refuse.
func (d *Dialer) handshake(src netip.AddrPort, h Header, body []byte) {
	e := d.e
	if src != d.remote {
		e.ctr.drop(DropNotAllowed)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch h.Type() {
	case MsgConnectAck:
		d.unanswered = 0
		if len(body) != connectAckLen || h.Session() == 0 {
			e.ctr.drop(DropMalformed)
			return
		}
		if string(body[8:24]) != string(d.crand[:]) || d.closed {
			e.ctr.drop(DropStale) // an answer to an earlier connect
			return
		}
		rand.Read(d.crand[:]) // one ack per connect
		num := int(binary.BigEndian.Uint16(body))
		p := &peer{e: e, addr: src, raw: d.raw, session: h.Session(), port: d.port, num: num, guid: d.guid}
		if e.hs != nil {
			p.tx, p.rx = e.keys.session(body[8:24], body[24:40])
		}
		if old := d.cur.Swap(p); old != nil && old.end() {
			d.port.Attach(nil)
		}
		d.refusal, d.delay, d.connected = "", e.cfg.ReconnectMin, e.cfg.Clock.Now()
		if d.timer != nil {
			d.timer.Stop()
		}
		p.startTimer() // before the port sees the link: tests advance fake time from there
		d.port.Attach(p)
		d.upOnce.Do(func() { close(d.firstUp) })
		e.ctr.connects.Add(1)
		e.log.Info("udplink: connected to switch", "switch", d.remote, "port_guid", fmt.Sprintf("%#016x", d.guid), "switch_port", num)
	case MsgRefuse:
		if len(body) < refuseMinLen || len(body) != refuseMinLen+int(body[17]) {
			e.ctr.drop(DropMalformed)
			return
		}
		if string(body[:16]) != string(d.crand[:]) {
			e.ctr.drop(DropStale)
			return
		}
		d.unanswered = 0
		reason := string(body[18:])
		if d.refusal != reason {
			e.log.Error("udplink: the switch refused this port", "switch", d.remote,
				"port_guid", fmt.Sprintf("%#016x", d.guid), "reason", reason)
		}
		d.refusal = reason
		e.ctr.refused.Add(1)
		// Keep trying, slowly: a port may free up.
		d.delay = e.cfg.ReconnectMax
	case MsgDisconnect:
		// The switch has no session with us any more (it restarted): start again now.
		p := d.cur.Load()
		if p == nil || h.Session() != p.session {
			e.ctr.drop(DropUnknownSession)
			return
		}
		d.mu.Unlock()
		d.ended(p, false)
		d.mu.Lock()
	default:
		e.ctr.drop(DropType)
	}
}

// stale: a dialer has nothing to tell sources other than its switch.
func (d *Dialer) stale(netip.AddrPort, []byte) {}

// ended takes a session that died or that the switch closed: the port goes down and the
// dialer connects again.
func (d *Dialer) ended(p *peer, dead bool) {
	if d.endSession(p, dead) {
		d.mu.Lock()
		d.delay = d.e.cfg.ReconnectMin
		d.mu.Unlock()
		d.connect()
	}
}

func (d *Dialer) endSession(p *peer, dead bool) bool {
	if !p.end() {
		return false
	}
	if d.cur.CompareAndSwap(p, nil) {
		d.port.Attach(nil)
	}
	d.e.log.Warn("udplink: lost the switch", "switch", d.remote, "port_guid", fmt.Sprintf("%#016x", d.guid), "dead", dead)
	return true
}
