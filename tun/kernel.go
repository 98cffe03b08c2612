package tun

import (
	"log/slog"
	"net/netip"
)

// KernelConfig describes a kernel TUN device for CreateKernel. The zero value is valid:
// a device named by the kernel (tunN) in the current network namespace, MTU 1500,
// link type none, no addresses, down.
type KernelConfig struct {
	// Name is the interface name ("ib0"); "" lets the kernel choose one.
	Name string
	// MTU of the device; 0 means 1500. IPv6 needs at least 1280.
	MTU int
	// NetNS is a named network namespace (under NetNSDir) to create the device in; ""
	// is the current one. The namespace must exist (see CreateNetNS).
	NetNS string
	// Infiniband sets the link type to ARPHRD_INFINIBAND (32) so that `ip -d link`
	// shows link/infiniband. The kernel then adds no IPv6 link-local address by itself:
	// put one in Addrs.
	Infiniband bool
	// Addrs are assigned to the device (with their connected routes), IPv4 and IPv6
	// including the link-local fe80::/64 one.
	Addrs []netip.Prefix
	// Routes are extra destinations routed through the device (needs Up).
	Routes []netip.Prefix
	// Up brings the device up once configured.
	Up bool
	// IgnoreRoutesWithLinkDown sets the device's ignore_routes_with_linkdown sysctls
	// (IPv4 and IPv6): while its carrier is off (SetCarrier) the kernel ignores the
	// routes through it, so a send fails with "Network is unreachable" instead of
	// vanishing into a device that cannot transmit.
	IgnoreRoutesWithLinkDown bool
	// Logger receives device events; nil is slog.Default().
	Logger *slog.Logger
}

// DefaultKernelMTU is the MTU of a KernelConfig with MTU 0.
const DefaultKernelMTU = 1500

// ARPHRDInfiniband is the Linux link type of InfiniBand interfaces (if_arp.h), set on a
// TUN device with the TUNSETLINK ioctl.
const ARPHRDInfiniband = 32
