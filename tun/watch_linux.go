package tun

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LinkState is what the kernel says about a TUN device: the state `ip link`, `ip addr`
// and `ip route` set, read whole after every change (Watch).
type LinkState struct {
	// Up is the administrative state (IFF_UP: `ip link set DEV up|down`).
	Up bool
	// MTU is the device's MTU (`ip link set DEV mtu N`).
	MTU int
	// Addrs are the device's addresses, IPv4 and IPv6 (`ip addr add|del`).
	Addrs []netip.Prefix
	// Routes are the main table's routes out of the device (`ip route`).
	Routes []Route
	// Deleted says the device is gone (`ip link del DEV`, or its namespace).
	Deleted bool
}

// Route is a route out of a device: to Dst via Gateway, or on-link when Gateway is
// not valid.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// State reads the device's LinkState from the kernel.
func (k *Kernel) State() (LinkState, error) {
	link, err := k.h.LinkByIndex(k.index)
	if err != nil {
		var lnf netlink.LinkNotFoundError
		if errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) {
			return LinkState{Deleted: true}, nil
		}
		return LinkState{}, fmt.Errorf("tun: %s: %w", describe(k.name, k.netns), err)
	}
	st := LinkState{Up: link.Attrs().Flags&net.FlagUp != 0, MTU: link.Attrs().MTU}
	addrs, err := k.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return LinkState{}, fmt.Errorf("tun: %s: addresses: %w", describe(k.name, k.netns), err)
	}
	for _, a := range addrs {
		if p, ok := ipNetToPrefix(a.IPNet); ok {
			st.Addrs = append(st.Addrs, p)
		}
	}
	routes, err := k.h.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{LinkIndex: k.index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return LinkState{}, fmt.Errorf("tun: %s: routes: %w", describe(k.name, k.netns), err)
	}
	for _, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			continue
		}
		var rt Route
		if r.Dst != nil {
			p, ok := ipNetToPrefix(r.Dst)
			if !ok {
				continue
			}
			rt.Dst = p
		} else if r.Family == unix.AF_INET6 {
			rt.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		} else {
			rt.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		if g, ok := netip.AddrFromSlice(r.Gw); ok && !g.IsUnspecified() {
			rt.Gateway = g.Unmap()
		}
		st.Routes = append(st.Routes, rt)
	}
	return st, nil
}

func ipNetToPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones), true
}

// Equal reports whether two states are the same.
func (s LinkState) Equal(o LinkState) bool {
	return s.Up == o.Up && s.MTU == o.MTU && s.Deleted == o.Deleted &&
		slices.Equal(s.Addrs, o.Addrs) && slices.Equal(s.Routes, o.Routes)
}

// Watch calls f with the device's state now and after every change the kernel reports
// (netlink link, address and route notifications in the device's namespace: no
// polling), until ctx is done or the device is deleted (f's last state has Deleted).
// f runs on Watch's goroutine.
func (k *Kernel) Watch(ctx context.Context, f func(LinkState)) error {
	var ns netns.NsHandle = -1
	if k.netns != "" {
		var err error
		if ns, err = openNetNS(k.netns); err != nil {
			return err
		}
		defer ns.Close()
	}
	s, err := subscribeNetlink(ns, unix.RTNLGRP_LINK,
		unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE)
	if err != nil {
		return fmt.Errorf("tun: watch %s: netlink: %w", describe(k.name, k.netns), err)
	}
	stop := context.AfterFunc(ctx, s.close)
	defer func() {
		if stop() {
			s.close()
		}
	}()
	// Subscribed first, then read: no change falls between the two.
	last, err := k.State()
	if err != nil {
		return err
	}
	f(last)
	for !last.Deleted {
		concerns := false
		err := s.receive(func(msgs []syscall.NetlinkMessage) { concerns = k.concerns(msgs) })
		if err != nil {
			if ctx.Err() != nil || k.closed.Load() {
				return nil
			}
			if !errors.Is(err, unix.ENOBUFS) {
				return fmt.Errorf("tun: watch %s: %w", describe(k.name, k.netns), err)
			}
			// Notifications were lost: read the whole state again below.
		} else if !concerns {
			continue
		}
		stateReads <- struct{}{}
		st, err := k.State()
		<-stateReads
		if err != nil {
			if k.closed.Load() {
				return nil
			}
			return err
		}
		if !st.Equal(last) {
			last = st
			f(st)
		}
	}
	return nil
}

// concerns reports whether any of msgs is about this device: its link, its addresses or
// a route out of it.
func (k *Kernel) concerns(msgs []syscall.NetlinkMessage) bool {
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.RTM_NEWLINK, unix.RTM_DELLINK:
			// struct ifinfomsg: family, pad, type (u16), index (s32), …
			if len(m.Data) >= 8 && int(int32(binary.NativeEndian.Uint32(m.Data[4:]))) == k.index {
				return true
			}
		case unix.RTM_NEWADDR, unix.RTM_DELADDR:
			// struct ifaddrmsg: family, prefixlen, flags, scope (u8 each), index (u32)
			if len(m.Data) >= 8 && int(binary.NativeEndian.Uint32(m.Data[4:])) == k.index {
				return true
			}
		case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
			// Only a route out of this device (RTA_OIF), or one that does not say
			// (multipath): every device of a namespace hears of every route, and
			// each State is three netlink round trips.
			if oif, ok := routeOIF(m); !ok || oif == k.index {
				return true
			}
		}
	}
	return false
}

// AddAddr assigns an address to the device (no DAD for IPv6: the device is NOARP); one
// it has already is not an error.
func (k *Kernel) AddAddr(p netip.Prefix) error {
	if k.closed.Load() {
		return ErrClosed
	}
	link, err := k.h.LinkByIndex(k.index)
	if err != nil {
		return devError("add address to", describe(k.name, k.netns), err)
	}
	if err := k.h.AddrReplace(link, netlinkAddr(p)); err != nil {
		return devError("add address to", describe(k.name, k.netns), err)
	}
	return nil
}

// routeOIF is the output interface (RTA_OIF) of a route message.
func routeOIF(m syscall.NetlinkMessage) (int, bool) {
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return 0, false
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.RTA_OIF && len(a.Value) >= 4 {
			return int(binary.NativeEndian.Uint32(a.Value)), true
		}
	}
	return 0, false
}

// stateReads bounds the State reads under way at once across devices: each is netlink
// round trips on a blocking socket, and every goroutine blocked in one holds an OS
// thread, which the Go runtime keeps for good once made (a change that concerns many
// devices at once, such as their namespace going away, would make one per device).
var stateReads = make(chan struct{}, 2)
