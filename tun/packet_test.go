package tun

import (
	"encoding/binary"
	"net/netip"
)

// Hand-built IP packets for the tests, with correct checksums.

func checksum(b []byte, sum uint32) uint16 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// icmp4Echo builds an IPv4 ICMP echo request (typ 8) or reply (typ 0).
func icmp4Echo(src, dst netip.Addr, typ uint8, id, seq uint16, payload []byte) []byte {
	p := make([]byte, 20+8+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], seq)
	p[8] = 64
	p[9] = 1 // ICMP
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20], 0))
	m := p[20:]
	m[0] = typ
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], seq)
	copy(m[8:], payload)
	binary.BigEndian.PutUint16(m[2:], checksum(m, 0))
	return p
}

// icmp6Echo builds an ICMPv6 echo request (typ 128) or reply (typ 129).
func icmp6Echo(src, dst netip.Addr, typ uint8, id, seq uint16, payload []byte) []byte {
	p := make([]byte, 40+8+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(8+len(payload)))
	p[6] = 58 // ICMPv6
	p[7] = 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	m := p[40:]
	m[0] = typ
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], seq)
	copy(m[8:], payload)
	binary.BigEndian.PutUint16(m[2:], checksum(m, pseudo6(p[8:24], p[24:40], 58, len(m))))
	return p
}

// pseudo6 is the unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1).
func pseudo6(src, dst []byte, proto uint8, n int) uint32 {
	var sum uint32
	for i := 0; i < 16; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(src[i:])) + uint32(binary.BigEndian.Uint16(dst[i:]))
	}
	return sum + uint32(n) + uint32(proto)
}

// ipProto returns the IP version and upper-layer protocol of packet p (for IPv6, the
// next header after hop-by-hop options, where MLD reports carry their router alert).
func ipProto(p []byte) (version int, proto uint8, payload []byte) {
	if len(p) < 20 {
		return 0, 0, nil
	}
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0xf) * 4
		if len(p) < ihl {
			return 4, p[9], nil
		}
		return 4, p[9], p[ihl:]
	case 6:
		if len(p) < 40 {
			return 6, 0, nil
		}
		nh, rest := p[6], p[40:]
		if nh == 0 && len(rest) >= 8 { // hop-by-hop options
			l := (int(rest[1]) + 1) * 8
			if len(rest) >= l {
				nh, rest = rest[0], rest[l:]
			}
		}
		return 6, nh, rest
	}
	return 0, 0, nil
}
