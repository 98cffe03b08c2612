package sa_test

import (
	"context"
	"os"
	"runtime"
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
// 11,664 HCAs and 1,620 switches): the built-in SM brings every port of the three-level
// fat tree of 36-port switches Active in at most 2 s, on the real clock; it reports the
// SMPs and the memory per HCA (the heap the whole fabric holds, over its HCAs).
func TestSMFatTree11664(t *testing.T) {
	if os.Getenv("PIBGW_SCALE") == "" {
		t.Skip("set PIBGW_SCALE=1 to bring up the 11,664-HCA fat tree (about 2 GB and a minute to build)")
	}
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
	sm, err := sa.New(sa.Config{Port: f.HCAs[0].Port(1), Clock: f.Clock, SweepInterval: -1})
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
	took := time.Since(start)
	cpu := cpuTime() - cpu0
	for _, p := range f.Ports() {
		if p.State() != hca.PortActive {
			t.Fatalf("%s not Active", p.Device().Name())
		}
	}
	st := sm.Stats()
	// The CPU time the process used says what the wall time would be on an idle machine
	// (the routing runs on every core, the sweep on one).
	t.Logf("%d HCAs, %d switches: built in %v, %.0f KiB heap per HCA (fabric total %d MiB); every port Active %v after Start (%v of CPU), %d SMPs",
		len(f.HCAs), len(f.Switches), built.Round(time.Millisecond), perHCA/1024, (after.HeapAlloc-before.HeapAlloc)>>20,
		took.Round(time.Millisecond), cpu.Round(time.Millisecond), st.SMPsSent)
	if took > 2*time.Second {
		t.Errorf("every port Active after %v, want ≤ 2 s", took)
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
