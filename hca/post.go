package hca

import "github.com/pibgw/pibgw/trace"

// PostSend posts send WRs (ibv_post_send). It returns how many were posted; on error,
// wrs[n] is the WR that was refused (libibverbs' bad_wr) and none after it was posted.
//
// As ibv_post_send(3) on hardware: posting to a QP in RESET, INIT or RTR fails; in SQE or ERR the WR is
// accepted and completes with IBV_WC_WR_FLUSH_ERR; in SQD it waits for the return to RTS.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	const op = "post_send"
	if trace.On() {
		qp.tracePostSend(wrs)
	}
	if err := qp.checkPostSend(wrs); err != nil {
		return 0, err
	}
	if bs, ok := qp.tr.(BatchSender); ok && len(wrs) > 1 && qp.State() == QPStateRTS {
		return qp.postSendBatch(bs, wrs)
	}
	for i := range wrs {
		wr := &wrs[i]
		switch s := qp.State(); s {
		case QPStateReset, QPStateInit, QPStateRTR:
			return i, errorf(op, EINVAL, "QP %#x is in %s; sends need RTS", qp.num, s)
		case QPStateSQE, QPStateErr:
			qp.flushSend(wr)
			continue
		}
		if err := qp.validateSend(wr); err != nil {
			return i, err
		}
		if qp.State() == QPStateSQD {
			qp.mu.Lock()
			if qp.State() == QPStateSQD {
				qp.sqdPending = append(qp.sqdPending, cloneWR(wr))
				qp.mu.Unlock()
				continue
			}
			qp.mu.Unlock()
		}
		if err := qp.tr.PostSend(qp, wr); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// BatchSender is implemented by transports that send several WRs at once (UD: one
// Transmit per batch, so the receiver completes a burst together).
type BatchSender interface {
	// PostSendBatch sends validated WRs and returns how many it took; an error is for
	// the WR at that index.
	PostSendBatch(qp *QP, wrs []SendWR) (int, error)
}

// postSendBatch validates WRs and hands runs of valid ones to the transport.
func (qp *QP) postSendBatch(bs BatchSender, wrs []SendWR) (int, error) {
	for i := 0; i < len(wrs); {
		j := i
		var verr error
		for ; j < len(wrs); j++ {
			if verr = qp.validateSend(&wrs[j]); verr != nil {
				break
			}
		}
		if j > i {
			n, err := bs.PostSendBatch(qp, wrs[i:j])
			if err != nil {
				return i + n, err
			}
			if n < j-i { // a WR completed in error: the rest meet the QP in SQE
				m, err := qp.PostSend(wrs[i+n : j])
				if err != nil {
					return i + n + m, err
				}
			}
		}
		if verr != nil {
			return j, verr
		}
		i = j
	}
	return len(wrs), nil
}

func cloneWR(wr *SendWR) SendWR {
	c := *wr
	c.SGL = append([]SGE(nil), wr.SGL...)
	if wr.SendFlags&SendInline != 0 {
		// Inline data is copied at post time (IBV_SEND_INLINE, ibv_post_send(3)): keep a copy.
		c.inline = make([]byte, 0, MessageLen(wr.SGL))
		for _, s := range wr.SGL {
			c.inline = append(c.inline, rawBytes(s.Addr, s.Length)...)
		}
	}
	return c
}

// replaySQD starts the WRs posted while the QP was in SQD.
func (qp *QP) replaySQD() {
	qp.mu.Lock()
	wrs := qp.sqdPending
	qp.sqdPending = nil
	qp.mu.Unlock()
	for i := range wrs {
		if err := qp.tr.PostSend(qp, &wrs[i]); err != nil {
			qp.dev.log.Warn("send WR posted in SQD failed on resume", "qpn", qp.num, "err", err)
		}
	}
}

// validateSend applies the checks libibverbs providers make at post time.
func (qp *QP) validateSend(wr *SendWR) error {
	const op = "post_send"
	if !opcodeAllowed(qp.typ, wr.Opcode) {
		return errorf(op, EINVAL, "opcode %s is not valid on a %s QP", wr.Opcode, qp.typ)
	}
	if len(wr.SGL) > int(qp.cap.MaxSendSGE) {
		return errorf(op, EINVAL, "%d SGEs, max_send_sge is %d", len(wr.SGL), qp.cap.MaxSendSGE)
	}
	n := MessageLen(wr.SGL)
	if wr.SendFlags&SendInline != 0 {
		if n > uint64(qp.cap.MaxInlineData) {
			return errorf(op, EINVAL, "%d bytes inline, max_inline_data is %d", n, qp.cap.MaxInlineData)
		}
		if wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAndAdd {
			return errorf(op, EINVAL, "%s cannot be inline", wr.Opcode)
		}
	}
	if wr.Opcode == WRBindMW {
		if err := validateBind(wr); err != nil {
			return err
		}
	}
	if n > MaxMsgSize {
		return errorf(op, EINVAL, "message of %d bytes above max_msg_sz %d", n, MaxMsgSize)
	}
	if qp.typ.datagram() {
		if wr.AH == nil {
			return errorf(op, EINVAL, "UD send without an address handle")
		}
		// IBA C10-10 leaves the choice between an immediate error and a completion error
		// to the implementation; pibgw reports it immediately.
		if wr.AH.pd != qp.pd {
			return errorf(op, EINVAL, "address handle of another PD")
		}
	}
	if wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAndAdd {
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return errorf(op, EINVAL, "atomic WR needs one 8-byte SGE")
		}
		if wr.RemoteAddr%8 != 0 {
			return errorf(op, EINVAL, "atomic remote address %#x is not 8-byte aligned", wr.RemoteAddr)
		}
	}
	return nil
}

