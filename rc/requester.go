package rc

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/csum"
	"github.com/pibgw/pibgw/trace"
	"github.com/pibgw/pibgw/wire"
)

// swqe is a send WQE as the requester tracks it until it completes.
type swqe struct {
	wr       hca.SendWR
	sgl      [hca.MaxSGE]hca.SGE
	inline   []byte // an inline WR's bytes, copied at post; nil for any other WR
	buf      []byte // the slot's buffer for inline bytes, kept from WR to WR
	length   uint64
	mtu      int
	npkts    uint32 // packets of the message (READ: response packets)
	firstPSN uint32
	sent     uint32 // packets sent (READ, atomic: npkts once the request is out)
	// hiSent is the most packets of a SEND or WRITE ever sent: a packet below it goes
	// again (go-back-N) and carries its bytes, since an earlier copy of it may be
	// acknowledged, the WR completed and its memory reused while this one is on its way.
	hiSent  uint32
	recvd   uint32 // READ: response packets received in order
	issued  bool   // READ/atomic counted in rdAtomicOut
	reissue bool   // READ/atomic whose responses were lost: send the request again
	done    bool
	status  hca.WCStatus
}

func (w *swqe) lastPSN() uint32 { return psnAdd(w.firstPSN, w.npkts-1) }

func (w *swqe) rdAtomic() bool {
	o := w.wr.Opcode
	return o == hca.WRRDMARead || o == hca.WRAtomicCmpAndSwp || o == hca.WRAtomicFetchAndAdd
}

// requester is the send side of a connection (IBA 9.7.4, 9.7.5.1).
type requester struct {
	ring        []swqe
	head, next  int // oldest incomplete; next to send from
	tail, count int
	depth       int    // max_send_wr; the ring has one slot more
	nextPSN     uint32 // first PSN of the next posted WQE
	ackedPSN    uint32 // last PSN acknowledged (cumulative)
	rdAtomicOut int

	timeout            time.Duration
	retryCnt, rnrRetry uint8
	retryLeft, rnrLeft uint8
	maxRdAtomic        int
	timer              clock.Timer
	timerOn            bool
	rnrWait            bool
	rnrTimer           clock.Timer
	readGap            uint32 // PSN a read-response gap was last re-requested from
	readGapSet         bool
	reissues           int // WQEs with reissue set
	// sentSinceNak counts packets sent since the last go-back on a sequence NAK: a NAK
	// for the same PSN counts again only once the resend has started.
	sentSinceNak    uint32
	deadline        time.Time // when the ACK timer is due
	nakPSN          uint32    // PSN of the last sequence NAK acted on
	nakSet          bool
	drainedNotified bool
	rnrRun          int // RNR NAKs in a row with rnr_retry 7 (the rnr_retry_forever pitfall)
	ghostRun        int // responses in a row for PSNs never sent (the psn_mismatch pitfall)
}

func (r *requester) init(sqPSN uint32, depth int) {
	if depth < 1 {
		depth = 1
	}
	// One slot more than the queue holds: a full queue's tail then never lands on next,
	// which would make "next == tail" (nothing left to send) true while every WQE waits.
	r.ring = make([]swqe, depth+1)
	r.depth = depth
	r.nextPSN = sqPSN
	r.ackedPSN = psnAdd(sqPSN, psnMask) // sqPSN - 1
}

func (r *requester) slot(i int) int {
	if i >= len(r.ring) {
		return i - len(r.ring)
	}
	return i
}

