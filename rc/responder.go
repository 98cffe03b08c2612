package rc

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// rdRes is a responder resource: a READ or atomic the responder executed, kept to answer
// a duplicate of its request (IBA 9.7.5.2: reads are re-executed, atomics replayed).
type rdRes struct {
	valid  bool
	atomic bool
	psn    uint32
	npkts  uint32
	orig   uint64
}

// out is one response the responder owes, sent by the drainer in order.
type out struct {
	kind   uint8
	psn    uint32
	synd   uint8
	msn    uint32
	mr     *hca.MR // read
	va     uint64
	length uint64
	idx    uint32 // read: next response packet
	npkts  uint32
	orig   uint64 // atomic
}

const (
	outAck = iota
	outRead
	outAtomic
)

// responder is the receive side of a connection (IBA 9.7.5.2).
type responder struct {
	xrc      bool // an XRC receive QP: requests name their SRQ in an XRCETH (Annex A14)
	ePSN     uint32
	ucSkip   bool // UC: a PSN gap was seen, drop until a First or Only (IBA 9.8.3)
	msn      uint32
	minRNR   uint8
	access   hca.AccessFlags
	nakSent  bool
	oosLast  uint32 // PSN of the last out-of-sequence request seen while NAKed
	oosCount uint32 // out-of-sequence requests seen

	wqe     hca.RecvWQE
	haveWQE bool
	// errWQE is a receive that failed (recvError), completed in error by the Kick that
	// sends its NAK, after the NAK: a program that exits when it polls the error must
	// not take the NAK with it, which a real HCA has on the wire by then.
	errWQE     hca.RecvWQE
	errStatus  hca.WCStatus
	haveErrWQE bool
	// csumPartial: the SEND in progress came with a checksum to finish, which the QP
	// takes as it is (hca.WCIPCsumPartial).
	csumPartial bool
	inSend      bool
	sendOff     uint64

	inWrite bool
	wMR     *hca.MR
	wVA     uint64
	wLeft   uint64
	wTotal  uint64

	res     []rdRes
	resNext int

	out     []out
	outHead int

	lastFatal string // why the responder last took the QP to ERR, for inspection

	commEst bool // a valid request has come (IBA 11.6.3.1: COMM_EST once, in RTR)
}

func (r *responder) push(o out) {
	if o.kind == outAck && len(r.out) > r.outHead {
		// Coalesce: a newer ACK or NAK supersedes one not yet sent (ACKs are cumulative).
		if last := &r.out[len(r.out)-1]; last.kind == outAck && last.synd&wire.SyndromeKindMask == wire.SyndromeACK {
			*last = o
			return
		}
	}
	if r.outHead > 0 && r.outHead == len(r.out) {
		r.out, r.outHead = r.out[:0], 0
	}
	r.out = append(r.out, o)
}

func (r *responder) ack(psn uint32) {
	r.push(out{kind: outAck, psn: psn, synd: wire.SyndromeACKCredit(wire.CreditInvalid), msn: r.msn})
}

func (r *responder) nak(psn uint32, code uint8) {
	r.push(out{kind: outAck, psn: psn, synd: wire.SyndromeNAKCode(code), msn: r.msn})
}

// rcOp maps a UC opcode onto its RC twin (same low five bits, IBA table 38).
func rcOp(op wire.Opcode) wire.Opcode { return op & 0x1F }

// request handles one request packet from the peer's requester.
func (r *responder) request(c *conn, pk *hca.Packet) {
	qp := c.qp
	if s := qp.State(); s < hca.QPStateRTR || s > hca.QPStateSQE {
		qp.Port().Drop(hca.CntDropQPState, pk.Raw)
		return
	}
	if r.res == nil {
		return
	}
	psn := pk.BTH.PSN()
	op := rcOp(pk.BTH.OpCode())
	d := psnDiff(psn, r.ePSN)
	if c.uc {
		r.ucRequest(c, pk, op, psn, d)
		return
	}
	switch {
	case d > 0:
		// IBA 9.7.5.2.1: a PSN ahead of the expected one means lost packets: NAK
		// (sequence error) once, and drop until the requester goes back.
		// It NAKs again when the PSNs it sees stop rising (the requester started a new
		// round, and the packet it went back for was lost again) and every 64 packets
		// that keep coming out of sequence (the NAK itself was lost). The requester
		// ignores a repeat it has already acted on.
		r.oosCount++
		if !r.nakSent || psnDiff(psn, r.oosLast) <= 0 || r.oosCount%64 == 0 {
			r.nakSent = true
			r.nak(r.ePSN, wire.NAKPSNSequenceError)
		}
		r.oosLast = psn
		return
	case d < 0:
		r.duplicate(c, pk, op, psn)
		return
	}
	r.nakSent = false
	r.execute(c, pk, op, psn)
}

