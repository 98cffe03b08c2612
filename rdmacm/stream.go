package rdmacm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// A byte stream over an RC connection, as net.Conn: data goes in SEND_WITH_IMM
// messages into receive buffers the peer posted; the immediate value returns credits
// (buffers re-posted since the last report). A sender sends only with a credit in hand,
// so no message ever meets an empty receive queue: a slow reader never causes an RNR
// NAK, it slows the writer down. One credit is kept for credit-only messages (an empty
// SEND_WITH_IMM), so two writers facing two slow readers cannot both be stuck without
// a way to report freed buffers (SDP's rule, IBA Annex A4.5.4).

// Stream parameters, exchanged in the connection's private data.
const (
	streamMagic   = 0x50475753 // "PGWS"
	streamVersion = 1
	streamHdrLen  = 12
	// DefaultRecvBufs and DefaultBufSize size a stream's receive side: 32 × 64 KiB.
	DefaultRecvBufs = 32
	DefaultBufSize  = 64 << 10
	sendSlots       = 16
)

// Addr is an rdma_cm stream endpoint: an IPoIB address and a port of the TCP port
// space.
type Addr struct{ netip.AddrPort }

func (Addr) Network() string { return "rdma" }

// Conn is a stream connection (net.Conn) over an RC QP set up by rdma_cm.
type Conn struct {
	id      *ID
	ownCh   *EventChannel // active side: the connection's own channel
	ctx     *hca.Context
	pd      *hca.PD
	cq      *hca.CQ
	cch     *hca.CompChannel
	qp      *hca.QP
	mem     []byte
	mr      *hca.MR
	nRecv   int
	bufLen  int // ours
	peerBuf int // the peer's receive buffer size: the most one message carries

	drainMu sync.Mutex
	wcs     []hca.WC

	mu      sync.Mutex
	cond    *sync.Cond
	rxq     []rxMsg // received, not yet read
	credits int     // the peer's receive buffers we may fill
	// reportDue says a credits report found no send slot or credit free (reportCredits):
	// drain tries it again as completions come in.
	reportDue atomic.Bool
	returned  int   // our buffers re-posted and not yet reported
	free      []int // free send slots
	inflight  int
	err       error // the connection failed
	eof       bool  // the peer disconnected
	closed    bool
	rdl, wdl  deadline
	done      chan struct{}
	once      sync.Once
}

type rxMsg struct {
	slot, off, n int
}

type deadline struct {
	t       time.Time
	timer   *time.Timer
	expired bool
}

var _ net.Conn = (*Conn)(nil)

// streamHdr is the private data of a stream's connect and accept.
func streamHdr(nRecv, bufLen int) []byte {
	b := make([]byte, streamHdrLen)
	binary.BigEndian.PutUint32(b, streamMagic)
	b[4] = streamVersion
	binary.BigEndian.PutUint16(b[6:], uint16(nRecv))
	binary.BigEndian.PutUint32(b[8:], uint32(bufLen))
	return b
}

func parseStreamHdr(b []byte) (nRecv, bufLen int, err error) {
	if len(b) < streamHdrLen || binary.BigEndian.Uint32(b) != streamMagic || b[4] != streamVersion {
		return 0, 0, errors.New("rdmacm: the peer is not an rdmacm stream")
	}
	nRecv, bufLen = int(binary.BigEndian.Uint16(b[6:])), int(binary.BigEndian.Uint32(b[8:]))
	if nRecv < 2 || bufLen < 1 {
		return 0, 0, fmt.Errorf("rdmacm: stream peer offers %d buffers of %d bytes", nRecv, bufLen)
	}
	return nRecv, bufLen, nil
}

