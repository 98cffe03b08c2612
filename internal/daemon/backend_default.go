package daemon

import (
	"context"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/tun"
)

// DefaultBackend returns the real backend: named namespaces and kernel TUN devices
// (link type infiniband, addresses, up) from tun, gVisor netstacks for userspace
// interfaces, and ipoib interfaces.
func DefaultBackend() Backend { return defaultBackend{} }

type defaultBackend struct{}

func (defaultBackend) NetNSExists(name string) (bool, error) { return tun.NetNSExists(name), nil }
func (defaultBackend) CreateNetNS(name string) error         { return tun.CreateNetNS(name) }
func (defaultBackend) DeleteNetNS(name string) error         { return tun.DeleteNetNS(name) }
func (defaultBackend) WatchNetNSRemoved(ctx context.Context, ready func(), removed func(string)) error {
	return tun.WatchNetNSRemoved(ctx, ready, removed)
}

func (defaultBackend) LockNetNS(name string) (NetNSLock, error) {
	return tun.LockNetNS(tun.NetNSLockDir, name)
}

func (defaultBackend) OpenDevice(spec DeviceSpec) (tun.Device, error) {
	if spec.Stack == config.StackUserspace {
		return tun.NewNetstack(tun.NetstackConfig{Name: spec.Name, MTU: spec.MTU, Addrs: spec.Addrs})
	}
	return tun.CreateKernel(tun.KernelConfig{
		Name: spec.Name, MTU: spec.MTU, NetNS: spec.NetNS, Infiniband: true,
		Addrs: spec.Addrs, Up: true, IgnoreRoutesWithLinkDown: true,
	})
}

func (defaultBackend) NewInterface(cfg ipoib.Config) (IPoIB, error) { return ipoib.New(cfg) }
