package hca

import (
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/trace"
)

const (
	firstUserQPN = 0x48
	maxQPN       = 0xFFFFFF
)

// QP is a queue pair (ibv_qp).
type QP struct {
	pd     *PD
	xrcd   *XRCD // XRC_RECV QPs (xrc.go)
	dev    *Device
	num    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	csumP  bool // QPInitAttr.IPCsumPartial
	cap    QPCap
	tr     Transport
	fwd    Forwarder // set on a device's entries for QPs of attached processes (remote.go)

	// Read on the packet path without locks.
	state     atomic.Uint32
	qkey      atomic.Uint32
	pkeyIndex atomic.Uint32
	port      atomic.Pointer[Port]
	apm       apmState // alternate path and migration state (apm.go)

	mu   sync.Mutex // guards attr and state changes
	attr QPAttr

	rq recvQueue

	sqdPending []SendWR // WRs posted in SQD, started on the return to RTS

	unsig     atomic.Int32  // unsignaled sends in a row (manner_checks.go)
	recvKeyOK atomic.Uint32 // the last L_Key a receive was posted into found writable (manner_checks.go)

	mcMu   sync.Mutex
	mcGIDs map[[16]byte]struct{}

	// TransportState belongs to the QP's transport (rc keeps its requester and responder
	// here).
	TransportState any
	// SendMu serialises a transport's send path for this QP.
	SendMu sync.Mutex
}

// sgeLen is sizeof(struct ibv_sge): address, length, lkey.
const sgeLen = 16

// CreateQP creates a queue pair (ibv_create_qp). SMI and GSI types create the port's QP0
// and QP1.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	if init.QPType == QPTypeXRCRecv {
		return nil, errorf("create_qp", EINVAL, "XRC_RECV QPs are created in an XRC domain")
	}
	return pd.createQP(init, nil)
}

