package ipoib_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
)

// TestResolve: rdma_cm's address resolution through the neighbour table — ARP on
// demand, the own address, and FAILED after the unanswered probes.
func TestResolve(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, _ := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	b, _ := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hw, err := a.Resolve(ctx, netipMust("10.10.0.2"))
	if err != nil || hw != b.HWAddr() {
		t.Fatalf("Resolve(10.10.0.2) = %v, %v; want %v", hw, err, b.HWAddr())
	}
	if hw, err := a.Resolve(ctx, netipMust("10.10.0.1")); err != nil || hw != a.HWAddr() {
		t.Fatalf("own address resolves to %v, %v", hw, err)
	}
	if hw, err := a.Resolve(ctx, b.LinkLocal()); err != nil || hw != b.HWAddr() {
		t.Fatalf("IPv6 link-local resolves to %v, %v", hw, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Resolve(ctx, netipMust("10.10.0.99"))
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, ipoib.ErrUnresolved) {
				t.Fatalf("unanswered address: %v", err)
			}
			return
		case <-time.After(time.Millisecond):
			tf.clk.Advance(500 * time.Millisecond) // three probes a second apart
		}
	}
}
