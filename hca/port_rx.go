package hca

import (
	"sync"

	"github.com/pibgw/pibgw/trace"
	"github.com/pibgw/pibgw/wire"
)

// Packet is a received packet as a transport sees it: the parsed headers plus what the
// port's checks found out.
type Packet struct {
	wire.Packet
	// Raw is the whole packet, LRH through ICRC.
	Raw []byte
	// PKeyIndex is the index in the port's P_Key table of the entry that matched.
	PKeyIndex uint16
	// Port is the port the packet arrived on.
	Port *Port
	// Loopback is set when the packet never left this port (sent to its own LID or a
	// multicast group with local members).
	Loopback bool

	// touched are the receive CQs with a completion handler that got completions from
	// the current batch; their handlers run once the batch is delivered.
	touched batchSet[*CQ]
	// kicks are the connections the batch gave responses to send (DeferKick).
	kicks batchSet[Kicker]
}

// batchSet holds the distinct things a batch touched (up to four: one more runs the
// batch's end early).
type batchSet[T comparable] struct {
	v [4]T
	n int
}

// add adds x unless it is in s already, and reports whether it did; when s is full it
// first calls flush, which must empty it.
func (s *batchSet[T]) add(x T, flush func()) bool {
	for _, y := range s.v[:s.n] {
		if y == x {
			return false
		}
	}
	if s.n == len(s.v) {
		flush()
	}
	s.v[s.n] = x
	s.n++
	return true
}

// drain empties s, calling f on each value in the order added, and returns how many
// there were.
func (s *batchSet[T]) drain(f func(T)) int {
	var zero T
	n := s.n
	for i := range s.v[:n] {
		x := s.v[i]
		s.v[i] = zero
		f(x)
	}
	s.n = 0
	return n
}

// A Kicker is a transport's connection that has responses queued — rc's ACKs — and
// sends them when kicked.
type Kicker interface{ Kick() }

// DeferKick has the port kick k once it has taken in the whole batch, before the
// completion handlers run. rc queues an ACK at the end of each message but sends from
// here, so that a batch carrying several messages of one connection is answered by one
// ACK — ACKs are cumulative, and the responder's queue lets a newer ACK replace one not
// yet sent (IBA 9.7.5.1) — as hfi1 and qib keep a QP's ACK until the end of the receive
// interrupt (rc_defer_ack). Every batch ends in runHandlers, which kicks first.
//
// Until the kick, the device counts the connection as having responses to send, and its
// CQs hand no completion to a poller (CQ.Poll): a transport calls DeferKick before it
// completes anything of the packet, so that a program never sees a receive completed
// whose ACK is still in this process — one that polls it, then exits at once took the
// ACK with it, and the peer's send ended in IBV_WC_RETRY_EXC_ERR (an HCA has sent the
// ACK or holds it itself by the time the CQE is written).
func (pk *Packet) DeferKick(k Kicker) {
	if pk.kicks.add(k, pk.runKicks) && pk.Port != nil {
		pk.Port.dev.unsentKicks.Add(1)
	}
}

func (pk *Packet) runKicks() {
	if n := pk.kicks.drain(Kicker.Kick); n > 0 && pk.Port != nil {
		pk.Port.dev.unsentKicks.Add(int32(-n))
	}
}

// noteCQ records a CQ whose handler should run after the batch.
func (pk *Packet) noteCQ(cq *CQ) {
	if cq.handler.Load() == nil {
		return
	}
	pk.touched.add(cq, pk.runHandlers)
}

// runHandlers kicks the connections the batch gave work (DeferKick), then calls the
// completion handlers of the CQs it touched.
func (pk *Packet) runHandlers() {
	pk.runKicks()
	pk.touched.drain(runHandler)
}

func runHandler(cq *CQ) {
	if h := cq.handler.Load(); h != nil {
		(*h)(cq)
	}
}

var packetPool = sync.Pool{New: func() any { return new(Packet) }}