func (pd *PD) createQP(init QPInitAttr, xrcd *XRCD) (*QP, error) {
	d := pd.ctx.dev
	const op = "create_qp"
	// An XRC send QP has no receive side (Annex A14), an XRC receive QP no queues at all.
	needSend, needRecv := init.QPType != QPTypeXRCRecv, init.QPType != QPTypeXRCRecv && init.QPType != QPTypeXRCSend
	if needSend && init.SendCQ == nil || needRecv && init.RecvCQ == nil {
		return nil, errorf(op, EINVAL, "send_cq and recv_cq are required")
	}
	if init.SendCQ != nil && init.SendCQ.ctx.dev != d || init.RecvCQ != nil && init.RecvCQ.ctx.dev != d {
		return nil, errorf(op, EINVAL, "CQ of another device")
	}
	if !needRecv {
		if init.SRQ != nil {
			return nil, errorf(op, EINVAL, "an %s QP takes no SRQ", init.QPType)
		}
		init.RecvCQ, init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = nil, 0, 0
	}
	tr := d.transport(init.QPType)
	if tr == nil {
		return nil, errorf(op, EOPNOTSUPP, "QP type %s is not supported by %s", init.QPType, d.Name())
	}
	c := init.Cap
	if c.MaxSendWR > MaxQPWR || c.MaxRecvWR > MaxQPWR {
		return nil, errorf(op, EINVAL, "max_send_wr %d / max_recv_wr %d above max_qp_wr %d", c.MaxSendWR, c.MaxRecvWR, MaxQPWR)
	}
	if c.MaxSendSGE > MaxSGE || c.MaxRecvSGE > MaxSGE {
		return nil, errorf(op, EINVAL, "max_send_sge %d / max_recv_sge %d above max_sge %d", c.MaxSendSGE, c.MaxRecvSGE, MaxSGE)
	}
	if c.MaxInlineData > MaxInline {
		return nil, errorf(op, EINVAL, "max_inline_data %d above %d", c.MaxInlineData, MaxInline)
	}
	if init.SRQ != nil && init.SRQ.pd.ctx.dev != d {
		return nil, errorf(op, EINVAL, "SRQ of another device")
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if needSend && c.MaxInlineData < c.MaxSendSGE*sgeLen {
		// A send WQE holds its inline data where its scatter/gather list would be, as
		// rxe's do (rxe_qp_init_req: max(max_inline_data, max_send_sge × sizeof(struct
		// ib_sge))) and mlx5's: ibv_create_qp(3) returns the capabilities the QP has,
		// which may exceed those asked for, and programs rely on it (rdma_xclient posts
		// 16 bytes inline from a QP created with max_inline_data 0).
		c.MaxInlineData = min(c.MaxSendSGE*sgeLen, MaxInline)
	}
	if pd.dead.Load() {
		return nil, errorf(op, EINVAL, "PD %d is freed", pd.id)
	}
	qp := &QP{
		pd: pd, xrcd: xrcd, dev: d, typ: init.QPType, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, sigAll: init.SQSigAll, cap: c, tr: tr, csumP: init.IPCsumPartial && (init.QPType == QPTypeUD || init.QPType == QPTypeRC),
	}
	if init.SRQ == nil {
		qp.rq = newRecvQueue(int(c.MaxRecvWR), int(c.MaxRecvSGE))
	}
	var special *Port
	if init.QPType == QPTypeSMI || init.QPType == QPTypeGSI {
		special = d.Port(int(init.Port))
		if special == nil {
			return nil, errorf(op, EINVAL, "port %d does not exist", init.Port)
		}
	}

	d.mu.Lock()
	if d.counts.qp >= MaxQP {
		d.mu.Unlock()
		return nil, errorf(op, ENOMEM, "device has %d QPs (max_qp)", MaxQP)
	}
	switch init.QPType {
	case QPTypeSMI, QPTypeGSI:
		slot := &special.qp0
		qp.num = 0
		if init.QPType == QPTypeGSI {
			slot, qp.num = &special.qp1, 1
		}
		if !slot.CompareAndSwap(nil, qp) {
			d.mu.Unlock()
			return nil, errorf(op, EBUSY, "port %d already has QP%d", init.Port, qp.num)
		}
		qp.port.Store(special)
	default:
		if d.cfg.Remote != nil {
			// A mirror device's numbers come from the daemon (remote.go); the RPC must
			// not run under the device lock.
			d.mu.Unlock()
			n, err := d.cfg.Remote.AllocQPN()
			if err != nil {
				return nil, errorf(op, ENOMEM, "QP number from the daemon: %v", err)
			}
			d.mu.Lock()
			qp.num = n
		} else {
			qp.num = d.allocQPNLocked()
		}
		d.qps.store(qp.num, qp)
	}
	d.counts.qp++
	d.mu.Unlock()

	pd.refs.Add(1)
	if init.SendCQ != nil {
		init.SendCQ.refs.Add(1)
	}
	if init.RecvCQ != nil {
		init.RecvCQ.refs.Add(1)
	}
	if init.SRQ != nil {
		d.mu.Lock()
		init.SRQ.refs++
		d.mu.Unlock()
	}
	qp.attr.Cap = c
	qp.attr.QPState = QPStateReset
	d.register(qp)
	if special != nil {
		qp.attr.PortNum = special.num
	}
	return qp, nil
}

// allocQPNLocked returns the next free QP number; d.mu held.
func (d *Device) allocQPNLocked() uint32 {
	if d.Manner().LowestQPN {
		// pib's behavior flag: the lowest free number, so a program that mistakes a
		// destroyed QP's successor for it meets its bug at once.
		n := uint32(firstUserQPN)
		for d.qps.load(n) != nil {
			n = nextQPN(n)
		}
		return n
	}
	for d.qps.load(d.nextQPN) != nil {
		d.nextQPN = nextQPN(d.nextQPN)
	}
	n := d.nextQPN
	d.nextQPN = nextQPN(d.nextQPN)
	return n
}

func nextQPN(n uint32) uint32 {
	n++
	if n > maxQPN-1 { // 0xFFFFFF is the multicast QPN
		n = firstUserQPN
	}
	return n
}

// Num is the QP number.
func (qp *QP) Num() uint32 { return qp.num }

// Type is the QP type.
func (qp *QP) Type() QPType { return qp.typ }

// IPCsumPartial reports whether the QP takes CHECKSUM_PARTIAL receives
// (QPInitAttr.IPCsumPartial).
func (qp *QP) IPCsumPartial() bool { return qp.csumP }

// State is the current state.
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Device returns the QP's device.
func (qp *QP) Device() *Device { return qp.dev }

// Port returns the port the QP is bound to (nil in RESET before INIT).
func (qp *QP) Port() *Port { return qp.port.Load() }

// QKey is the QP's Q_Key.
func (qp *QP) QKey() uint32 { return qp.qkey.Load() }

// PKeyIndex is the QP's P_Key index.
func (qp *QP) PKeyIndex() uint16 { return uint16(qp.pkeyIndex.Load()) }

// SendCQ and RecvCQ return the QP's CQs.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ returns the receive CQ.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// SRQ returns the QP's SRQ or nil.
func (qp *QP) SRQ() *SRQ { return qp.srq }

// Cap returns the QP's capabilities.
func (qp *QP) Cap() QPCap { return qp.cap }

// Attr returns a copy of the QP's attributes.
func (qp *QP) Attr() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.QPState = qp.State()
	return a
}

