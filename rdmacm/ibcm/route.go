package ibcm

import (
	"encoding/binary"

	"github.com/pibgw/pibgw/wire"
)

// Routing CM MADs between the CMs that share a port (the daemon's and those of attached
// processes, each with its own Options.IDPrefix).

// Dest says whom a received CM MAD is for: a REQ or SIDR_REQ goes to whoever listens on
// ServiceID; every other message names the receiver's comm ID (or SIDR request ID),
// whose prefix (IDPrefixOf) names its CM.
type Dest struct {
	Request   bool // REQ or SIDR_REQ: route by ServiceID
	ServiceID uint64
	CommID    uint32
}

// RouteOf reads the destination of a CM MAD (256 bytes). ok is false for a MAD that is
// not a CM message it knows (ClassPortInfo and the like stay with the daemon's CM).
func RouteOf(mad []byte) (d Dest, ok bool) {
	if len(mad) < wire.MADLen {
		return Dest{}, false
	}
	m := wire.MAD(mad)
	if m.MgmtClass() != wire.MgmtClassCM {
		return Dest{}, false
	}
	f := mad[wire.MADHeaderLen:]
	switch m.AttrID() {
	case wire.AttrCMReq:
		// IBA 12.6.5 Table 106: Local Communication ID, reserved, ServiceID at byte 8.
		return Dest{Request: true, ServiceID: wire.CMReq(mad).ServiceID()}, true
	case wire.AttrCMSIDRReq:
		return Dest{Request: true, ServiceID: wire.CMSIDRReq(mad).ServiceID()}, true
	case wire.AttrCMSIDRRep:
		// IBA 12.11.2 Table 120: the Request ID the requester chose.
		return Dest{CommID: binary.BigEndian.Uint32(f[0:])}, true
	case wire.AttrCMMRA, wire.AttrCMRej, wire.AttrCMRep, wire.AttrCMRTU, wire.AttrCMDReq,
		wire.AttrCMDRep, wire.AttrCMLAP, wire.AttrCMAPR:
		// IBA 12.6.6–12.8: Local Communication ID, then Remote Communication ID (the
		// receiver's).
		return Dest{CommID: binary.BigEndian.Uint32(f[4:])}, true
	}
	return Dest{}, false
}

// SenderID returns the comm ID or SIDR request ID that the sender of a CM MAD chose for
// itself, which must carry the sender's prefix; ok is false when the message carries
// none of the sender's own (SIDR_REP, a REJ of a REQ sent before any ID existed has 0).
func SenderID(mad []byte) (id uint32, ok bool) {
	if len(mad) < wire.MADLen || wire.MAD(mad).MgmtClass() != wire.MgmtClassCM {
		return 0, false
	}
	switch wire.MAD(mad).AttrID() {
	case wire.AttrCMSIDRRep:
		return 0, false
	}
	id = binary.BigEndian.Uint32(mad[wire.MADHeaderLen:])
	return id, id != 0
}