// post copies wr into the send queue (the buffers stay the caller's until completion, as
// ibv_post_send(3) says; the SGL itself is copied now).
func (r *requester) post(c *conn, p *path, wr *hca.SendWR) error {
	if r.ring == nil || p == nil {
		return hca.Errorf("post_send", hca.EINVAL, "QP %#x has no send queue state", c.qp.Num())
	}
	if r.count == r.depth {
		return hca.Errorf("post_send", hca.ENOMEM, "send queue full (%d WRs)", r.depth)
	}
	if c.uc && (wr.Opcode == hca.WRRDMARead || wr.Opcode == hca.WRAtomicCmpAndSwp || wr.Opcode == hca.WRAtomicFetchAndAdd) {
		return hca.Errorf("post_send", hca.EINVAL, "%s is not valid on a UC QP", wr.Opcode)
	}
	w := &r.ring[r.tail]
	*w = swqe{wr: *wr, buf: w.buf, mtu: p.mtu}
	w.wr.SGL = w.sgl[:copy(w.sgl[:], wr.SGL)]
	w.length = hca.MessageLen(wr.SGL)
	if wr.SendFlags&hca.SendInline != 0 {
		// The slot's buffer is reused, but only an inline WR points at it: a WR that
		// is not inline, posted into a slot an inline one had, gathers its SGL.
		w.buf = hca.InlineBytes(wr, w.buf)
		w.inline = w.buf
	}
	switch wr.Opcode {
	case hca.WRRDMARead:
		w.npkts = npackets(w.length, p.mtu)
	case hca.WRAtomicCmpAndSwp, hca.WRAtomicFetchAndAdd:
		w.npkts = 1
	case hca.WRLocalInv, hca.WRBindMW:
		w.npkts = 0
	default:
		w.npkts = npackets(w.length, p.mtu)
	}
	w.firstPSN = r.nextPSN
	r.nextPSN = psnAdd(r.nextPSN, w.npkts)
	r.tail = r.slot(r.tail + 1)
	r.count++
	return nil
}

// output fills b with request packets: new WQEs in order, within the window, the
// initiator depth for READ/atomic (max_rd_atomic) and fences (IBA 10.8.3.3).
func (r *requester) output(c *conn, p *path, b *batch, sqd bool) {
	defer r.checkInvariant("output")
	if r.rnrWait || r.ring == nil {
		return
	}
	if r.reissues > 0 {
		for i, k := r.head, 0; k < r.count && i != r.next && !b.full(); i, k = r.slot(i+1), k+1 {
			if w := &r.ring[i]; w.reissue {
				w.reissue = false
				r.reissues--
				if !w.done {
					r.build(c, p, b, w)
					if !r.timerOn {
						r.armTimer(c)
					}
				}
			}
		}
	}
	for !b.full() && r.next != r.tail {
		w := &r.ring[r.next]
		if w.sent == 0 && !w.issued {
			if sqd {
				break // SQD: finish what started, start nothing new
			}
			if w.wr.SendFlags&hca.SendFence != 0 && r.rdAtomicOut > 0 {
				break
			}
			if w.rdAtomic() && r.rdAtomicOut >= r.maxRdAtomic {
				break
			}
		}
		if w.npkts == 0 { // local operation (LOCAL_INV, BIND_MW): no packets
			r.next = r.slot(r.next + 1)
			if st := c.qp.ExecLocal(&w.wr); st != hca.WCSuccess {
				r.localError(c, w, st)
				return
			}
			w.done = true
			r.complete(c)
			continue
		}
		if w.done { // acknowledged while queued for a resend: nothing to send
			w.sent = w.npkts
			r.next = r.slot(r.next + 1)
			continue
		}
		psn := psnAdd(w.firstPSN, w.sent)
		if !c.uc && psnDiff(psn, r.ackedPSN) > Window {
			break
		}
		if !r.build(c, p, b, w) {
			break
		}
		if !r.timerOn && !c.uc {
			r.armTimer(c)
		}
		if w.sent == w.npkts {
			r.next = r.slot(r.next + 1)
			if c.uc { // UC: complete once sent (IBA 9.8)
				w.done = true
			}
		}
	}
	if c.uc {
		r.complete(c)
	}
}

