package shmring

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// WaitAny returns the ring that has a record, or that was closed; a Wake from another
// goroutine ends a sleep with (-1, nil); ctx's end ends it with ctx's error.
func TestWaitAny(t *testing.T) {
	rs := make([]*Ring, 3)
	for i := range rs {
		r, err := Create(MinSize)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rs[i] = r
	}
	ctx := context.Background()
	if _, err := rs[2].Write(ctx, [][]byte{[]byte("x")}, 1, 0, false); err != nil {
		t.Fatal(err)
	}
	if i, _, err := WaitAny(ctx, 0, rs); i != 2 || err != nil {
		t.Fatalf("WaitAny = %d, %v; want 2, nil", i, err)
	}
	if _, err := rs[2].TryRead(8, func(uint16, uint16, [][]byte) {}); err != nil {
		t.Fatal(err)
	}

	// Asleep on all three: a record in the middle one wakes it.
	done := make(chan [2]any, 1)
	go func() {
		i, _, err := WaitAny(ctx, 0, rs)
		done <- [2]any{i, err}
	}()
	time.Sleep(20 * time.Millisecond)
	rs[1].Write(ctx, [][]byte{[]byte("y")}, 1, 0, false)
	select {
	case r := <-done:
		if r[0] != 1 || r[1] != nil {
			t.Fatalf("woken with %v; want 1, nil", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a record did not wake WaitAny")
	}
	rs[1].TryRead(8, func(uint16, uint16, [][]byte) {})

	// Wake on the first ring: (-1, nil).
	go func() {
		i, _, err := WaitAny(ctx, 0, rs)
		done <- [2]any{i, err}
	}()
	time.Sleep(20 * time.Millisecond)
	rs[0].Wake()
	select {
	case r := <-done:
		if r[0] != -1 || r[1] != nil {
			t.Fatalf("woken with %v; want -1, nil", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not wake WaitAny")
	}

	// ctx's end. A doorbell left over from the steps above may wake it first, with
	// (-1, nil) as any wake-up: it waits again, as its callers do.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			i, _, err := WaitAny(cctx, 0, rs)
			if i != -1 || err != nil {
				done <- [2]any{i, err}
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case r := <-done:
		if err, _ := r[1].(error); r[0] != -1 || !errors.Is(err, context.Canceled) {
			t.Fatalf("after cancel: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not wake WaitAny")
	}

	// A closed ring is reported with its index.
	rs[1].Close()
	if i, _, err := WaitAny(ctx, 0, rs[1:]); i != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("closed ring: %d, %v", i, err)
	}
	if i, _, err := WaitAny(ctx, 0, []*Ring{rs[0], rs[2], rs[1]}); i != 2 || !errors.Is(err, ErrClosed) {
		t.Fatalf("closed ring last: %d, %v", i, err)
	}
}

// Statistics words are shared with the other side and out of the ring's way.
func TestStats(t *testing.T) {
	r, err := Create(MinSize)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o, err := Open(dupFds(t, r))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for i := range NumStats {
		r.AddStat(i, uint64(i+1))
	}
	if _, err := r.Write(context.Background(), [][]byte{[]byte("z")}, 1, 0, false); err != nil {
		t.Fatal(err)
	}
	n := 0
	o.TryRead(8, func(_, _ uint16, p [][]byte) { n += len(p) })
	for i := range NumStats {
		if got := o.LoadStat(i); got != uint64(i+1) {
			t.Fatalf("stat %d = %d", i, got)
		}
	}
	if n != 1 {
		t.Fatalf("%d records", n)
	}
}

// TestWaitAnyLost: a spin whose sched_yield hands its processor to a thread that
// never yields back (here one pinned to the same processor, spinning) stops spinning,
// sleeps on the doorbell — a record written then wakes it — and reports the lost yield.
func TestWaitAnyLost(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() < 1 {
		t.Skipf("no CPU affinity: %v", err)
	}
	cpu := -1
	for i := 0; i < 1024 && cpu < 0; i++ {
		if set.IsSet(i) {
			cpu = i
		}
	}
	pin := func() error {
		var one unix.CPUSet
		one.Set(cpu)
		return unix.SchedSetaffinity(0, &one)
	}
	r, err := Create(MinSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	stop := make(chan struct{})
	hogReady := make(chan error, 1)
	go func() { // the spinner: an OS thread of its own on that processor, never yielding
		runtime.LockOSThread() // never unlocked: the pinned thread ends with the goroutine
		hogReady <- pin()
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	defer close(stop)
	if err := <-hogReady; err != nil {
		t.Skipf("cannot pin a thread: %v", err)
	}
	type result struct {
		i    int
		lost bool
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := pin(); err != nil {
			done <- result{err: err}
			return
		}
		start := time.Now()
		i, lost, err := WaitAny(context.Background(), 1<<30, []*Ring{r})
		done <- result{i, lost, err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond) // the spin meets the hog, loses a yield, sleeps
	if _, err := r.Write(context.Background(), [][]byte{[]byte("x")}, 1, 0, false); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.err != nil || res.i != 0 || !res.lost {
			t.Fatalf("WaitAny = %d, lost %v, %v after %v; want 0, lost, nil", res.i, res.lost, res.err, res.took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitAny still spinning or asleep 10 s after the record: a lost yield did not end the spin, or the doorbell was not rung")
	}
}
