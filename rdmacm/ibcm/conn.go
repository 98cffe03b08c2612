package ibcm

import (
	"fmt"
	"syscall"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// The connection state machines of IBA 12.9.6: the active side sends REQ and RTU, the
// passive side REP; either side may MRA, REJ, and disconnect with DREQ/DREP. Timeouts
// and retries follow IBA 12.7.4 and Linux's cm.c:
//   - REQ is resent every RemoteCMResponseTimeout + 2 × packet lifetime, MaxCMRetries
//     times, then REQ_ERROR;
//   - REP is resent every LocalCMResponseTimeout of the REQ, MaxCMRetries times, then
//     REP_ERROR and a REJ (timeout);
//   - an MRA replaces the wait by its service timeout + the packet lifetime, no resends;
//   - DREQ is resent like REQ, then DREQ_ERROR, and the ID goes to TIMEWAIT anyway;
//   - TIMEWAIT lasts 4.096 µs × 2^(packet lifetime + 1) (Linux's av.timeout), and a
//     duplicate REQ meanwhile gets REJ "stale connection" (10).

// peerAddr is where messages for a peer that sent us one go: its port's QP1.
func peerAddr(from hca.MADAddr) hca.MADAddr {
	qpn := from.QPN
	if qpn == 0 {
		qpn = 1
	}
	return hca.MADAddr{DLID: from.SLID, SL: from.SL, QPN: qpn, QKey: hca.GSIQKey, PKeyIndex: from.PKeyIndex}
}

// SendReq sends a connection request (ib_send_cm_req): REQ_SENT, resent until a REP,
// MRA or REJ arrives or the retries run out (REQ_ERROR).
func (id *ID) SendReq(p ReqParam) error {
	cm := id.cm
	if err := checkPrivate("REQ", p.Private, wire.CMReqPrivateLen); err != nil {
		return err
	}
	if p.QPType != hca.QPTypeRC && p.QPType != hca.QPTypeUC {
		return fmt.Errorf("ibcm: REQ for a %v QP (RC or UC only; UD uses SIDR)", p.QPType)
	}
	pkeyIdx := cm.port.FindPKey(p.PKey)
	if pkeyIdx < 0 {
		return fmt.Errorf("ibcm: P_Key %#04x is not in the port's table", p.PKey)
	}
	cm.mu.Lock()
	defer cm.unlock()
	if err := id.begin(pkeyIdx, p.Path.DLID, p.Path.SL); err != nil {
		return err
	}
	id.req = p
	id.req.Private = append([]byte(nil), p.Private...)
	id.twWait = timeout(p.Path.PacketLifeTime + 1)

	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMReq, id.tid)
	r := wire.CMReq(mad)
	r.SetLocalCommID(id.local)
	r.SetServiceID(p.ServiceID)
	r.SetLocalCAGUID(cm.port.CAGUID())
	r.SetLocalQPN(p.QPN)
	r.SetResponderResources(p.ResponderRes)
	r.SetInitiatorDepth(p.InitiatorDepth)
	r.SetRemoteCMResponseTimeout(p.RemoteCMResponseTimeout)
	if p.QPType == hca.QPTypeUC {
		r.SetTransportServiceType(1)
	}
	r.SetEndToEndFlowControl(p.FlowControl)
	r.SetStartingPSN(p.StartingPSN)
	r.SetLocalCMResponseTimeout(p.LocalCMResponseTimeout)
	r.SetRetryCount(p.RetryCount)
	r.SetPKey(p.PKey)
	r.SetPathMTU(p.Path.MTU)
	r.SetRNRRetryCount(p.RNRRetryCount)
	r.SetMaxCMRetries(p.MaxCMRetries)
	r.SetSRQ(p.SRQ)
	pp := r.Primary()
	pp.SetLocalLID(p.Path.SLID)
	pp.SetRemoteLID(p.Path.DLID)
	pp.SetLocalGID(p.Path.SGID)
	pp.SetRemoteGID(p.Path.DGID)
	pp.SetFlowLabel(p.Path.FlowLabel)
	pp.SetPacketRate(p.Path.Rate)
	pp.SetTrafficClass(p.Path.TClass)
	pp.SetHopLimit(p.Path.HopLimit)
	pp.SetSL(p.Path.SL)
	pp.SetSubnetLocal(p.Path.HopLimit <= 1)
	pp.SetLocalACKTimeout(min(p.Path.PacketLifeTime+1, 31)) // Linux's cm_ack_timeout
	copy(r.Private(), p.Private)

	id.lastMsg = mad
	id.state = ReqSent
	cm.send(id.addr, mad)
	id.arm(timeout(p.RemoteCMResponseTimeout)+2*timeout(p.Path.PacketLifeTime), p.MaxCMRetries, func() {
		id.release()
		id.state = Idle
		cm.emit(id, Event{Type: EventReqError})
	})
	return nil
}