// newConn creates the verbs side of a stream on id's device: PD, CQ, QP, one MR for
// the receive and send buffers, receives posted.
func newConn(id *ID) (*Conn, error) {
	dev := id.Device()
	c := &Conn{id: id, nRecv: DefaultRecvBufs, bufLen: DefaultBufSize, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.ctx = dev.Port.Device().Open()
	fail := func(err error) (*Conn, error) {
		c.release()
		return nil, err
	}
	var err error
	if c.pd, err = c.ctx.AllocPD(); err != nil {
		return fail(err)
	}
	c.cch = c.ctx.CreateCompChannel()
	if c.cq, err = c.ctx.CreateCQ(2*(c.nRecv+sendSlots), c.cch); err != nil {
		return fail(err)
	}
	c.mem = make([]byte, (c.nRecv+sendSlots)*c.bufLen)
	if c.mr, err = c.pd.RegMR(c.mem, hca.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if c.qp, err = id.CreateQP(c.pd, hca.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: hca.QPCap{MaxSendWR: sendSlots + 1, MaxRecvWR: uint32(c.nRecv), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fail(err)
	}
	wrs := make([]hca.RecvWR, c.nRecv)
	for i := range wrs {
		wrs[i] = hca.RecvWR{WRID: uint64(i), SGL: []hca.SGE{c.sge(i, 0, c.bufLen)}}
	}
	if _, err := c.qp.PostRecv(wrs); err != nil {
		return fail(err)
	}
	for i := range sendSlots {
		c.free = append(c.free, c.nRecv+i)
	}
	c.wcs = make([]hca.WC, 64)
	c.cq.SetCompHandler(func(*hca.CQ) { c.drain() })
	go c.pollLoop()
	return c, nil
}

func (c *Conn) sge(slot, off, n int) hca.SGE {
	return hca.SGE{Addr: c.mr.Addr() + uint64(slot*c.bufLen+off), Length: uint32(n), LKey: c.mr.LKey()}
}

func (c *Conn) slotBytes(slot int) []byte { return c.mem[slot*c.bufLen : (slot+1)*c.bufLen] }

// start records the peer's stream parameters once connected.
func (c *Conn) start(peerRecv, peerBuf int) {
	c.mu.Lock()
	c.credits, c.peerBuf = peerRecv, min(peerBuf, c.bufLen)
	c.mu.Unlock()
}

// pollLoop catches completions no delivery announced (flushes, timer-driven errors)
// through the completion channel.
func (c *Conn) pollLoop() {
	for {
		if err := c.cq.ReqNotify(false); err != nil {
			return
		}
		c.drain()
		select {
		case cq := <-c.cch.Events():
			cq.AckEvents(1)
		case <-c.done:
			return
		}
	}
}

// drain takes the CQ's completions: received messages join the read queue and bring
// credits; send completions free their slots. Whoever holds drainMu looks again after
// letting go, so nothing waits for the next event.
func (c *Conn) drain() {
	for c.cq.Pending() > 0 {
		if !c.drainMu.TryLock() {
			return
		}
		var repost []hca.RecvWR
		for {
			n := c.cq.Poll(c.wcs)
			if n == 0 {
				break
			}
			c.mu.Lock()
			for _, wc := range c.wcs[:n] {
				if wc.Status != hca.WCSuccess {
					// A flush follows a disconnect (DISCONNECTED tells) or another
					// error, which completes with its own status first.
					if c.err == nil && !c.closed && !c.eof && wc.Status != hca.WCWRFlushErr {
						c.err = fmt.Errorf("rdmacm: stream: %v", wc.Status)
					}
					if int(wc.WRID) >= c.nRecv { // a send slot (error WCs have no opcode)
						c.inflight--
					}
					continue
				}
				if int(wc.WRID) < c.nRecv {
					if wc.WCFlags&hca.WCWithImm != 0 {
						c.credits += int(wc.ImmData)
					}
					slot := int(wc.WRID)
					if wc.ByteLen == 0 { // credits only: the buffer goes straight back
						repost = append(repost, hca.RecvWR{WRID: uint64(slot), SGL: []hca.SGE{c.sge(slot, 0, c.bufLen)}})
						continue
					}
					c.rxq = append(c.rxq, rxMsg{slot: slot, n: int(wc.ByteLen)})
					continue
				}
				c.inflight--
				c.free = append(c.free, int(wc.WRID))
			}
			c.cond.Broadcast()
			c.mu.Unlock()
		}
		report := c.reportDue.Load()
		c.drainMu.Unlock()
		if len(repost) > 0 {
			c.repost(repost)
		} else if report {
			c.reportCredits()
		}
	}
}

// repost gives buffers back to the receive queue and reports them when enough piled up.
func (c *Conn) repost(wrs []hca.RecvWR) {
	if _, err := c.qp.PostRecv(wrs); err != nil {
		c.fail(err)
		return
	}
	c.mu.Lock()
	c.returned += len(wrs)
	c.mu.Unlock()
	c.reportCredits()
}

// reportCredits sends the buffers re-posted since the last message as a credits-only
// message once half the receive queue is back, if a send slot and a credit are free.
// When none is (a writer has every send slot in flight), drain calls it again as send
// completions free slots and credits arrive (unless a data message carried the credits
// meanwhile): a report that waited for the next Read
// could wait forever, the peer's writer stalled for the credits and this side's reader
// for the data that writer would send.
func (c *Conn) reportCredits() {
	c.mu.Lock()
	var slot int
	due := c.returned >= c.nRecv/2 && c.err == nil && !c.eof
	send := due && c.credits > 0 && len(c.free) > 0
	c.reportDue.Store(due && !send)
	var imm int
	if send {
		slot = c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
		c.credits--
		c.inflight++
		imm, c.returned = c.returned, 0
	}
	c.mu.Unlock()
	if send {
		c.post(slot, 0, imm)
	}
}

// post sends n bytes of slot with imm credits.
func (c *Conn) post(slot, n, imm int) {
	wr := hca.SendWR{WRID: uint64(slot), Opcode: hca.WRSendWithImm, SendFlags: hca.SendSignaled, ImmData: uint32(imm)}
	if n > 0 {
		wr.SGL = []hca.SGE{c.sge(slot, 0, n)}
	}
	if _, err := c.qp.PostSend([]hca.SendWR{wr}); err != nil {
		c.fail(err)
	}
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// wait blocks on the condition until woken; false if the deadline passed. mu held.
func (c *Conn) wait(d *deadline) bool {
	if d.expired {
		return false
	}
	c.cond.Wait()
	return !d.expired
}

// Read reads what the peer sent; io.EOF once the peer closed and everything is read.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	for len(c.rxq) == 0 {
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case c.eof:
			c.mu.Unlock()
			return 0, io.EOF
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if !c.wait(&c.rdl) {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
	}
	m := &c.rxq[0]
	n := copy(b, c.slotBytes(m.slot)[m.off:m.n])
	m.off += n
	var done []hca.RecvWR
	for len(c.rxq) > 0 && c.rxq[0].off == c.rxq[0].n {
		s := c.rxq[0].slot
		done = append(done, hca.RecvWR{WRID: uint64(s), SGL: []hca.SGE{c.sge(s, 0, c.bufLen)}})
		c.rxq = c.rxq[1:]
	}
	c.mu.Unlock()
	if len(done) > 0 {
		c.repost(done)
	}
	return n, nil
}

// Write sends b, in messages of at most the peer's buffer size, waiting for credits.
func (c *Conn) Write(b []byte) (int, error) {
	written := 0
	for written < len(b) {
		c.mu.Lock()
		for c.credits < 2 || len(c.free) == 0 {
			if err := c.writeErr(); err != nil {
				c.mu.Unlock()
				return written, err
			}
			if !c.wait(&c.wdl) {
				c.mu.Unlock()
				return written, os.ErrDeadlineExceeded
			}
		}
		if err := c.writeErr(); err != nil {
			c.mu.Unlock()
			return written, err
		}
		slot := c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
		c.credits--
		c.inflight++
		imm := c.returned
		c.returned = 0
		c.mu.Unlock()
		n := copy(c.slotBytes(slot)[:c.peerBuf], b[written:])
		c.post(slot, n, imm)
		written += n
	}
	return written, nil
}

func (c *Conn) writeErr() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.err != nil:
		return c.err
	case c.eof:
		return syscall.EPIPE
	}
	return nil
}

// peerClosed marks the stream ended by the peer (DISCONNECTED).
func (c *Conn) peerClosed() {
	c.drain()
	c.mu.Lock()
	c.eof = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// Close waits (up to 5 s) for the messages already written to be acknowledged, then
// disconnects and frees the connection's resources.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	end := time.Now().Add(5 * time.Second)
	t := time.AfterFunc(5*time.Second, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	for c.inflight > 0 && c.err == nil && !c.eof && time.Now().Before(end) {
		c.cond.Wait()
	}
	t.Stop()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.id.Disconnect()
	c.once.Do(func() { close(c.done) })
	go func() {
		// Let the disconnect run its course before the QP goes.
		time.Sleep(time.Second)
		c.id.Destroy()
		if c.ownCh != nil {
			c.ownCh.Destroy()
		}
		c.release()
	}()
	return nil
}

func (c *Conn) release() {
	if c.cq != nil {
		c.cq.SetCompHandler(nil)
	}
	c.id.DestroyQP()
	if c.mr != nil {
		c.mr.Dereg()
	}
	if c.cq != nil {
		c.cq.Destroy()
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
	if c.ctx != nil {
		c.ctx.Close()
	}
}

// LocalAddr and RemoteAddr are the IPoIB addresses and ports of the two ends.
func (c *Conn) LocalAddr() net.Addr  { return Addr{c.id.LocalAddr()} }
func (c *Conn) RemoteAddr() net.Addr { return Addr{c.id.PeerAddr()} }

// ID is the connection's rdma_cm ID; its QP, PD and device give access to RDMA READ
// and WRITE beside the stream.
func (c *Conn) ID() *ID { return c.id }

// PD is the connection's protection domain, for registering memory for RDMA.
func (c *Conn) PD() *hca.PD { return c.pd }

func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error  { c.setDeadline(&c.rdl, t); return nil }
func (c *Conn) SetWriteDeadline(t time.Time) error { c.setDeadline(&c.wdl, t); return nil }

func (c *Conn) setDeadline(d *deadline, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.t, d.expired = t, false
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expired = true
		c.cond.Broadcast()
		return
	}
	d.timer = time.AfterFunc(wait, func() {
		c.mu.Lock()
		if d.t.Equal(t) {
			d.expired = true
			c.cond.Broadcast()
		}
		c.mu.Unlock()
	})
}

// Dial connects a stream to address ("10.10.0.2:7471", an IPoIB address of the fabric)
// through the host's rdma_cm: resolve the address and the route, create the QP, connect.
// A port nobody listens on gives ECONNREFUSED, an unreachable one ETIMEDOUT or
// EHOSTUNREACH.
func Dial(ctx context.Context, h Host, address string) (*Conn, error) {
	return DialFrom(ctx, h, netip.Addr{}, address)
}

// DialFrom is Dial from a chosen local address (rdma_resolve_addr's src): the
// connection leaves from that address's interface and port.
func DialFrom(ctx context.Context, h Host, local netip.Addr, address string) (*Conn, error) {
	dst, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: dial %q: %w", address, err)
	}
	ch := CreateEventChannel()
	id, err := CreateID(h, ch, nil, PSTCP)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Conn, error) {
		id.Destroy()
		ch.Destroy()
		return nil, &net.OpError{Op: "dial", Net: "rdma", Addr: Addr{dst}, Err: err}
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	next := func(want EventType) (*Event, error) {
		e, err := ch.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		e.Ack()
		if e.Type != want {
			return e, eventErr(e)
		}
		return e, nil
	}
	if err := id.ResolveAddr(local, dst, timeout); err != nil {
		return fail(err)
	}
	if _, err := next(EventAddrResolved); err != nil {
		return fail(err)
	}
	if err := id.ResolveRoute(timeout); err != nil {
		return fail(err)
	}
	if _, err := next(EventRouteResolved); err != nil {
		return fail(err)
	}
	c, err := newConn(id)
	if err != nil {
		return fail(err)
	}
	c.ownCh = ch
	id.Context = c
	if err := id.Connect(ConnParam{Private: streamHdr(c.nRecv, c.bufLen), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}); err != nil {
		c.release()
		return fail(err)
	}
	e, err := next(EventEstablished)
	if err != nil {
		c.release()
		return fail(err)
	}
	nr, bl, err := parseStreamHdr(e.Param.Private)
	if err != nil {
		id.Disconnect()
		c.release()
		return fail(err)
	}
	c.start(nr, bl)
	go dispatch(ch)
	return c, nil
}

// Dialer dials rdma_cm streams the way net.Dialer dials TCP, for code that takes a
// DialContext function (HTTP transports, gRPC).
type Dialer struct {
	Host      Host
	LocalAddr netip.Addr // the source address; unset: the host picks one
}

// DialContext dials address ("10.10.0.2:7471"); network is "rdma" (or "tcp", the
// port space the stream uses).
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if network != "rdma" && network != "tcp" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	c, err := DialFrom(ctx, d.Host, d.LocalAddr, address)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// eventErr turns a failed step's event into an errno.
func eventErr(e *Event) error {
	switch e.Type {
	case EventRejected:
		if e.Status == 8 {
			return syscall.ECONNREFUSED
		}
		return fmt.Errorf("%w (REJ reason %d)", syscall.ECONNREFUSED, e.Status)
	case EventUnreachable:
		return syscall.ETIMEDOUT
	case EventAddrError, EventRouteError:
		if e.Status == -int(syscall.ETIMEDOUT) {
			return syscall.ETIMEDOUT
		}
		return syscall.EHOSTUNREACH
	}
	return fmt.Errorf("rdmacm: unexpected %v (status %d)", e.Type, e.Status)
}

// dispatch hands a channel's connection events to their streams until it is destroyed.
func dispatch(ch *EventChannel) {
	for {
		e, err := ch.GetEvent(context.Background())
		if err != nil {
			return
		}
		if c, ok := e.ID.Context.(*Conn); ok {
			switch e.Type {
			case EventDisconnected:
				c.peerClosed()
				e.ID.Disconnect() // answer the DREQ
			case EventUnreachable, EventConnectError, EventRejected:
				c.fail(eventErr(e))
			}
		}
		e.Ack()
	}
}

// Listener accepts stream connections (net.Listener).
type Listener struct {
	id    *ID
	ch    *EventChannel
	ready chan *Conn
	done  chan struct{}
	once  sync.Once
}

var _ net.Listener = (*Listener)(nil)

// Listen listens for stream connections on address ("10.10.0.2:7471", or
// "0.0.0.0:7471" for every device of the host).
func Listen(h Host, address string) (*Listener, error) {
	a, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("rdmacm: listen %q: %w", address, err)
	}
	ch := CreateEventChannel()
	id, err := CreateID(h, ch, nil, PSTCP)
	if err != nil {
		return nil, err
	}
	if err := id.BindAddr(a); err != nil {
		return nil, err
	}
	if err := id.Listen(128); err != nil {
		id.Destroy()
		return nil, err
	}
	l := &Listener{id: id, ch: ch, ready: make(chan *Conn, 128), done: make(chan struct{})}
	go l.loop()
	return l, nil
}

