// Package inet has the few IPv4/IPv6/TCP/UDP facts that pibgw's emulated checksum and
// segmentation offloads need: the Internet checksum (RFC 1071), pseudo-header sums
// (RFC 793 §3.1, RFC 768, RFC 8200 §8.1), and where a packet's transport header and
// checksum are. It knows nothing about InfiniBand.
package inet

import (
	"encoding/binary"

	"github.com/pibgw/pibgw/internal/csum"
)

// IP protocol numbers.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// Offsets of the checksum field inside the transport headers.
const (
	TCPCsumOffset = 16
	UDPCsumOffset = 6
)

// Sum adds b to the running one's-complement sum (RFC 1071); see csum.Sum.
func Sum(b []byte, sum uint64) uint64 { return csum.Sum(b, sum) }

// Fold folds a running sum to 16 bits (not complemented).
func Fold(sum uint64) uint16 { return csum.Fold(sum) }

// Checksum is the Internet checksum of b: the complement of its folded sum.
func Checksum(b []byte) uint16 { return csum.Checksum(b) }

// PseudoSum is the sum of the pseudo-header of a transport segment of length bytes
// carried in ip (an IPv4 or IPv6 header: its addresses are read from it).
func PseudoSum(ip []byte, proto uint8, length int) uint64 {
	var s uint64
	if ip[0]>>4 == 4 {
		s = Sum(ip[12:20], 0)
	} else {
		s = Sum(ip[8:40], 0)
	}
	return s + uint64(proto) + uint64(length)
}

// Transport locates the transport header of an IPv4 or IPv6 packet carrying TCP or UDP
// directly (IPv6 extension headers and IPv4 fragments are not offloaded): the IP header
// length, the protocol and the offset of its checksum field from the transport header.
// ok is false for anything else.
func Transport(ip []byte) (iphl int, proto uint8, csumOff int, ok bool) {
	if len(ip) < 20 {
		return 0, 0, 0, false
	}
	switch ip[0] >> 4 {
	case 4:
		iphl = int(ip[0]&0x0F) * 4
		if iphl < 20 || len(ip) < iphl || binary.BigEndian.Uint16(ip[6:])&0x3FFF != 0 {
			return 0, 0, 0, false // options too short, or a fragment (MF or an offset)
		}
		proto = ip[9]
	case 6:
		if len(ip) < 40 {
			return 0, 0, 0, false
		}
		iphl, proto = 40, ip[6]
	default:
		return 0, 0, 0, false
	}
	switch proto {
	case ProtoTCP:
		csumOff = TCPCsumOffset
	case ProtoUDP:
		csumOff = UDPCsumOffset
	default:
		return 0, 0, 0, false
	}
	if len(ip) < iphl+csumOff+2 {
		return 0, 0, 0, false
	}
	return iphl, proto, csumOff, true
}

// SetPartial stores in the transport checksum field of ip (TCP or UDP, as Transport
// finds it) the folded pseudo-header sum, the state Linux calls CHECKSUM_PARTIAL: a
// checksum engine completes it by summing the transport header and data.
func SetPartial(ip []byte, iphl int, proto uint8, csumOff int) {
	l4 := len(ip) - iphl
	binary.BigEndian.PutUint16(ip[iphl+csumOff:], Fold(PseudoSum(ip, proto, l4)))
}

// CompletePartial finishes the transport checksum of ip whose field holds the
// pseudo-header sum (CHECKSUM_PARTIAL) and fixes the IPv4 header checksum. It reports
// false, changing nothing, if ip is not TCP or UDP over IPv4 or IPv6.
func CompletePartial(ip []byte) bool {
	iphl, proto, csumOff, ok := Transport(ip)
	if !ok {
		return false
	}
	if ip[0]>>4 == 4 {
		SetIPv4HeaderChecksum(ip[:iphl])
	}
	CompleteAt(ip[iphl:], csumOff, proto == ProtoUDP)
	return true
}

// CompleteAt finishes a CHECKSUM_PARTIAL checksum: l4 is the summed region (from
// csum_start to the end), the field at csumOff holds the pseudo-header sum. A UDP
// checksum that comes out 0 is sent as 0xFFFF (RFC 768).
func CompleteAt(l4 []byte, csumOff int, udp bool) {
	c := ^Fold(Sum(l4, 0))
	if c == 0 && udp {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(l4[csumOff:], c)
}

// Valid reports whether ip's transport checksum is correct (false for packets Transport
// does not locate).
func Valid(ip []byte) bool {
	iphl, proto, csumOff, ok := Transport(ip)
	if !ok {
		return false
	}
	l4 := ip[iphl:]
	if proto == ProtoUDP && ip[0]>>4 == 4 && binary.BigEndian.Uint16(l4[csumOff:]) == 0 {
		return true // RFC 768: no checksum
	}
	return Fold(Sum(l4, PseudoSum(ip, proto, len(l4)))) == 0xFFFF
}

// SetIPv4HeaderChecksum computes the header checksum of the IPv4 header h.
func SetIPv4HeaderChecksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], Checksum(h))
}
