package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/tun"
)

// What a user does to an interface with `ip` — addresses, down and up, MTU, routes,
// `ip link del` — the daemon follows, as the kernel's ipoib driver would see it.

// linkWatcher is the kernel side of an interface whose configuration `ip` changes
// (*tun.Kernel).
type linkWatcher interface {
	Watch(ctx context.Context, f func(tun.LinkState)) error
	SetMTU(mtu int) error
	AddAddr(p netip.Prefix) error
}

// follow applies the kernel's view of n's TUN device to its IPoIB interface until ctx
// ends: addresses (ARP and ND answer for exactly the device's), the administrative state
// (down leaves the groups, up rejoins them and puts back the IPv6 addresses the kernel
// removed at down), an MTU above the mode's maximum (put back, with a warning, as
// ipoib_change_mtu refuses it), the routes through the device (next hops through
// gateways), and the device's deletion.
func (d *Daemon) follow(ctx context.Context, n *netif, w linkWatcher, ipo *ipoib.Interface, v6 []netip.Prefix) {
	defer mtuRefused.Delete(n)
	var last tun.LinkState
	first := true
	err := w.Watch(ctx, func(st tun.LinkState) {
		if st.Deleted {
			go d.deletedUnder(n)
			return
		}
		if first {
			// ethtool IFACE reports the IB port's rate, as ipoib's ipoib_get_link_ksettings.
			if s, ok := w.(interface{ SetLinkSpeed(mbps int) error }); ok && ipo.Port() != nil {
				if mbps := ipo.Port().Query().LinkMbps(); mbps > 0 {
					if err := s.SetLinkSpeed(mbps); err != nil {
						d.log.Debug("ethtool link speed", "iface", n.cfg.Name, "err", err)
					}
				}
			}
		}
		if first || st.Up != last.Up {
			ipo.SetAdminUp(st.Up)
			switch {
			case first:
			case st.Up:
				d.log.Info("interface set up", "iface", n.cfg.Name)
				// The kernel dropped the IPv6 addresses at down (and adds no link-local
				// address to a TUN device at up): put back those pibgw configured.
				for _, p := range v6 {
					if err := w.AddAddr(p); err != nil {
						d.log.Warn("restoring an address after up", "iface", n.cfg.Name, "addr", p, "err", err)
					}
				}
			default:
				d.log.Info("interface set down", "iface", n.cfg.Name)
			}
		}
		if first || !slices.Equal(st.Addrs, last.Addrs) {
			ipo.SetAddrs(st.Addrs)
		}
		if max := ipo.MTU(); max > 0 && st.MTU > max {
			// As ipoib_change_mtu refuses it, leaving the MTU the device had: the previous
			// one, not the maximum.
			back := last.MTU
			if first || back <= 0 || back > max {
				back = max
			}
			note := fmt.Sprintf("mtu %d refused: above the mode's maximum %d (datagram: broadcast group MTU − 4; connected: 65520); put back %d", st.MTU, max, back)
			d.log.Warn("MTU above the mode's maximum: put back", "iface", n.cfg.Name, "mtu", st.MTU, "max", max, "put_back", back)
			mtuRefused.Store(n, note)
			if err := w.SetMTU(back); err != nil {
				d.log.Warn("putting the MTU back", "iface", n.cfg.Name, "err", err)
			}
			st.MTU = back
		}
		if first || !slices.Equal(st.Routes, last.Routes) {
			rs := make([]ipoib.Route, len(st.Routes))
			for k, r := range st.Routes {
				rs[k] = ipoib.Route{Dst: r.Dst, Gateway: r.Gateway}
			}
			ipo.SetRoutes(rs)
		}
		last, first = st, false
	})
	if err != nil && ctx.Err() == nil {
		d.log.Warn("not following ip on the interface", "iface", n.cfg.Name, "err", err)
	}
}

// mtuRefused holds, per interface (*netif), the last MTU ip set above the mode's
// maximum, which follow put back: pibgw show reports it (Interface.MTURefused).
var mtuRefused sync.Map

// deletedUnder removes an interface whose TUN device was deleted (`ip link del`): a
// child goes as `pibgw child del` takes it; a parent deleted from under the daemon is
// logged once at warning level.
func (d *Daemon) deletedUnder(n *netif) {
	d.mu.Lock()
	found := false
	for k, x := range d.ifaces {
		if x == n {
			d.ifaces = slices.Delete(d.ifaces, k, k+1)
			found = true
			break
		}
	}
	d.mu.Unlock()
	if !found {
		return // being removed already
	}
	if n.cfg.Parent != "" {
		d.log.Info("child deleted with ip link del", "iface", n.cfg.Name, "parent", n.cfg.Parent)
	} else {
		d.log.Warn("interface deleted from under the daemon", "iface", n.cfg.Name)
	}
	if err := d.stopInterface(n); err != nil {
		d.log.Debug("removing a deleted interface", "iface", n.cfg.Name, "err", err)
	}
}