// ucRequest: UC has no ACKs; a gap drops the message in progress and waits for the next
// first or only packet (IBA 9.8.3).
func (r *responder) ucRequest(c *conn, pk *hca.Packet, op wire.Opcode, psn uint32, d int32) {
	if d != 0 {
		// IBA 9.8.3: a PSN gap ends the message in progress; the responder drops
		// packets until the next First or Only starts a new one.
		r.inSend, r.sendOff, r.inWrite = false, 0, false
		r.ucSkip = true
	}
	if r.ucSkip {
		r.ePSN = psnAdd(psn, 1)
		if !isFirstOrOnly(op) {
			return
		}
		r.ucSkip = false
		r.ePSN = psn
	}
	r.execute(c, pk, op, psn)
}

func isFirstOrOnly(op wire.Opcode) bool {
	switch op {
	case wire.RCSendFirst, wire.RCSendOnly, wire.RCSendOnlyImm, wire.RCSendOnlyInv,
		wire.RCRDMAWriteFirst, wire.RCRDMAWriteOnly, wire.RCRDMAWriteOnlyImm:
		return true
	}
	return false
}

// fatal NAKs psn with code and takes the QP to ERR (IBA 9.9.2, class C/D errors).
//
// An RC error that no receive WQE carries (recvError's do) is also an affiliated
// asynchronous error of the responder's QP (IBA 9.9.3.1.3, C9-222.1.1; 11.6.3.1): an
// R_Key violation is a Local Access Violation Work Queue Error (IBV_EVENT_QP_ACCESS_ERR,
// as rxe's check_rkey → RESPST_ERR_RKEY_VIOLATION_EVENT raises it), an invalid request an
// Invalid Request Local Work Queue Error (IBV_EVENT_QP_REQ_ERR, mlx5's
// WQ_INVAL_REQ_ERROR; rxe raises none). runFail raises it as it takes the QP to ERR.
func (r *responder) fatal(c *conn, psn uint32, code uint8) {
	r.lastFatal = fmt.Sprintf("NAK code %d at PSN %#x (ePSN %#x inSend %v inWrite %v)", code, psn, r.ePSN, r.inSend, r.inWrite)
	if !c.uc {
		r.nak(psn, code)
		if !r.haveErrWQE {
			switch code {
			case wire.NAKRemoteAccessError:
				c.failEvent.Store(uint32(hca.EventQPAccessErr) + 1)
			case wire.NAKInvalidRequest:
				c.failEvent.Store(uint32(hca.EventQPReqErr) + 1)
			}
		}
	}
	c.fail()
}

