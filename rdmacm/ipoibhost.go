package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// IPoIBHost is a Host over IPoIB interfaces, as the kernel's rdma_cm is over ib0: an
// address belongs to the interface that has it (its port and P_Key), a destination
// resolves through that interface's neighbour table (ARP/ND), paths come from the
// port's SA client, and each port gets one CM. A destination on a local interface
// resolves to that interface (loopback works, both ends on one host).
type IPoIBHost struct {
	clk clock.Clock

	mu     sync.Mutex
	ifaces []hostIface
	cms    map[*hca.Port]*ibcm.CM
	mcRefs map[mcKey]int // rdma_cm IDs joined to a group, per port
}

// mcKey is a port's membership of a multicast group.
type mcKey struct {
	port *hca.Port
	mgid wire.GID
}

type hostIface struct {
	ifc *ipoib.Interface
	sa  *sa.Client
}

// NewIPoIBHost returns an empty host; add its interfaces with Add.
func NewIPoIBHost(clk clock.Clock) *IPoIBHost {
	if clk == nil {
		clk = clock.Real{}
	}
	return &IPoIBHost{clk: clk, cms: make(map[*hca.Port]*ibcm.CM), mcRefs: make(map[mcKey]int)}
}

// Add makes an interface's addresses usable by rdma_cm; client is its port's SA client.
func (h *IPoIBHost) Add(ifc *ipoib.Interface, client *sa.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ifaces = append(h.ifaces, hostIface{ifc, client})
	h.cmLocked(ifc.Port())
}

// CM returns the port's CM, starting it the first time: one per port takes the port's
// CM MADs, for rdma_cm and for IPoIB connected mode alike.
func (h *IPoIBHost) CM(p *hca.Port) *ibcm.CM {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cmLocked(p)
}

func (h *IPoIBHost) cmLocked(p *hca.Port) *ibcm.CM {
	if h.cms[p] == nil {
		h.cms[p] = ibcm.New(ibcm.HCAPort(p), ibcm.Options{Clock: h.clk})
	}
	return h.cms[p]
}

// Remove forgets an interface (its port's CM stays for the port's other interfaces).
func (h *IPoIBHost) Remove(ifc *ipoib.Interface) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, x := range h.ifaces {
		if x.ifc == ifc {
			h.ifaces = append(h.ifaces[:k], h.ifaces[k+1:]...)
			return
		}
	}
}

// Close stops the CMs.
func (h *IPoIBHost) Close() {
	h.mu.Lock()
	cms := h.cms
	h.cms = map[*hca.Port]*ibcm.CM{}
	h.mu.Unlock()
	for _, cm := range cms {
		cm.Close()
	}
}

