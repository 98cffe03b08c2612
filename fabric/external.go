package fabric

import (
	"errors"

	"github.com/pibgw/pibgw/mgmt"
	"github.com/pibgw/pibgw/wire"
)

// A management client outside the switch on its port 0: the ibsim server attaches a
// libumad2sim program (ibnetdiscover, smpquery…) to a switch as ibsim does. Its MADs
// leave port 0 as the switch's own would (SendMAD), and the responses that come back to
// port 0 carrying TIDExternal go to the handler SetExternal installs instead of being
// dropped — the switch has no SM or other agent of its own to take them.

// TIDExternal is bit 63 of a transaction ID: set in the requests of management clients
// outside the fabric's own agents (the ibsim server's), so that responses find them
// (hca.TIDExternal is the same bit). The switch's own TIDs never set it.
const TIDExternal = 1 << 63

// ExternalMAD is a MAD that arrived at port 0 for the external client.
type ExternalMAD struct {
	SLID, DLID uint16
	SrcQP      uint32
	DestQP     uint32
	// MAD is the 256-byte MAD, valid only during the handler call.
	MAD []byte
}

// ExternalHandler takes MADs for the switch's external client. It runs on the delivering
// goroutine and must not block.
type ExternalHandler func(m *ExternalMAD)

type externalBox struct{ h ExternalHandler }

// SetExternal installs h (nil removes it).
func (sw *Switch) SetExternal(h ExternalHandler) {
	if h == nil {
		sw.ext.Store(nil)
		return
	}
	sw.ext.Store(&externalBox{h})
}

// external hands a response that reached port 0 to the external client; it reports
// whether it took it.
func (sw *Switch) external(b []byte, pk *wire.Packet, mad wire.MAD) bool {
	x := sw.ext.Load()
	if x == nil || mad.TID()&TIDExternal == 0 {
		return false
	}
	m := ExternalMAD{SLID: pk.LRH.SLID(), DLID: pk.LRH.DLID(), SrcQP: pk.DETH.SrcQP(), DestQP: pk.BTH.DestQP(), MAD: mad}
	x.h(&m)
	return true
}

// SMAGet runs a SubnGet of attr with modifier mod on the switch's SMA as if it had come
// in at port 0, writing the 64-byte attribute into out; it returns the MAD status.
func (sw *Switch) SMAGet(attr uint16, mod uint32, out []byte) uint16 {
	if len(out) < wire.SMPDataLen {
		return wire.StatusInvalidAttrOrModVal
	}
	var req [wire.SMPDataLen]byte
	return mgmt.AnswerSMA(swSMA{sw}, 0, wire.MethodGet, attr, mod, req[:], out[:wire.SMPDataLen])
}

// Errors of SendMAD.
var (
	ErrMADSize      = errors.New("fabric: a MAD is 256 bytes")
	ErrMADToSelf    = errors.New("fabric: a LID-routed MAD from port 0 to the switch itself")
	ErrDirectedPath = errors.New("fabric: bad directed route from port 0")
)

// SendMAD sends a MAD from port 0 for the external client, the way the switch's SMI and
// GSI would (IBA 14.2.2.1, C14-9:1): a directed-route SMP request with hop count 0 is
// answered by the switch's own SMA and handed back to the external handler; one with a
// hop count leaves by InitialPath[1] with its hop pointer at 1; everything else is
// routed by DLID through the switch's LFT. SMPs go on VL15 with the default P_Key, GMPs
// on VL0 with the GSI Q_Key.
func (sw *Switch) SendMAD(dlid uint16, dqp uint32, mad []byte) error {
	if len(mad) != wire.MADLen {
		return ErrMADSize
	}
	m := wire.MAD(mad)
	class := m.MgmtClass()
	smp := class == wire.MgmtClassSubnLID || class == wire.MgmtClassSubnDirected
	mb := mgmtBufPool.Get().(*mgmtBuf)
	defer mgmtBufPool.Put(mb)
	n := wire.LRHLen + wire.BTHLen + wire.DETHLen + wire.MADLen + wire.ICRCLen
	b := mb.b[:n]
	clear(b)
	madOff := wire.LRHLen + wire.BTHLen + wire.DETHLen
	lrh := wire.LRH(b)
	lrh.SetLVer(wire.LRHVersion)
	lrh.SetLNH(wire.LNHLocal)
	lrh.SetDLID(dlid)
	lrh.SetSLID(sw.ownSLID(0))
	lrh.SetPktLen(uint16(n / 4))
	bth := wire.BTH(b[wire.LRHLen:])
	bth.SetOpCode(wire.UDSendOnly)
	bth.SetTVer(wire.BTHTVer)
	bth.SetPKey(0xFFFF)
	bth.SetDestQP(dqp)
	bth.SetPSN(uint32(sw.tid.Add(1)) & 0xFFFFFF)
	deth := wire.DETH(b[wire.LRHLen+wire.BTHLen:])
	if smp {
		lrh.SetVL(15)
		bth.SetDestQP(0)
	} else {
		deth.SetQKey(gsiQKey)
		deth.SetSrcQP(1)
	}
	copy(b[madOff:], mad)
	s := wire.SMP(b[madOff : madOff+wire.MADLen])
	if class == wire.MgmtClassSubnDirected && !s.D() {
		hc := s.HopCount()
		switch {
		case hc > wire.SMPMaxHops || s.DrSLID() != permissiveLID:
			return ErrDirectedPath
		case hc == 0:
			// C14-9:3 at the originating node: for the switch's own SMA; C14-13:3 hands
			// the response back without touching a link.
			req := wire.SMP(mad)
			sw.answerSMP(0, req, s)
			s.SetHopPointer(0)
			if x := sw.ext.Load(); x != nil {
				x.h(&ExternalMAD{SLID: permissiveLID, DLID: permissiveLID, MAD: s})
			}
			return nil
		}
		out := s.InitialPath()[1]
		if out == 0 || int(out) > sw.nports {
			return ErrDirectedPath
		}
		s.SetHopPointer(1)
		lrh.SetDLID(permissiveLID)
		seal(b, wire.LRHLen)
		sw.sendOut(int(out), b, mb)
		return nil
	}
	if class == wire.MgmtClassSubnDirected {
		lrh.SetDLID(permissiveLID) // a response the client built: back along its return path
		seal(b, wire.LRHLen)
		if hp := s.HopPointer(); hp >= 1 && int(hp) <= len(s.ReturnPath())-1 {
			sw.sendOut(int(s.ReturnPath()[hp]), b, mb)
			return nil
		}
		return ErrDirectedPath
	}
	if r := sw.route(b); r&routeKindMask == routeUnicast && r&routeValueMask == 0 {
		return ErrMADToSelf
	}
	seal(b, wire.LRHLen)
	sw.sendFromPort0(b, mb)
	return nil
}
