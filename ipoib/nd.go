package ipoib

import (
	"encoding/binary"
	"net/netip"
)

// IPv6 neighbour discovery over IPoIB (RFC 4861 with RFC 4391 §9.1: the link-layer
// address option is 24 bytes, length 3: type, length, 2 reserved bytes, the 20-byte
// address). pibgw resolves and answers on the IB side; the IP stack behind a TUN device
// has no link-layer address to do it with.

const (
	ipv6HeaderLen = 40
	protoIGMP     = 2
	protoICMPv6   = 58
	protoHopByHop = 0

	icmp6RouterSolicit   = 133
	icmp6RouterAdvert    = 134
	icmp6NeighborSolicit = 135
	icmp6NeighborAdvert  = 136
	icmp6Redirect        = 137

	ndMsgLen = 24 // NS and NA: type, code, checksum, 4 bytes, target
	ndOptLen = 24 // RFC 4391 §9.1.1: length 3 (units of 8 bytes)

	ndOptSourceLL = 1
	ndOptTargetLL = 2

	naRouter    = 0x80
	naSolicited = 0x40
	naOverride  = 0x20

	scopeLinkLocal = 2
)

func isND(t byte) bool { return t >= icmp6RouterSolicit && t <= icmp6Redirect }

// checksum16 folds the one's complement sum.
func checksumAdd(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

func checksumFold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// icmp6Checksum computes the ICMPv6 checksum of msg (checksum field zero) with the
// IPv6 pseudo-header (RFC 8200 §8.1).
func icmp6Checksum(src, dst [16]byte, msg []byte) uint16 {
	var sum uint32
	sum = checksumAdd(sum, src[:])
	sum = checksumAdd(sum, dst[:])
	sum += uint32(len(msg))
	sum += protoICMPv6
	sum = checksumAdd(sum, msg)
	return checksumFold(sum)
}

// putIPv6 writes an IPv6 header for an ICMPv6 payload of n bytes, hop limit 255
// (RFC 4861 §7.1: ND messages must carry 255).
func putIPv6(b []byte, src, dst netip.Addr, n int) {
	clear(b[:ipv6HeaderLen])
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(n))
	b[6] = protoICMPv6
	b[7] = 255
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
}

func putLLOption(b []byte, typ byte, hw HWAddr) {
	b[0], b[1], b[2], b[3] = typ, ndOptLen/8, 0, 0
	copy(b[4:], hw[:])
}

// buildNS writes a neighbour solicitation for target from src (to target's
// solicited-node group) with our link-layer address.
func buildNS(b []byte, src, target netip.Addr, hw HWAddr) []byte {
	n := ndMsgLen + ndOptLen
	dst := SolicitedNode(target)
	putIPv6(b, src, dst, n)
	m := b[ipv6HeaderLen : ipv6HeaderLen+n]
	clear(m)
	m[0] = icmp6NeighborSolicit
	t := target.As16()
	copy(m[8:], t[:])
	putLLOption(m[ndMsgLen:], ndOptSourceLL, hw)
	binary.BigEndian.PutUint16(m[2:], icmp6Checksum(src.As16(), dst.As16(), m))
	return b[:ipv6HeaderLen+n]
}

// buildNA writes a neighbour advertisement for target (ours) to dst.
func buildNA(b []byte, target, dst netip.Addr, flags byte, hw HWAddr) []byte {
	n := ndMsgLen + ndOptLen
	putIPv6(b, target, dst, n)
	m := b[ipv6HeaderLen : ipv6HeaderLen+n]
	clear(m)
	m[0] = icmp6NeighborAdvert
	m[4] = flags
	t := target.As16()
	copy(m[8:], t[:])
	putLLOption(m[ndMsgLen:], ndOptTargetLL, hw)
	binary.BigEndian.PutUint16(m[2:], icmp6Checksum(target.As16(), dst.As16(), m))
	return b[:ipv6HeaderLen+n]
}

