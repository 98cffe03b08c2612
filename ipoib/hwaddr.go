package ipoib

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/pibgw/pibgw/wire"
)

// Hardware address flags (RFC 4755 §3.3 / Linux IPOIB_FLAGS_RC, IPOIB_FLAGS_UC).
const (
	FlagConnected = 0x80 // connected mode supported
	FlagUC        = 0x40
)

// MulticastQPN is the destination QPN of every multicast packet (IBA 10.5.2.2).
const MulticastQPN = 0xFFFFFF

// MakeHWAddr builds an address from flags, the UD QPN and the port GID (RFC 4391 §9.1.1).
func MakeHWAddr(flags uint8, qpn uint32, gid wire.GID) HWAddr {
	var a HWAddr
	binary.BigEndian.PutUint32(a[0:], qpn&0xFFFFFF)
	a[0] = flags
	copy(a[4:], gid[:])
	return a
}

// MulticastHWAddr is the hardware address of a multicast group: 00:ff:ff:ff + MGID.
func MulticastHWAddr(mgid wire.GID) HWAddr { return MakeHWAddr(0, MulticastQPN, mgid) }

// Flags returns byte 0.
func (a HWAddr) Flags() uint8 { return a[0] }

// QPN returns the 24-bit QP number.
func (a HWAddr) QPN() uint32 { return binary.BigEndian.Uint32(a[0:]) & 0xFFFFFF }

// GID returns the port (or multicast) GID.
func (a HWAddr) GID() wire.GID { return wire.GID(a[4:20]) }

// IsMulticast reports whether a names a multicast group.
func (a HWAddr) IsMulticast() bool { return a.QPN() == MulticastQPN && a[4] == 0xFF }

// IsZero reports whether every byte is zero.
func (a HWAddr) IsZero() bool { return a == HWAddr{} }

// String is Linux's form: 20 colon-separated hex bytes.
func (a HWAddr) String() string {
	var b strings.Builder
	b.Grow(3*HWAddrLen - 1)
	for i, c := range a {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(hex.EncodeToString([]byte{c}))
	}
	return b.String()
}

// MarshalText implements encoding.TextMarshaler (the colon form).
func (a HWAddr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *HWAddr) UnmarshalText(b []byte) error {
	p, err := ParseHWAddr(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// ParseHWAddr parses the colon form of an IPoIB hardware address.
func ParseHWAddr(s string) (HWAddr, error) {
	var a HWAddr
	parts := strings.Split(s, ":")
	if len(parts) != HWAddrLen {
		return a, fmt.Errorf("ipoib: hardware address %q: want %d colon-separated bytes", s, HWAddrLen)
	}
	for i, p := range parts {
		if len(p) != 2 {
			return a, fmt.Errorf("ipoib: hardware address %q: byte %d is %q", s, i, p)
		}
		if _, err := hex.Decode(a[i:i+1], []byte(p)); err != nil {
			return a, fmt.Errorf("ipoib: hardware address %q: byte %d is %q", s, i, p)
		}
	}
	return a, nil
}

// BroadcastMGID is the partition's IPv4 broadcast group, ff12:401b:PPPP::ffff:ffff
// (RFC 4391 §5), with the full-member bit set in the P_Key as Linux does.
func BroadcastMGID(pkey uint16) wire.GID { return wire.IPoIBBroadcastMGID(pkey) }

// MGIDForIPv4 maps an IPv4 multicast group to its MGID (RFC 4391 §4):
// ff1s:401b:PPPP::0 + the low 28 bits of the group (Linux ip_ib_mc_map).
func MGIDForIPv4(group netip.Addr, pkey uint16, scope uint8) wire.GID {
	var g wire.GID
	g[0], g[1] = 0xFF, 0x10|scope&0x0F
	binary.BigEndian.PutUint16(g[2:], wire.IPoIBSignatureIPv4)
	binary.BigEndian.PutUint16(g[4:], pkey|0x8000)
	a := group.As4()
	g[12], g[13], g[14], g[15] = a[0]&0x0F, a[1], a[2], a[3]
	return g
}

// MGIDForIPv6 maps an IPv6 multicast group to its MGID (RFC 4391 §4):
// ff1s:601b:PPPP + the low 80 bits of the group (Linux ipv6_ib_mc_map).
func MGIDForIPv6(group netip.Addr, pkey uint16, scope uint8) wire.GID {
	var g wire.GID
	g[0], g[1] = 0xFF, 0x10|scope&0x0F
	binary.BigEndian.PutUint16(g[2:], wire.IPoIBSignatureIPv6)
	binary.BigEndian.PutUint16(g[4:], pkey|0x8000)
	a := group.As16()
	copy(g[6:], a[6:])
	return g
}

// LinkLocalFromGUID is the IPv6 link-local address of a port: fe80::/64 and the port
// GUID with the universal/local bit flipped as the interface identifier (RFC 4391 §8).
func LinkLocalFromGUID(guid uint64) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xFE, 0x80
	binary.BigEndian.PutUint64(a[8:], guid^0x0200_0000_0000_0000)
	return netip.AddrFrom16(a)
}

// SolicitedNode is the solicited-node multicast address of a (RFC 4291 §2.7.1).
func SolicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	s := [16]byte{0: 0xFF, 1: 0x02, 11: 0x01, 12: 0xFF, 13: b[13], 14: b[14], 15: b[15]}
	return netip.AddrFrom16(s)
}

// allNodes is ff02::1.
var allNodes = netip.AddrFrom16([16]byte{0: 0xFF, 1: 0x02, 15: 1})