// build adds the next packet of w to b.
func (r *requester) build(c *conn, p *path, b *batch, w *swqe) bool {
	qp := c.qp
	i := w.sent
	last := i == w.npkts-1
	first := i == 0
	wr := &w.wr
	psn := psnAdd(w.firstPSN, i)
	switch wr.Opcode {
	case hca.WRRDMARead:
		if debugTimeouts && w.recvd >= w.npkts {
			panic(fmt.Sprintf("build READ with recvd %d npkts %d done %v sent %v", w.recvd, w.npkts, w.done, w.sent))
		}
		off := uint64(w.recvd) * uint64(w.mtu)
		buf, o := b.start(p, hdr{op: wire.RCRDMAReadRequest, psn: psnAdd(w.firstPSN, w.recvd), ackReq: true, srqn: wr.RemoteSRQN}, wire.RETHLen)
		reth := wire.RETH(buf[o : o+wire.RETHLen])
		reth.SetVA(wr.RemoteAddr + off)
		reth.SetRKey(wr.RKey)
		reth.SetDMALen(uint32(w.length - off))
		b.finish(buf)
		w.sent = w.npkts
		if !w.issued {
			w.issued = true
			r.rdAtomicOut++
		}
		return true
	case hca.WRAtomicCmpAndSwp, hca.WRAtomicFetchAndAdd:
		op := wire.RCCompareSwap
		if wr.Opcode == hca.WRAtomicFetchAndAdd {
			op = wire.RCFetchAdd
		}
		buf, o := b.start(p, hdr{op: op, psn: w.firstPSN, ackReq: true, srqn: wr.RemoteSRQN}, wire.AtomicETHLen)
		a := wire.AtomicETH(buf[o : o+wire.AtomicETHLen])
		a.SetVA(wr.RemoteAddr)
		a.SetRKey(wr.RKey)
		if op == wire.RCCompareSwap {
			a.SetSwapData(wr.Swap)
			a.SetCompareData(wr.CompareAdd)
		} else {
			a.SetSwapData(wr.CompareAdd) // the add operand (IBA 9.3.4: SwapOrAddData)
			a.SetCompareData(0)
		}
		b.finish(buf)
		w.sent = 1
		if !w.issued {
			w.issued = true
			r.rdAtomicOut++
		}
		return true
	}
	off := uint64(i) * uint64(w.mtu)
	n := int(min(uint64(w.mtu), w.length-off))
	if w.length == 0 {
		n = 0
	}
	op, eth := requestOpcode(wr.Opcode, first, last, c.uc)
	h := hdr{op: op, psn: psn, payload: n, se: last && wr.SendFlags&hca.SendSolicited != 0, srqn: wr.RemoteSRQN}
	// Ask for an ACK at the end of every message and every 16 packets within a long one,
	// so the window keeps moving (IBA 9.7.5.1 leaves the choice to the requester).
	h.ackReq = !c.uc && (last || i%16 == 15)
	buf, o := b.start(p, h, ethLen(eth))
	if eth&ethRETH != 0 {
		reth := wire.RETH(buf[o : o+wire.RETHLen])
		reth.SetVA(wr.RemoteAddr)
		reth.SetRKey(wr.RKey)
		reth.SetDMALen(uint32(w.length))
		o += wire.RETHLen
	}
	if eth&ethImm != 0 {
		wire.ImmDt(buf[o : o+wire.ImmDtLen]).SetImm(wr.ImmData)
		o += wire.ImmDtLen
	}
	if eth&ethIETH != 0 {
		wire.IETH(buf[o : o+wire.IETHLen]).SetRKey(wr.InvalidateRKey)
		o += wire.IETHLen
	}
	ref := false
	var rdev, rkey uint32
	var raddr uint64
	if n > 0 {
		dst := buf[o : o+n]
		st := hca.WCSuccess
		switch {
		case w.inline != nil:
			copy(dst, w.inline[off:])
		case n >= wire.PayloadRefMin && !c.uc && i >= w.hiSent && qp.Device().PayloadRefs():
			// RC in process: the receiver reads the bytes from here (wire.SetPayloadRef),
			// which stay put until the message is acknowledged — for a first sending; a
			// resent packet carries its bytes (hiSent). UC completes a send as it goes
			// out, so its packets carry their bytes.
			if rdev, rkey, raddr, st, ref = qp.RefAt(wr.SGL, off, n); !ref {
				st = qp.GatherAt(wr.SGL, off, dst)
			}
		default:
			st = qp.GatherAt(wr.SGL, off, dst)
		}
		if st != hca.WCSuccess {
			// A local protection error completes the WQE in error (IBV_WC_LOC_PROT_ERR) and
			// takes the QP to Error (IBA 9.9).
			r.localError(c, w, st)
			return false
		}
	}
	b.finish(buf)
	if ref {
		wire.SetPayloadRef(buf, rdev, rkey, raddr)
	}
	if first && wr.SendFlags&hca.SendIPCsum != 0 && isSendOpcode(wr.Opcode) {
		if st := deferCsum(qp, w, buf, o, n, ref); st != hca.WCSuccess {
			b.n-- // the packet never goes out
			r.localError(c, w, st)
			return false
		}
	}
	w.sent++
	w.hiSent = max(w.hiSent, w.sent)
	r.sentSinceNak++
	return true
}

