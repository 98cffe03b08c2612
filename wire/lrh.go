package wire

import "encoding/binary"

// Header lengths in bytes (IBA 5.4, 7.7, 8.3, 9.2, 9.3, 7.8).
const (
	LRHLen          = 8
	GRHLen          = 40
	BTHLen          = 12
	RDETHLen        = 4
	DETHLen         = 8
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	XRCETHLen       = 4
	ICRCLen         = 4
	VCRCLen         = 2
)

// LNH is the Link Next Header field of the LRH (IBA 7.7.5).
type LNH uint8

// Link Next Header values (IBA 7.7.5).
const (
	LNHRaw    LNH = 0 // raw packet, no IBA transport header
	LNHIPv6   LNH = 1 // raw IPv6 packet (IPv6 header follows)
	LNHLocal  LNH = 2 // IBA local: BTH follows
	LNHGlobal LNH = 3 // IBA global: GRH follows
)

// String returns the spec's name for the value.
func (l LNH) String() string {
	switch l {
	case LNHRaw:
		return "Raw"
	case LNHIPv6:
		return "IPv6"
	case LNHLocal:
		return "Local"
	case LNHGlobal:
		return "Global"
	}
	return "LNH(invalid)"
}

// LRH is the Local Route Header (IBA 7.7), 8 bytes:
//
//	byte 0: VL(4) LVer(4)
//	byte 1: SL(4) Rsv2(2) LNH(2)
//	bytes 2-3: DLID
//	bytes 4-5: Rsv5(5) PktLen(11)
//	bytes 6-7: SLID
type LRH []byte

// LRHVersion is the only link version defined (IBA 7.7.2).
const LRHVersion = 0

// VL returns the virtual lane (IBA 7.7.1).
func (h LRH) VL() uint8 { return h[0] >> 4 }

// LVer returns the link version (IBA 7.7.2).
func (h LRH) LVer() uint8 { return h[0] & 0x0f }

// SL returns the service level (IBA 7.7.3).
func (h LRH) SL() uint8 { return h[1] >> 4 }

// LNH returns the link next header (IBA 7.7.5).
func (h LRH) LNH() LNH { return LNH(h[1] & 0x03) }

// DLID returns the destination LID (IBA 7.7.6).
func (h LRH) DLID() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// PktLen returns the packet length in 4-byte words, counted from the first
// byte of the LRH through the ICRC, the VCRC excluded (IBA 7.7.8).
func (h LRH) PktLen() uint16 { return binary.BigEndian.Uint16(h[4:]) & 0x07ff }

// SLID returns the source LID (IBA 7.7.9).
func (h LRH) SLID() uint16 { return binary.BigEndian.Uint16(h[6:]) }

// SetVL sets the virtual lane (low 4 bits of v).
func (h LRH) SetVL(v uint8) { h[0] = h[0]&0x0f | v<<4 }

// SetLVer sets the link version (low 4 bits of v).
func (h LRH) SetLVer(v uint8) { h[0] = h[0]&0xf0 | v&0x0f }

// SetSL sets the service level (low 4 bits of v); it also clears Rsv2
// (IBA 7.7.4: reserved bits are sent as zero).
func (h LRH) SetSL(v uint8) { h[1] = h[1]&0x03 | v<<4 }

// SetLNH sets the link next header.
func (h LRH) SetLNH(v LNH) { h[1] = h[1]&0xf0 | uint8(v)&0x03 }

// SetDLID sets the destination LID.
func (h LRH) SetDLID(v uint16) { binary.BigEndian.PutUint16(h[2:], v) }

// SetPktLen sets the packet length in 4-byte words (11 bits); Rsv5 is
// cleared (IBA 7.7.7).
func (h LRH) SetPktLen(v uint16) { binary.BigEndian.PutUint16(h[4:], v&0x07ff) }

// SetSLID sets the source LID.
func (h LRH) SetSLID(v uint16) { binary.BigEndian.PutUint16(h[6:], v) }

// Well-known LIDs and keys (IBA 4.1.3, 10.9, 10.2.4, 13.5.1).
const (
	LIDReserved        = 0x0000
	LIDMulticastBase   = 0xc000
	LIDPermissive      = 0xffff
	LIDUnicastMax      = 0xbfff
	LIDMulticastMax    = 0xfffe
	MaxPktLenWords     = 0x07ff // largest PktLen value
	DefaultPKey        = 0xffff // full-membership default partition (IBA 10.9.1.2)
	PKeyMembershipFull = 0x8000 // P_Key bit 15: full member
	PKeyBaseMask       = 0x7fff
	QP1QKey            = 0x80010000 // well-known Q_Key of QP1 (IBA 13.5.1)
	QKeyControlledBit  = 0x80000000 // IBA 10.2.4: controlled Q_Key bit
	MulticastQPN       = 0xffffff   // IBA 10.8: DestQP of multicast packets
	QPNMask            = 0xffffff
	PSNMask            = 0xffffff
)
