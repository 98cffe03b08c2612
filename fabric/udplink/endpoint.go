package udplink

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/wire"
)

// Config holds what both ends of a UDP link share. The zero value is valid: no PSK,
// loopback-only allow-list, the real clock, the default timers.
type Config struct {
	// PSK is the pre-shared key; nil disables authentication (then Allow applies).
	PSK []byte
	// Allow lists the source prefixes accepted without a PSK; nil means DefaultAllow.
	Allow []netip.Prefix
	// Keepalive is the interval between keepalives of a session (default 250 ms); a
	// session from which nothing arrives for DeadAfter (default 2 s) is dead: its port
	// goes down.
	Keepalive, DeadAfter time.Duration
	// ReconnectMin and ReconnectMax bound a dialer's back-off between connects
	// (defaults 100 ms and 1 s); the delay doubles after each unanswered attempt.
	ReconnectMin, ReconnectMax time.Duration
	// Batch is the number of datagrams per recvmmsg/sendmmsg call (default 32).
	Batch  int
	Clock  clock.Clock
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Allow == nil {
		c.Allow = DefaultAllow
	}
	if c.Keepalive <= 0 {
		c.Keepalive = 250 * time.Millisecond
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 2 * time.Second
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = max(time.Second, c.ReconnectMin)
	}
	if c.Batch <= 0 {
		c.Batch = 32
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// role is what a Listener or a Dialer adds to the endpoint's receive path. Its methods run
// on the receive goroutine, except dead, which runs on a peer's timer.
type role interface {
	// lookup returns the session peer datagrams from src belong to, or nil.
	lookup(src netip.AddrPort) *peer
	// handshake takes an authenticated connect, connect-ack or refuse.
	handshake(src netip.AddrPort, h Header, body []byte)
	// ended takes a peer whose session is over: dead (no datagram for DeadAfter) or
	// disconnected by the other side.
	ended(p *peer, dead bool)
	// stale takes a datagram from a source with no session (d may be unauthenticated).
	stale(src netip.AddrPort, d []byte)
}

// endpoint is one UDP socket with its receive loop, shared by Listener and Dialer.
type endpoint struct {
	cfg  Config
	uc   *net.UDPConn
	rc   syscall.RawConn
	fam  int
	keys keys
	hs   cipher.AEAD // handshake key; nil without a PSK
	role role
	log  *slog.Logger

	ctr  counters
	free chan *batch // send batches

	// Receive-loop state.
	rx      *batch
	hsNonce nonce

	gso     atomic.Bool // send with UDP_SEGMENT until the kernel refuses
	closed  atomic.Bool
	started bool
	done    chan struct{}
}

func newEndpoint(uc *net.UDPConn, fam int, cfg Config) (*endpoint, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	e := &endpoint{
		cfg: cfg, uc: uc, rc: rc, fam: fam, log: cfg.Logger,
		free: make(chan *batch, 8),
		done: make(chan struct{}),
	}
	e.gso.Store(true)
	if enableGRO(rc) {
		// Coalesced runs arrive in one buffer: fewer, bigger ones.
		e.rx = newBatch(groMessages, groBuffer)
	} else {
		e.rx = newBatch(cfg.Batch, maxDatagram)
	}
	if cfg.PSK != nil {
		if len(cfg.PSK) < PSKMinLen {
			return nil, errors.New("udplink: pre-shared key shorter than 16 bytes")
		}
		e.keys = keys{psk: cfg.PSK}
		e.hs = e.keys.handshake()
	}
	return e, nil
}

// Counters returns a snapshot of the endpoint's counters.
func (e *endpoint) Counters() Counters { return e.ctr.snapshot() }

// LocalAddr is the socket's address.
func (e *endpoint) LocalAddr() netip.AddrPort { return e.uc.LocalAddr().(*net.UDPAddr).AddrPort() }

func (e *endpoint) start() {
	e.started = true
	go e.loop()
}

func (e *endpoint) close() {
	if e.closed.Swap(true) {
		return
	}
	e.uc.Close()
	if e.started {
		<-e.done
	}
}

// loop receives datagrams until the socket closes.
func (e *endpoint) loop() {
	defer close(e.done)
	for {
		if err := e.rx.readBatch(e.rc); err != nil {
			if e.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// An unconnected UDP socket reports no ICMP errors; anything else is
			// unexpected, but a daemon keeps serving.
			e.log.Warn("udplink: receive", "err", err)
			continue
		}
		e.receive(e.rx)
	}
}

// With UDP_GRO, the receive batch is groMessages buffers of groBuffer bytes: a
// coalesced run of a flow is at most 64 KiB.
const (
	groMessages = 8
	groBuffer   = 65536 + maxDatagram
)

// receive handles one received batch: data for one peer in a row is delivered in one
// Receive call.
func (e *endpoint) receive(b *batch) {
	now := e.cfg.Clock.Now().UnixNano()
	var cur *peer
	run := b.run[:0]
	var n uint64
	for i := 0; i < b.count; i++ {
		src, trunc := b.from(i), b.truncated(i)
		d, seg := b.bufs[i][:b.lens[i]], b.segs[i]
		if seg <= 0 || seg >= len(d) {
			seg = len(d)
		}
		for first := true; first || len(d) > 0; first = false {
			piece := d[:min(seg, len(d))]
			d = d[len(piece):]
			n++
			p, pkt := e.classify(piece, src, trunc, now, &cur, &run)
			if pkt == nil {
				continue
			}
			if p != cur {
				e.deliver(cur, run)
				cur, run = p, run[:0]
			}
			run = append(run, pkt)
		}
	}
	e.ctr.rxDgrams.Add(n)
	e.deliver(cur, run)
	b.run = run[:0]
}

func (e *endpoint) deliver(p *peer, run [][]byte) {
	if p == nil || len(run) == 0 {
		return
	}
	var n uint64
	for _, q := range run {
		n += uint64(len(q))
	}
	e.ctr.rxPkts.Add(uint64(len(run)))
	e.ctr.rxBytes.Add(n)
	p.rxPkts.Add(uint64(len(run)))
	if port := p.port; port != nil && !p.gone.Load() {
		port.Receive(run)
	}
}

// auth is how a datagram was authenticated.
type auth int

const (
	authNone auth = iota // no PSK configured
	authSession
	authHandshake
)

// classify checks datagram i and returns the packet it carries with its peer, or nil
// after handling (or dropping) anything else. Control messages first deliver the data
// collected so far, so that a session's packets and its end stay in order.
func (e *endpoint) classify(d []byte, src netip.AddrPort, trunc bool, now int64, cur **peer, run *[][]byte) (*peer, []byte) {
	if trunc || len(d) > maxDatagram {
		e.ctr.drop(DropTruncated)
		return nil, nil
	}
	min := HeaderLen
	if e.hs != nil {
		min += TagLen
	}
	if len(d) < min {
		e.ctr.drop(DropShort)
		return nil, nil
	}
	if e.hs == nil && !allowed(e.cfg.Allow, src.Addr()) {
		e.ctr.drop(DropNotAllowed)
		return nil, nil
	}
	p := e.role.lookup(src)
	how := authNone
	if e.hs != nil {
		// The tag is checked before any field is believed (the sequence number only
		// forms the nonce under which it is checked).
		switch {
		case p != nil && open(p.rx, &p.rxNonce, d):
			how = authSession
		case open(e.hs, &e.hsNonce, d):
			how = authHandshake
		default:
			e.ctr.drop(DropAuth)
			if p == nil {
				e.role.stale(src, d)
			}
			return nil, nil
		}
		d = d[:len(d)-TagLen]
	}
	h := Header(d)
	if h.Version() != Version {
		e.ctr.drop(DropVersion)
		return nil, nil
	}
	t := h.Type()
	if t.handshake() || (t == MsgDisconnect && how == authHandshake) {
		if how == authSession {
			e.ctr.drop(DropType)
			return nil, nil
		}
		e.deliver(*cur, *run)
		*cur, *run = nil, (*run)[:0]
		e.role.handshake(src, h, d[HeaderLen:])
		return nil, nil
	}
	if t != MsgKeepalive && t != MsgDisconnect && t != MsgData {
		e.ctr.drop(DropType)
		return nil, nil
	}
	if p == nil || how == authHandshake || h.Session() != p.session || p.gone.Load() {
		e.ctr.drop(DropUnknownSession)
		if p == nil {
			e.role.stale(src, d)
		}
		return nil, nil
	}
	seq := h.Seq()
	if !p.win.check(seq) {
		e.ctr.drop(DropReplay)
		return nil, nil
	}
	body := d[HeaderLen:]
	if t == MsgData && (len(body) < wire.VCRCLen+1 || !wire.CheckVCRC(body)) {
		e.ctr.drop(DropVCRC)
		return nil, nil
	}
	// Only a datagram that passed every check moves the window (RFC 4303 §3.4.3).
	p.win.accept(seq)
	p.lastRx.Store(now)
	switch t {
	case MsgKeepalive:
		return nil, nil
	case MsgDisconnect:
		e.deliver(*cur, *run)
		*cur, *run = nil, (*run)[:0]
		e.role.ended(p, false)
		return nil, nil
	}
	pkt := body[:len(body)-wire.VCRCLen]
	if wire.ClearMarks(pkt) {
		// A mark of deferred work from another process would let the packet skip its
		// ICRC check here; the VCRC is made again over the cleared byte, for a switch
		// that sends the datagram on from this buffer (forwarded).
		binary.LittleEndian.PutUint16(body[len(pkt):], wire.VCRC(pkt))
	}
	return p, pkt
}

// getBatch takes a send batch from the free list.
func (e *endpoint) getBatch() *batch {
	select {
	case b := <-e.free:
		return b
	default:
		return newBatch(e.cfg.Batch, maxDatagram)
	}
}

func (e *endpoint) putBatch(b *batch) {
	b.count = 0
	select {
	case e.free <- b:
	default:
	}
}

// flush sends a batch's datagrams (to p, or a control message when p is nil) and
// empties it. A path that cannot take segmented sends (UDP_SEGMENT: a segment larger than
// its MTU, or a device without checksum offload) is sent datagram by datagram from then
// on: the peer's path, or, for EIO, every path of the socket.
func (e *endpoint) flush(b *batch, p *peer) {
	if b.count == 0 {
		return
	}
	gso := p != nil && e.gso.Load() && !p.noGSO.Load()
	refused, err := b.writeBatch(e.rc, gso)
	if refused {
		if b.refusal == syscall.EIO {
			e.gso.Store(false)
		}
		if !p.noGSO.Swap(true) {
			e.log.Info("udplink: this path does not take segmented UDP sends; sending datagrams one by one",
				"peer", p.addr, "err", b.refusal)
		}
	}
	if err != nil && !e.closed.Load() {
		e.ctr.drop(DropTxError)
	}
	e.ctr.txDgrams.Add(uint64(b.datagram))
	b.count = 0
}

// sendData sends IB packets on p's session: each is copied into a datagram, finalized
// (wire.Finalize: the checksums an in-process sender deferred), given its VCRC and, with
// a PSK, its tag.
func (e *endpoint) sendData(p *peer, pkts [][]byte) {
	if p.gone.Load() {
		e.ctr.drops[DropTxDown].Add(uint64(len(pkts)))
		return
	}
	b := e.getBatch()
	var n, bytes, fwd uint64
	for _, pkt := range pkts {
		if len(pkt) > maxPacket || len(pkt) == 0 {
			e.ctr.drop(DropTxOversize)
			continue
		}
		d := b.bufs[b.count]
		if f := e.forwarded(pkt); f != nil {
			d = f
			b.lens[b.count] = p.encodeForward(d, len(pkt), &b.nonce)
			fwd++
		} else {
			b.lens[b.count] = p.encodeData(d, pkt, &b.nonce)
		}
		b.iovs[b.count].Base = &d[0]
		b.setTo(b.count, &p.raw)
		b.count++
		n++
		bytes += uint64(len(pkt))
		if b.count == len(b.msgs) {
			e.flush(b, p)
		}
	}
	e.flush(b, p)
	e.putBatch(b)
	if fwd > 0 {
		e.ctr.txForwarded.Add(fwd) // before txPkts: whoever sees the packets counted sees these
	}
	e.ctr.txPkts.Add(n)
	e.ctr.txBytes.Add(bytes)
	p.txPkts.Add(n)
}

// forwarded returns the datagram around pkt when pkt is a packet this endpoint received
// and is handing on synchronously — a switch forwarding from one of its UDP ports to
// another (or to the same one): pkt then lies in the receive batch (fabric.Receiver may
// not keep packets past the call, so nothing else can point there) between its link
// header and the VCRC classify checked, followed by room for a tag where a PSK gives
// one. A switch forwards packets unchanged (it copies what it alters: directed-route
// SMPs), so that VCRC still holds, and the datagram can leave from where it arrived with
// a new header (and tag): no copy, no second VCRC pass (IBA 7.8.2 asks for a VCRC
// correct for the hop, which the unchanged bytes have). Otherwise nil.
func (e *endpoint) forwarded(pkt []byte) []byte {
	mem := e.rx.mem
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(pkt)))
	tail := wire.VCRCLen
	if e.hs != nil {
		tail += TagLen
	}
	if at < base+HeaderLen || at+uintptr(len(pkt)+tail) > base+uintptr(len(mem)) {
		return nil
	}
	off := int(at - base)
	return mem[off-HeaderLen : off+len(pkt)+tail]
}