// RxBudget is how many packets of a batch a port takes in before it runs the completion
// handlers (and the deferred kicks) of what it has taken: a consumer hears of at most
// this many receives at a time and re-posts their buffers before the next ones fill, as
// Linux's NAPI polls a device 64 completions at a time (NAPI_POLL_WEIGHT). A batch from
// a UDP link can hold hundreds of small packets; without a budget, a UD receive queue
// shorter than the batch would drop the rest (no receive WQE) while its consumer waits
// for the batch's end.
const RxBudget = 64

// Receive takes packets arriving from the fabric (fabric.Receiver). Every packet that is
// not delivered increments a named counter; nothing here panics on bad input.
func (p *Port) Receive(pkts [][]byte) { p.ReceiveFrom(pkts, false) }

// ReceiveFrom is Receive for a mirror device's port, which is also given the packets the
// daemon's port looped back (loopback set): its own multicast is not delivered back to
// the QP that sent it.
func (p *Port) ReceiveFrom(pkts [][]byte, loopback bool) {
	if trace.On() {
		p.traceRx(pkts)
	}
	pk := packetPool.Get().(*Packet)
	for i, b := range pkts {
		p.receiveOne(pk, b, loopback)
		if (i+1)%RxBudget == 0 && i+1 < len(pkts) {
			pk.runHandlers()
		}
	}
	pk.Packet = wire.Packet{}
	pk.Raw = nil
	pk.runHandlers()
	packetPool.Put(pk)
}

const (
	permissiveLID  = 0xFFFF
	multicastLIDLo = 0xC000
	mcastQPN       = 0xFFFFFF
)

func isMulticastLID(lid uint16) bool { return lid >= multicastLIDLo && lid != permissiveLID }

func (p *Port) receiveOne(pk *Packet, b []byte, loop bool) {
	c := &p.counters
	if err := pk.Parse(b); err != nil {
		c.Inc(CntRcvErrors)
		p.drop(CntDropMalformed, b)
		return
	}
	if pk.BTH == nil { // raw packets: no consumer yet
		c.Inc(CntRcvErrors)
		p.drop(CntDropMalformed, b)
		return
	}
	// IBA 7.8.1: a packet whose ICRC does not check is dropped.
	if !wire.CheckReceivedICRC(b) {
		c.Inc(CntRcvErrors)
		p.drop(CntDropICRC, b)
		return
	}
	if wire.HasPayloadRef(b) {
		// An in-process sender named its bytes (wire.SetPayloadRef): the transport reads
		// them where they are. One that no longer resolves is a damaged packet.
		src, ok := wire.ResolvePayload(b)
		if !ok {
			c.Inc(CntRcvErrors)
			p.drop(CntDropICRC, b)
			return
		}
		pk.Payload = src
	}
	pk.Raw, pk.Loopback = b, loop
	c.Inc(CntRcvPkts)
	c.Add(CntRcvData, uint64(len(b)+wire.VCRCLen)/4)
	pi := p.info.Load()
	dlid := pk.LRH.DLID()
	dqp := pk.BTH.DestQP()

	// VL15 carries only SMPs to QP0 (IBA 7.6.5); they pass in any port state.
	if dqp == 0 {
		if pk.LRH.VL() != 15 {
			c.Inc(CntRcvErrors)
			p.drop(CntDropQPType, b)
			return
		}
		if dlid != permissiveLID && !p.ownsLID(pi, dlid) {
			c.Inc(CntVL15Dropped)
			p.drop(CntDropDLID, b)
			return
		}
		pk.PKeyIndex = 0
		c.Inc(CntUnicastRcvPkts)
		if p.receiveMAD(pk) {
			return
		}
		qp := p.qp0.Load()
		if qp == nil {
			c.Inc(CntVL15Dropped)
			p.drop(CntDropNoQP, b)
			return
		}
		p.deliver(qp, pk)
		return
	}
	// Data packets need an Armed or Active port (IBA 7.2: Init accepts only SMPs).
	if pi.state != PortArmed && pi.state != PortActive {
		p.drop(CntDropPortState, b)
		return
	}
	if isMulticastLID(dlid) {
		c.Inc(CntMulticastRcvPkts)
		p.receiveMulticast(pk, pi)
		return
	}
	c.Inc(CntUnicastRcvPkts)
	if !p.ownsLID(pi, dlid) {
		c.Inc(CntRcvErrors)
		p.drop(CntDropDLID, b)
		return
	}
	var qp *QP
	if dqp == 1 {
		// IBA 10.9.3: QP1 accepts any P_Key in the table.
		if !p.checkPKey(pk, pi, gsiPKeyCheck) {
			return
		}
		if p.receiveMAD(pk) {
			return
		}
		qp = p.qp1.Load()
		if qp == nil {
			p.drop(CntDropNoQP, b)
			return
		}
		p.deliver(qp, pk)
		return
	} else {
		qp = p.dev.lookupQP(dqp)
		if qp != nil && qp.fwd != nil {
			// A QP of an attached process: it checks the packet itself, and cannot read
			// this process's memory.
			wire.Materialize(b)
			qp.fwd.Forward(p, b, loop)
			return
		}
		if qp != nil && qp.port.Load() != p && qp.apm.altPort.Load() != p {
			qp = nil // IBA 17.2.8: a QP takes packets on its alternate path's port too
		}
	}
	if qp == nil {
		p.drop(CntDropNoQP, b)
		return
	}
	if !p.checkPKey(pk, pi, qp) {
		return
	}
	p.deliver(qp, pk)
}