// Query returns the attributes (ibv_query_qp) and the creation attributes. As the kernel
// answers them: cur_qp_state is the state the QP is in (rxe_qp_to_attr; ib_uverbs_query_qp
// copies it), and sq_psn/rq_psn are where the queues are (rxe: req.psn and resp.psn;
// mlx5: next_send_psn and next_rcv_psn), not the values last set.
func (qp *QP) Query() (QPAttr, QPInitAttr) {
	a := qp.Attr()
	a.CurQPState = a.QPState
	if r, ok := qp.tr.(PSNReporter); ok {
		r.CurrentPSNs(qp, &a.SQPSN, &a.RQPSN)
	}
	// A QP on an SRQ has no receive capabilities to report: rxe_qp_to_init fills them only
	// without one, into the attributes ib_query_qp zeroed.
	c := qp.cap
	if qp.srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	return a, QPInitAttr{SendCQ: qp.sendCQ, RecvCQ: qp.recvCQ, SRQ: qp.srq, Cap: c, QPType: qp.typ, SQSigAll: qp.sigAll}
}

// PSNReporter is implemented by a Transport that keeps PSNs: CurrentPSNs replaces *sq
// with the PSN the send queue sends next and *rq with the one the receive queue expects,
// each once the transport has one (RTS, RTR), for Query.
type PSNReporter interface {
	CurrentPSNs(qp *QP, sq, rq *uint32)
}

// receiving reports whether the receive side accepts packets: RTR and later, but not in
// ERR (IBA 10.3.1).
func (qp *QP) receiving() bool {
	s := qp.State()
	return s >= QPStateRTR && s <= QPStateSQE
}