// encodeForward makes d, a received datagram carrying an n-byte packet (forwarded),
// a data message of p's session, and returns its length.
func (p *peer) encodeForward(d []byte, n int, nc *nonce) int {
	Header(d).put(MsgData, p.session, p.txSeq.Add(1))
	end := HeaderLen + n + wire.VCRCLen
	if p.tx != nil {
		end = len(seal(p.tx, nc, d[:end])) // over the received tag
	}
	return end
}

// encodeData writes the data message carrying pkt into buf and returns its length.
func (p *peer) encodeData(buf, pkt []byte, n *nonce) int {
	Header(buf).put(MsgData, p.session, p.txSeq.Add(1))
	end := HeaderLen + wire.CopyPacket(buf[HeaderLen:], pkt) // Finalize brings a reference's bytes in
	ib := buf[HeaderLen:end]
	wire.Finalize(ib)
	binary.LittleEndian.PutUint16(buf[end:], wire.VCRC(ib))
	end += wire.VCRCLen
	if p.tx != nil {
		end = len(seal(p.tx, n, buf[:end]))
	}
	return end
}

// sendControl sends one control message to to. a seals it (nil without a PSK).
func (e *endpoint) sendControl(to *rawAddr, a cipher.AEAD, t MsgType, session uint32, seq uint64, body []byte) {
	b := e.getBatch()
	buf := b.bufs[0]
	b.iovs[0].Base = &buf[0] // a data send may have pointed it at a received datagram
	Header(buf).put(t, session, seq)
	end := HeaderLen + copy(buf[HeaderLen:], body)
	if a != nil {
		end = len(seal(a, &b.nonce, buf[:end]))
	}
	b.lens[0] = end
	b.setTo(0, to)
	b.count = 1
	e.flush(b, nil)
	e.putBatch(b)
}