// deferCsum is the checksum engine for a SEND with IBV_SEND_IP_CSUM (hca.SendWR.CsumStart):
// its first packet buf (payload at o, n bytes) gets the checksum over the whole message,
// deferred like the ICRC where it can be — as a message checksum beside a payload by
// reference (wire.SetMsgCsumPending), or a packet checksum when the message is this one
// packet (wire.SetCsumPending) — and computed now from the sender's memory otherwise.
// The field must lie in the first packet, where a message's headers are.
func deferCsum(qp *hca.QP, w *swqe, buf []byte, o, n int, ref bool) hca.WCStatus {
	wr := &w.wr
	start, offset := int(wr.CsumStart), int(wr.CsumOffset)
	if start+offset+2 > n {
		return hca.WCLocQPOpErr
	}
	switch {
	case ref:
		if !wire.SetMsgCsumPending(buf, uint32(w.length), wr.CsumStart, wr.CsumOffset, wr.CsumNoZero) {
			return hca.WCLocQPOpErr
		}
	case w.npkts == 1:
		if !wire.SetCsumPending(buf, wr.CsumStart, wr.CsumOffset, wr.CsumNoZero) {
			return hca.WCLocQPOpErr
		}
	default:
		var sum uint16
		if w.inline != nil {
			sum = csum.Fold(csum.Sum(w.inline[start:], 0))
		} else {
			var st hca.WCStatus
			if sum, st = qp.SumAt(wr.SGL, uint64(start)); st != hca.WCSuccess {
				return st
			}
		}
		v := ^sum
		if v == 0 && wr.CsumNoZero {
			v = 0xFFFF // RFC 768
		}
		binary.BigEndian.PutUint16(buf[o+start+offset:], v)
	}
	return hca.WCSuccess
}

func isSendOpcode(op hca.WROpcode) bool {
	return op == hca.WRSend || op == hca.WRSendWithImm || op == hca.WRSendWithInv
}

const (
	ethRETH = 1 << iota
	ethImm
	ethIETH
)

// requestOpcode picks the opcode of packet (first, last) of a SEND or WRITE (IBA 9.4,
// table 38) and the extended headers it carries, as a mask and their total length.
func requestOpcode(o hca.WROpcode, first, last, uc bool) (wire.Opcode, int) {
	var op wire.Opcode
	eth := 0
	switch o {
	case hca.WRSend, hca.WRSendWithImm, hca.WRSendWithInv:
		switch {
		case first && last:
			op = wire.RCSendOnly
		case first:
			op = wire.RCSendFirst
		case last:
			op = wire.RCSendLast
		default:
			op = wire.RCSendMiddle
		}
		if last && o == hca.WRSendWithImm {
			op++ // SendLast → SendLastImm, SendOnly → SendOnlyImm
			eth |= ethImm
		}
		if last && o == hca.WRSendWithInv {
			if op == wire.RCSendOnly {
				op = wire.RCSendOnlyInv
			} else {
				op = wire.RCSendLastInv
			}
			eth |= ethIETH
		}
	default: // RDMA WRITE (with immediate)
		switch {
		case first && last:
			op = wire.RCRDMAWriteOnly
			eth |= ethRETH
		case first:
			op = wire.RCRDMAWriteFirst
			eth |= ethRETH
		case last:
			op = wire.RCRDMAWriteLast
		default:
			op = wire.RCRDMAWriteMiddle
		}
		if last && o == hca.WRRDMAWriteWithImm {
			op++ // WriteLast → WriteLastImm, WriteOnly → WriteOnlyImm
			eth |= ethImm
		}
	}
	if uc {
		op |= 0x20 // UC opcodes are the RC ones with transport bits 001 (IBA table 38)
	}
	return op, eth
}

func ethLen(eth int) int {
	n := 0
	if eth&ethRETH != 0 {
		n += wire.RETHLen
	}
	if eth&ethImm != 0 {
		n += wire.ImmDtLen
	}
	if eth&ethIETH != 0 {
		n += wire.IETHLen
	}
	return n
}