// Modify changes attributes and state (ibv_modify_qp).
func (qp *QP) Modify(a *QPAttr, mask QPAttrMask) error {
	const op = "modify_qp"
	if err := qp.checkModify(a, mask); err != nil {
		return err
	}
	qp.mu.Lock()
	cur := qp.State()
	next := cur
	if mask&QPAttrState != 0 {
		next = a.QPState
		if next > QPStateErr {
			qp.mu.Unlock()
			return errorf(op, EINVAL, "unknown target state %d", next)
		}
	}
	if mask&QPAttrCurState != 0 && a.CurQPState != cur {
		qp.mu.Unlock()
		return errorf(op, EINVAL, "cur_qp_state %s is not the QP's state %s", a.CurQPState, cur)
	}
	if err := checkTransition(qp.typ, cur, next, mask); err != nil {
		qp.mu.Unlock()
		return err
	}
	if err := qp.checkValues(a, mask); err != nil {
		qp.mu.Unlock()
		return err
	}
	if err := qp.checkAPM(a, mask); err != nil {
		qp.mu.Unlock()
		return err
	}
	qp.apply(a, mask)
	migrated := qp.applyAPM(a, mask)
	if next == QPStateReset {
		qp.resetAPMLocked()
	}
	qp.attr.QPState = next
	qp.state.Store(uint32(next))
	qp.mu.Unlock()
	if migrated {
		qp.dev.raise(AsyncEvent{Type: EventPathMig, QP: qp})
	}

	if trace.On() {
		qp.traceModify(cur, next)
	}
	// The transport hears of every successful modify, state change or not (RTS→RTS
	// updates timers and access flags).
	qp.changed(cur, next)
	return nil
}

func (qp *QP) checkValues(a *QPAttr, mask QPAttrMask) error {
	const op = "modify_qp"
	d := qp.dev
	port := qp.port.Load()
	if mask&QPAttrPort != 0 {
		port = d.Port(int(a.PortNum))
		if port == nil {
			return errorf(op, EINVAL, "port_num %d does not exist", a.PortNum)
		}
	}
	if mask&QPAttrPKeyIndex != 0 && int(a.PKeyIndex) >= PKeyTableLen {
		return errorf(op, EINVAL, "pkey_index %d out of range 0..%d", a.PKeyIndex, PKeyTableLen-1)
	}
	if mask&QPAttrPathMTU != 0 {
		if a.PathMTU.Bytes() == 0 {
			return errorf(op, EINVAL, "path_mtu encoding %d invalid", a.PathMTU)
		}
		if port != nil && a.PathMTU > d.cfg.MaxMTU {
			return errorf(op, EINVAL, "path_mtu %d above the port's max_mtu %d", a.PathMTU.Bytes(), d.cfg.MaxMTU.Bytes())
		}
	}
	if mask&QPAttrAV != 0 {
		if a.AHAttr.DLID == 0 {
			return errorf(op, EINVAL, "ah_attr.dlid is 0")
		}
		if a.AHAttr.SL > 15 {
			return errorf(op, EINVAL, "ah_attr.sl %d out of range", a.AHAttr.SL)
		}
	}
	// rxe_qp_chk_attr checks the timeout (5 bits) but neither retry count nor the RNR
	// timer: it keeps retry_cnt and rnr_retry as given and counts with them (only 7 is
	// "forever"), and sends min_rnr_timer's low 5 bits (mlx5 keeps the low bits of all
	// three).
	if mask&QPAttrTimeout != 0 && a.Timeout > 31 {
		return errorf(op, EINVAL, "timeout %d above 31", a.Timeout)
	}
	if mask&QPAttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > MaxQPInitRdAtom {
		return errorf(op, EINVAL, "max_rd_atomic %d above max_qp_init_rd_atom %d", a.MaxRdAtomic, MaxQPInitRdAtom)
	}
	if mask&QPAttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > MaxQPRdAtom {
		return errorf(op, EINVAL, "max_dest_rd_atomic %d above max_qp_rd_atom %d", a.MaxDestRdAtomic, MaxQPRdAtom)
	}
	if mask&QPAttrDestQPN != 0 && a.DestQPNum > maxQPN {
		return errorf(op, EINVAL, "dest_qp_num %#x wider than 24 bits", a.DestQPNum)
	}
	// pib's "manner" check: PSNs are 24 bits; a wider value is a bug in the caller.
	if mask&QPAttrSQPSN != 0 && a.SQPSN > 0xFFFFFF {
		if err := d.pitfall(PitfallPSNWidth, op, qp.num, qp.what(), "sq_psn %#x is wider than 24 bits; the upper bits are ignored", a.SQPSN); err != nil {
			return err
		}
	}
	if mask&QPAttrRQPSN != 0 && a.RQPSN > 0xFFFFFF {
		if err := d.pitfall(PitfallPSNWidth, op, qp.num, qp.what(), "rq_psn %#x is wider than 24 bits; the upper bits are ignored", a.RQPSN); err != nil {
			return err
		}
	}
	// qp_access_flags may carry MR flags such as IBV_ACCESS_ON_DEMAND: uverbs copies them,
	// rxe takes the bits of RXE_ACCESS_SUPPORTED_QP (rxe_qp_chk_attr), keeps them as given
	// (ibv_query_qp returns them) and uses the remote ones, as mlx5 does.
	if mask&QPAttrAccessFlags != 0 && a.QPAccessFlags&^accessSupportedQP != 0 {
		return errorf(op, EINVAL, "qp_access_flags %#x has bits rxe does not take (%#x)", uint32(a.QPAccessFlags), uint32(a.QPAccessFlags&^accessSupportedQP))
	}
	return nil
}