func opcodeAllowed(t QPType, o WROpcode) bool {
	switch t {
	case QPTypeUD, QPTypeSMI, QPTypeGSI:
		return o == WRSend || o == WRSendWithImm
	case QPTypeUC:
		// IBA table 38: SEND with Invalidate exists for RC and XRC only.
		return o == WRSend || o == WRSendWithImm || o == WRRDMAWrite || o == WRRDMAWriteWithImm ||
			o == WRLocalInv || o == WRBindMW
	case QPTypeRC, QPTypeXRCSend:
		return o <= WRAtomicFetchAndAdd || o == WRSendWithInv || o == WRLocalInv || o == WRBindMW
	}
	return false
}

// MessageLen is the total length of a scatter/gather list.
func MessageLen(sgl []SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n
}

// PostRecv posts receive WRs (ibv_post_recv): allowed from INIT on (IBA 10.8.2); in ERR
// they complete at once with IBV_WC_WR_FLUSH_ERR.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	const op = "post_recv"
	if trace.On() {
		qp.tracePostRecv(wrs)
	}
	if err := qp.checkPostRecv(wrs); err != nil {
		return 0, err
	}
	if qp.typ == QPTypeXRCSend || qp.typ == QPTypeXRCRecv {
		return 0, errorf(op, EINVAL, "an %s QP has no receive queue", qp.typ)
	}
	if qp.srq != nil {
		return 0, errorf(op, EINVAL, "QP %#x uses an SRQ; post to the SRQ", qp.num)
	}
	switch s := qp.State(); s {
	case QPStateReset:
		return 0, errorf(op, EINVAL, "QP %#x is in RESET; receives need INIT or later", qp.num)
	case QPStateErr:
		for i := range wrs {
			if len(wrs[i].SGL) > qp.rq.maxSGE {
				return i, errorf(op, EINVAL, "wr %d has %d SGEs, max_recv_sge is %d", i, len(wrs[i].SGL), qp.rq.maxSGE)
			}
			qp.recvCQ.Push(&WC{WRID: wrs[i].WRID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.num}, false)
		}
		return len(wrs), nil
	}
	return qp.rq.post(op, wrs)
}

// The driver API: what transports call.

// Signaled reports whether wr's successful completion is reported (IBV_SEND_SIGNALED or
// sq_sig_all).
func (qp *QP) Signaled(wr *SendWR) bool { return qp.sigAll || wr.SendFlags&SendSignaled != 0 }

// CompleteSend reports a send-side completion on the send CQ.
func (qp *QP) CompleteSend(wc *WC) {
	wc.QPNum = qp.num
	qp.sendCQ.Push(wc, false)
}

// CompleteRecv reports a receive completion; solicited marks a message with SE set.
func (qp *QP) CompleteRecv(wc *WC, solicited bool) {
	wc.QPNum = qp.num
	qp.recvCQ.Push(wc, solicited)
}

