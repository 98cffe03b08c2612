package ipoib

import (
	"context"
	"errors"
	"net/netip"

	"github.com/pibgw/pibgw/hca"
)

// ErrUnresolved is Resolve's error when nobody answered the solicitations.
var ErrUnresolved = errors.New("ipoib: neighbour did not answer")

// Resolve returns dst's hardware address from the neighbour table, soliciting it (ARP,
// or ND for IPv6) and waiting for the answer if needed, as rdma_resolve_addr does
// through the kernel's neighbour table. An address of this interface resolves to the
// interface's own. It fails with ErrUnresolved once the solicitations went unanswered
// (FAILED), or with ctx's error.
func (i *Interface) Resolve(ctx context.Context, dst netip.Addr) (HWAddr, error) {
	if i.isOurs(dst) {
		return i.HWAddr(), nil
	}
	started := false
	for {
		if i.closed.Load() {
			return HWAddr{}, ErrClosed
		}
		wake := make(chan struct{})
		i.nmu.Lock()
		n := i.neigh[dst]
		switch {
		case n != nil && (n.state == nudReachable || n.state == nudStale):
			hw := n.hw
			i.nmu.Unlock()
			return hw, nil
		case n != nil && n.state == nudFailed && started:
			i.nmu.Unlock()
			return HWAddr{}, ErrUnresolved
		}
		if i.waiters == nil {
			i.waiters = make(map[netip.Addr][]chan struct{})
		}
		i.waiters[dst] = append(i.waiters[dst], wake)
		i.nmu.Unlock()
		if !started {
			started = true
			i.resolve(dst, i.clk.Now(), 0, nil, false)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			i.nmu.Lock()
			ws := i.waiters[dst]
			for k, w := range ws {
				if w == wake {
					i.waiters[dst] = append(ws[:k], ws[k+1:]...)
					break
				}
			}
			if len(i.waiters[dst]) == 0 {
				delete(i.waiters, dst)
			}
			i.nmu.Unlock()
			return HWAddr{}, ctx.Err()
		}
	}
}

// wakeResolvers wakes Resolve calls waiting for ip's entry; nmu held.
func (i *Interface) wakeResolvers(ip netip.Addr) {
	for _, w := range i.waiters[ip] {
		close(w)
	}
	delete(i.waiters, ip)
}

// Port is the HCA port the interface runs on.
func (i *Interface) Port() *hca.Port { return i.port }