func (r *responder) execute(c *conn, pk *hca.Packet, op wire.Opcode, psn uint32) {
	qp := c.qp
	p := c.path.Load()
	if !r.commEst {
		// IBA 11.6.3.1, Communication Established: the first valid request a QP in RTR
		// receives (the RTU may have been lost; the CM acts on it, ib_cm_notify).
		r.commEst = true
		if qp.State() == hca.QPStateRTR {
			qp.RaiseEvent(hca.EventCommEst)
		}
	}
	if r.xrc && !qp.ValidXRCSRQ(pk.XRCETH.SRQ()) {
		// Annex A14: an XRCETH naming no XRC SRQ of the receive QP's domain is an
		// invalid request (class C, IBA 9.9.3).
		r.fatal(c, psn, wire.NAKInvalidRequest)
		return
	}
	switch op {
	case wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastImm,
		wire.RCSendOnly, wire.RCSendOnlyImm, wire.RCSendLastInv, wire.RCSendOnlyInv:
		first := op == wire.RCSendFirst || op == wire.RCSendOnly || op == wire.RCSendOnlyImm || op == wire.RCSendOnlyInv
		last := op != wire.RCSendFirst && op != wire.RCSendMiddle
		if first == r.inSend || r.inWrite {
			// A SEND that does not continue the message in progress, or a middle/last
			// with none: IBA 9.7.5.2.3, invalid request.
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		if first {
			if !r.haveWQE {
				if !r.takeRecv(qp, pk) {
					r.rnr(c, psn)
					return
				}
				r.haveWQE = true
			}
			if !r.sendCsum(qp, pk) {
				return
			}
			r.inSend, r.sendOff = true, 0
		}
		// IBA 9.7.5.2: every packet but the last carries exactly one MTU.
		if !last && len(pk.Payload) != p.mtu {
			qp.Pitfall(hca.PitfallPathMTUMismatch, "a SEND's %s packet carries %d bytes, this QP's path MTU is %d: the peer's differs", op, len(pk.Payload), p.mtu)
			r.recvError(c, psn, hca.WCLocLenErr, wire.NAKInvalidRequest)
			return
		}
		st := qp.Scatter(&r.wqe, r.sendOff, pk.Payload)
		if st == hca.WCSuccess && first && !r.csumPartial {
			st = finishMsgCsum(qp, &r.wqe, pk)
		}
		if st != hca.WCSuccess {
			code := uint8(wire.NAKInvalidRequest)
			if st == hca.WCLocProtErr {
				code = wire.NAKRemoteOpError
			}
			r.recvError(c, psn, st, code)
			return
		}
		if last && pk.IETH != nil && !qp.InvalidateRemote(pk.IETH.RKey()) {
			// IBA 9.9.3, class J: an R_Key a SEND_WITH_INV cannot invalidate (no type 2
			// window bound through this QP; a type 1 window, o10-37.2.26) is an invalid
			// request, and the receive completes with REM_INV_REQ_ERR.
			r.recvError(c, psn, hca.WCRemInvReqErr, wire.NAKInvalidRequest)
			return
		}
		r.sendOff += uint64(len(pk.Payload))
		r.ePSN = psnAdd(psn, 1)
		if last {
			wc := hca.WC{WRID: r.wqe.WRID, Status: hca.WCSuccess, Opcode: hca.WCRecv, ByteLen: uint32(r.sendOff),
				SrcQP: p.destQPN, SLID: pk.LRH.SLID(), SL: pk.LRH.SL()}
			if pk.ImmDt != nil {
				wc.WCFlags |= hca.WCWithImm
				wc.ImmData = pk.ImmDt.Imm()
			}
			if pk.IETH != nil {
				wc.WCFlags |= hca.WCWithInv
				wc.ImmData = pk.IETH.RKey()
			}
			if r.csumPartial {
				wc.WCFlags |= hca.WCIPCsumOK | hca.WCIPCsumPartial
			}
			r.haveWQE, r.inSend = false, false
			r.msn = (r.msn + 1) & psnMask
			qp.CompleteRecvWQE(&r.wqe, &wc, pk.BTH.SE())
		}
	case wire.RCRDMAWriteFirst, wire.RCRDMAWriteOnly, wire.RCRDMAWriteOnlyImm,
		wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteLastImm:
		first := op == wire.RCRDMAWriteFirst || op == wire.RCRDMAWriteOnly || op == wire.RCRDMAWriteOnlyImm
		last := op != wire.RCRDMAWriteFirst && op != wire.RCRDMAWriteMiddle
		if first == r.inWrite || r.inSend {
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		if first {
			reth := pk.RETH
			mr, va, ok := r.access_(qp, pk, reth.RKey(), reth.VA(), uint64(reth.DMALen()), hca.AccessRemoteWrite)
			if !ok {
				r.writeAccessError(c, pk, op, psn)
				return
			}
			r.wMR, r.wVA, r.wLeft, r.wTotal = mr, va, uint64(reth.DMALen()), uint64(reth.DMALen())
		}
		n := uint64(len(pk.Payload))
		if n > r.wLeft || (!last && n != uint64(p.mtu)) || (last && n != r.wLeft) {
			if !last && n != uint64(p.mtu) {
				qp.Pitfall(hca.PitfallPathMTUMismatch, "an RDMA WRITE's %s packet carries %d bytes, this QP's path MTU is %d: the peer's differs", op, n, p.mtu)
			}
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		imm := op == wire.RCRDMAWriteOnlyImm || op == wire.RCRDMAWriteLastImm
		if imm && !r.haveWQE {
			// WRITE with immediate consumes a receive WQE (IBA 9.4.2); none: RNR NAK.
			if !r.takeRecv(qp, pk) {
				r.rnr(c, psn)
				return
			}
			r.haveWQE = true
		}
		if n > 0 {
			dst, _ := r.wMR.Slice(r.wVA, uint32(n))
			copy(dst, pk.Payload)
		}
		r.wVA += n
		r.wLeft -= n
		r.inWrite = !last
		r.ePSN = psnAdd(psn, 1)
		if last {
			r.msn = (r.msn + 1) & psnMask
			if imm {
				r.haveWQE = false
				wc := hca.WC{WRID: r.wqe.WRID, Status: hca.WCSuccess, Opcode: hca.WCRecvRDMAWithImm,
					ByteLen: uint32(r.wTotal), SrcQP: p.destQPN, SLID: pk.LRH.SLID(), SL: pk.LRH.SL(),
					WCFlags: hca.WCWithImm, ImmData: pk.ImmDt.Imm()}
				qp.CompleteRecvWQE(&r.wqe, &wc, pk.BTH.SE())
			}
		}
	case wire.RCRDMAReadRequest:
		if r.inSend || r.inWrite {
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		reth := pk.RETH
		mr, va, ok := r.access_(qp, pk, reth.RKey(), reth.VA(), uint64(reth.DMALen()), hca.AccessRemoteRead)
		if !ok {
			r.fatal(c, psn, wire.NAKRemoteAccessError)
			r.lastFatal += fmt.Sprintf(" READ va %#x len %d rkey %#x", reth.VA(), reth.DMALen(), reth.RKey())
			return
		}
		n := npackets(uint64(reth.DMALen()), p.mtu)
		r.keep(rdRes{valid: true, psn: psn, npkts: n})
		r.ePSN = psnAdd(psn, n)
		r.msn = (r.msn + 1) & psnMask
		r.push(out{kind: outRead, psn: psn, mr: mr, va: va, length: uint64(reth.DMALen()), npkts: n, msn: r.msn})
		return
	case wire.RCCompareSwap, wire.RCFetchAdd:
		if r.inSend || r.inWrite {
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		a := pk.AtomicETH
		if a.VA()%8 != 0 {
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		mr, va, ok := r.access_(qp, pk, a.RKey(), a.VA(), 8, hca.AccessRemoteAtomic)
		if !ok {
			r.fatal(c, psn, wire.NAKRemoteAccessError)
			return
		}
		if va%8 != 0 { // a zero-based window at an unaligned place of its region
			r.fatal(c, psn, wire.NAKInvalidRequest)
			return
		}
		b, _ := mr.Slice(va, 8)
		// The 8 bytes are aligned because the VA is the buffer's real address: operate
		// atomically, so that atomics from several QPs on one location serialise.
		word := (*uint64)(unsafe.Pointer(&b[0]))
		var orig uint64
		if op == wire.RCCompareSwap {
			for {
				orig = atomic.LoadUint64(word)
				if orig != a.CompareData() || atomic.CompareAndSwapUint64(word, orig, a.SwapData()) {
					break
				}
			}
		} else {
			orig = atomic.AddUint64(word, a.SwapData()) - a.SwapData()
		}
		r.keep(rdRes{valid: true, atomic: true, psn: psn, npkts: 1, orig: orig})
		r.ePSN = psnAdd(psn, 1)
		r.msn = (r.msn + 1) & psnMask
		r.push(out{kind: outAtomic, psn: psn, orig: orig, msn: r.msn})
		return
	default:
		r.fatal(c, psn, wire.NAKInvalidRequest)
		return
	}
	if pk.BTH.AckReq() && !c.uc {
		r.ack(psn)
	}
}

// access_ checks an R_Key for an access (IBA 9.7.5.2.4): it names an MR of the QP's
// PD, or a memory window bound in it, that allows the access, the QP allows it too, and
// [va, va+n) lies inside. It returns the MR and where in it the access starts (no MR
// for a zero-length access, whose R_Key is not checked).
func (r *responder) access_(qp *hca.QP, pk *hca.Packet, rkey uint32, va, n uint64, acc hca.AccessFlags) (*hca.MR, uint64, bool) {
	if r.access&acc == 0 {
		qp.ExplainRemoteAccess(rkey, acc, r.access)
		return nil, 0, false
	}
	if n == 0 {
		// C9-88: a zero-length RDMA READ or WRITE need not carry a valid R_Key or
		// VA, and the responder does not check them (UCX's rc_verbs flushes an
		// endpoint with a zero-length WRITE whose R_Key is 0). It touches no memory.
		return nil, 0, true
	}
	if r.xrc {
		// Annex A14: an XRC request reaches memory through its XRC SRQ's PD.
		return qp.RemoteAccessXRC(pk.XRCETH.SRQ(), rkey, va, n, acc)
	}
	mr, va, ok := qp.RemoteAccess(rkey, va, n, acc)
	if !ok {
		qp.ExplainRemoteAccess(rkey, acc, r.access)
	}
	return mr, va, ok
}

// writeAccessError answers an RDMA WRITE whose R_Key does not allow it (IBA 9.7.5.2.4).
// UC drops the message (rxe's RESPST_ERR_RKEY_VIOLATION for UC without an SRQ: class E,
// drop_msg; the QP stays in RTS). RC NAKs it and goes to ERR; a WRITE Only with
// immediate has taken its receive WQE first (rxe checks resources before the R_Key), which
// completes with IBV_WC_REM_ACCESS_ERR and carries the error, while any other is reported
// as IBV_EVENT_QP_ACCESS_ERR (fatal).
func (r *responder) writeAccessError(c *conn, pk *hca.Packet, op wire.Opcode, psn uint32) {
	if c.uc {
		r.ePSN = psnAdd(psn, 1)
		r.ucSkip = true
		return
	}
	if op == wire.RCRDMAWriteOnlyImm {
		if !r.haveWQE {
			if !r.takeRecv(c.qp, pk) {
				r.rnr(c, psn)
				return
			}
			r.haveWQE = true
		}
		r.recvError(c, psn, hca.WCRemAccessErr, wire.NAKRemoteAccessError)
		return
	}
	r.fatal(c, psn, wire.NAKRemoteAccessError)
}

// takeRecv takes the receive WQE a SEND (or WRITE with immediate) consumes: from the QP's
// RQ or SRQ, or for an XRC receive QP from the XRC SRQ the request names.
func (r *responder) takeRecv(qp *hca.QP, pk *hca.Packet) bool {
	if r.xrc {
		return qp.TakeRecvXRC(pk.XRCETH.SRQ(), &r.wqe)
	}
	return qp.TakeRecv(&r.wqe)
}

func (r *responder) keep(x rdRes) {
	r.res[r.resNext] = x
	r.resNext = (r.resNext + 1) % len(r.res)
}

// rnr answers a request that needs a receive WQE when none is posted (IBA 9.7.5.2.8).
func (r *responder) rnr(c *conn, psn uint32) {
	if c.uc {
		// UC drops the message whole (IBA 9.8.3): its Middle and Last packets too, until
		// the next First or Only.
		r.ePSN = psnAdd(psn, 1)
		r.ucSkip = true
		return
	}
	r.push(out{kind: outAck, psn: psn, synd: wire.SyndromeRNR(r.minRNR), msn: r.msn})
}

// recvError completes the receive WQE in error and NAKs (IBA 9.9: the QP goes to ERR).
func (r *responder) recvError(c *conn, psn uint32, st hca.WCStatus, code uint8) {
	if r.haveWQE {
		r.errWQE, r.errStatus, r.haveErrWQE = r.wqe, st, true
		r.haveWQE = false
	}
	r.inSend = false
	r.fatal(c, psn, code)
}

// completeError completes the receive recvError failed, if any (c.rmu held).
func (r *responder) completeError(c *conn) {
	if r.haveErrWQE {
		r.haveErrWQE = false
		c.qp.CompleteRecvWQE(&r.errWQE, &hca.WC{WRID: r.errWQE.WRID, Status: r.errStatus, Opcode: hca.WCRecv}, false)
	}
}

// duplicate answers a request the responder has seen before (IBA 9.7.5.2.2): SENDs and
// WRITEs are acknowledged again, READs re-executed, atomics answered from the saved result.
func (r *responder) duplicate(c *conn, pk *hca.Packet, op wire.Opcode, psn uint32) {
	c.stats.Duplicates.Add(1)
	switch op {
	case wire.RCRDMAReadRequest:
		reth := pk.RETH
		mr, va, ok := r.access_(c.qp, pk, reth.RKey(), reth.VA(), uint64(reth.DMALen()), hca.AccessRemoteRead)
		if !ok {
			return
		}
		p := c.path.Load()
		n := npackets(uint64(reth.DMALen()), p.mtu)
		msn := r.msn
		r.push(out{kind: outRead, psn: psn, mr: mr, va: va, length: uint64(reth.DMALen()), npkts: n, msn: msn})
	case wire.RCCompareSwap, wire.RCFetchAdd:
		for _, x := range r.res {
			if x.valid && x.atomic && x.psn == psn {
				r.push(out{kind: outAtomic, psn: psn, orig: x.orig, msn: r.msn})
				return
			}
		}
	default:
		r.ack(psnAdd(r.ePSN, psnMask))
	}
}

// output moves owed responses into b, in order.
func (r *responder) output(c *conn, p *path, b *batch) {
	for !b.full() && r.outHead < len(r.out) {
		o := &r.out[r.outHead]
		switch o.kind {
		case outAck:
			buf, off := b.start(p, hdr{op: wire.RCAcknowledge, psn: o.psn}, wire.AETHLen)
			a := wire.AETH(buf[off : off+wire.AETHLen])
			a.SetSyndrome(o.synd)
			a.SetMSN(o.msn)
			b.finish(buf)
			r.outHead++
		case outAtomic:
			buf, off := b.start(p, hdr{op: wire.RCAtomicAcknowledge, psn: o.psn}, wire.AETHLen+wire.AtomicAckETHLen)
			a := wire.AETH(buf[off : off+wire.AETHLen])
			a.SetSyndrome(wire.SyndromeACKCredit(wire.CreditInvalid))
			a.SetMSN(o.msn)
			wire.AtomicAckETH(buf[off+wire.AETHLen:]).SetOrigRemData(o.orig)
			b.finish(buf)
			r.outHead++
		case outRead:
			i := o.idx
			off64 := uint64(i) * uint64(p.mtu)
			n := int(min(uint64(p.mtu), o.length-off64))
			if o.length == 0 {
				n = 0
			}
			var op wire.Opcode
			switch {
			case o.npkts == 1:
				op = wire.RCRDMAReadResponseOnly
			case i == 0:
				op = wire.RCRDMAReadResponseFirst
			case i == o.npkts-1:
				op = wire.RCRDMAReadResponseLast
			default:
				op = wire.RCRDMAReadResponseMiddle
			}
			ethLen := 0
			if op != wire.RCRDMAReadResponseMiddle {
				ethLen = wire.AETHLen // IBA 9.3.5: first, last and only carry an AETH
			}
			buf, off := b.start(p, hdr{op: op, psn: psnAdd(o.psn, i), payload: n}, ethLen)
			if ethLen > 0 {
				a := wire.AETH(buf[off : off+wire.AETHLen])
				a.SetSyndrome(wire.SyndromeACKCredit(wire.CreditInvalid))
				a.SetMSN(o.msn)
				off += wire.AETHLen
			}
			if n > 0 {
				src, _ := o.mr.Slice(o.va+off64, uint32(n))
				copy(buf[off:off+n], src)
			}
			b.finish(buf)
			o.idx++
			if o.idx == o.npkts {
				r.outHead++
			}
		}
	}
	if r.outHead == len(r.out) {
		r.out, r.outHead = r.out[:0], 0
	}
}

// sendCsum looks at the first packet of a SEND for a checksum its sender's engine left
// to finish (a deferred IBV_SEND_IP_CSUM: wire.SetCsumPending, wire.SetMsgCsumPending):
// a QP that takes CHECKSUM_PARTIAL data gets the message as it is and WCIPCsumPartial
// (IPoIB writes it to its TUN so), any other the finished checksum. A message checksum
// that does not resolve is a damaged packet: false, dropped.
func (r *responder) sendCsum(qp *hca.QP, pk *hca.Packet) bool {
	r.csumPartial = false
	msg, pkt := wire.MsgCsumPending(pk.Raw), wire.CsumPending(pk.Raw)
	switch {
	case !msg && !pkt:
	case qp.IPCsumPartial():
		r.csumPartial = true
	case pkt:
		wire.FinalizeCsum(pk.Raw) // the payload is the packet's own bytes
	default:
		if _, _, ok := wire.MsgCsum(pk.Raw); !ok {
			qp.Port().Drop(hca.CntDropICRC, pk.Raw)
			return false
		}
	}
	return true
}

// finishMsgCsum writes a deferred message checksum into the receive buffer, once the
// first packet's bytes are there.
func finishMsgCsum(qp *hca.QP, w *hca.RecvWQE, pk *hca.Packet) hca.WCStatus {
	field, v, ok := wire.MsgCsum(pk.Raw)
	if !ok {
		return hca.WCSuccess // none (sendCsum dropped an unresolvable one)
	}
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return qp.Scatter(w, uint64(field), b[:])
}