// ownsLID reports whether dlid addresses this port: its base LID with any path bits below
// the LMC (IBA 7.11.1).
func (p *Port) ownsLID(pi *portInfo, dlid uint16) bool {
	return pi.lid != 0 && dlid>>pi.lmc == pi.lid>>pi.lmc
}

// checkPKey applies IBA 10.9.3: QP1 accepts a P_Key that matches any table entry; other QPs
// only the entry at their P_Key index. A mismatch is dropped and counted in
// PortInfo:P_KeyViolations and PortRcvErrors.
func (p *Port) checkPKey(pk *Packet, pi *portInfo, qp *QP) bool {
	pkey := pk.BTH.PKey()
	if qp == gsiPKeyCheck || qp.typ == QPTypeGSI {
		for i, k := range pi.pkeys {
			if PKeyMatch(pkey, k) {
				pk.PKeyIndex = uint16(i)
				return true
			}
		}
	} else {
		i := qp.pkeyIndex.Load()
		if PKeyMatch(pkey, pi.pkeys[i]) {
			pk.PKeyIndex = uint16(i)
			return true
		}
	}
	p.drop(CntPKeyViolations, pk.Raw)
	p.counters.Inc(CntRcvErrors)
	return false
}

// gsiPKeyCheck stands for QP1 in checkPKey when no GSI verbs QP exists.
var gsiPKeyCheck = &QP{typ: QPTypeGSI}

func (p *Port) deliver(qp *QP, pk *Packet) {
	if !qp.receiving() {
		p.drop(CntDropQPState, pk.Raw)
		return
	}
	pk.Port = p
	qp.tr.Receive(qp, pk)
	if qp.recvCQ != nil {
		pk.noteCQ(qp.recvCQ)
	}
}

// receiveMulticast delivers a multicast packet to every QP attached to its MGID (IBA
// 3.5.11: multicast packets carry a GRH; DestQP is 0xFFFFFF).
func (p *Port) receiveMulticast(pk *Packet, pi *portInfo) {
	c := &p.counters
	if pk.GRH == nil || pk.BTH.DestQP() != mcastQPN {
		c.Inc(CntRcvErrors)
		p.drop(CntDropMalformed, pk.Raw)
		return
	}
	mgid := pk.GRH.DGID()
	p.mcMu.RLock()
	qps := p.mcast[mgid]
	p.mcMu.RUnlock()
	if len(qps) == 0 {
		p.drop(CntDropMcastNoGroup, pk.Raw)
		return
	}
	src := pk.DETH.SrcQP()
	for i, qp := range qps {
		if qp.fwd != nil {
			if !forwardedBefore(qps, i, qp.fwd) {
				qp.fwd.Forward(p, pk.Raw, pk.Loopback)
			}
			continue
		}
		// Our own multicast comes back only to the other QPs of this port.
		if pk.Loopback && qp.num == src {
			continue
		}
		if !p.checkPKey(pk, pi, qp) {
			continue
		}
		p.deliver(qp, pk)
	}
}