// response handles an ACK, NAK, READ response or atomic acknowledge (IBA 9.7.5.1).
func (r *requester) response(c *conn, pk *hca.Packet) {
	if r.ring == nil {
		return
	}
	psn := pk.BTH.PSN()
	switch op := rcOp(pk.BTH.OpCode()); op {
	case wire.RCAcknowledge:
		a := pk.AETH
		if r.ghost(c, psn, a.IsACK()) {
			return
		}
		switch {
		case a.IsACK():
			r.ack(c, psn)
		case a.IsRNRNAK():
			r.ack(c, psnAdd(psn, psnMask))
			r.rnr(c, psn, a.RNRTimer())
		default:
			r.ack(c, psnAdd(psn, psnMask))
			r.nak(c, psn, a.NAKCode())
		}
	case wire.RCAtomicAcknowledge:
		if w := r.find(psn); w != nil && w.rdAtomic() && !w.done && w.firstPSN == psn {
			var v [8]byte
			binary.LittleEndian.PutUint64(v[:], pk.AtomicAckETH.OrigRemData())
			if st := c.qp.ScatterSGL(w.wr.SGL, 0, v[:]); st != hca.WCSuccess {
				w.status = st
			}
			w.done = true
		}
		r.ack(c, psn)
	default: // READ responses
		w := r.find(psn)
		if w == nil || w.wr.Opcode != hca.WRRDMARead || w.done {
			return // a duplicate or stale response
		}
		want := psnAdd(w.firstPSN, w.recvd)
		if psn != want {
			// A gap: the responses in between were lost. Re-request from the first
			// missing one, once per gap (IBA 9.7.5.1).
			if psnDiff(psn, want) > 0 && (!r.readGapSet || r.readGap != want) {
				r.readGap, r.readGapSet = want, true
				r.reissueWQE(r.index(w))
			}
			return
		}
		if !readOpcodeFits(op, w.recvd, w.npkts) {
			return
		}
		off := uint64(w.recvd) * uint64(w.mtu)
		if st := c.qp.ScatterSGL(w.wr.SGL, off, pk.Payload); st != hca.WCSuccess {
			r.localError(c, w, st)
			return
		}
		w.recvd++
		r.retryLeft, r.rnrLeft = r.retryCnt, r.rnrRetry // forward progress
		if r.timerOn && pk.AETH == nil {
			// A First or Middle response acknowledges nothing, but shows the READ is being
			// answered: the transport timer runs from it (IBA 9.7.6.1.3), lazily — the
			// expiry moves its own deadline on.
			r.deadline = c.clk.Now().Add(r.timeout)
		}
		if w.recvd == w.npkts {
			w.done = true
		}
		if pk.AETH != nil {
			r.ack(c, psn)
		}
	}
	r.complete(c)
}

// ghost reports, and counts, an ACK or NAK that answers nothing this QP sent: its PSN is
// past the last request posted or, for a NAK, not past the last acknowledged (IBA
// 9.7.5.1: a response whose PSN matches no outstanding request is discarded). One
// cannot come from a peer that follows the protocol; it comes from one whose rq_psn
// differs from this QP's sq_psn — set up wrong — whose duplicate ACKs and sequence NAKs,
// taken at face value, would complete requests that never arrived or send the QP back
// forever. Dropped, the ACK timer retries and ends in IBV_WC_RETRY_EXC_ERR; the
// psn_mismatch pitfall names the cause.
func (r *requester) ghost(c *conn, psn uint32, ack bool) bool {
	last := psnAdd(r.nextPSN, psnMask)
	// A NAK a little behind the acknowledged PSN is a late one (a delaying or reordering
	// link): handled as before, it resends what is unacknowledged — dropping it stalled a
	// transfer behind a 20 µs delay now and then (TestPayloadRefsLeaveWithBytes).
	late := !ack && psnDiff(psn, r.ackedPSN) <= 0 && psnDiff(r.ackedPSN, psn) < 4*Window
	if late || psnDiff(psn, last) <= 0 && (ack || psnDiff(psn, r.ackedPSN) > 0) {
		return false
	}
	c.stats.Ghosts.Add(1)
	if r.ghostRun++; r.ghostRun == 3 {
		c.qp.Pitfall(hca.PitfallPSNMismatch, "3 ACKs/NAKs in a row for PSNs this QP did not send (last %#x; acknowledged to %#x, posted to %#x): the peer's rq_psn is not this QP's sq_psn",
			psn, r.ackedPSN, last)
	}
	return true
}

// readOpcodeFits checks a READ response's opcode against its place in the message. A
// READ re-requested from the middle is answered First…Last (or Only) from that point, so
// only the end of the message is pinned.
func readOpcodeFits(op wire.Opcode, idx, n uint32) bool {
	switch op {
	case wire.RCRDMAReadResponseOnly, wire.RCRDMAReadResponseLast:
		return idx == n-1
	case wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle:
		return idx < n-1
	}
	return false
}

