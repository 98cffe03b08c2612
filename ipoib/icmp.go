package ipoib

import (
	"encoding/binary"

	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/tun"
)

// Path MTU for packets that do not fit: a packet from the stack larger than its way
// takes (the UD MTU toward a peer without connected mode or to a group, a connection's
// MTU) is dropped and answered, toward the stack, with an ICMP "fragmentation needed"
// (RFC 792, RFC 1191) or an ICMPv6 "packet too big" (RFC 4443 §3.2) carrying the
// smaller MTU, as Linux's ipoib_cm_skb_too_long does: the kernel caches the path MTU
// (`ip route get` shows it) and its TCP sends smaller segments.

// ICMP and ICMPv6 numbers used here.
const (
	icmpDestUnreach    = 3
	icmpFragNeeded     = 4
	icmp6PacketTooBig  = 2
	protoICMP          = 1
	icmpQuoteMax       = 576 // RFC 1812 §4.3.2.3: an ICMP error fits in 576 bytes
	icmp6QuoteMax      = 1280
	icmpErrorHeaderLen = 8
)

// tooBig drops pkt, which is larger than mtu, and tells the stack (counted
// tx_icmp_too_big). Nothing answers an ICMP error or a non-first fragment (RFC 1122
// §3.2.2, RFC 4443 §2.4 (e)).
func (i *Interface) tooBig(pkt []byte, mtu int) {
	i.cnt.inc(cDropTooBig)
	b := i.txp.icmp[:]
	var n int
	switch pkt[0] >> 4 {
	case 4:
		n = buildFragNeeded(b[tun.MinOffset:], pkt, mtu)
	case 6:
		n = buildPacketTooBig(b[tun.MinOffset:], pkt, mtu)
	}
	if n == 0 {
		return
	}
	if i.writeRaw(b[:tun.MinOffset+n]) == nil {
		i.cnt.inc(cTxICMPTooBig)
	}
}

// icmpBufLen holds head-room and the larger of the two errors.
const icmpBufLen = tun.MinOffset + 40 + icmpErrorHeaderLen + icmp6QuoteMax

// buildFragNeeded writes into b an ICMP "fragmentation needed" for the IPv4 packet pkt,
// from its destination to its source, and returns its length (0: none is due).
func buildFragNeeded(b, pkt []byte, mtu int) int {
	ihl := int(pkt[0]&0x0F) * 4
	if ihl < 20 || len(pkt) < ihl || binary.BigEndian.Uint16(pkt[6:])&0x1FFF != 0 {
		return 0
	}
	if pkt[9] == protoICMP && len(pkt) > ihl && isICMPError(pkt[ihl]) {
		return 0
	}
	quote := min(len(pkt), icmpQuoteMax-20-icmpErrorHeaderLen)
	n := 20 + icmpErrorHeaderLen + quote
	h := b[:20]
	clear(b[:28])
	h[0], h[1] = 0x45, 0xC0 // internetwork control, as ICMP errors go
	binary.BigEndian.PutUint16(h[2:], uint16(n))
	h[8], h[9] = 64, protoICMP
	copy(h[12:16], pkt[16:20]) // from the unreachable side
	copy(h[16:20], pkt[12:16])
	inet.SetIPv4HeaderChecksum(h)
	m := b[20:n]
	m[0], m[1] = icmpDestUnreach, icmpFragNeeded
	binary.BigEndian.PutUint16(m[6:], uint16(mtu)) // RFC 1191 §4: next-hop MTU
	copy(m[icmpErrorHeaderLen:], pkt[:quote])
	binary.BigEndian.PutUint16(m[2:], ^inet.Fold(inet.Sum(m, 0)))
	return n
}

// buildPacketTooBig writes into b an ICMPv6 "packet too big" for the IPv6 packet pkt.
func buildPacketTooBig(b, pkt []byte, mtu int) int {
	if len(pkt) < ipv6HeaderLen {
		return 0
	}
	if pkt[6] == protoICMPv6 && len(pkt) > ipv6HeaderLen && pkt[ipv6HeaderLen] < 128 {
		return 0 // an ICMPv6 error
	}
	quote := min(len(pkt), icmp6QuoteMax-ipv6HeaderLen-icmpErrorHeaderLen)
	plen := icmpErrorHeaderLen + quote
	n := ipv6HeaderLen + plen
	h := b[:ipv6HeaderLen]
	clear(b[:ipv6HeaderLen+icmpErrorHeaderLen])
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(plen))
	h[6], h[7] = protoICMPv6, 64
	copy(h[8:24], pkt[24:40])
	copy(h[24:40], pkt[8:24])
	m := b[ipv6HeaderLen:n]
	m[0] = icmp6PacketTooBig
	binary.BigEndian.PutUint32(m[4:], uint32(mtu))
	copy(m[icmpErrorHeaderLen:], pkt[:quote])
	binary.BigEndian.PutUint16(m[2:], ^inet.Fold(inet.Sum(m, inet.PseudoSum(b[:n], protoICMPv6, plen))))
	return n
}

// isICMPError reports whether an ICMP type is an error message (RFC 1122 §3.2.2).
func isICMPError(t byte) bool {
	switch t {
	case 3, 4, 5, 11, 12:
		return true
	}
	return false
}
