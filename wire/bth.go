package wire

import "encoding/binary"

// BTH is the Base Transport Header (IBA 9.2), 12 bytes:
//
//	byte 0:     OpCode
//	byte 1:     SE(1) M(1) PadCnt(2) TVer(4)
//	bytes 2-3:  P_Key
//	byte 4:     Resv8a (variant: masked in the ICRC)
//	bytes 5-7:  DestQP
//	byte 8:     A(1) Resv7(7)
//	bytes 9-11: PSN
type BTH []byte

// BTHTVer is the only transport header version defined (IBA 9.2).
const BTHTVer = 0

// OpCode returns the operation code (IBA 9.2.1).
func (h BTH) OpCode() Opcode { return Opcode(h[0]) }

// SE returns the solicited event bit (IBA 9.2).
func (h BTH) SE() bool { return h[1]&0x80 != 0 }

// MigReq returns the migration request bit M (IBA 9.2).
func (h BTH) MigReq() bool { return h[1]&0x40 != 0 }

// PadCnt returns the number of pad bytes (0-3) at the end of the payload
// (IBA 9.2).
func (h BTH) PadCnt() uint8 { return h[1] >> 4 & 0x03 }

// TVer returns the transport header version (IBA 9.2).
func (h BTH) TVer() uint8 { return h[1] & 0x0f }

// PKey returns the partition key (IBA 9.2).
func (h BTH) PKey() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// DestQP returns the 24-bit destination QP number (IBA 9.2).
func (h BTH) DestQP() uint32 { return binary.BigEndian.Uint32(h[4:]) & 0x00ffffff }

// AckReq returns the acknowledge request bit A (IBA 9.2).
func (h BTH) AckReq() bool { return h[8]&0x80 != 0 }

// PSN returns the 24-bit packet sequence number (IBA 9.2).
func (h BTH) PSN() uint32 { return binary.BigEndian.Uint32(h[8:]) & 0x00ffffff }

// SetOpCode sets the operation code.
func (h BTH) SetOpCode(v Opcode) { h[0] = uint8(v) }

// SetSE sets the solicited event bit.
func (h BTH) SetSE(v bool) { h[1] = setBit(h[1], 0x80, v) }

// SetMigReq sets the migration request bit.
func (h BTH) SetMigReq(v bool) { h[1] = setBit(h[1], 0x40, v) }

// SetPadCnt sets the pad count (low 2 bits of v).
func (h BTH) SetPadCnt(v uint8) { h[1] = h[1]&0xcf | v&0x03<<4 }

// SetTVer sets the transport header version (low 4 bits of v).
func (h BTH) SetTVer(v uint8) { h[1] = h[1]&0xf0 | v&0x0f }

// SetPKey sets the partition key.
func (h BTH) SetPKey(v uint16) { binary.BigEndian.PutUint16(h[2:], v) }

// SetDestQP sets the 24-bit destination QP; Resv8a is cleared
// (IBA 9.2: reserved fields are sent as zero).
func (h BTH) SetDestQP(v uint32) { binary.BigEndian.PutUint32(h[4:], v&0x00ffffff) }

// SetAckReq sets the acknowledge request bit; Resv7 is cleared.
func (h BTH) SetAckReq(v bool) {
	if v {
		h[8] = 0x80
	} else {
		h[8] = 0
	}
}

// SetPSN sets the 24-bit PSN, keeping the A bit and clearing Resv7.
func (h BTH) SetPSN(v uint32) {
	a := uint32(h[8]&0x80) << 24
	binary.BigEndian.PutUint32(h[8:], a|v&0x00ffffff)
}

func setBit(b, mask uint8, v bool) uint8 {
	if v {
		return b | mask
	}
	return b &^ mask
}

// PacketOpcode returns the BTH opcode of pkt (LRH, a GRH when LNH says so, BTH …), or
// false for a raw packet or one too short for its headers.
func PacketOpcode(pkt []byte) (Opcode, bool) {
	o := bthOffset(pkt)
	if o < 0 {
		return 0, false
	}
	return BTH(pkt[o:]).OpCode(), true
}