// find returns the incomplete WQE whose PSN range holds psn.
func (r *requester) find(psn uint32) *swqe {
	for i, k := r.head, 0; k < r.count; i, k = r.slot(i+1), k+1 {
		w := &r.ring[i]
		if w.npkts == 0 {
			continue
		}
		if psnDiff(psn, w.firstPSN) >= 0 && psnDiff(psn, w.lastPSN()) <= 0 {
			return w
		}
	}
	return nil
}

// ack processes a cumulative acknowledgement of every PSN up to psn (IBA 9.7.5.1.1).
func (r *requester) ack(c *conn, psn uint32) {
	defer r.checkInvariant("ack")
	progress := false
	if psnDiff(psn, r.ackedPSN) > 0 {
		r.ackedPSN, progress = psn, true
	}
	for i, k := r.head, 0; k < r.count; i, k = r.slot(i+1), k+1 {
		w := &r.ring[i]
		if w.done || w.npkts == 0 {
			continue
		}
		if psnDiff(w.lastPSN(), psn) > 0 {
			break
		}
		if w.rdAtomic() {
			// An ACK past a READ or atomic whose response has not come: it was lost or is
			// late (IBA 9.7.5.1: implied NAK). Ask again; what follows is acknowledged.
			r.reissueWQE(i)
			continue
		}
		w.done, progress = true, true
	}
	if progress {
		r.retryLeft, r.rnrLeft = r.retryCnt, r.rnrRetry
		r.rnrRun, r.ghostRun = 0, 0
		r.restartTimer(c)
	}
}

// nak handles a NAK for psn (IBA 9.7.5.1; the NAK codes of the AETH, 9.3.5).
func (r *requester) nak(c *conn, psn uint32, code uint8) {
	if code == wire.NAKPSNSequenceError {
		// The responder NAKs a sequence error once per expected PSN; a copy that comes
		// again (duplicated or late) must not trigger a second go-back.
		if r.nakSet && r.nakPSN == psn && r.sentSinceNak == 0 {
			return
		}
		r.nakPSN, r.nakSet, r.sentSinceNak = psn, true, 0
		c.stats.SeqNAKs.Add(1)
		if trace.On() {
			traceRetry(c, "seq_nak", psn, r.retryLeft)
		}
		r.goBack(psn)
		return
	}
	w := r.find(psn)
	if w == nil {
		return
	}
	st := hca.WCRemOpErr
	switch code {
	case wire.NAKInvalidRequest:
		st = hca.WCRemInvReqErr
	case wire.NAKRemoteAccessError:
		st = hca.WCRemAccessErr
	case wire.NAKInvalidRDRequest:
		st = hca.WCRemInvRdReqErr
	}
	w.status, w.done = st, true
	r.complete(c)
}

// rnrForever is how many RNR NAKs in a row, with rnr_retry 7 (infinite), make the
// rnr_retry_forever pitfall.
const rnrForever = 16

// rnr handles an RNR NAK: wait the responder's timer, then resend from psn; rnr_retry 7
// retries forever (IBA 9.7.5.2.8).
func (r *requester) rnr(c *conn, psn uint32, code uint8) {
	if r.rnrRetry != 7 {
		if r.rnrLeft == 0 {
			if w := r.find(psn); w != nil {
				w.status, w.done = hca.WCRNRRetryExcErr, true
				r.complete(c)
			}
			return
		}
		r.rnrLeft--
	} else if r.rnrRun++; r.rnrRun == rnrForever {
		c.qp.Pitfall(hca.PitfallRNRRetryForever, "%d RNR NAKs in a row with rnr_retry 7: the peer posts no receive and the QP retries forever", r.rnrRun)
	}
	r.rnrWait = true
	c.stats.RNRNAKs.Add(1)
	if trace.On() {
		traceRetry(c, "rnr_nak", psn, r.rnrLeft)
	}
	r.stopTimer()
	f := func() {
		c.mu.Lock()
		if r.rnrWait {
			r.rnrWait = false
			r.goBack(psn)
		}
		c.mu.Unlock()
		c.kick()
		c.runFail()
	}
	if r.rnrTimer == nil {
		r.rnrTimer = c.clk.AfterFunc(rnrDelay(code), f)
	} else {
		r.rnrTimer.Stop()
		r.rnrTimer = c.clk.AfterFunc(rnrDelay(code), f)
	}
}