func (qp *QP) apply(a *QPAttr, mask QPAttrMask) {
	t := &qp.attr
	if mask&QPAttrPort != 0 {
		t.PortNum = a.PortNum
		qp.port.Store(qp.dev.Port(int(a.PortNum)))
	}
	if mask&QPAttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
		qp.pkeyIndex.Store(uint32(a.PKeyIndex))
	}
	if mask&QPAttrQKey != 0 {
		t.QKey = a.QKey
		qp.qkey.Store(a.QKey)
	}
	if mask&QPAttrAccessFlags != 0 {
		t.QPAccessFlags = a.QPAccessFlags
	}
	if mask&QPAttrAV != 0 {
		t.AHAttr = a.AHAttr
	}
	if mask&QPAttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
	}
	if mask&QPAttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
	}
	if mask&QPAttrRQPSN != 0 {
		t.RQPSN = a.RQPSN & 0xFFFFFF
	}
	if mask&QPAttrSQPSN != 0 {
		t.SQPSN = a.SQPSN & 0xFFFFFF
	}
	// rxe_qp_from_attr keeps both depths rounded up to a power of two (0 stays 0), and
	// works and reports with that (mlx5 too: log_sra_max, log_rra_max).
	if mask&QPAttrMaxQPRdAtomic != 0 {
		t.MaxRdAtomic = pow2Up(a.MaxRdAtomic)
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		t.MaxDestRdAtomic = pow2Up(a.MaxDestRdAtomic)
	}
	if mask&QPAttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if mask&QPAttrDestQPN != 0 {
		t.DestQPNum = a.DestQPNum
	}
	if mask&QPAttrEnSQDAsyncNotify != 0 {
		t.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
}

// pow2Up rounds n up to a power of two (at most 128, checkValues' limits are lower); 0
// stays 0.
func pow2Up(n uint8) uint8 {
	if n == 0 {
		return 0
	}
	p := uint8(1)
	for p < n && p < 128 {
		p <<= 1
	}
	return p
}

