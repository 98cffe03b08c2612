package attach

import (
	"context"
	"net/netip"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// RDMA returns rdma_cm's host for this process: addresses are the IPoIB addresses of the
// daemon's interfaces (in whatever namespace they are), so binding to 10.10.0.2 means the
// port of the interface that has it, as librdmacm binds on a host with ib0; destinations
// resolve through the daemon's neighbour tables, paths through its SA client, and each
// port's CM runs here with this session's comm-ID prefix. The process needs no network
// namespace of its own.
func (s *Session) RDMA() rdmacm.Host { return host{s} }

type host struct{ s *Session }

var _ rdmacm.Host = host{}

func (h host) device(r portRef) (rdmacm.Device, error) {
	if r.Dev < 0 || r.Dev >= len(h.s.devs) {
		return rdmacm.Device{}, &Error{Op: opAddr, Errno: syscall.ENODEV, Msg: "the daemon named a device this process does not have"}
	}
	p := h.s.devs[r.Dev].Port(int(r.Port))
	if p == nil {
		return rdmacm.Device{}, &Error{Op: opAddr, Errno: syscall.ENODEV, Msg: "the daemon named a port this process does not have"}
	}
	return rdmacm.Device{Port: p, PKey: r.PKey, CM: h.s.CM(p)}, nil
}

func (h host) ref(d rdmacm.Device) (dev int, port uint8) {
	for i, x := range h.s.devs {
		if x == d.Port.Device() {
			return i, d.Port.Num()
		}
	}
	return -1, 0
}

func (h host) LocalDevice(a netip.Addr) (rdmacm.Device, error) {
	if a.IsUnspecified() {
		return rdmacm.Device{}, rdmacm.ErrAnyAddress
	}
	m, err := h.s.call(context.Background(), &msg{Op: opAddr, Addr: a.String()})
	if err != nil {
		return rdmacm.Device{}, err
	}
	if len(m.Ports) != 1 {
		return rdmacm.Device{}, &Error{Op: opAddr, Errno: syscall.EIO, Msg: "bad reply"}
	}
	return h.device(m.Ports[0])
}

func (h host) Devices() []rdmacm.Device {
	m, err := h.s.call(context.Background(), &msg{Op: opDevices})
	if err != nil {
		return nil
	}
	var out []rdmacm.Device
	for _, r := range m.Ports {
		if d, err := h.device(r); err == nil {
			out = append(out, d)
		}
	}
	return out
}

func (h host) Source(dst netip.Addr) (netip.Addr, error) {
	m, err := h.s.call(context.Background(), &msg{Op: opSource, Addr: dst.String()})
	if err != nil {
		return netip.Addr{}, err
	}
	return netip.ParseAddr(m.Addr)
}

func (h host) Neighbor(ctx context.Context, src, dst netip.Addr) (wire.GID, error) {
	req := &msg{Op: opNeighbor, Addr: src.String(), Addr2: dst.String()}
	if dl, ok := ctx.Deadline(); ok {
		req.WaitMS = max(time.Until(dl).Milliseconds(), 1)
	}
	m, err := h.s.call(ctx, req)
	if err != nil {
		return wire.GID{}, err
	}
	return parseGID(m.GID)
}

func (h host) PathRecord(ctx context.Context, d rdmacm.Device, dgid wire.GID) (sa.Path, error) {
	dev, port := h.ref(d)
	m, err := h.s.call(ctx, &msg{Op: opPath, Dev: dev, Port: port, PKey: d.PKey, GID: gidString(dgid)})
	if err != nil {
		return sa.Path{}, err
	}
	if m.Path == nil {
		return sa.Path{}, &Error{Op: opPath, Errno: syscall.EIO, Msg: "reply without a path"}
	}
	return *m.Path, nil
}

func (h host) JoinMulticast(ctx context.Context, d rdmacm.Device, mgid wire.GID, qkey uint32) (sa.MCGroup, error) {
	dev, port := h.ref(d)
	m, err := h.s.call(ctx, &msg{Op: opJoin, Dev: dev, Port: port, PKey: d.PKey, GID: gidString(mgid), QKey: qkey})
	if err != nil {
		return sa.MCGroup{}, err
	}
	if m.Group == nil {
		return sa.MCGroup{}, &Error{Op: opJoin, Errno: syscall.EIO, Msg: "reply without a group"}
	}
	return *m.Group, nil
}

func (h host) LeaveMulticast(ctx context.Context, d rdmacm.Device, mgid wire.GID) error {
	dev, port := h.ref(d)
	_, err := h.s.call(ctx, &msg{Op: opLeave, Dev: dev, Port: port, PKey: d.PKey, GID: gidString(mgid)})
	return err
}
