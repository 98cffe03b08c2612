package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// IBAddr is an AF_IB address (struct sockaddr_ib): a GID with its P_Key, and a service
// ID whose low 16 bits are the port (Linux's cma_port for AF_IB). rdma_cm takes it as it
// takes an IP address — libfabric's verbs provider uses one for each GID and P_Key of a
// device whose IPoIB interface it cannot see — but with no IP CM header in the REQ: the
// service ID alone names the listener (IBA A11 does not apply; Linux's
// cma_user_data_offset is 0 for AF_IB).
type IBAddr struct {
	GID     wire.GID
	PKey    uint16 // sib_pkey
	Flow    uint32 // sib_flowinfo
	SID     uint64 // sib_sid
	SIDMask uint64 // sib_sid_mask
	Scope   uint64 // sib_scope_id
}

// Port is the port the service ID carries (Linux's cma_port: sid & mask, low 16 bits).
func (a IBAddr) Port() uint16 { return uint16(a.SID & a.SIDMask) }

// ipForm is the address as the ID keeps it beside IP ones: the GID as an IPv6 address
// (bound or not, local or not, port table) and the port.
func (a IBAddr) ipForm() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(a.GID), a.Port())
}

// RDMA_IB_IP_PS_MASK and the port spaces' service ID prefixes (Linux's rdma_cm_ib.h).
const (
	ibPSMask = 0xFFFFFFFFFFFF0000
	ibPSTCP  = 0x0000000001060000
	ibPSUDP  = 0x0000000001110000
	ibPSIB   = 0x00000000013F0000
)

// afIB is an ID's AF_IB addresses, on when it was bound or resolved with one.
type afIB struct {
	on       bool
	src, dst IBAddr
}

// IsIB reports whether the ID's addresses are AF_IB ones (LocalIB, PeerIB).
func (id *ID) IsIB() bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ib.on
}

// LocalIB and PeerIB are rdma_get_local_addr and rdma_get_peer_addr of an AF_IB ID.
func (id *ID) LocalIB() IBAddr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ib.src
}

func (id *ID) PeerIB() IBAddr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ib.dst
}

// selectIBPS is the port space an AF_IB bind takes from the service ID, as Linux's
// cma_select_ib_ps: the ID's own if the ID's prefix (under the mask) is its port
// space's — RDMA_PS_IB also takes TCP's prefix, as a TCP ID takes IB's — else none.
func selectIBPS(ps PortSpace, a *IBAddr) (PortSpace, error) {
	mask := a.SIDMask & ibPSMask
	sid := a.SID & mask
	var prefix uint64
	switch {
	case ps == PSIB && sid == ibPSIB&mask:
		prefix = ibPSIB
	case (ps == PSIB || ps == PSTCP) && sid == ibPSTCP&mask:
		ps, prefix = PSTCP, ibPSTCP
	case (ps == PSIB || ps == PSUDP) && sid == ibPSUDP&mask:
		ps, prefix = PSUDP, ibPSUDP
	default:
		return 0, syscall.EPROTONOSUPPORT
	}
	a.SID = prefix | uint64(a.Port())
	a.SIDMask |= ibPSMask
	return ps, nil
}

// ibDevice is the device with GID gid and P_Key pkey (0: the device's own), as Linux's
// cma_translate_ib and cma_acquire_dev_by_src_ip find it.
func (id *ID) ibDevice(gid wire.GID, pkey uint16) (Device, bool) {
	for _, d := range id.host.Devices() {
		if d.Port == nil {
			continue
		}
		if g, ok := d.Port.GID(0); !ok || g != gid {
			continue
		}
		if pkey == 0 || pkey == d.PKey {
			return d, true
		}
		if d.Port.FindPKey(pkey) >= 0 {
			d.PKey = pkey
			return d, true
		}
	}
	return Device{}, false
}

// BindIB is rdma_bind_addr with an AF_IB address: a GID of this host's (and its device),
// or the zero GID (no device); a port from the service ID (0: an ephemeral one), whose
// port space the service ID's prefix chooses (cma_select_ib_ps).
func (id *ID) BindIB(a IBAddr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stIdle || id.src.IsValid() {
		return fmt.Errorf("rdmacm: bind: %w", syscall.EINVAL)
	}
	return id.bindIBLocked(a)
}

