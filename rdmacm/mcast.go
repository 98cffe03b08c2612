package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// MulticastQPN is the destination QPN of a multicast send (IBA 3.5.11).
const MulticastQPN = 0xFFFFFF

// mcMGID maps a multicast IP address to the group's MGID as Linux's cma_set_mgid does:
// IPoIB's mapping (RFC 4391 §4) with the P_Key of the ID's interface; in the UDP port
// space byte 3 is 0x01, the RDMA CM signature, so rdma_cm's groups are not IPoIB's.
func mcMGID(a netip.Addr, pkey uint16, ps PortSpace) (wire.GID, error) {
	var g wire.GID
	switch {
	case a.Is4() && a.IsMulticast():
		g = ipoib.MGIDForIPv4(a, pkey, 2)
	case a.Is6() && a.As16()[0] == 0xFF && a.As16()[2]&0xF0 == 0xA0 && a.As16()[3] == 0x1B:
		return a.As16(), nil // an SA-assigned MGID as an IPv6 address
	case a.Is6() && a.IsMulticast():
		g = ipoib.MGIDForIPv6(a, pkey, 2)
	default:
		return g, fmt.Errorf("rdmacm: %v is not a multicast address: %w", a, syscall.EINVAL)
	}
	if ps == PSUDP {
		g[3] = 0x01
	}
	return g, nil
}

// JoinMulticast is rdma_join_multicast: the ID's port joins the group of address addr
// as a full member through the SA (creating it, with the port space's Q_Key), the ID's
// QP is attached to it, and MULTICAST_JOIN reports how to send to it (UD.AHAttr with the
// group's MLID and MGID, QPNum 0xFFFFFF, QKey); MULTICAST_ERROR if the SA refuses.
func (id *ID) JoinMulticast(addr netip.Addr) error {
	id.mu.Lock()
	dev, ps, qp := id.dev, id.ps, id.qp
	id.mu.Unlock()
	if dev.Port == nil {
		return fmt.Errorf("rdmacm: join_multicast: the ID has no device (bind or resolve first): %w", syscall.EINVAL)
	}
	if id.qpType != hca.QPTypeUD {
		return fmt.Errorf("rdmacm: join_multicast in %v: %w", ps, syscall.EINVAL)
	}
	mgid, err := mcMGID(addr, dev.PKey, ps)
	if err != nil {
		return err
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g, err := id.host.JoinMulticast(ctx, dev, mgid, UDPQKey)
		if err == nil && qp != nil {
			err = qp.AttachMcast(g.MGID, g.MLID)
		}
		if err != nil {
			id.emit(&Event{Type: EventMulticastError, Status: errno(syscall.EINVAL), Group: addr})
			return
		}
		id.mu.Lock()
		if id.groups == nil {
			id.groups = make(map[netip.Addr]sa.MCGroup)
		}
		id.groups[addr] = g
		id.mu.Unlock()
		id.emit(&Event{Type: EventMulticastJoin, Group: addr, UD: UDParam{QPNum: MulticastQPN, QKey: g.QKey,
			AHAttr: hca.AHAttr{DLID: g.MLID, SL: g.SL, IsGlobal: true, PortNum: dev.Port.Num(),
				GRH: hca.GlobalRoute{DGID: g.MGID, FlowLabel: g.FlowLabel, HopLimit: g.HopLimit, TrafficClass: g.TClass}}}})
	}()
	return nil
}

// LeaveMulticast is rdma_leave_multicast: the QP is detached and the port leaves (when
// no other ID of the port is a member).
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	id.mu.Lock()
	g, ok := id.groups[addr]
	delete(id.groups, addr)
	dev, qp := id.dev, id.qp
	id.mu.Unlock()
	if !ok {
		return fmt.Errorf("rdmacm: leave_multicast %v: not joined: %w", addr, syscall.EADDRNOTAVAIL)
	}
	if qp != nil {
		qp.DetachMcast(g.MGID, g.MLID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Linux's rdma_leave_multicast returns nothing: the SA's answer to the leave does
	// not reach the caller (ucma_leave_multicast fails only for an unknown group).
	_ = id.host.LeaveMulticast(ctx, dev, g.MGID)
	return nil
}

// leaveAll leaves every group the ID joined, as the kernel's rdma_destroy_id does
// (cma_leave_mc_groups): a program that destroys its ID, or exits, without leaving leaves
// neither its port a member at the SA nor the port's count of members up.
func (id *ID) leaveAll() {
	id.mu.Lock()
	addrs := make([]netip.Addr, 0, len(id.groups))
	for a := range id.groups {
		addrs = append(addrs, a)
	}
	id.mu.Unlock()
	for _, a := range addrs {
		id.LeaveMulticast(a)
	}
}
