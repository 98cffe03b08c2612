package ibcm

import (
	"fmt"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Service ID resolution (IBA 12.11): a UD client asks for the QPN and Q_Key behind a
// service ID with SIDR_REQ; the service answers with SIDR_REP.

// SIDRReqParam is a SIDR request (ib_cm_sidr_req_param).
type SIDRReqParam struct {
	ServiceID  uint64
	PKey       uint16
	DLID       uint16 // the service's port
	SL         uint8
	Timeout    uint8 // 4.096 µs × 2^n between resends
	MaxRetries uint8
	Private    []byte
}

// SIDRRepParam answers a SIDR_REQ (ib_cm_sidr_rep_param).
type SIDRRepParam struct {
	Status  uint8 // wire.SIDRStatus*
	QPN     uint32
	QKey    uint32
	Info    []byte
	Private []byte
}

// SendSIDRReq sends a SIDR_REQ, resent until the SIDR_REP (SIDR_REP_RECEIVED) or the
// retries run out (SIDR_REQ_ERROR).
func (id *ID) SendSIDRReq(p SIDRReqParam) error {
	if err := checkPrivate("SIDR_REQ", p.Private, wire.CMSIDRReqPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	pkeyIdx := cm.port.FindPKey(p.PKey)
	if pkeyIdx < 0 {
		return fmt.Errorf("ibcm: P_Key %#04x is not in the port's table", p.PKey)
	}
	cm.mu.Lock()
	defer cm.unlock()
	if err := id.begin(pkeyIdx, p.DLID, p.SL); err != nil {
		return err
	}
	id.service = p.ServiceID
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMSIDRReq, id.tid)
	r := wire.CMSIDRReq(mad)
	r.SetRequestID(id.local)
	r.SetPKey(p.PKey)
	r.SetServiceID(p.ServiceID)
	copy(r.Private(), p.Private)
	id.lastMsg = mad
	id.state = SIDRReqSent
	cm.send(id.addr, mad)
	id.arm(timeout(p.Timeout), p.MaxRetries, func() {
		id.release()
		id.state = Idle
		cm.emit(id, Event{Type: EventSIDRReqError})
	})
	return nil
}

func (cm *CM) handleSIDRReq(mad []byte, from hca.MADAddr) {
	r := wire.CMSIDRReq(mad)
	// Duplicates are told apart by request ID and sender (Linux keys them the same way).
	key := remoteKey{r.RequestID(), 1<<63 | uint64(from.SLID)}
	if cm.byRemote[key] != nil {
		cm.stats.Duplicates++
		return
	}
	l := cm.findListener(r.ServiceID())
	if l == nil {
		rep := make([]byte, wire.MADLen)
		wire.NewCMMAD(rep, wire.AttrCMSIDRRep, wire.MAD(mad).TID())
		s := wire.CMSIDRRep(rep)
		s.SetRequestID(r.RequestID())
		s.SetServiceID(r.ServiceID())
		s.SetStatus(wire.SIDRStatusNoService)
		cm.stats.Rejected++
		cm.send(peerAddr(from), rep)
		return
	}
	id := &ID{cm: cm, handler: l.handler, Context: l.Context, listener: l}
	id.remote, id.remoteCA = key.commID, key.caGUID
	cm.byRemote[key] = id
	id.byRemote = true
	id.addr = peerAddr(from)
	id.tid = wire.MAD(mad).TID()
	id.service = r.ServiceID()
	id.state = SIDRReqRcvd
	req := ReqParam{ServiceID: r.ServiceID(), PKey: r.PKey(), Private: append([]byte(nil), r.Private()...)}
	cm.emit(id, Event{Type: EventSIDRReqReceived, Req: &req, PKey: r.PKey(), Private: req.Private, From: from})
}

// SendSIDRRep answers a SIDR_REQ; the ID returns to IDLE.
func (id *ID) SendSIDRRep(p SIDRRepParam) error {
	if err := checkPrivate("SIDR_REP", p.Private, wire.CMSIDRRepPrivateLen); err != nil {
		return err
	}
	if len(p.Info) > wire.CMSIDRInfoLen {
		return fmt.Errorf("ibcm: SIDR_REP information of %d bytes, it takes %d", len(p.Info), wire.CMSIDRInfoLen)
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.state != SIDRReqRcvd {
		return ErrState
	}
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMSIDRRep, id.tid)
	s := wire.CMSIDRRep(mad)
	s.SetRequestID(id.remote)
	s.SetStatus(p.Status)
	s.SetInfoLen(uint8(len(p.Info)))
	s.SetQPN(p.QPN)
	s.SetServiceID(id.service)
	s.SetQKey(p.QKey)
	copy(s.Info(), p.Info)
	copy(s.Private(), p.Private)
	cm.send(id.addr, mad)
	id.release()
	id.state = Idle
	return nil
}

func (cm *CM) handleSIDRRep(mad []byte) {
	s := wire.CMSIDRRep(mad)
	id := cm.lookup(s.RequestID())
	if id == nil || id.state != SIDRReqSent {
		cm.stats.Dropped++
		return
	}
	id.release()
	id.state = Idle
	cm.emit(id, Event{Type: EventSIDRRepReceived, SIDRStatus: s.Status(), QPN: s.QPN(), QKey: s.QKey(),
		Private: append([]byte(nil), s.Private()...)})
}
