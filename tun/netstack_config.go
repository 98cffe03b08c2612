package tun

import (
	"errors"
	"net/netip"
)

// NetstackConfig describes a userspace IP stack for NewNetstack. The zero value is
// valid: an interface "netstack0" with MTU 1500 and no addresses.
type NetstackConfig struct {
	// Name is the interface name the stack gives its one NIC; "" is "netstack0".
	Name string
	// MTU of the interface; 0 means 1500. IPv6 needs at least 1280.
	MTU int
	// Addrs are the stack's addresses; each prefix also routes its subnet through the
	// interface, and the interface is the default route of each family that has an
	// address.
	Addrs []netip.Prefix
}

// DefaultNetstackMTU is the MTU of a NetstackConfig with MTU 0.
const DefaultNetstackMTU = 1500

// ErrNetstackOmitted is returned by NewNetstack in binaries built with the
// pibgw_omit_netstack tag, which leaves gVisor out.
var ErrNetstackOmitted = errors.New("tun: userspace netstack not built in (pibgw_omit_netstack)")
