package daemon_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/tun"
)

// procStatus reads a field of /proc/self/status (VmRSS in KiB, Threads).
func procStatus(t *testing.T, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// usage is the process's cost at one moment, after a collection.
type usage struct {
	heap    uint64 // bytes: the Go heap in use
	rss     int    // KiB
	threads int
	fds     int
}

func measure(t *testing.T) usage {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{heap: ms.HeapInuse, rss: procStatus(t, "VmRSS"), threads: procStatus(t, "Threads"), fds: openFDs(t)}
}

func (u usage) String() string {
	return fmt.Sprintf("heap %.1f MiB, RSS %.1f MiB, %d threads, %d fds", float64(u.heap)/(1<<20), float64(u.rss)/1024, u.threads, u.fds)
}

// rootDaemon starts a real daemon (kernel TUN devices, named namespaces) with one
// interface, ib0 of the default configuration, in a namespace named ns.
func rootDaemon(t *testing.T, ns string, cfgf func(*config.Config)) *daemon.Daemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (kernel TUN devices and namespaces)")
	}
	cfg := config.Default()
	cfg.Interfaces = cfg.Interfaces[:1]
	cfg.Interfaces[0].NetNS = ns
	if cfgf != nil {
		cfgf(cfg)
	}
	t.Cleanup(func() {
		if tun.NetNSExists(ns) {
			tun.DeleteNetNS(ns)
		}
	})
	d, err := daemon.Start(context.Background(), daemon.Options{Config: cfg, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// Issue 43 item 7: P_Key children cost little while idle (≤ 1 MiB of heap and of RSS
// each, no OS thread), and what they cost comes back when they are deleted: the heap,
// the descriptors, and the threads — which the Go runtime never gives back once made, so
// a child must not make any, not even for a moment all at once (before: 3.7 MiB, 10
// descriptors and 0.4–0.9 threads a child, the threads staying after deletion).
func TestChildrenCost(t *testing.T) {
	const n = 50
	d := rootDaemon(t, fmt.Sprintf("pibcc%d", os.Getpid()), func(c *config.Config) { c.Daemon.MaxChildren = n + 1 })
	// One child first, added and deleted, so that what the first one costs once (pools,
	// the code's first use) is in the baseline.
	if _, err := d.AddChild("ib0", 0x8fff, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DelChild("ib0", 0x8fff); err != nil {
		t.Fatal(err)
	}
	base := measure(t)
	for k := range n {
		if _, err := d.AddChild("ib0", uint16(0x8100+k), nil); err != nil {
			t.Fatal(err)
		}
	}
	full := measure(t)
	for k := range n {
		if _, err := d.DelChild("ib0", uint16(0x8100+k)); err != nil {
			t.Fatal(err)
		}
	}
	after := measure(t)
	t.Logf("baseline: %v\nwith %d children: %v\nafter deleting them: %v", base, n, full, after)
	perHeap := (int64(full.heap) - int64(base.heap)) / n
	perRSS := int64(full.rss-base.rss) * 1024 / n
	t.Logf("per child: heap %d KiB, RSS %d KiB, %.2f threads, %.1f fds", perHeap>>10, perRSS>>10,
		float64(full.threads-base.threads)/n, float64(full.fds-base.fds)/n)
	if raceEnabled {
		perRSS = 0 // the race detector's shadow memory: RSS says nothing (race_on_test.go)
	}
	if perHeap > 1<<20 || perRSS > 1<<20 {
		t.Errorf("an idle child costs %d KiB of heap and %d KiB of RSS, want ≤ 1 MiB each", perHeap>>10, perRSS>>10)
	}
	// A few threads may come for the runtime's own reasons (GC workers, a system call
	// that took long under load); one per child, or per five, may not.
	if full.threads-base.threads > 10 || after.threads-base.threads > 10 {
		t.Errorf("threads %d → %d with %d children → %d after deleting them; want near %d throughout",
			base.threads, full.threads, n, after.threads, base.threads)
	}
	if after.fds > base.fds {
		t.Errorf("%d descriptors open after deleting the children, %d before", after.fds, base.fds)
	}
	if after.heap > base.heap+4<<20 || (!raceEnabled && after.rss > base.rss+16<<10) {
		t.Errorf("after deleting the children: %v; want near the baseline %v", after, base)
	}
}

// daemon.max_children caps the children `pibgw child add` makes, with an error that says
// so; deleting one makes room again.
func TestMaxChildren(t *testing.T) {
	cfg := config.Default()
	cfg.Daemon.MaxChildren = 2
	d := start(t, cfg, daemontest.New())
	for _, pk := range []uint16{0x8001, 0x8002} {
		if _, err := d.AddChild("ib0", pk, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := d.AddChild("ib1", 0x8003, nil)
	want := "child ib1.8003 not added: the daemon runs 2 P_Key children, as many as daemon.max_children (2) allows; delete one, or raise the limit in the configuration"
	if err == nil || err.Error() != want {
		t.Fatalf("third child: %v\nwant: %s", err, want)
	}
	if _, err := d.DelChild("ib0", 0x8001); err != nil {
		t.Fatal(err)
	}
	if _, err := d.AddChild("ib1", 0x8003, nil); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