// changed runs the side effects of a modify.
func (qp *QP) changed(from, to QPState) {
	switch {
	case from == to && to != QPStateReset:
	case to == QPStateReset:
		// IBA 10.3.1: RESET empties both queues without completions (checkManner warns).
		if qp.srq == nil {
			qp.rq.drain()
		}
	case to == QPStateErr:
		qp.flushRecv()
	}
	qp.tr.Modified(qp, from, to)
	switch {
	case from == to:
	case to == QPStateReset:
		// The completions of the QP still queued go with it (CQ.clean: libmlx5's
		// mlx5_modify_qp to RESET cleans both CQs); after the transport stopped, so
		// that none is queued behind the cleaning.
		qp.cleanCQs()
	case to == QPStateErr && qp.srq != nil:
		// IBA 10.3.1, 11.6.3.1 (Last WQE Reached): a QP on an SRQ that enters the Error
		// state takes no more WQEs from it; the consumer hears it as an affiliated
		// event (rxe's flush_recv_queue on ERR; ib_drain_qp waits for it).
		qp.dev.raise(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
	}
	if from == QPStateSQD && to == QPStateRTS {
		qp.replaySQD()
	}
	if to == QPStateSQD && from == QPStateRTS {
		qp.mu.Lock()
		notify := qp.attr.EnSQDAsyncNotify
		qp.mu.Unlock()
		if notify && qp.tr != nil {
			// Datagram sends complete at post time, so the SQ is drained at once; RC raises
			// the event itself when its last outstanding request is acknowledged.
			if qp.typ.datagram() {
				qp.dev.raise(AsyncEvent{Type: EventSQDrained, QP: qp})
			}
		}
	}
}

// cleanCQs removes the QP's completions from its send and receive CQs (RESET).
func (qp *QP) cleanCQs() {
	if qp.sendCQ != nil {
		qp.sendCQ.clean(qp.num)
	}
	if qp.recvCQ != nil && qp.recvCQ != qp.sendCQ {
		qp.recvCQ.clean(qp.num)
	}
}

// RaiseEvent raises an affiliated asynchronous event of the QP on the context that owns
// it (IBA 11.6.3.1): the transports' way to report COMM_EST and the responder's errors.
func (qp *QP) RaiseEvent(t EventType) {
	qp.dev.raise(AsyncEvent{Type: t, QP: qp})
}

func (qp *QP) rqLen() int {
	if qp.srq != nil {
		return 0
	}
	return qp.rq.len()
}

// flushRecv completes every receive WQE with IBV_WC_WR_FLUSH_ERR (IBA 10.3.1: a QP in
// Error flushes its queues).
func (qp *QP) flushRecv() {
	if qp.srq != nil {
		return
	}
	for _, id := range qp.rq.drain() {
		qp.recvCQ.Push(&WC{WRID: id, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.num}, false)
	}
}

// Destroy destroys the QP (ibv_destroy_qp).
func (qp *QP) Destroy() error {
	d := qp.dev
	if qp.num > 1 && d.pitfallsOn() {
		// Receives posted at destruction are normal (every server ends so); sends not yet
		// completed may not have reached the peer.
		if s, _ := qp.outstanding(); s > 0 {
			if err := d.pitfall(PitfallDestroyOutstanding, "destroy_qp", qp.num, qp.what(), "destroyed with %d send WRs not completed", s); err != nil {
				return err
			}
		}
	}
	qp.mu.Lock()
	cur := qp.State()
	qp.state.Store(uint32(QPStateReset))
	qp.attr.QPState = QPStateReset
	qp.mu.Unlock()
	qp.tr.Modified(qp, cur, QPStateReset)
	qp.DetachAll()
	d.mu.Lock()
	switch qp.typ {
	case QPTypeSMI:
		qp.port.Load().qp0.CompareAndSwap(qp, nil)
	case QPTypeGSI:
		qp.port.Load().qp1.CompareAndSwap(qp, nil)
	default:
		if d.qps.load(qp.num) != qp {
			d.mu.Unlock()
			return errorf("destroy_qp", EINVAL, "QP %#x already destroyed", qp.num)
		}
		d.qps.store(qp.num, nil)
	}
	d.counts.qp--
	if qp.srq != nil {
		qp.srq.refs--
	}
	d.mu.Unlock()
	if d.cfg.Remote != nil && qp.num > 1 {
		d.cfg.Remote.FreeQPN(qp.num)
	}
	d.unregister(qp)
	qp.pd.refs.Add(-1)
	if qp.sendCQ != nil {
		qp.sendCQ.refs.Add(-1)
	}
	if qp.recvCQ != nil {
		qp.recvCQ.refs.Add(-1)
	}
	if qp.xrcd != nil {
		qp.xrcd.refs.Add(-1)
	}
	return nil
}

// LookupQP finds a QP of the device by number (not QP0/QP1).
func (d *Device) LookupQP(qpn uint32) *QP { return d.lookupQP(qpn) }
