package ipoib_test

import (
	"net/netip"
	"testing"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/wire"
)

func TestHWAddr(t *testing.T) {
	gid := wire.MakeGID(0xfe80_0000_0000_0000, 0x0015_5dff_fd33_ff0b)
	a := ipoib.MakeHWAddr(0, 0x149, gid)
	if s := a.String(); s != "00:00:01:49:fe:80:00:00:00:00:00:00:00:15:5d:ff:fd:33:ff:0b" {
		t.Fatal(s)
	}
	c := ipoib.MakeHWAddr(ipoib.FlagConnected, 0x48, gid)
	if s := c.String(); s[:14] != "80:00:00:48:fe" || c.QPN() != 0x48 || c.Flags() != 0x80 || c.GID() != gid {
		t.Fatal(s)
	}
	p, err := ipoib.ParseHWAddr(a.String())
	if err != nil || p != a {
		t.Fatalf("parse: %s %v", p, err)
	}
	for _, bad := range []string{"", "00:11", "zz:00:01:49:fe:80:00:00:00:00:00:00:00:15:5d:ff:fd:33:ff:0b"} {
		if _, err := ipoib.ParseHWAddr(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// RFC 4391 §4: broadcast address of P_Key 0x8001.
	b := ipoib.MulticastHWAddr(ipoib.BroadcastMGID(0x8001))
	if s := b.String(); s != "00:ff:ff:ff:ff:12:40:1b:80:01:00:00:00:00:00:00:ff:ff:ff:ff" || !b.IsMulticast() {
		t.Fatal(s)
	}
	if ipoib.BroadcastMGID(0x0001) != ipoib.BroadcastMGID(0x8001) {
		t.Fatal("the broadcast MGID carries the full-member P_Key")
	}
}

func TestMulticastMGIDs(t *testing.T) {
	cases := []struct{ ip, want string }{
		{"224.0.0.1", "ff12:401b:ffff::1"},
		{"239.255.255.250", "ff12:401b:ffff::fff:fffa"},
		{"ff02::1", "ff12:601b:ffff::1"},
		{"ff02::1:ff00:2", "ff12:601b:ffff::1:ff00:2"},
		{"ff05::1:3", "ff12:601b:ffff::1:3"},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.ip)
		var g wire.GID
		if a.Is4() {
			g = ipoib.MGIDForIPv4(a, 0xFFFF, 2)
		} else {
			g = ipoib.MGIDForIPv6(a, 0xFFFF, 2)
		}
		if g.String() != c.want {
			t.Errorf("%s → %s, want %s", c.ip, g, c.want)
		}
	}
	if g := ipoib.MGIDForIPv4(netip.MustParseAddr("239.1.2.3"), 0x0001, 2); g.String() != "ff12:401b:8001::f01:203" {
		t.Errorf("P_Key 0x0001: %s", g)
	}
	if s := ipoib.SolicitedNode(netip.MustParseAddr("fd00::abcd:1234")); s.String() != "ff02::1:ffcd:1234" {
		t.Error(s)
	}
	if ll := ipoib.LinkLocalFromGUID(0x0002_c903_0000_0101); ll.String() != "fe80::202:c903:0:101" {
		t.Error(ll)
	}
}
