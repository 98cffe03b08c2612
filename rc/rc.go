// Package rc is the Reliable Connection transport (IBA 9.7) and its unreliable sibling
// UC (IBA 9.8): packetisation by path MTU, PSNs, ACK/NAK with AETH, retransmission
// (go-back-N from the first unacknowledged PSN) on the local ACK timeout and on NAKs, RNR
// retry, RDMA READ and WRITE, atomics, duplicate detection and replay.
//
// Every RC QP's outgoing packets, requests and responses alike, leave through one
// drainer: whichever goroutine kicks the QP first sends until nothing is left, and kicks
// that arrive meanwhile (from timers, or re-entrantly from an in-process fabric that
// delivers the answer to a packet inside the Transmit call that sent it) only flag more
// work. No lock is held across Transmit.
package rc

import (
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Register installs the RC and UC transports on d.
func Register(d *hca.Device) {
	t := &Transport{}
	d.SetTransport(hca.QPTypeRC, t)
	d.SetTransport(hca.QPTypeUC, t)
	d.SetTransport(hca.QPTypeXRCSend, t)
	d.SetTransport(hca.QPTypeXRCRecv, t)
}

// Transport implements hca.Transport for RC and UC QPs.
type Transport struct{}

// conn is the transport state of one RC/UC QP (QP.TransportState).
type conn struct {
	qp  *hca.QP
	uc  bool
	xrc bool // an XRC send (requester) or receive (responder) QP
	clk clock.Clock

	path atomic.Pointer[path]
	alt  atomic.Pointer[path] // the alternate path while one is loaded (apm.go)

	mu  sync.Mutex // requester state
	req requester

	rmu  sync.Mutex // responder state
	resp responder

	stats Stats

	running   atomic.Bool
	pending   atomic.Bool
	failing   atomic.Bool   // a fatal error waits to move the QP to ERR
	failEvent atomic.Uint32 // and the affiliated event it raises then, plus one (0: none)

	// Static rate control (IBA 9.11), owned by the drainer, and the timer that kicks the
	// drainer when it may send again.
	pacer     hca.Pacer
	paceTimer clock.Timer
	paceArmed atomic.Bool
}

// paced reports whether the drainer must wait before it sends on p, and arms the timer
// that kicks it when it may.
func (c *conn) paced(p *path) bool {
	if p.pace == 0 {
		return false
	}
	wait := c.pacer.Wait(c.clk.Now())
	if wait == 0 {
		return false
	}
	if c.paceArmed.CompareAndSwap(false, true) {
		if c.paceTimer == nil {
			c.paceTimer = c.clk.AfterFunc(wait, c.paceKick)
		} else {
			c.paceTimer.Reset(wait)
		}
	}
	return true
}

func (c *conn) paceKick() {
	c.paceArmed.Store(false)
	c.kick()
}

// Stats counts a connection's recovery events (pibgw's inspection shows them).
type Stats struct {
	Timeouts      atomic.Uint64 // local ACK timer expiries that retransmitted
	SeqNAKs       atomic.Uint64 // PSN sequence NAKs acted on (go-back-N)
	RNRNAKs       atomic.Uint64 // RNR NAKs received
	Retransmitted atomic.Uint64 // request packets sent again
	Duplicates    atomic.Uint64 // duplicate requests answered by the responder
	Migrations    atomic.Uint64 // path migrations (IBA 17.2.8)
	Ghosts        atomic.Uint64 // ACKs/NAKs for PSNs this QP did not send, dropped
}

// ConnStats returns the recovery counters of an RC/UC QP (nil for other QPs).
func ConnStats(qp *hca.QP) *Stats {
	if c := getConn(qp); c != nil {
		return &c.stats
	}
	return nil
}

// Window is the most request packets a QP has unacknowledged at once (pib used 64).
const Window = 256

func getConn(qp *hca.QP) *conn {
	c, _ := qp.TransportState.(*conn)
	return c
}

// Modified follows the QP through its states: INIT creates the state, RTR sets the
// responder's expected PSN, RTS the requester's next PSN, ERR flushes, RESET forgets.
func (t *Transport) Modified(qp *hca.QP, from, to hca.QPState) {
	c := getConn(qp)
	if c == nil {
		t := qp.Type()
		c = &conn{qp: qp, uc: t == hca.QPTypeUC, xrc: t == hca.QPTypeXRCSend || t == hca.QPTypeXRCRecv, clk: qp.Device().Clock()}
		qp.TransportState = c
	}
	a := qp.Attr()
	if to >= hca.QPStateRTR && to != hca.QPStateErr {
		c.setPath(&a)
	}
	switch {
	case to == hca.QPStateReset:
		c.reset()
	case to == hca.QPStateErr:
		c.flush()
	case to == hca.QPStateRTR && from == hca.QPStateInit:
		c.rmu.Lock()
		c.resp = responder{ePSN: a.RQPSN & psnMask, xrc: c.xrc}
		c.resp.res = make([]rdRes, max(int(a.MaxDestRdAtomic), 1))
		c.rmu.Unlock()
	case to == hca.QPStateRTS && (from == hca.QPStateRTR || from == hca.QPStateSQD || from == hca.QPStateRTS):
		c.mu.Lock()
		if from == hca.QPStateRTR {
			c.req.init(a.SQPSN&psnMask, int(a.Cap.MaxSendWR))
		}
		c.req.timeout = ackTimeout(a.Timeout)
		c.req.retryCnt, c.req.rnrRetry, c.req.maxRdAtomic = a.RetryCnt, a.RNRRetry, int(max(a.MaxRdAtomic, 1))
		if from == hca.QPStateRTR {
			c.req.retryLeft, c.req.rnrLeft = a.RetryCnt, a.RNRRetry
		}
		c.mu.Unlock()
		defer c.kick()
	case to == hca.QPStateSQD:
		c.checkDrained()
	}
	c.rmu.Lock()
	c.resp.minRNR = a.MinRNRTimer
	c.resp.access = a.QPAccessFlags
	c.rmu.Unlock()
}

func (c *conn) setPath(a *hca.QPAttr) {
	p := newPath(c.qp.Port(), &a.AHAttr, a.PKeyIndex, a)
	p.migReq = a.PathMigState == hca.MigMigrated
	p.xrc = c.xrc
	c.path.Store(p)
	var alt *path
	if c.qp.AltPort() != nil {
		if port := c.qp.Device().Port(int(a.AltPortNum)); port != nil {
			alt = newPath(port, &a.AltAHAttr, a.AltPKeyIndex, a)
			alt.migReq = true // used once migrated
			alt.xrc = c.xrc
		}
	}
	c.alt.Store(alt)
}

func newPath(port *hca.Port, ah *hca.AHAttr, pkeyIndex uint16, a *hca.QPAttr) *path {
	pkey, _ := port.PKey(int(pkeyIndex))
	p := &path{
		port: port, dlid: ah.DLID, sl: ah.SL, global: ah.IsGlobal,
		grh: ah.GRH, pkey: pkey, destQPN: a.DestQPNum, mtu: a.PathMTU.Bytes(),
	}
	p.pace = hca.PaceBytesPerSec(port, ah.StaticRate)
	lmcMask := uint16(1)<<port.LMC() - 1
	p.slid = port.LID() | uint16(ah.SrcPathBits)&lmcMask
	if p.global {
		p.sgid, _ = port.GID(int(ah.GRH.SGIDIndex))
	}
	if p.mtu == 0 {
		p.mtu = 256
	}
	return p
}

// PostSend queues a WR on the send queue and starts sending.
func (t *Transport) PostSend(qp *hca.QP, wr *hca.SendWR) error {
	c := getConn(qp)
	p := c.path.Load()
	c.mu.Lock()
	err := c.req.post(c, p, wr)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.kick()
	c.runFail()
	return nil
}

// Receive sorts a packet into the responder (requests) or the requester (responses).
func (t *Transport) Receive(qp *hca.QP, pk *hca.Packet) {
	c := getConn(qp)
	op := pk.BTH.OpCode()
	want := wire.TransportRC
	if c.uc {
		want = wire.TransportUC
	} else if c.xrc {
		want = wire.TransportXRC
	}
	if op.Transport() != want {
		qp.Port().Drop(hca.CntDropQPType, pk.Raw)
		return
	}
	// IBA 9.6.1.5 (C9-54): a connected QP takes packets only from its peer, on its
	// primary path, or on its alternate path once the peer has migrated (17.2.8).
	p := c.path.Load()
	if p == nil {
		qp.Port().Drop(hca.CntDropNoQP, pk.Raw)
		return
	}
	if pk.LRH.SLID() != p.dlid || pk.Port != nil && pk.Port != p.port {
		if !c.peerMigrated(pk) {
			qp.Port().Drop(hca.CntDropNoQP, pk.Raw)
			return
		}
	} else if !pk.BTH.MigReq() && qp.PathMigState() == hca.MigRearm {
		qp.Rearmed() // the peer has its alternate path loaded too
	}
	// Once per received batch: one ACK for its messages. Before the packet is handled,
	// so that the device counts the ACK as unsent before the packet completes anything
	// (hca.Packet.DeferKick: no poll returns that completion until the ACK is sent).
	pk.DeferKick(c)
	switch rcOp(op) {
	case wire.RCAcknowledge, wire.RCAtomicAcknowledge, wire.RCRDMAReadResponseFirst,
		wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly:
		if qp.State() < hca.QPStateRTS {
			qp.Port().Drop(hca.CntDropQPState, pk.Raw)
			return
		}
		c.mu.Lock()
		c.req.response(c, pk)
		c.mu.Unlock()
	default:
		if qp.Type() == hca.QPTypeXRCSend { // a requester only (Annex A14)
			qp.Port().Drop(hca.CntDropQPType, pk.Raw)
			return
		}
		c.rmu.Lock()
		c.resp.request(c, pk)
		c.rmu.Unlock()
	}
}

// Kick sends what the packets of a received batch queued (hca.Kicker), a fatal NAK
// among them, before runFail completes the receive that failed.
func (c *conn) Kick() {
	c.kick()
	c.runFail()
}

// kick runs the drainer unless another goroutine (or an outer frame of this one) already
// does, in which case it leaves it a flag.
func (c *conn) kick() {
	c.pending.Store(true)
	for c.pending.Load() {
		if !c.running.CompareAndSwap(false, true) {
			return
		}
		for c.pending.Swap(false) {
			for c.drainOnce() {
			}
		}
		c.running.Store(false)
	}
}

// drainOnce builds one batch (responses first, then requests) and transmits it. It
// reports whether the batch was full, i.e. whether there may be more to send.
func (c *conn) drainOnce() bool {
	p := c.path.Load()
	if p == nil {
		return false
	}
	if c.paced(p) {
		return false // the pace timer kicks the drainer when the static rate allows
	}
	s := c.qp.State()
	b := batchPool.Get().(*batch)
	if s >= hca.QPStateRTR && s != hca.QPStateErr {
		c.rmu.Lock()
		c.resp.output(c, p, b)
		c.rmu.Unlock()
	}
	if s == hca.QPStateRTS || s == hca.QPStateSQD {
		c.mu.Lock()
		c.req.output(c, p, b, s == hca.QPStateSQD)
		c.mu.Unlock()
	}
	n := b.n
	if n > 0 {
		p.port.TransmitQP(c.qp, b.pkts[:n])
	}
	sent := 0
	for i := range b.pkts[:n] {
		sent += len(b.pkts[i])
		b.pkts[i] = nil
	}
	if p.pace != 0 && sent > 0 {
		c.pacer.Charge(c.clk.Now(), sent, p.pace)
	}
	b.n = 0
	batchPool.Put(b)
	return n == batchMax
}

// reset forgets everything (ModifyQP to RESET: IBA 10.3.1, no completions).
func (c *conn) reset() {
	c.mu.Lock()
	c.req.stopTimer()
	c.req = requester{}
	c.mu.Unlock()
	c.rmu.Lock()
	c.resp = responder{}
	c.rmu.Unlock()
}

// flush completes every outstanding send WR with IBV_WC_WR_FLUSH_ERR (the receive queue
// is flushed by hca).
func (c *conn) flush() {
	c.mu.Lock()
	c.req.stopTimer()
	c.req.flushAll(c.qp)
	c.mu.Unlock()
	c.sendOwedAcks()
}

// sendOwedAcks sends, as the QP enters ERR, the ACK or NAK its responder still owes.
// The messages it acknowledges have completed here already and the consumer may be
// reacting to one (rping's client disconnects on the last one); a hardware responder's
// ACK leaves with the completion, so the requester must hear it rather than retry into
// a QP in ERR until its SEND fails. Owed read and atomic responses go with the QP (IBA
// 10.3.1: in ERR nothing more is processed).
func (c *conn) sendOwedAcks() {
	p := c.path.Load()
	b := batchPool.Get().(*batch)
	c.rmu.Lock()
	r := &c.resp
	acks := r.out[:0]
	for _, o := range r.out[r.outHead:] {
		if o.kind == outAck {
			acks = append(acks, o)
		}
	}
	r.out, r.outHead = acks, 0
	if p != nil {
		r.output(c, p, b)
	}
	r.out, r.outHead = r.out[:0], 0
	c.rmu.Unlock()
	if b.n > 0 {
		p.port.TransmitQP(c.qp, b.pkts[:b.n])
	}
	for i := range b.pkts[:b.n] {
		b.pkts[i] = nil
	}
	b.n = 0
	batchPool.Put(b)
}

// fail notes a fatal error (IBA 9.9.2: the QP goes to the Error state); runFail, called
// where no lock is held, carries it out.
func (c *conn) fail() { c.failing.Store(true) }

// runFail moves a failed QP to the error state: the receive the responder failed
// completes with its error first, then the rest flush. No lock of c's is held.
func (c *conn) runFail() {
	if c.failing.CompareAndSwap(true, false) {
		c.rmu.Lock()
		c.resp.completeError(c)
		c.rmu.Unlock()
		// The error's own event comes before the QP_LAST_WQE_REACHED its SRQ QP raises
		// on entering ERR, as in rxe, whose responder raises it at the error.
		if ev := c.failEvent.Swap(0); ev != 0 {
			c.qp.RaiseEvent(hca.EventType(ev - 1))
		}
		c.qp.SetError()
	}
}
