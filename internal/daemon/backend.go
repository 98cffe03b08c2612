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
	// LockNetNS takes the daemon's hold on a named namespace (tun.NetNSLock), before
	// it looks at, creates or uses it: daemons sharing a namespace do not delete it
	// from under each other.
	LockNetNS(name string) (NetNSLock, error)
	// WatchNetNSRemoved calls removed with each named namespace deleted (ip netns del),
	// until ctx is done; ready once the watch is in place.
	WatchNetNSRemoved(ctx context.Context, ready func(), removed func(name string)) error
	// OpenDevice creates an interface's IP side.
	OpenDevice(spec DeviceSpec) (tun.Device, error)
	// NewInterface creates an IPoIB interface on cfg.Device.
	NewInterface(cfg ipoib.Config) (IPoIB, error)
}

// NetNSLock is a daemon's hold on a named namespace: *tun.NetNSLock.
type NetNSLock interface {
	// MarkCreated records that pibgw created the namespace (or adopted it from a killed
	// daemon): the last daemon to let go of it deletes it.
	MarkCreated() error
	// Release lets go; with del, the last user of a namespace pibgw created deletes it.
	Release(del bool) (tun.NetNSRelease, error)
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