// peer is one session: the Link its port transmits on, and the state its datagrams are
// checked against. A new session is a new peer; nothing but the atomics changes after
// creation.
type peer struct {
	e       *endpoint
	addr    netip.AddrPort
	raw     rawAddr
	session uint32
	tx, rx  cipher.AEAD // nil without a PSK
	port    fabric.Port
	num     int    // switch port number (listener: local, dialer: the switch's)
	guid    uint64 // the host port's GUID

	noGSO          atomic.Bool // the path refused a segmented send
	txSeq          atomic.Uint64
	lastRx         atomic.Int64 // clock time, Unix ns
	gone           atomic.Bool
	rxPkts, txPkts atomic.Uint64

	// Receive goroutine only.
	win     replayWindow
	rxNonce nonce

	tmu   sync.Mutex
	timer clock.Timer
}

// Send implements fabric.Link.
func (p *peer) Send(pkts [][]byte) { p.e.sendData(p, pkts) }

// startTimer starts the keepalive and dead-peer timer.
func (p *peer) startTimer() {
	p.lastRx.Store(p.e.cfg.Clock.Now().UnixNano())
	p.tmu.Lock()
	p.timer = p.e.cfg.Clock.AfterFunc(p.e.cfg.Keepalive, p.tick)
	p.tmu.Unlock()
}