func owns(ifc *ipoib.Interface, a netip.Addr) bool {
	if a == ifc.LinkLocal() {
		return true
	}
	for _, p := range ifc.Info().Addrs {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

func (h *IPoIBHost) find(a netip.Addr) (hostIface, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.ifaces {
		if owns(x.ifc, a) {
			return x, true
		}
	}
	return hostIface{}, false
}

func (h *IPoIBHost) device(x hostIface) Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Device{Port: x.ifc.Port(), PKey: x.ifc.PKey(), CM: h.cms[x.ifc.Port()]}
}

func (h *IPoIBHost) LocalDevice(a netip.Addr) (Device, error) {
	if a.IsUnspecified() {
		return Device{}, ErrAnyAddress
	}
	x, ok := h.find(a.Unmap())
	if !ok {
		return Device{}, syscall.EADDRNOTAVAIL
	}
	return h.device(x), nil
}

func (h *IPoIBHost) Devices() []Device {
	h.mu.Lock()
	ifaces := append([]hostIface(nil), h.ifaces...)
	h.mu.Unlock()
	var out []Device
	for _, x := range ifaces {
		out = append(out, h.device(x))
	}
	return out
}

// Source picks the address of the interface whose prefix holds dst (a local address is
// its own source), else the first address of dst's family.
func (h *IPoIBHost) Source(dst netip.Addr) (netip.Addr, error) {
	dst = dst.Unmap()
	if _, ok := h.find(dst); ok {
		return dst, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var first netip.Addr
	for _, x := range h.ifaces {
		if dst.Is6() && dst.IsLinkLocalUnicast() {
			return x.ifc.LinkLocal(), nil
		}
		for _, p := range x.ifc.Info().Addrs {
			if p.Addr().Is4() != dst.Is4() {
				continue
			}
			if p.Contains(dst) {
				return p.Addr(), nil
			}
			if !first.IsValid() {
				first = p.Addr()
			}
		}
	}
	if !first.IsValid() {
		return netip.Addr{}, syscall.ENETUNREACH
	}
	return first, nil
}

// Neighbor resolves dst on src's interface; a local address is its interface's GID.
func (h *IPoIBHost) Neighbor(ctx context.Context, src, dst netip.Addr) (wire.GID, error) {
	if x, ok := h.find(dst.Unmap()); ok {
		return x.ifc.HWAddr().GID(), nil
	}
	x, ok := h.find(src.Unmap())
	if !ok {
		return wire.GID{}, syscall.EADDRNOTAVAIL
	}
	for {
		hw, err := x.ifc.Resolve(ctx, dst.Unmap())
		if errors.Is(err, ipoib.ErrUnresolved) {
			// Linux's rdma_resolve_addr does not stop at a FAILED neighbour: it solicits
			// again until its timeout, which it reports as ETIMEDOUT
			// (drivers/infiniband/core/addr.c: -ENODATA is retried).
			if ctx.Err() == nil {
				continue
			}
			return wire.GID{}, ctx.Err()
		}
		if err != nil {
			return wire.GID{}, err
		}
		return hw.GID(), nil
	}
}

// client is the SA client of dev's port.
func (h *IPoIBHost) client(dev Device) (*sa.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.ifaces {
		if x.ifc.Port() == dev.Port {
			return x.sa, nil
		}
	}
	return nil, fmt.Errorf("rdmacm: no SA client for %s port %d", dev.Port.Device().Name(), dev.Port.Num())
}

// JoinMulticast joins through the SA client of dev's port (IBA 15.2.5.17).
func (h *IPoIBHost) JoinMulticast(ctx context.Context, dev Device, mgid wire.GID, qkey uint32) (sa.MCGroup, error) {
	client, err := h.client(dev)
	if err != nil {
		return sa.MCGroup{}, err
	}
	// rdma_cm's share of the port's membership is the host's: an IPoIB interface holding
	// the same group keeps the port in it when the last ID leaves.
	g, err := client.JoinFor(ctx, h, mgid, 1, sa.JoinParams{PKey: dev.PKey, Create: true, QKey: qkey})
	if err == nil {
		h.mu.Lock()
		h.mcRefs[mcKey{dev.Port, g.MGID}]++
		h.mu.Unlock()
	}
	return g, err
}

// LeaveMulticast leaves as a full member when the last ID of the port that joined mgid
// leaves: the port is a member for all of them, as in Linux's multicast.c, where the
// port's group counts its members and leaves at the SA when none is left.
func (h *IPoIBHost) LeaveMulticast(ctx context.Context, dev Device, mgid wire.GID) error {
	client, err := h.client(dev)
	if err != nil {
		return err
	}
	k := mcKey{dev.Port, mgid}
	h.mu.Lock()
	n := h.mcRefs[k] - 1
	if n > 0 {
		h.mcRefs[k] = n
	} else {
		delete(h.mcRefs, k)
	}
	h.mu.Unlock()
	if n > 0 {
		return nil
	}
	return client.LeaveFor(ctx, h, mgid, 1)
}

// PathRecord asks the SA client of dev's port (its path cache first).
func (h *IPoIBHost) PathRecord(ctx context.Context, dev Device, dgid wire.GID) (sa.Path, error) {
	client, err := h.client(dev)
	if err != nil {
		return sa.Path{}, err
	}
	sgid, _ := dev.Port.GID(0)
	return client.PathRecord(ctx, sa.PathQuery{SGID: sgid, DGID: dgid, PKey: dev.PKey, Reversible: true})
}
