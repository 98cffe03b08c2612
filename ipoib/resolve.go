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
		i.nb.mu.Lock()
		n := i.nb.m[dst]
		switch {
		case n != nil && (n.state == nudReachable || n.state == nudStale):
			hw := n.hw
			i.nb.mu.Unlock()
			return hw, nil
		case n != nil && n.state == nudFailed && started:
			i.nb.mu.Unlock()
			return HWAddr{}, ErrUnresolved
		}
		if i.nb.waiters == nil {
			i.nb.waiters = make(map[netip.Addr][]chan struct{})
		}
		i.nb.waiters[dst] = append(i.nb.waiters[dst], wake)
		i.nb.mu.Unlock()
		if !started {
			started = true
			i.resolve(dst, i.clk.Now(), 0, nil, false)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			i.nb.mu.Lock()
			ws := i.nb.waiters[dst]
			for k, w := range ws {
				if w == wake {
					i.nb.waiters[dst] = append(ws[:k], ws[k+1:]...)
					break
				}
			}
			if len(i.nb.waiters[dst]) == 0 {
				delete(i.nb.waiters, dst)
			}
			i.nb.mu.Unlock()
			return HWAddr{}, ctx.Err()
		}
	}
}

// Port is the HCA port the interface runs on.
func (i *Interface) Port() *hca.Port { return i.port }