func wcOpcode(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// WCOpcodeOf maps a send WR opcode to the opcode of its completion.
func WCOpcodeOf(o WROpcode) WCOpcode { return wcOpcode(o) }

func (qp *QP) flushSend(wr *SendWR) {
	qp.CompleteSend(&WC{WRID: wr.WRID, Status: WCWRFlushErr, Opcode: wcOpcode(wr.Opcode)})
}

// SendError completes wr with an error status and moves the QP to SQE (UD, UC: IBA
// 10.3.1's Send Queue Error state) or ERR (RC), flushing what follows.
func (qp *QP) SendError(wr *SendWR, status WCStatus) {
	qp.CompleteSend(&WC{WRID: wr.WRID, Status: status, Opcode: wcOpcode(wr.Opcode)})
	if qp.typ == QPTypeRC {
		qp.SetError()
		return
	}
	qp.mu.Lock()
	cur := qp.State()
	if cur == QPStateRTS || cur == QPStateSQD {
		qp.state.Store(uint32(QPStateSQE))
		qp.attr.QPState = QPStateSQE
	}
	qp.mu.Unlock()
}

// RecvError completes the receive WQE w with an error status and moves the QP to ERR
// (IBA 9.9: receive errors are QP fatal), flushing the rest.
func (qp *QP) RecvError(w *RecvWQE, status WCStatus, opcode WCOpcode) {
	qp.CompleteRecv(&WC{WRID: w.WRID, Status: status, Opcode: opcode}, false)
	qp.SetError()
}

// SetError moves the QP to ERR, flushing its receive queue, as ModifyQP to ERR does.
func (qp *QP) SetError() {
	qp.mu.Lock()
	cur := qp.State()
	if cur == QPStateErr || cur == QPStateReset {
		qp.mu.Unlock()
		return
	}
	qp.state.Store(uint32(QPStateErr))
	qp.attr.QPState = QPStateErr
	qp.mu.Unlock()
	qp.changed(cur, QPStateErr)
}

// TakeRecv pops the next receive WQE (from the SRQ if the QP has one) into w.
func (qp *QP) TakeRecv(w *RecvWQE) bool {
	w.pd, w.cq = nil, nil
	if qp.srq != nil {
		return qp.srq.take(w)
	}
	ok, _ := qp.rq.take(w)
	return ok
}

// Gather copies the message wr describes into dst (len(dst) ≥ MessageLen(wr.SGL)),
// checking every SGE: the L_Key must name an MR of the QP's PD and the range must lie
// inside it (else IBV_WC_LOC_PROT_ERR); inline data is read straight from the given addresses.
func (qp *QP) Gather(wr *SendWR, dst []byte) WCStatus {
	if wr.inline != nil {
		copy(dst, wr.inline)
		return WCSuccess
	}
	inline := wr.SendFlags&SendInline != 0
	off := 0
	for _, s := range wr.SGL {
		if s.Length == 0 {
			continue
		}
		if inline {
			off += copy(dst[off:], rawBytes(s.Addr, s.Length))
			continue
		}
		mr := qp.dev.LookupKey(s.LKey)
		if mr == nil || mr.pd != qp.pd {
			return WCLocProtErr
		}
		b, ok := mr.Slice(s.Addr, s.Length)
		if !ok {
			return WCLocProtErr
		}
		off += copy(dst[off:], b)
	}
	return WCSuccess
}

// GatherAt copies len(dst) bytes of a registered gather list, starting at byte off of
// the message, with Gather's checks (RC packetisation takes a message piece by piece).
func (qp *QP) GatherAt(sgl []SGE, off uint64, dst []byte) WCStatus {
	for _, s := range sgl {
		if len(dst) == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		n := uint64(s.Length) - off
		if n > uint64(len(dst)) {
			n = uint64(len(dst))
		}
		mr := qp.dev.LookupKey(s.LKey)
		if mr == nil || mr.pd != qp.pd {
			return WCLocProtErr
		}
		b, ok := mr.Slice(s.Addr+off, uint32(n))
		if !ok {
			return WCLocProtErr
		}
		copy(dst, b)
		dst = dst[n:]
		off = 0
	}
	if len(dst) != 0 {
		return WCLocLenErr
	}
	return WCSuccess
}

// InlineBytes returns a copy of an inline WR's data (RC keeps it for retransmission).
func InlineBytes(wr *SendWR, dst []byte) []byte {
	if wr.inline != nil {
		return append(dst[:0], wr.inline...)
	}
	dst = dst[:0]
	for _, s := range wr.SGL {
		dst = append(dst, rawBytes(s.Addr, s.Length)...)
	}
	return dst
}

// Scatter writes src at byte offset off of w's scatter list, checking each SGE's L_Key,
// PD, LOCAL_WRITE access and bounds (LOC_PROT_ERR) and the list's length (LOC_LEN_ERR).
func (qp *QP) Scatter(w *RecvWQE, off uint64, src []byte) WCStatus {
	pd := qp.pd
	if w.pd != nil {
		pd = w.pd
	}
	return qp.scatter(pd, w.SGE[:w.NumSGE], off, src)
}

// ScatterSGL writes src at byte offset off of a scatter list (a receive WQE's, or the
// local buffers of an RDMA READ or atomic), with Scatter's checks.
func (qp *QP) ScatterSGL(sgl []SGE, off uint64, src []byte) WCStatus {
	return qp.scatter(qp.pd, sgl, off, src)
}

func (qp *QP) scatter(pd *PD, sgl []SGE, off uint64, src []byte) WCStatus {
	for _, s := range sgl {
		if len(src) == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		n := uint64(s.Length) - off
		if n > uint64(len(src)) {
			n = uint64(len(src))
		}
		mr := qp.dev.LookupKey(s.LKey)
		if mr == nil || mr.pd != pd || mr.access&AccessLocalWrite == 0 {
			return WCLocProtErr
		}
		b, ok := mr.Slice(s.Addr+off, uint32(n))
		if !ok {
			return WCLocProtErr
		}
		copy(b, src[:n])
		src = src[n:]
		off = 0
	}
	if len(src) != 0 {
		return WCLocLenErr
	}
	return WCSuccess
}

// AttachMcast attaches the QP to a multicast group (ibv_attach_mcast): packets sent to
// the MGID are delivered to it. Only UD QPs can be attached (ibv_attach_mcast(3)).
func (qp *QP) AttachMcast(gid [16]byte, lid uint16) error {
	const op = "attach_mcast"
	if qp.typ != QPTypeUD {
		return errorf(op, EINVAL, "only UD QPs can join multicast groups, this one is %s", qp.typ)
	}
	if gid[0] != 0xFF {
		return errorf(op, EINVAL, "GID %x is not a multicast GID", gid)
	}
	p := qp.port.Load()
	if p == nil {
		return errorf(op, EINVAL, "QP %#x is not bound to a port yet", qp.num)
	}
	qp.mcMu.Lock()
	defer qp.mcMu.Unlock()
	if _, ok := qp.mcGIDs[gid]; ok {
		return nil
	}
	if r := qp.dev.cfg.Remote; r != nil {
		// The daemon's port must forward the group's packets to this process.
		if err := r.AttachMcast(p.num, gid, qp.num); err != nil {
			return errorf(op, ENOMEM, "the daemon refused the attachment: %v", err)
		}
	}
	p.mcMu.Lock()
	defer p.mcMu.Unlock()
	if len(p.mcast) >= MaxMcastGroups && p.mcast[gid] == nil {
		return errorf(op, ENOMEM, "port has %d multicast groups (max_mcast_grp)", MaxMcastGroups)
	}
	if len(p.mcast[gid]) >= MaxMcastQPAttach {
		return errorf(op, ENOMEM, "group has %d QPs (max_mcast_qp_attach)", MaxMcastQPAttach)
	}
	// Copy on write: the receive path iterates the old slice without the lock.
	qps := append(append([]*QP(nil), p.mcast[gid]...), qp)
	p.mcast[gid] = qps
	if qp.mcGIDs == nil {
		qp.mcGIDs = make(map[[16]byte]struct{})
	}
	qp.mcGIDs[gid] = struct{}{}
	return nil
}

// DetachMcast detaches the QP from a group (ibv_detach_mcast).
func (qp *QP) DetachMcast(gid [16]byte, lid uint16) error {
	qp.mcMu.Lock()
	defer qp.mcMu.Unlock()
	if _, ok := qp.mcGIDs[gid]; !ok {
		return errorf("detach_mcast", EINVAL, "QP %#x is not attached to %x", qp.num, gid)
	}
	delete(qp.mcGIDs, gid)
	qp.port.Load().detach(gid, qp)
	if r := qp.dev.cfg.Remote; r != nil {
		r.DetachMcast(qp.port.Load().num, gid, qp.num)
	}
	return nil
}

// DetachAll detaches the QP from every group.
func (qp *QP) DetachAll() {
	qp.mcMu.Lock()
	defer qp.mcMu.Unlock()
	for gid := range qp.mcGIDs {
		qp.port.Load().detach(gid, qp)
		if r := qp.dev.cfg.Remote; r != nil {
			r.DetachMcast(qp.port.Load().num, gid, qp.num)
		}
	}
	qp.mcGIDs = nil
}

func (p *Port) detach(gid [16]byte, qp *QP) {
	p.mcMu.Lock()
	defer p.mcMu.Unlock()
	p.detachLocked(gid, qp)
}

// detachLocked removes qp from group gid; p.mcMu held.
func (p *Port) detachLocked(gid [16]byte, qp *QP) {
	var qps []*QP
	for _, q := range p.mcast[gid] {
		if q != qp {
			qps = append(qps, q)
		}
	}
	if len(qps) == 0 {
		delete(p.mcast, gid)
	} else {
		p.mcast[gid] = qps
	}
}

// RaiseSQDrained reports that a QP in SQD has no send WR in flight any more
// (IBV_EVENT_SQ_DRAINED, if the QP asked for it with en_sqd_async_notify).
func (qp *QP) RaiseSQDrained() {
	qp.mu.Lock()
	notify := qp.attr.EnSQDAsyncNotify
	qp.mu.Unlock()
	if notify {
		qp.dev.raise(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}
