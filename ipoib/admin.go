package ipoib

import (
	"net/netip"
	"slices"
)

// What the IP side's configuration (ip link, ip addr, ip route) does to the interface:
// the administrative state, announcements, and next hops through gateways.

// reasonAdminDown is State.Reason while the IP side is set down.
const reasonAdminDown = "administratively down"

// SetAdminUp follows the IP side's administrative state (`ip link set DEV down|up`) as
// Linux's ipoib_stop and ipoib_open do: down leaves the broadcast and multicast groups
// at the SA, detaches the QP and forgets the neighbours; up joins again and, once up,
// announces the interface's addresses.
func (i *Interface) SetAdminUp(up bool) {
	i.ctl.mu.Lock()
	defer i.ctl.mu.Unlock()
	if i.closed.Load() || i.ctl.adminDown.Load() == !up {
		return
	}
	i.ctl.adminDown.Store(!up)
	if !up {
		i.takeDown(reasonAdminDown, true)
		return
	}
	i.bringUp(true)
}

// Detach takes the interface down for good, with reason, as Linux's ipoib does when its
// netdev goes away under it: the IP side is gone (the network namespace its TUN device
// was in was deleted), so nothing could reach the interface from there. It leaves its
// groups at the SA and stays down whatever the port or SetAdminUp do.
func (i *Interface) Detach(reason string) {
	i.ctl.mu.Lock()
	defer i.ctl.mu.Unlock()
	if i.closed.Load() || i.ctl.detached != "" {
		return
	}
	i.ctl.detached = reason
	i.takeDown(reason, true)
}

// AdminUp reports the administrative state SetAdminUp last set (up at creation).
func (i *Interface) AdminUp() bool { return !i.ctl.adminDown.Load() }

// announce sends a gratuitous ARP for each IPv4 address and an unsolicited neighbour
// advertisement (override set, to all nodes) for each IPv6 one (RFC 5227 §3, RFC 4861
// §7.2.6), so that peers whose cache holds an old hardware address for them — a
// re-created interface has a new QPN — update it at once. only, if not nil, limits
// it to those addresses.
func (i *Interface) announce(only []netip.Prefix) {
	ls := i.link.Load()
	if !ls.up {
		return
	}
	addrs := i.addrs.Load()
	list := only
	if list == nil {
		list = append(slices.Clone(addrs.prefixes), netip.PrefixFrom(addrs.linkLocal, 64))
	}
	seen := make(map[netip.Addr]bool, len(list))
	for _, p := range list {
		a := p.Addr()
		if !a.IsValid() || seen[a] {
			continue
		}
		seen[a] = true
		if a.Is4() {
			var b [arpLen]byte
			if ls.bcastAH != nil && i.txp.snd.send(ls.bcastAH, MulticastQPN, ls.qkey, EtherTypeARP,
				buildARP(b[:], arpOpRequest, ls.hw, a, HWAddr{}, a)) {
				i.cnt.inc(cTxAnnounce)
				i.cnt.inc(cTxMulticast) // to the broadcast group
			}
			continue
		}
		var b [ipv6HeaderLen + ndMsgLen + ndOptLen]byte
		i.xmit(buildNA(b[:], a, allNodes, naOverride, ls.hw))
		i.cnt.inc(cTxAnnounce)
	}
}

// Route is a route of the IP side through the interface: to Dst via Gateway (a
// neighbour on the link), or on-link when Gateway is not valid.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// routeTable is the routes with a gateway and the on-link ones, longest prefix first;
// nil (the common case: no gateway at all) sends every packet to its destination.
type routeTable struct{ routes []Route }

// SetRoutes gives the interface the IP side's routes through it (`ip route`), so that a
// packet for a destination behind a gateway goes to the gateway's hardware address: the
// kernel's TUN device hands pibgw the packet, not the next hop it chose.
func (i *Interface) SetRoutes(routes []Route) {
	gw := false
	for _, r := range routes {
		gw = gw || r.Gateway.IsValid()
	}
	if !gw {
		i.routes.Store(nil)
		return
	}
	rs := slices.Clone(routes)
	slices.SortStableFunc(rs, func(a, b Route) int { return b.Dst.Bits() - a.Dst.Bits() })
	i.routes.Store(&routeTable{routes: rs})
}

// nextHop is the neighbour a unicast packet to dst goes to: the gateway of the most
// specific route containing dst, or dst itself.
func (i *Interface) nextHop(dst netip.Addr) netip.Addr {
	rt := i.routes.Load()
	if rt == nil {
		return dst
	}
	for _, r := range rt.routes {
		if r.Dst.Contains(dst) {
			if r.Gateway.IsValid() {
				return r.Gateway
			}
			return dst
		}
	}
	return dst
}
