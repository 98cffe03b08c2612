package tun

import (
	"context"
	"os"
	"testing"
	"time"
)

// Two holders of a namespace pibgw created: the first to let go leaves it, the last
// deletes it; one made by someone else (not marked) is never deleted.
func TestNetNSLockShared(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	ns := testNetNS(t) // deleted at cleanup unless the lock deleted it
	a, err := LockNetNS(dir, ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.MarkCreated(); err != nil {
		t.Fatal(err)
	}
	b, err := LockNetNS(dir, ns)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Release(true); err != nil || res != NetNSInUse || !NetNSExists(ns) {
		t.Fatalf("first release: %v %v, exists %v; want NetNSInUse and the namespace kept", res, err, NetNSExists(ns))
	}
	if res, err := b.Release(true); err != nil || res != NetNSDeleted || NetNSExists(ns) {
		t.Fatalf("last release: %v %v, exists %v; want NetNSDeleted", res, err, NetNSExists(ns))
	}
	CreateNetNS(ns) // for testNetNS's cleanup

	// Not created by pibgw: kept.
	c, err := LockNetNS(dir, ns)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Release(true); err != nil || res != NetNSKept || !NetNSExists(ns) {
		t.Fatalf("unmarked: %v %v, exists %v; want NetNSKept", res, err, NetNSExists(ns))
	}
}

// WatchNetNSRemoved hears of ip netns del at once.
func TestWatchNetNSRemoved(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() { done <- WatchNetNSRemoved(ctx, nil, func(n string) { got <- n }) }()
	// Once the watch is in place (a file removed before it is no news), the deletion
	// of a namespace is heard: a file of ours removed and re-made until one is.
	probe := NetNSDir + "/" + ns + ".probe"
	heard := func(name string, d time.Duration) bool {
		for deadline := time.After(d); ; {
			select {
			case n := <-got:
				if n == name {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	for k := 0; ; k++ {
		if k == 100 {
			t.Fatal("the watch never started")
		}
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(probe)
		if heard(ns+".probe", 100*time.Millisecond) {
			break
		}
	}
	ipCmd(t, "netns", "del", ns)
	if !heard(ns, 10*time.Second) {
		t.Fatalf("no news of %s deleted", ns)
	}
	CreateNetNS(ns) // for testNetNS's cleanup
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
}
