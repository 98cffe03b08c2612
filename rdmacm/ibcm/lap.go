package ibcm

import (
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// Loading an alternate path into an established connection (IBA 12.8, 12.9.6's LAP
// states; Linux's ib_send_cm_lap/ib_send_cm_apr): the side that wants one sends LAP with
// the path, resent like a DREQ until the APR comes (else LAP_ERROR); the other side hears
// LAP_RECEIVED with the path from its own view, loads it into its QP (IBV_QP_ALT_PATH and
// path_mig_state REARM, IBA 17.2.8) and answers with SendAPR; the first side, on
// APR_RECEIVED with status success, loads the path into its own QP. The connection stays
// ESTABLISHED throughout.

type lapState uint8

const (
	lapIdle lapState = iota
	lapSent          // our LAP waits for its APR
	lapRcvd          // the peer's LAP waits for our APR
	aprSent          // we answered the last LAP (a duplicate of it gets the APR again)
)

// SendLAP proposes an alternate path (from this side's view: SLID is this port) to the
// peer of an established connection.
func (id *ID) SendLAP(alt sa.Path, private []byte) error {
	if err := checkPrivate("LAP", private, wire.CMLAPPrivateLen); err != nil {
		return err
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.state != Established || id.lap == lapSent || id.lap == lapRcvd {
		return ErrState
	}
	id.tid = cm.port.TID()
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMLAP, id.tid)
	l := wire.CMLAP(mad)
	l.SetLocalCommID(id.local)
	l.SetRemoteCommID(id.remote)
	l.SetRemoteQPN(id.remoteQPN)
	l.SetRemoteCMResponseTimeout(id.req.RemoteCMResponseTimeout)
	l.SetAltLocalLID(alt.SLID)
	l.SetAltRemoteLID(alt.DLID)
	l.SetAltLocalGID(alt.SGID)
	l.SetAltRemoteGID(alt.DGID)
	l.SetAltFlowLabel(alt.FlowLabel)
	l.SetAltTrafficClass(alt.TClass)
	l.SetAltHopLimit(alt.HopLimit)
	l.SetAltPacketRate(alt.Rate)
	l.SetAltSL(alt.SL)
	l.SetAltSubnetLocal(alt.HopLimit <= 1)
	l.SetAltLocalACKTimeout(min(alt.PacketLifeTime+1, 31)) // as for the primary path (SendReq)
	copy(l.Private(), private)
	id.lastMsg = mad
	id.lap = lapSent
	cm.send(id.addr, mad)
	wait := timeout(id.req.RemoteCMResponseTimeout) + 2*timeout(id.req.Path.PacketLifeTime)
	id.arm(wait, id.req.MaxCMRetries, func() {
		id.lap = lapIdle
		cm.emit(id, Event{Type: EventLAPError})
	})
	return nil
}

func (cm *CM) handleLAP(mad []byte, from hca.MADAddr) {
	l := wire.CMLAP(mad)
	id := cm.lookup(l.RemoteCommID())
	if id == nil || id.remote != l.LocalCommID() || id.state != Established {
		cm.stats.Dropped++
		return
	}
	switch id.lap {
	case lapRcvd:
		cm.stats.Duplicates++ // the consumer has not answered yet
		return
	case aprSent:
		if wire.MAD(mad).TID() == wire.MAD(id.lapReply).TID() {
			cm.stats.Duplicates++ // our APR was lost: send it again (IBA 12.9.6)
			cm.send(id.addr, id.lapReply)
			return
		}
	case lapSent:
		// Both sides proposed a path at once: this side answers the peer's, and its
		// own LAP is dropped (no APR_RECEIVED or LAP_ERROR will come for it).
		id.stopTimer()
	}
	id.tid = wire.MAD(mad).TID()
	id.lap = lapRcvd
	// The path from this side's view: local and remote swap.
	alt := sa.Path{
		SLID: l.AltRemoteLID(), DLID: l.AltLocalLID(), SGID: l.AltRemoteGID(), DGID: l.AltLocalGID(),
		FlowLabel: l.AltFlowLabel(), TClass: l.AltTrafficClass(), HopLimit: l.AltHopLimit(), Rate: l.AltPacketRate(),
		SL: l.AltSL(), PKey: id.req.PKey, MTU: id.req.Path.MTU, PacketLifeTime: max(l.AltLocalACKTimeout(), 1) - 1,
	}
	cm.emit(id, Event{Type: EventLAPReceived, AltPath: &alt, Private: append([]byte(nil), l.Private()...), From: from})
}

// SendAPR answers the peer's LAP (status wire.APRSuccess once the path is loaded).
func (id *ID) SendAPR(status uint8, info, private []byte) error {
	if err := checkPrivate("APR", private, wire.CMAPRPrivateLen); err != nil {
		return err
	}
	if len(info) > wire.CMAPRInfoLen {
		return checkPrivate("APR additional information", info, wire.CMAPRInfoLen)
	}
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if id.lap != lapRcvd {
		return ErrState
	}
	mad := make([]byte, wire.MADLen)
	wire.NewCMMAD(mad, wire.AttrCMAPR, id.tid)
	a := wire.CMAPR(mad)
	a.SetLocalCommID(id.local)
	a.SetRemoteCommID(id.remote)
	a.SetStatus(status)
	a.SetInfo(info)
	copy(a.Private(), private)
	id.lapReply = mad
	id.lap = aprSent
	cm.send(id.addr, mad)
	return nil
}

func (cm *CM) handleAPR(mad []byte) {
	a := wire.CMAPR(mad)
	id := cm.lookup(a.RemoteCommID())
	if id == nil || id.remote != a.LocalCommID() || id.lap != lapSent {
		cm.stats.Dropped++
		return
	}
	id.stopTimer()
	id.lap = lapIdle
	cm.emit(id, Event{Type: EventAPRReceived, APStatus: a.Status(), Info: append([]byte(nil), a.Info()...),
		Private: append([]byte(nil), a.Private()...)})
}