// handleReq: a duplicate of a REQ we know, a REQ nobody listens for (REJ 8), or a new
// passive ID for the listener.
func (cm *CM) handleReq(mad []byte, from hca.MADAddr) {
	r := wire.CMReq(mad)
	key := remoteKey{r.LocalCommID(), r.LocalCAGUID()}
	if dup := cm.byRemote[key]; dup != nil {
		cm.stats.Duplicates++
		switch dup.state {
		case MRAReqSent:
			cm.send(dup.addr, dup.lastReply)
		case TimeWait:
			// IBA 12.9.8.3.1: a REQ for a connection in TIMEWAIT is stale.
			cm.rejectMsg(mad, from, wire.RejStaleConn, wire.CMMsgREQ)
		}
		return
	}
	l := cm.findListener(r.ServiceID())
	if l == nil {
		// IBA 12.6.7.2: nobody listens on the service ID → REJ "invalid service ID".
		cm.rejectMsg(mad, from, wire.RejInvalidServiceID, wire.CMMsgREQ)
		return
	}
	id := &ID{cm: cm, handler: l.handler, Context: l.Context, listener: l}
	id.local = cm.allocID(id)
	id.remote, id.remoteCA = key.commID, key.caGUID
	cm.byRemote[key] = id
	id.byRemote = true
	id.addr = peerAddr(from)
	id.tid = wire.MAD(mad).TID()
	id.service = r.ServiceID()
	id.remoteQPN = r.LocalQPN()
	pp := r.Primary()
	id.req = ReqParam{
		ServiceID: r.ServiceID(), QPN: r.LocalQPN(), QPType: hca.QPTypeRC, StartingPSN: r.StartingPSN(),
		PKey: r.PKey(),
		Path: sa.Path{
			DGID: pp.LocalGID(), SGID: pp.RemoteGID(), DLID: pp.LocalLID(), SLID: pp.RemoteLID(),
			FlowLabel: pp.FlowLabel(), HopLimit: pp.HopLimit(), TClass: pp.TrafficClass(),
			PKey: r.PKey(), SL: pp.SL(), MTU: r.PathMTU(), Rate: pp.PacketRate(),
			PacketLifeTime: max(pp.LocalACKTimeout(), 1) - 1,
		},
		ResponderRes: r.ResponderResources(), InitiatorDepth: r.InitiatorDepth(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(),
		LocalCMResponseTimeout:  r.LocalCMResponseTimeout(),
		RetryCount:              r.RetryCount(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(), FlowControl: r.EndToEndFlowControl(),
		Private: append([]byte(nil), r.Private()...), CAGUID: r.LocalCAGUID(),
	}
	if r.TransportServiceType() == 1 {
		id.req.QPType = hca.QPTypeUC
	}
	id.wait = timeout(r.LocalCMResponseTimeout())
	id.maxTries = r.MaxCMRetries()
	id.twWait = timeout(id.req.Path.PacketLifeTime + 1)
	id.state = ReqRcvd
	req := id.req
	cm.emit(id, Event{Type: EventReqReceived, Req: &req, Private: req.Private, From: from})
}

// rejectMsg answers a message that has no ID with a REJ (local comm ID 0).
func (cm *CM) rejectMsg(mad []byte, from hca.MADAddr, reason uint16, msg uint8) {
	cm.stats.Rejected++
	rej := make([]byte, wire.MADLen)
	wire.NewCMMAD(rej, wire.AttrCMRej, wire.MAD(mad).TID())
	j := wire.CMRej(rej)
	j.SetRemoteCommID(wire.CMReq(mad).LocalCommID())
	j.SetMessageRejected(msg)
	j.SetReason(reason)
	cm.send(peerAddr(from), rej)
}

// SendRep accepts a REQ (ib_send_cm_rep): REP_SENT, resent until the RTU (or the first
// data packet, Established) arrives or the retries run out (REP_ERROR).
func (id *ID) SendRep(p RepParam) error {
	if err := checkPrivate("REP", p.Private, wire.CMRepPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.state != ReqRcvd && id.state != MRAReqSent {
		return ErrState
	}
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMRep, id.tid)
	r := wire.CMRep(mad)
	r.SetLocalCommID(id.local)
	r.SetRemoteCommID(id.remote)
	r.SetLocalQPN(p.QPN)
	r.SetStartingPSN(p.StartingPSN)
	r.SetResponderResources(p.ResponderRes)
	r.SetInitiatorDepth(p.InitiatorDepth)
	r.SetTargetACKDelay(p.TargetACKDelay)
	r.SetEndToEndFlowControl(p.FlowControl)
	r.SetRNRRetryCount(p.RNRRetryCount)
	r.SetSRQ(p.SRQ)
	r.SetLocalCAGUID(cm.port.CAGUID())
	copy(r.Private(), p.Private)
	id.lastMsg = mad
	id.state = RepSent
	cm.send(id.addr, mad)
	id.arm(id.wait, id.maxTries, func() {
		id.sendRej(wire.RejTimeout, nil, nil, wire.CMMsgREP)
		id.release()
		id.state = Idle
		cm.emit(id, Event{Type: EventRepError})
	})
	return nil
}

func (cm *CM) handleRep(mad []byte, from hca.MADAddr) {
	r := wire.CMRep(mad)
	id := cm.lookup(r.RemoteCommID())
	if id == nil {
		cm.stats.Dropped++
		return
	}
	switch id.state {
	case ReqSent, MRAReqRcvd:
		id.stopTimer()
		id.remote, id.remoteCA, id.remoteQPN = r.LocalCommID(), r.LocalCAGUID(), r.LocalQPN()
		id.tid = wire.MAD(mad).TID()
		id.state = RepRcvd
		rep := RepParam{
			QPN: r.LocalQPN(), StartingPSN: r.StartingPSN(), ResponderRes: r.ResponderResources(),
			InitiatorDepth: r.InitiatorDepth(), TargetACKDelay: r.TargetACKDelay(),
			FailoverAccepted: r.FailoverAccepted(), FlowControl: r.EndToEndFlowControl(),
			RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(),
			Private: append([]byte(nil), r.Private()...), CAGUID: r.LocalCAGUID(),
		}
		cm.emit(id, Event{Type: EventRepReceived, Rep: &rep, Private: rep.Private, From: from})
	case Established, MRARepSent:
		// Our RTU (or MRA) was lost: the passive side resends its REP (IBA 12.9.8.2).
		cm.resendLast(id)
	default:
		cm.stats.Dropped++
	}
}

// SendRTU completes the active side (ib_send_cm_rtu): ESTABLISHED.
func (id *ID) SendRTU(private []byte) error {
	if err := checkPrivate("RTU", private, wire.CMRTUPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.state != RepRcvd && id.state != MRARepSent {
		return ErrState
	}
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMRTU, id.tid)
	r := wire.CMRTU(mad)
	r.SetLocalCommID(id.local)
	r.SetRemoteCommID(id.remote)
	copy(r.Private(), private)
	id.lastReply = mad
	id.lastMsg = nil
	id.state = Established
	cm.send(id.addr, mad)
	return nil
}

func (cm *CM) handleRTU(mad []byte) {
	r := wire.CMRTU(mad)
	id := cm.lookup(r.RemoteCommID())
	if id == nil || id.remote != r.LocalCommID() {
		cm.stats.Dropped++
		return
	}
	switch id.state {
	case RepSent, MRARepRcvd:
		id.stopTimer()
		id.lastMsg = nil
		id.state = Established
		cm.emit(id, Event{Type: EventRTUReceived, Private: append([]byte(nil), r.Private()...)})
	default:
		cm.stats.Duplicates++
	}
}

// Established moves a passive ID whose QP received data before the RTU to ESTABLISHED
// (ib_cm_notify with IB_EVENT_COMM_EST): the RTU was lost or is late. An ID already
// established gets EISCONN, one in any other state ErrState (cm_establish: -EINVAL).
func (id *ID) Established() error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	switch id.state {
	case RepSent, MRARepRcvd:
		id.stopTimer()
		id.lastMsg = nil
		id.state = Established
		cm.emit(id, Event{Type: EventUserEstablished})
		return nil
	case Established:
		return syscall.EISCONN
	}
	return ErrState
}

// SendRej rejects a REQ or REP (ib_send_cm_rej) with an IBA reason, additional
// rejection information and private data; the ID returns to IDLE.
func (id *ID) SendRej(reason uint16, ari, private []byte) error {
	if err := checkPrivate("REJ", private, wire.CMRejPrivateLen); err != nil {
		return err
	}
	if len(ari) > wire.CMRejARILen {
		return fmt.Errorf("ibcm: ARI of %d bytes, REJ takes %d", len(ari), wire.CMRejARILen)
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	switch id.state {
	case ReqSent, MRAReqRcvd, ReqRcvd, MRAReqSent, RepRcvd, MRARepSent, RepSent, MRARepRcvd:
	default:
		return ErrState
	}
	id.sendRej(reason, ari, private, msgFor(id.state))
	id.release()
	id.state = Idle
	return nil
}

// sendRej sends a REJ for the ID's connection; mu held.
func (id *ID) sendRej(reason uint16, ari, private []byte, msg uint8) {
	cm := id.cm
	cm.stats.Rejected++
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMRej, id.tid)
	j := wire.CMRej(mad)
	j.SetLocalCommID(id.local)
	j.SetRemoteCommID(id.remote)
	j.SetMessageRejected(msg)
	j.SetRejectedInfoLen(uint8(len(ari)))
	j.SetReason(reason)
	copy(j.ARI(), ari)
	copy(j.Private(), private)
	cm.send(id.addr, mad)
}

func (cm *CM) handleRej(mad []byte, from hca.MADAddr) {
	j := wire.CMRej(mad)
	id := cm.lookup(j.RemoteCommID())
	if id == nil {
		cm.stats.Dropped++
		return
	}
	switch id.state {
	case ReqSent, MRAReqRcvd, RepRcvd, MRARepSent, ReqRcvd, MRAReqSent, RepSent, MRARepRcvd:
	case Established:
		if j.Reason() != wire.RejStaleConn {
			cm.stats.Dropped++
			return
		}
	default:
		cm.stats.Dropped++
		return
	}
	// A REJ from the passive side names its comm ID; one sent before it had one (or by
	// a CM with no ID for us, e.g. invalid service ID) carries 0.
	if id.remote != 0 && j.LocalCommID() != 0 && j.LocalCommID() != id.remote {
		cm.stats.Dropped++
		return
	}
	id.release()
	id.state = Idle
	n := min(int(j.RejectedInfoLen()), wire.CMRejARILen)
	cm.emit(id, Event{Type: EventRejReceived, Reason: j.Reason(),
		ARI: append([]byte(nil), j.ARI()[:n]...), Private: append([]byte(nil), j.Private()...), From: from})
}

// SendMRA asks the peer for more time (ib_send_cm_mra): serviceTimeout is how long
// this side will take (4.096 µs × 2^n).
func (id *ID) SendMRA(serviceTimeout uint8, private []byte) error {
	if err := checkPrivate("MRA", private, wire.CMMRAPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	var msg uint8
	switch id.state {
	case ReqRcvd:
		msg, id.state = wire.CMMsgREQ, MRAReqSent
	case RepRcvd:
		msg, id.state = wire.CMMsgREP, MRARepSent
	default:
		return ErrState
	}
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMMRA, id.tid)
	m := wire.CMMRA(mad)
	m.SetLocalCommID(id.local)
	m.SetRemoteCommID(id.remote)
	m.SetMessageMRAed(msg)
	m.SetServiceTimeout(serviceTimeout)
	copy(m.Private(), private)
	id.lastReply = mad
	cm.send(id.addr, mad)
	return nil
}

func (cm *CM) handleMRA(mad []byte) {
	m := wire.CMMRA(mad)
	id := cm.lookup(m.RemoteCommID())
	if id == nil {
		cm.stats.Dropped++
		return
	}
	wait := timeout(m.ServiceTimeout()) + timeout(id.req.Path.PacketLifeTime)
	switch {
	case id.state == ReqSent && m.MessageMRAed() == wire.CMMsgREQ:
		id.state = MRAReqRcvd
		id.remote = m.LocalCommID()
		id.after(wait, func() {
			id.release()
			id.state = Idle
			cm.emit(id, Event{Type: EventReqError})
		})
	case id.state == RepSent && m.MessageMRAed() == wire.CMMsgREP:
		id.state = MRARepRcvd
		id.after(wait, func() {
			id.sendRej(wire.RejTimeout, nil, nil, wire.CMMsgREP)
			id.release()
			id.state = Idle
			cm.emit(id, Event{Type: EventRepError})
		})
	default:
		cm.stats.Dropped++
		return
	}
	cm.emit(id, Event{Type: EventMRAReceived, Private: append([]byte(nil), m.Private()...)})
}

// SendDReq starts a disconnect (ib_send_cm_dreq): DREQ_SENT until the DREP (then
// TIMEWAIT) or the retries run out (DREQ_ERROR, then TIMEWAIT).
func (id *ID) SendDReq(private []byte) error {
	if err := checkPrivate("DREQ", private, wire.CMDReqPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.state != Established {
		return ErrState
	}
	id.tid = cm.port.TID()
	id.buildDReq(private)
	id.state = DReqSent
	cm.send(id.addr, id.lastMsg)
	wait := timeout(id.req.RemoteCMResponseTimeout) + 2*timeout(id.req.Path.PacketLifeTime)
	id.arm(wait, id.req.MaxCMRetries, func() {
		cm.emit(id, Event{Type: EventDReqError})
		id.enterTimeWait()
	})
	return nil
}

func (id *ID) buildDReq(private []byte) {
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMDReq, id.tid)
	d := wire.CMDReq(mad)
	d.SetLocalCommID(id.local)
	d.SetRemoteCommID(id.remote)
	d.SetRemoteQPN(id.remoteQPN)
	copy(d.Private(), private)
	id.lastMsg = mad
}

func (cm *CM) handleDReq(mad []byte, from hca.MADAddr) {
	d := wire.CMDReq(mad)
	id := cm.lookup(d.RemoteCommID())
	if id == nil {
		// Gone already (TIMEWAIT over, or destroyed): answer anyway so the peer stops
		// resending, as Linux's cm_issue_drep does.
		cm.stats.Duplicates++
		cm.send(peerAddr(from), DRepFor(mad))
		return
	}
	if id.remote != d.LocalCommID() {
		cm.stats.Dropped++
		return
	}
	switch id.state {
	case Established, RepSent, MRARepRcvd, DReqSent:
		id.stopTimer()
		id.tid = wire.MAD(mad).TID()
		id.state = DReqRcvd
		cm.emit(id, Event{Type: EventDReqReceived, Private: append([]byte(nil), d.Private()...), From: from})
	case TimeWait:
		// Our DREP was lost: send it again (IBA 12.9.8.5).
		cm.resendLast(id)
	default:
		cm.stats.Duplicates++
	}
}

// DRepFor returns the DREP that answers dreq for a connection its receiver no longer
// has (Linux's cm_issue_drep): the comm IDs swapped, the DREQ's transaction ID, so that
// the sender stops resending and reports DISCONNECTED.
func DRepFor(dreq []byte) []byte {
	d := wire.CMDReq(dreq)
	rep := make([]byte, wire.MADLen)
	wire.NewCMMAD(rep, wire.AttrCMDRep, wire.MAD(dreq).TID())
	r := wire.CMDRep(rep)
	r.SetLocalCommID(d.RemoteCommID())
	r.SetRemoteCommID(d.LocalCommID())
	return rep
}

// SendDRep answers a DREQ (ib_send_cm_drep): TIMEWAIT.
func (id *ID) SendDRep(private []byte) error {
	if err := checkPrivate("DREP", private, wire.CMDRepPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.state != DReqRcvd {
		return ErrState
	}
	id.buildDRep(private)
	cm.send(id.addr, id.lastReply)
	id.enterTimeWait()
	return nil
}

func (id *ID) buildDRep(private []byte) {
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMDRep, id.tid)
	d := wire.CMDRep(mad)
	d.SetLocalCommID(id.local)
	d.SetRemoteCommID(id.remote)
	copy(d.Private(), private)
	id.lastReply = mad
}

func (cm *CM) handleDRep(mad []byte) {
	d := wire.CMDRep(mad)
	id := cm.lookup(d.RemoteCommID())
	if id == nil || id.remote != d.LocalCommID() || id.state != DReqSent {
		cm.stats.Dropped++
		return
	}
	id.stopTimer()
	cm.emit(id, Event{Type: EventDRepReceived, Private: append([]byte(nil), d.Private()...)})
	id.enterTimeWait()
}

// enterTimeWait holds the comm ID (and the QP, for the user) for TIMEWAIT, then frees it
// and reports TIMEWAIT_EXIT; mu held.
func (id *ID) enterTimeWait() {
	cm := id.cm
	id.state = TimeWait
	id.lastMsg = nil
	id.after(id.twWait, func() {
		id.release()
		id.state = Idle
		cm.emit(id, Event{Type: EventTimeWaitExit})
	})
}

// checkPrivate refuses private data longer than the message (what) carries.
func checkPrivate(what string, private []byte, max int) error {
	if len(private) > max {
		return fmt.Errorf("%w: %d bytes, %s takes %d", ErrPrivate, len(private), what, max)
	}
	return nil
}

// resendLast (under cm.mu) answers a duplicate with the reply id last sent, if any: the
// peer's retransmission says our answer was lost (IBA 12.9.8).
func (cm *CM) resendLast(id *ID) {
	cm.stats.Duplicates++
	if id.lastReply != nil {
		cm.send(id.addr, id.lastReply)
	}
}

// begin (under cm.mu) starts an idle id toward the CM at dlid/sl with the P_Key at
// pkeyIdx: a local communication ID, the address of the peer's CM (QP1) and a TID.
func (id *ID) begin(pkeyIdx int, dlid uint16, sl uint8) error {
	cm := id.cm
	if cm.closed {
		return ErrClosed
	}
	if id.state != Idle {
		return ErrState
	}
	id.local = cm.allocID(id)
	id.addr = hca.MADAddr{DLID: dlid, SL: sl, QPN: 1, QKey: hca.GSIQKey, PKeyIndex: uint16(pkeyIdx)}
	id.tid = cm.port.TID()
	return nil
}
