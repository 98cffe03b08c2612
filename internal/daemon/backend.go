package daemon

import (
	"context"
	"net/netip"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/tun"
)

// Backend is how the daemon makes the IP side of its interfaces and the IPoIB
// interfaces themselves. The default (DefaultBackend) uses kernel TUN devices and named
// network namespaces (tun.CreateKernel, tun.CreateNetNS), gVisor netstacks for
// userspace interfaces, and ipoib.New; tests substitute fakes.
type Backend interface {
	// NetNSExists reports whether the named network namespace exists.
	NetNSExists(name string) (bool, error)
	// CreateNetNS creates the named network namespace; DeleteNetNS removes it.
	CreateNetNS(name string) error
	DeleteNetNS(name string) error
	// OpenDevice creates an interface's IP side.
	OpenDevice(spec DeviceSpec) (tun.Device, error)
	// NewInterface creates an IPoIB interface on cfg.Device.
	NewInterface(cfg ipoib.Config) (IPoIB, error)
}

// DeviceSpec describes an interface's IP side.
type DeviceSpec struct {
	Name  string
	Stack string // config.StackKernel or config.StackUserspace
	NetNS string // kernel: the namespace to create the TUN device in ("" for the daemon's)
	MTU   int
	// Addrs are configured on the device (kernel) or the netstack (userspace), the IPv6
	// link-local address included.
	Addrs []netip.Prefix
}

// IPoIB is what the daemon uses of an *ipoib.Interface.
type IPoIB interface {
	Run(ctx context.Context) error
	Close() error
	Info() ipoib.Info
	Neighbors() []ipoib.Neighbor
	State() ipoib.State
	SetMode(ipoib.Mode) error
}
