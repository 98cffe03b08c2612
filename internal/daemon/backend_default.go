package daemon

import (
	"errors"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/tun"
)

// DefaultBackend returns the backend of kernel TUN devices, named namespaces, gVisor
// netstacks and ipoib interfaces.
func DefaultBackend() Backend { return defaultBackend{} }

type defaultBackend struct{}

// errPending is returned until the ipoib and netstack implementations land.
var errPending = errors.New("not available in this build yet (ipoib/netstack pending)")

func (defaultBackend) NetNSExists(name string) (bool, error) { return tun.NetNSExists(name), nil }
func (defaultBackend) CreateNetNS(name string) error         { return tun.CreateNetNS(name) }
func (defaultBackend) DeleteNetNS(name string) error         { return tun.DeleteNetNS(name) }

func (defaultBackend) OpenDevice(spec DeviceSpec) (tun.Device, error) {
	if spec.Stack == config.StackUserspace {
		return nil, errPending
	}
	return tun.CreateKernel(tun.KernelConfig{
		Name: spec.Name, MTU: spec.MTU, NetNS: spec.NetNS, Infiniband: true,
		Addrs: spec.Addrs, Up: true,
	})
}

func (defaultBackend) NewInterface(cfg ipoib.Config) (IPoIB, error) { return nil, errPending }
