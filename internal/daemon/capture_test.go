package daemon_test

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/wire"
)

// stuckWriter takes nothing: a capture client whose output never drains stops reading
// its connection.
type stuckWriter struct{ release chan struct{} }

func (w stuckWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

// A capture client that never reads does not slow the fabric (issue 43 item 2): a burst
// of MADs from pib_0 to pib_1 arrives whole within a deadline set from the same burst
// without a capture, and what the capture could not take is counted as dropped.
func TestCaptureStalledClient(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl := serve(t, d)
	src, dst := d.Fabric.Device("pib_0").Port(1), d.Fabric.Device("pib_1").Port(1)
	deadline := time.Now().Add(10 * time.Second)
	for dst.State() != hca.PortActive || dst.LID() == 0 || src.State() != hca.PortActive {
		if time.Now().After(deadline) {
			t.Fatalf("ports not active: %v %v", src.State(), dst.State())
		}
		<-d.Fabric.SM.Resweep()
	}
	const class = 0x0A // vendor specific (IBA 13.4.4)
	var got atomic.Int64
	var mu sync.Mutex
	var want int64
	all := make(chan struct{}, 1)
	dst.RegisterMADHandler(class, false, hca.MADHandlerFunc(func(m *hca.MAD) {
		n := got.Add(1)
		mu.Lock()
		if n == want {
			all <- struct{}{}
		}
		mu.Unlock()
	}))
	mad := make([]byte, wire.MADLen)
	mad[0], mad[1], mad[2], mad[3] = 1, class, 1, 1 // base version, class, class version, Get
	// burst sends n MADs and reports how long they took to arrive, or false if they did
	// not arrive within limit.
	burst := func(n int, limit time.Duration) (time.Duration, bool) {
		mu.Lock()
		want = got.Load() + int64(n)
		mu.Unlock()
		start := time.Now()
		go func() {
			for i := 0; i < n; i++ {
				if err := src.SendMAD(hca.MADAddr{DLID: dst.LID(), QPN: 1, QKey: hca.GSIQKey}, mad); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		select {
		case <-all:
			return time.Since(start), true
		case <-time.After(limit):
			return 0, false
		}
	}
	// capture starts a capture client writing into w and waits until the fabric records.
	capture := func(w io.Writer) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := cl.Capture(ctx, control.Request{}, w)
			done <- err
		}()
		for !d.Fabric.Observed() {
			if time.Now().After(deadline) {
				t.Fatal("the capture did not start")
			}
			time.Sleep(10 * time.Millisecond)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	// Each MAD is two records of 322 bytes (leaving pib_0, arriving at pib_1): 40,000 are
	// 25.8 MB, more than the daemon's backlog (twice 8 MiB: one being written, one
	// filling) and the socket's buffer together.
	const n = 40000
	// The baseline: the same burst with a capture client that reads everything.
	stop := capture(io.Discard)
	base, ok := burst(n, time.Minute)
	if !ok {
		t.Fatalf("baseline: %d of %d MADs arrived in a minute with a reading capture client", got.Load(), n)
	}
	stop()
	for d.Fabric.Observed() {
		time.Sleep(10 * time.Millisecond)
	}
	var counters control.LinkCounters
	if err := cl.Do(context.Background(), control.Request{Verb: control.VerbCounters}, &counters); err != nil {
		t.Fatal(err)
	}
	if counters["capture_dropped"] != 0 {
		t.Logf("the reading capture client lost %d records (a loaded machine)", counters["capture_dropped"])
	}
	droppedBefore := counters["capture_dropped"]

	release := make(chan struct{})
	stop = capture(stuckWriter{release})
	t.Cleanup(func() { close(release); stop() })
	limit := 5*base + 5*time.Second
	before := got.Load()
	if took, ok := burst(n, limit); !ok {
		t.Fatalf("with a stalled capture client %d of %d MADs arrived in %v (%v with a reading one)", got.Load()-before, n, limit, base)
	} else {
		t.Logf("%d MADs: %v with a reading capture client, %v with a stalled one", n, base, took)
	}
	if err := cl.Do(context.Background(), control.Request{Verb: control.VerbCounters}, &counters); err != nil {
		t.Fatal(err)
	}
	if counters["capture_dropped"] <= droppedBefore {
		t.Errorf("counters: capture_dropped %d after a stalled capture client, %d before", counters["capture_dropped"], droppedBefore)
	}
}