// goBack arranges to resend everything from psn on (go-back-N, IBA 9.7.5.1). It never
// moves the send pointer forward: what has not been sent yet will be.
func (r *requester) goBack(psn uint32) {
	for i, k := r.head, 0; k < r.count; i, k = r.slot(i+1), k+1 {
		w := &r.ring[i]
		if w.npkts == 0 || w.done {
			continue
		}
		if psnDiff(psn, w.lastPSN()) <= 0 {
			if r.pos(i) > r.pos(r.next) {
				return
			}
			d := psnDiff(psn, w.firstPSN)
			if i == r.next && (w.rdAtomic() || d < 0 || uint32(d) >= w.sent) {
				return // already about to send from there or earlier
			}
			r.goBackTo(i)
			if d > 0 && !w.rdAtomic() {
				w.sent = uint32(d)
			}
			return
		}
	}
}

// pos is the distance of ring index i from the head.
func (r *requester) pos(i int) int {
	if i >= r.head {
		return i - r.head
	}
	return i + len(r.ring) - r.head
}

// reissueWQE arranges for the READ or atomic at index i to be requested again (from the
// first missing response), without resending what follows it.
func (r *requester) reissueWQE(i int) {
	w := &r.ring[i]
	if w.done || w.reissue {
		return
	}
	if w.sent > 0 && i != r.next {
		w.reissue = true
		r.reissues++
	}
}

// index returns the ring index of w.
func (r *requester) index(w *swqe) int {
	for i, k := r.head, 0; k < r.count; i, k = r.slot(i+1), k+1 {
		if &r.ring[i] == w {
			return i
		}
	}
	return r.head
}

// goBackTo resets the send pointer to WQE index i: it and every later one are sent again.
func (r *requester) goBackTo(i int) {
	defer r.checkInvariant("goBackTo")
	r.next = i
	for j := i; j != r.tail; j = r.slot(j + 1) {
		w := &r.ring[j]
		if !w.done {
			w.sent = 0
		}
		if w.reissue {
			w.reissue = false
			r.reissues--
		}
	}
}

// complete reports finished WQEs from the head in order, and an errored one followed by
// the QP's move to ERR (IBA 10.8.3).
func (r *requester) complete(c *conn) {
	defer r.checkInvariant("complete")
	qp := c.qp
	for r.count > 0 {
		w := &r.ring[r.head]
		if !w.done {
			break
		}
		if w.issued {
			r.rdAtomicOut--
		}
		if w.status != hca.WCSuccess || qp.Signaled(&w.wr) {
			wc := hca.WC{WRID: w.wr.WRID, Status: w.status, Opcode: hca.WCOpcodeOf(w.wr.Opcode)}
			if w.status == hca.WCSuccess {
				// rxe's make_send_cqe: a successful send completion carries the WR's
				// length for every opcode (SEND, WRITE, READ, the atomics' 8 bytes; 0
				// for BIND_MW, LOCAL_INV), and WITH_IMM for the opcodes with immediate
				// data (mlx5's handle_good_req sets the same).
				wc.ByteLen = uint32(w.length)
				if w.wr.Opcode == hca.WRSendWithImm || w.wr.Opcode == hca.WRRDMAWriteWithImm {
					wc.WCFlags = hca.WCWithImm
				}
			}
			qp.CompleteSend(&wc)
		}
		failed := w.status != hca.WCSuccess
		if r.next == r.head {
			r.next = r.slot(r.head + 1)
		}
		r.head = r.slot(r.head + 1)
		r.count--
		if failed {
			r.stopTimer()
			c.fail()
			return
		}
	}
	if r.count == 0 {
		r.stopTimer()
	}
	if qp.State() == hca.QPStateSQD {
		r.notifyDrained(c)
	}
}

// localError completes w (and the WQEs before it, flushed) in error.
func (r *requester) localError(c *conn, w *swqe, st hca.WCStatus) {
	for i := r.head; ; i = r.slot(i + 1) {
		x := &r.ring[i]
		if x == w {
			break
		}
		if !x.done {
			x.status, x.done = hca.WCWRFlushErr, true
		}
	}
	w.status, w.done = st, true
	r.complete(c)
}

// flushAll completes every remaining WQE with IBV_WC_WR_FLUSH_ERR.
func (r *requester) flushAll(qp *hca.QP) {
	// The QP is in ERR: flushed WRs complete whether signaled or not (IBV_WC_WR_FLUSH_ERR, ibv_poll_cq(3)).
	for r.count > 0 {
		w := &r.ring[r.head]
		qp.CompleteSend(&hca.WC{WRID: w.wr.WRID, Status: hca.WCWRFlushErr, Opcode: hca.WCOpcodeOf(w.wr.Opcode)})
		r.head = r.slot(r.head + 1)
		r.count--
	}
	r.next = r.head
	r.rdAtomicOut = 0
}

