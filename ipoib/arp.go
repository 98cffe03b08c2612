package ipoib

import (
	"encoding/binary"
	"net/netip"
)

// EtherTypes carried in the IPoIB encapsulation header (RFC 4391 §6).
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86DD
)

// HeaderLen is the IPoIB encapsulation header: EtherType and 16 reserved bits (RFC 4391 §6).
const HeaderLen = 4

// ARP over IPoIB (RFC 4391 §4.1): hardware type 32 (ARPHRD_INFINIBAND), protocol
// 0x0800, hardware length 20, protocol length 4.
const (
	arpHWTypeInfiniBand = 32
	arpLen              = 8 + 2*(HWAddrLen+4) // 56
	arpOpRequest        = 1
	arpOpReply          = 2
)

// arpPacket is a view of an IPoIB ARP packet.
type arpPacket []byte

func (p arpPacket) valid() bool {
	return len(p) >= arpLen &&
		binary.BigEndian.Uint16(p[0:]) == arpHWTypeInfiniBand &&
		binary.BigEndian.Uint16(p[2:]) == EtherTypeIPv4 &&
		p[4] == HWAddrLen && p[5] == 4
}

func (p arpPacket) op() uint16 { return binary.BigEndian.Uint16(p[6:]) }
func (p arpPacket) sha() HWAddr {
	return HWAddr(p[8 : 8+HWAddrLen])
}
func (p arpPacket) spa() netip.Addr { return netip.AddrFrom4([4]byte(p[28:32])) }
func (p arpPacket) tha() HWAddr     { return HWAddr(p[32 : 32+HWAddrLen]) }
func (p arpPacket) tpa() netip.Addr { return netip.AddrFrom4([4]byte(p[52:56])) }

// buildARP writes an ARP packet into b (len ≥ arpLen) and returns it.
func buildARP(b []byte, op uint16, sha HWAddr, spa netip.Addr, tha HWAddr, tpa netip.Addr) []byte {
	p := b[:arpLen]
	binary.BigEndian.PutUint16(p[0:], arpHWTypeInfiniBand)
	binary.BigEndian.PutUint16(p[2:], EtherTypeIPv4)
	p[4], p[5] = HWAddrLen, 4
	binary.BigEndian.PutUint16(p[6:], op)
	copy(p[8:], sha[:])
	s := spa.As4()
	copy(p[28:], s[:])
	copy(p[32:], tha[:])
	t := tpa.As4()
	copy(p[52:], t[:])
	return p
}