// loop answers connection requests and routes the connections' events.
func (l *Listener) loop() {
	for {
		e, err := l.ch.GetEvent(context.Background())
		if err != nil {
			return
		}
		switch e.Type {
		case EventConnectRequest:
			l.request(e)
		case EventEstablished:
			if c, ok := e.ID.Context.(*Conn); ok {
				select {
				case l.ready <- c:
				case <-l.done:
				}
			}
		case EventDisconnected:
			if c, ok := e.ID.Context.(*Conn); ok {
				c.peerClosed()
				e.ID.Disconnect()
			}
		}
		e.Ack()
	}
}

func (l *Listener) request(e *Event) {
	nr, bl, err := parseStreamHdr(e.Param.Private)
	if err != nil {
		e.ID.Reject(nil)
		return
	}
	c, err := newConn(e.ID)
	if err != nil {
		e.ID.Reject(nil)
		return
	}
	e.ID.Context = c
	c.start(nr, bl)
	if err := e.ID.Accept(ConnParam{Private: streamHdr(c.nRecv, c.bufLen), ResponderResources: 1, InitiatorDepth: 1,
		RNRRetryCount: 7}); err != nil {
		c.release()
	}
}

// Accept waits for the next established connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops listening; established connections stay.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.id.Destroy()
	})
	return nil
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return Addr{l.id.LocalAddr()} }