func (id *ID) bindIBLocked(a IBAddr) error {
	ps, err := selectIBPS(id.ps, &a)
	if err != nil {
		return fmt.Errorf("rdmacm: bind AF_IB sid %#x: %w", a.SID, err)
	}
	var dev Device
	if a.GID != (wire.GID{}) {
		d, ok := id.ibDevice(a.GID, a.PKey)
		if !ok {
			return fmt.Errorf("rdmacm: bind AF_IB %v: %w", a.GID, syscall.EADDRNOTAVAIL)
		}
		dev = d
	}
	ip := a.ipForm()
	port, err := ports.take(id.host, ps, ip.Addr(), ip.Port(), id)
	if err != nil {
		return fmt.Errorf("rdmacm: bind AF_IB %v: %w", a.GID, err)
	}
	// cma_bind_port: the port in the service ID, which is now all significant.
	a.SID = a.SID&^0xFFFF | uint64(port)
	a.SIDMask = ^uint64(0)
	if dev.Port != nil {
		a.PKey = dev.PKey
		a.Scope = uint64(dev.Port.Num())
	}
	id.ps, id.dev = ps, dev
	id.src = netip.AddrPortFrom(ip.Addr(), port)
	id.ib = afIB{on: true, src: a}
	return nil
}

// ResolveIB is rdma_resolve_addr with an AF_IB destination: no neighbour to ask, the GID
// is the address. An unbound ID binds the zero AF_IB address first; an ID without a
// device takes the first port that has the destination's GID, else the first active one
// on its subnet, with its P_Key (Linux's cma_resolve_ib_dev). ADDR_RESOLVED follows.
func (id *ID) ResolveIB(src *IBAddr, dst IBAddr, timeout time.Duration) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stIdle {
		return fmt.Errorf("rdmacm: resolve_addr: %w", syscall.EINVAL)
	}
	if !id.src.IsValid() {
		a := IBAddr{}
		if src != nil {
			a = *src
		} else {
			// cma_bind_addr's any address: the destination's port space.
			a.SID, a.SIDMask = dst.SID&ibPSMask, dst.SIDMask&ibPSMask
		}
		if err := id.bindIBLocked(a); err != nil {
			return err
		}
	} else if !id.ib.on {
		return fmt.Errorf("rdmacm: resolve_addr: an AF_IB destination for an IP ID: %w", syscall.EINVAL)
	}
	if id.dev.Port == nil {
		dev, ok := id.resolveIBDev(dst)
		if !ok {
			return fmt.Errorf("rdmacm: resolve_addr AF_IB %v: %w", dst.GID, syscall.ENODEV)
		}
		g, _ := dev.Port.GID(0)
		id.dev = dev
		id.ib.src.GID, id.ib.src.PKey, id.ib.src.Scope = g, dev.PKey, uint64(dev.Port.Num())
		id.src = netip.AddrPortFrom(netip.AddrFrom16(g), id.src.Port())
	}
	id.ib.dst = dst
	id.dst = dst.ipForm()
	id.dgid = dst.GID
	id.state = stAddrResolved
	go id.emit(&Event{Type: EventAddrResolved})
	return nil
}

// resolveIBDev is cma_resolve_ib_dev: the first port (in device order) holding dst's
// P_Key whose GID is dst's, or which is active on dst's subnet.
func (id *ID) resolveIBDev(dst IBAddr) (Device, bool) {
	for _, d := range id.host.Devices() {
		if d.Port == nil || d.Port.FindPKey(dst.PKey) < 0 {
			continue
		}
		g, ok := d.Port.GID(0)
		if !ok {
			continue
		}
		if g == dst.GID || g.SubnetPrefix() == dst.GID.SubnetPrefix() && d.Port.State() == hca.PortActive {
			if dst.PKey != 0 {
				d.PKey = dst.PKey
			}
			return d, true
		}
	}
	return Device{}, false
}

// passiveIB is the AF_IB addresses of the ID a REQ to an AF_IB listener makes (Linux's
// cma_save_ib_info): this side's GID and the requester's from the REQ's path, the
// listener's service ID.
func passiveIB(l afIB, ev *ibcm.Event, dev Device) afIB {
	n := afIB{on: true, src: l.src}
	n.src.SIDMask = ^uint64(0)
	n.dst.PKey = dev.PKey
	if ev.Req != nil {
		p := ev.Req.Path
		n.src.GID, n.src.PKey, n.src.Flow, n.src.SID = p.SGID, p.PKey, p.FlowLabel, ev.Req.ServiceID
		n.dst.GID, n.dst.PKey, n.dst.Flow = p.DGID, p.PKey, p.FlowLabel
	} else if g, ok := dev.Port.GID(0); ok {
		n.src.GID = g
	}
	return n
}
