package sa_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
)

// BenchmarkSMFatTree648 times the SM from Start to every port Active on the 648-HCA fat
// tree (36 leaf + 18 spine switches of 36 ports), and reports the SMPs it sent.
func BenchmarkSMFatTree648(b *testing.B) {
	var smps, secs float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		f := satest.FatTree648(b, satest.Options{})
		cfg := sa.Config{Port: f.HCAs[0].Port(1), Clock: f.Clock}
		sm, err := sa.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := sm.Start(); err != nil {
			b.Fatal(err)
		}
		secs += time.Since(start).Seconds()
		b.StopTimer()
		for _, p := range f.Ports() {
			if p.State() != hca.PortActive {
				b.Fatalf("%s not Active", p.Device().Name())
			}
		}
		smps += float64(sm.Stats().SMPsSent)
		sm.Close()
		b.StartTimer()
	}
	b.ReportMetric(smps/float64(b.N), "SMPs/op")
	b.ReportMetric(secs/float64(b.N)*1e3, "ms-to-active")
}

// TestSMFatTree11664 is issue 16's scale point, run on request (PIBGW_SCALE=1; it builds
// 11,664 HCAs and 1,620 switches, three times over for each setting): the built-in SM
// brings every port of the three-level fat tree of 36-port switches Active in at most
// 2 s, on the real clock; it reports the SMPs and the memory per HCA (the heap the whole
// fabric holds, over its HCAs). Runs alternate with a baseline, the SM sending every SMP
// from one goroutine (SendGoroutines 1), and the medians of both are compared: the
// default (GOMAXPROCS goroutines, of which the SM uses one or all, whichever its batches
// time faster) must not be slower than the baseline by more than 10 %.
func TestSMFatTree11664(t *testing.T) {
	if os.Getenv("PIBGW_SCALE") == "" {
		t.Skip("set PIBGW_SCALE=1 to bring up the 11,664-HCA fat tree (about 2 GB and a minute to build)")
	}
	type result struct{ wall, cpu time.Duration }
	bringUp := func(goroutines int) result {
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		f := satest.FatTree3(t, 36, satest.Options{Clock: clock.Real{}})
		built := time.Since(t0)
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		perHCA := float64(after.HeapAlloc-before.HeapAlloc) / float64(len(f.HCAs))
		sm, err := sa.New(sa.Config{Port: f.HCAs[0].Port(1), Clock: f.Clock, SweepInterval: -1, SendGoroutines: goroutines})
		if err != nil {
			t.Fatal(err)
		}
		defer sm.Close()
		cpu0 := cpuTime()
		start := time.Now()
		if err := sm.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sm.WaitSweep(ctx); err != nil {
			t.Fatal(err)
		}
		r := result{time.Since(start), cpuTime() - cpu0}
		for _, p := range f.Ports() {
			if p.State() != hca.PortActive {
				t.Fatalf("%s not Active", p.Device().Name())
			}
		}
		st := sm.Stats()
		// The CPU time the process used says what the wall time would be on an idle
		// machine (the routing and the batches of SMPs run on every core).
		if goroutines == 0 {
			goroutines = runtime.GOMAXPROCS(0)
		}
		t.Logf("%d send goroutines: %d HCAs, %d switches: built in %v, %.0f KiB heap per HCA (fabric total %d MiB); every port Active %v after Start (%v of CPU), %d SMPs",
			goroutines, len(f.HCAs), len(f.Switches), built.Round(time.Millisecond), perHCA/1024, (after.HeapAlloc-before.HeapAlloc)>>20,
			r.wall.Round(time.Millisecond), r.cpu.Round(time.Millisecond), st.SMPsSent)
		return r
	}
	var base, par []result
	for range 3 {
		base = append(base, bringUp(1))
		par = append(par, bringUp(0))
	}
	med := func(rs []result, f func(result) time.Duration) time.Duration {
		var d []time.Duration
		for _, r := range rs {
			d = append(d, f(r))
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	wall := func(r result) time.Duration { return r.wall }
	cpu := func(r result) time.Duration { return r.cpu }
	bw, pw := med(base, wall), med(par, wall)
	t.Logf("medians: one send goroutine %v wall (%v CPU); %d send goroutines %v wall (%v CPU): %.2f× the wall time",
		bw.Round(time.Millisecond), med(base, cpu).Round(time.Millisecond), runtime.GOMAXPROCS(0),
		pw.Round(time.Millisecond), med(par, cpu).Round(time.Millisecond), pw.Seconds()/bw.Seconds())
	if pw > 2*time.Second {
		t.Errorf("every port Active after %v (median), want ≤ 2 s", pw)
	}
	if pw > bw*11/10 {
		t.Errorf("the default (%d send goroutines) took %v, one goroutine %v: want the default the faster, or within 10 %%",
			runtime.GOMAXPROCS(0), pw, bw)
	}
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSMParallelSendSameResult: the SM sending its batches of SMPs from several
// goroutines discovers the nodes in the same order and assigns the same LIDs and routes
// as sending them all from one, on the 648-HCA fat tree (in process, so responses arrive
// inside the sends and a batch's completions come back interleaved).
func TestSMParallelSendSameResult(t *testing.T) {
	type result struct {
		smps  uint64
		nodes []string
	}
	run := func(goroutines int) result {
		f := satest.FatTree648(t, satest.Options{})
		sm, err := sa.New(sa.Config{Port: f.HCAs[0].Port(1), Clock: f.Clock, SweepInterval: -1, SendGoroutines: goroutines})
		if err != nil {
			t.Fatal(err)
		}
		defer sm.Close()
		if err := sm.Start(); err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Ports() {
			if p.State() != hca.PortActive {
				t.Fatalf("%d goroutines: %s not Active", goroutines, p.Device().Name())
			}
		}
		var r result
		r.smps = sm.Stats().SMPsSent
		for _, n := range sm.Topology().Nodes {
			s := fmt.Sprintf("%#x %v lft=%x lids:", n.GUID, n.DRPath, n.LFT)
			for _, p := range n.Ports {
				if p != nil {
					s += fmt.Sprintf(" %d=%d/%d", p.Num, p.LID, p.State)
				}
			}
			r.nodes = append(r.nodes, s)
		}
		return r
	}
	one := run(1)
	for _, g := range []int{2, 4} {
		got := run(g)
		if got.smps != one.smps {
			t.Errorf("%d goroutines sent %d SMPs, one sent %d", g, got.smps, one.smps)
		}
		if len(got.nodes) != len(one.nodes) {
			t.Fatalf("%d goroutines found %d nodes, one found %d", g, len(got.nodes), len(one.nodes))
		}
		for i := range got.nodes {
			if got.nodes[i] != one.nodes[i] {
				t.Fatalf("%d goroutines: node %d is\n%.300s\nwith one goroutine\n%.300s", g, i, got.nodes[i], one.nodes[i])
			}
		}
	}
}
