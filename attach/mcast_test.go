package attach_test

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// waitDetached waits until the fabric has ended every attached session.
func waitDetached(t *testing.T, f *inproc.Fabric) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(f.Attached()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still attached", len(f.Attached()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tcpAcross connects ib0 to a listener on ib1 (10.10.0.2) and moves a few bytes: it needs
// ib0's ARP request, sent to the IPoIB broadcast group, to reach ib1.
func tcpAcross(t *testing.T, f *inproc.Fabric, port string) {
	t.Helper()
	ib0, err := f.Netstack("ib0")
	if err != nil {
		t.Fatal(err)
	}
	ib1, err := f.Netstack("ib1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ib1.Listen("tcp", "10.10.0.2:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("pong"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := ib0.DialContext(ctx, "tcp", "10.10.0.2:"+port)
	if err != nil {
		t.Fatalf("ib0 → ib1: %v (ib1's port no longer in the broadcast group?)", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("ib0 ← ib1: %q %v", buf, err)
	}
}

// TestAttachedBroadcastJoinExit is issue 43 item 4: a process that joins the IPoIB
// broadcast group of ib1's port through the attach channel (twice, as two rdma_cm IDs
// would) and exits must not take the port out of the group the daemon's ib1 holds, and a
// process that leaves a group it never joined is refused — ARP from ib0 still reaches ib1.
func TestAttachedBroadcastJoinExit(t *testing.T) {
	f, path := startFabric(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := dial(t, path), dial(t, path)
	d, err := a.RDMA().LocalDevice(netip.MustParseAddr("10.10.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	bcast := wire.IPoIBBroadcastMGID(d.PKey | 0x8000)
	for range 2 {
		if _, err := a.RDMA().JoinMulticast(ctx, d, bcast, wire.IPoIBBroadcastQKey); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	db, err := b.RDMA().LocalDevice(netip.MustParseAddr("10.10.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.RDMA().LeaveMulticast(ctx, db, bcast); err == nil {
		t.Error("a process left a group it had not joined")
	}
	b.Close()
	a.Close()
	waitDetached(t, f)
	tcpAcross(t, f, "7491")
}

// TestAttachedJoinLeftAtExit: a process that joined a group twice (two rdma_cm IDs) and
// exits without leaving is left for by the daemon, once per join: the port is no longer a
// member at the SA.
func TestAttachedJoinLeftAtExit(t *testing.T) {
	f, path := startFabric(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := dial(t, path)
	d, err := a.RDMA().LocalDevice(netip.MustParseAddr("10.10.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	mgid := wire.GID{0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 15: 0x91}
	for range 2 {
		if _, err := a.RDMA().JoinMulticast(ctx, d, mgid, 0x1234); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	c, err := sa.NewClient(f.Device("pib_0").Port(1), sa.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	members := func() int {
		t.Helper()
		m, err := c.MCMembers(ctx, mgid)
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	if n := members(); n != 1 {
		t.Fatalf("%d members after the joins, want 1", n)
	}
	a.Close()
	waitDetached(t, f)
	// The daemon's leaves are MADs to the SA, sent as the session ends: they may still be
	// on their way when it is gone from the session list (as the kernel's ib_sa leaves
	// after the process's exit).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := members()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d members 20 s after the process exited, want 0", n)
		}
	}
}
