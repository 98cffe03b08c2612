package tun

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threads is this process's OS thread count (/proc/self/status).
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "Threads:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// An idle kernel TUN device, watched, holds no OS thread and little memory (issue 43
// item 7): wireguard's monitor kept a thread in poll(2) and 64 KiB per device, its GRO
// tables 1.8 MB, and Watch a thread in recvfrom(2) — threads the Go runtime never gives
// back, so they stayed after the devices were gone.
func TestKernelIdleCost(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	const n = 30
	// One first, so that what is made once (pools, the poller) is in the baseline.
	k0 := testKernel(t, KernelConfig{Name: "pib0", NetNS: ns, Up: true})
	k0.Close()
	baseThreads, baseHeap := threads(t), heapInuse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ks []*Kernel
	watching := make(chan struct{}, n)
	for i := range n {
		k := testKernel(t, KernelConfig{Name: fmt.Sprintf("pib%d", i+1), NetNS: ns, Up: true})
		ks = append(ks, k)
		go k.Watch(ctx, func(LinkState) {
			select {
			case watching <- struct{}{}:
			default:
			}
		})
	}
	for range n {
		<-watching // each Watch subscribed and read the state: now it waits
	}
	time.Sleep(100 * time.Millisecond) // and is parked in the poller (or a system call)
	fullThreads, fullHeap := threads(t), heapInuse()
	cancel()
	for _, k := range ks {
		k.Close()
	}
	t.Logf("threads %d → %d with %d devices; heap %d KiB per device", baseThreads, fullThreads, n,
		(int64(fullHeap)-int64(baseHeap))/n/1024)
	if d := fullThreads - baseThreads; d > n/5 {
		t.Errorf("%d idle watched devices added %d OS threads (want none per device)", n, d)
	}
	if per := (int64(fullHeap) - int64(baseHeap)) / n; per > 256<<10 {
		t.Errorf("an idle device holds %d KiB of heap (want ≤ 256)", per/1024)
	}
}

// The device follows an MTU set from outside (`ip link set DEV mtu N`) through its own
// netlink subscription.
func TestKernelFollowsMTU(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	k := testKernel(t, KernelConfig{Name: "ib0", NetNS: ns, MTU: 2044, Up: true})
	ipCmd(t, "-n", ns, "link", "set", "ib0", "mtu", "1400")
	deadline := time.Now().Add(10 * time.Second)
	for k.MTU() != 1400 {
		if time.Now().After(deadline) {
			t.Fatalf("MTU %d, want 1400 after ip link set mtu 1400", k.MTU())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