// tick sends a keepalive, or ends the session when nothing arrived for DeadAfter.
func (p *peer) tick() {
	if p.gone.Load() {
		return
	}
	cfg := &p.e.cfg
	if time.Duration(cfg.Clock.Now().UnixNano()-p.lastRx.Load()) >= cfg.DeadAfter {
		p.e.ctr.deaths.Add(1)
		p.e.role.ended(p, true)
		return
	}
	p.sendControl(MsgKeepalive, nil)
	p.tmu.Lock()
	if !p.gone.Load() {
		p.timer.Reset(cfg.Keepalive)
	}
	p.tmu.Unlock()
}

// sendControl sends a session control message (keepalive, disconnect).
func (p *peer) sendControl(t MsgType, body []byte) {
	p.e.sendControl(&p.raw, p.tx, t, p.session, p.txSeq.Add(1), body)
}

// end marks the session over and stops its timer; it reports whether it was still live.
func (p *peer) end() bool {
	if p.gone.Swap(true) {
		return false
	}
	p.tmu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.tmu.Unlock()
	return true
}

// PeerInfo describes one session.
type PeerInfo struct {
	Addr       netip.AddrPort
	GUID       uint64
	Port       int // switch port number
	Session    uint32
	LastRx     time.Time
	RxPackets  uint64
	TxPackets  uint64
	SessionKey bool // authenticated with a PSK
}

func (p *peer) info() PeerInfo {
	return PeerInfo{Addr: p.addr, GUID: p.guid, Port: p.num, Session: p.session,
		LastRx: time.Unix(0, p.lastRx.Load()), RxPackets: p.rxPkts.Load(), TxPackets: p.txPkts.Load(),
		SessionKey: p.tx != nil}
}
