package wire

import (
	"encoding/binary"
	"net/netip"
)

// GID is a 128-bit global identifier (IBA 4.1.1), laid out like an IPv6
// address: 64-bit subnet prefix then 64-bit interface ID (EUI-64 port GUID).
type GID [16]byte

// DefaultGIDPrefix is the link-local subnet prefix fe80::/64 (IBA 4.1.1).
const DefaultGIDPrefix uint64 = 0xfe80000000000000

// MakeGID builds a GID from a subnet prefix and an interface ID (port GUID).
func MakeGID(prefix, guid uint64) GID {
	var g GID
	binary.BigEndian.PutUint64(g[0:], prefix)
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

// SubnetPrefix returns the upper 64 bits.
func (g GID) SubnetPrefix() uint64 { return binary.BigEndian.Uint64(g[0:]) }

// InterfaceID returns the lower 64 bits (the port GUID for a unicast GID).
func (g GID) InterfaceID() uint64 { return binary.BigEndian.Uint64(g[8:]) }

// IsMulticast reports whether g is a multicast GID (first byte 0xFF,
// IBA 4.1.1).
func (g GID) IsMulticast() bool { return g[0] == 0xff }

// IsZero reports whether every byte is zero.
func (g GID) IsZero() bool { return g == GID{} }

// String returns the IPv6 textual form, e.g. "fe80::2:c903:0:1".
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// GRH is the Global Route Header (IBA 8.3), 40 bytes, laid out like an IPv6
// header:
//
//	bytes 0-3:   IPVer(4) TClass(8) FlowLabel(20)
//	bytes 4-5:   PayLen
//	byte 6:      NxtHdr
//	byte 7:      HopLmt
//	bytes 8-23:  SGID
//	bytes 24-39: DGID
type GRH []byte

// GRH constants (IBA 8.3).
const (
	GRHIPVer  = 6    // IBA 8.3: IPVer is 6
	NxtHdrBTH = 0x1B // IBA 8.3: an IBA transport header (BTH) follows
)

// IPVer returns the IP version field (IBA 8.3).
func (h GRH) IPVer() uint8 { return h[0] >> 4 }

// TClass returns the traffic class (IBA 8.3).
func (h GRH) TClass() uint8 { return h[0]<<4 | h[1]>>4 }

// FlowLabel returns the 20-bit flow label (IBA 8.3).
func (h GRH) FlowLabel() uint32 { return binary.BigEndian.Uint32(h[0:]) & 0x000fffff }

// PayLen returns the payload length in bytes: everything after the GRH
// through the ICRC, VCRC excluded (IBA 8.3).
func (h GRH) PayLen() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// NxtHdr returns the next header (IBA 8.3); NxtHdrBTH for IBA transport.
func (h GRH) NxtHdr() uint8 { return h[6] }

// HopLmt returns the hop limit (IBA 8.3).
func (h GRH) HopLmt() uint8 { return h[7] }

// SGID returns the source GID (IBA 8.3).
func (h GRH) SGID() GID { return GID(h[8:24]) }

// DGID returns the destination GID (IBA 8.3).
func (h GRH) DGID() GID { return GID(h[24:40]) }

// SetIPVer sets the IP version (low 4 bits of v).
func (h GRH) SetIPVer(v uint8) { h[0] = h[0]&0x0f | v<<4 }

// SetTClass sets the traffic class.
func (h GRH) SetTClass(v uint8) {
	h[0] = h[0]&0xf0 | v>>4
	h[1] = h[1]&0x0f | v<<4
}

// SetFlowLabel sets the 20-bit flow label.
func (h GRH) SetFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(h[0:])
	binary.BigEndian.PutUint32(h[0:], w&0xfff00000|v&0x000fffff)
}

// SetPayLen sets the payload length in bytes.
func (h GRH) SetPayLen(v uint16) { binary.BigEndian.PutUint16(h[4:], v) }

// SetNxtHdr sets the next header.
func (h GRH) SetNxtHdr(v uint8) { h[6] = v }

// SetHopLmt sets the hop limit.
func (h GRH) SetHopLmt(v uint8) { h[7] = v }

// SetSGID sets the source GID.
func (h GRH) SetSGID(g GID) { copy(h[8:24], g[:]) }

// SetDGID sets the destination GID.
func (h GRH) SetDGID(g GID) { copy(h[24:40], g[:]) }