func (r *requester) armTimer(c *conn) {
	if r.timeout == 0 {
		return
	}
	r.timerOn = true
	r.deadline = c.clk.Now().Add(r.timeout)
	if r.timer == nil {
		r.timer = c.clk.AfterFunc(r.timeout, func() { c.ackTimeout() })
		return
	}
	r.timer.Reset(r.timeout)
}

func (r *requester) restartTimer(c *conn) {
	if r.count == 0 || r.next == r.head && r.ring[r.head].sent == 0 {
		r.stopTimer()
		return
	}
	r.armTimer(c)
}

func (r *requester) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timerOn = false
}

// ackTimeout is the local ACK timer firing (IBA 9.7.6.1.3): retry from the first
// unacknowledged PSN, or give up with IBV_WC_RETRY_EXC_ERR after retry_cnt retries.
func (c *conn) ackTimeout() {
	c.mu.Lock()
	r := &c.req
	if !r.timerOn || r.count == 0 || r.rnrWait {
		c.mu.Unlock()
		return
	}
	// A timer re-armed while its previous expiry was already on its way must not count
	// as a timeout.
	if now := c.clk.Now(); now.Before(r.deadline) {
		r.timer.Reset(r.deadline.Sub(now))
		c.mu.Unlock()
		return
	}
	// Nor does a timer that expires while this QP is still transmitting: the answers to
	// what it sends arrive when the transmission returns (in process: inside it), and the
	// goroutine doing it may simply not have had a CPU (IBA 9.7.6.1.3 times a request
	// from its transmission).
	if c.running.Load() {
		r.armTimer(c)
		c.mu.Unlock()
		return
	}
	r.timerOn = false
	switch {
	case r.retryLeft > 0:
		r.retryLeft--
	case c.migrate():
		// IBA 17.2.8: the primary path failed and an alternate one is armed: migrate and
		// resend there, with the alternate path's timeout and a fresh retry count.
		a := c.qp.Attr()
		r.timeout = ackTimeout(a.Timeout)
		r.retryLeft = r.retryCnt
	default:
		w := &r.ring[r.head]
		w.status, w.done = hca.WCRetryExcErr, true
		r.complete(c)
		c.mu.Unlock()
		c.runFail()
		return
	}
	c.stats.Timeouts.Add(1)
	if trace.On() {
		traceRetry(c, "timeout", psnAdd(r.ackedPSN, 1), r.retryLeft)
	}
	r.nakSet, r.readGapSet = false, false
	// READs and atomics whose answers are missing though later PSNs were acknowledged
	// are asked again; everything unacknowledged is sent again.
	for i, k := r.head, 0; k < r.count && i != r.next; i, k = r.slot(i+1), k+1 {
		if w := &r.ring[i]; !w.done && w.rdAtomic() && psnDiff(w.lastPSN(), r.ackedPSN) <= 0 {
			r.reissueWQE(i)
		}
	}
	r.goBack(psnAdd(r.ackedPSN, 1))
	r.armTimer(c)
	c.mu.Unlock()
	c.kick()
	c.runFail()
}

// notifyDrained raises IBV_EVENT_SQ_DRAINED once the SQD state has nothing in flight.
func (r *requester) notifyDrained(c *conn) {
	if r.drainedNotified {
		return
	}
	for i, k := r.head, 0; k < r.count; i, k = r.slot(i+1), k+1 {
		w := &r.ring[i]
		if w.sent > 0 || w.issued {
			return
		}
	}
	r.drainedNotified = true
	c.qp.RaiseSQDrained()
}

func (c *conn) checkDrained() {
	c.mu.Lock()
	c.req.drainedNotified = false
	c.req.notifyDrained(c)
	c.mu.Unlock()
}

// debugTimeouts turns on internal consistency checks (tests set it from RC_DEBUG).
var debugTimeouts = false

// checkInvariant panics (tests only) when a WQE before the send pointer was never sent.
func (r *requester) checkInvariant(where string) {
	if !debugTimeouts {
		return
	}
	for i, k := r.head, 0; k < r.count && i != r.next; i, k = r.slot(i+1), k+1 {
		w := &r.ring[i]
		if !w.done && w.sent == 0 && w.npkts > 0 {
			panic(where + ": unsent WQE behind the send pointer")
		}
	}
}