// ndLLOption finds the link-layer address option of type typ in opts.
func ndLLOption(opts []byte, typ byte) (HWAddr, bool) {
	for len(opts) >= 8 {
		l := int(opts[1]) * 8
		if l == 0 || l > len(opts) {
			return HWAddr{}, false
		}
		if opts[0] == typ && l == ndOptLen {
			return HWAddr(opts[4:24]), true
		}
		opts = opts[l:]
	}
	return HWAddr{}, false
}

// handleND processes a received NS or NA (pkt is the IPv6 packet); other ND messages
// (router solicitations and advertisements, redirects) are the IP stack's and pibgw has
// no link-layer address to give it, so they stop here too.
func (i *Interface) handleND(pkt []byte) {
	plen := int(binary.BigEndian.Uint16(pkt[4:]))
	if ipv6HeaderLen+plen > len(pkt) || plen < ndMsgLen || pkt[7] != 255 {
		i.cnt.inc(cDropMalformed)
		return
	}
	msg := pkt[ipv6HeaderLen : ipv6HeaderLen+plen]
	src := netip.AddrFrom16([16]byte(pkt[8:24]))
	dst := netip.AddrFrom16([16]byte(pkt[24:40]))
	if icmp6Checksum(src.As16(), dst.As16(), msg) != 0 {
		i.cnt.inc(cDropMalformed)
		return
	}
	target := netip.AddrFrom16([16]byte(msg[8:24]))
	ls := i.link.Load()
	now := i.clk.Now()
	switch msg[0] {
	case icmp6NeighborSolicit:
		hw, has := ndLLOption(msg[ndMsgLen:], ndOptSourceLL)
		if has && hw == ls.hw {
			i.cnt.inc(cDropOwnMulticast)
			return
		}
		if !i.isOurs(target) {
			i.cnt.inc(cDropNotForUs)
			return
		}
		var b [ipv6HeaderLen + ndMsgLen + ndOptLen]byte
		if src.IsUnspecified() {
			// Duplicate address detection: defend the address to all nodes (RFC 4861 §7.2.4).
			i.xmit(buildNA(b[:], target, allNodes, naOverride, ls.hw))
			i.cnt.inc(cTxND)
			return
		}
		if has {
			i.learn(src, hw, now, true)
		}
		na := buildNA(b[:], target, src, naSolicited|naOverride, ls.hw)
		i.xmit(na)
		i.cnt.inc(cTxND)
	case icmp6NeighborAdvert:
		hw, has := ndLLOption(msg[ndMsgLen:], ndOptTargetLL)
		if !has || hw == ls.hw {
			return
		}
		if msg[4]&naSolicited == 0 {
			// Unsolicited (an announcement, RFC 4861 §7.2.6): only a moved address counts.
			i.learnIfMoved(target, hw, now)
			return
		}
		i.learn(target, hw, now, true)
	}
}

// stackICMPv6 looks at an ICMPv6 packet the IP stack sends: MLD reports change our
// group memberships and ND messages are pibgw's to make. It reports whether the packet
// was consumed.
func (i *Interface) stackICMPv6(pkt []byte) bool {
	next, off := pkt[6], ipv6HeaderLen
	if next == protoHopByHop {
		// MLD messages carry a router-alert hop-by-hop option (RFC 3810 §5).
		if len(pkt) < off+8 {
			return false
		}
		next = pkt[off]
		off += (int(pkt[off+1]) + 1) * 8
	}
	if next != protoICMPv6 || len(pkt) <= off {
		return false
	}
	t := pkt[off]
	switch {
	case t == icmp6NeighborSolicit || t == icmp6NeighborAdvert || t == icmp6Redirect:
		i.cnt.inc(cDropStackControl)
		return true
	case t == mldQuery:
		return true
	case t == mldv1Report || t == mldv1Done || t == mldv2Report:
		i.mldReport(pkt[off:])
		return true
	}
	return false
}
