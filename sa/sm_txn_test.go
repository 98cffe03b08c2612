package sa

import (
	"testing"
	"time"
)

// TestSendTuner: the SM tries both ways of sending a large in-process batch, then keeps
// to the faster, times the other now and then, and follows it when the machine changes;
// one slow batch (a preemption) does not make it change.
func TestSendTuner(t *testing.T) {
	var st sendTuner
	cost := [2]time.Duration{100 * time.Microsecond, 130 * time.Microsecond}
	run := func(batches int) (n [2]int) {
		for range batches {
			m := st.pick()
			n[m]++
			st.record(m, cost[m], 100)
		}
		return n
	}
	if n := run(2 * tuneSamples); n != [2]int{tuneSamples, tuneSamples} {
		t.Fatalf("first batches %v, want %d of each way", n, tuneSamples)
	}
	n := run(10 * reprobeEvery)
	if n[1] != 10 {
		t.Fatalf("with one goroutine faster: %v batches one way and the other, want the slower timed once every %d", n, reprobeEvery)
	}
	// A preempted batch of the faster way: still the faster.
	st.record(0, 50*cost[0], 100)
	if n := run(reprobeEvery - 1); n[1] > 1 {
		t.Fatalf("after one slow batch: %v", n)
	}
	// The machine changes: several goroutines become the faster way.
	cost[1] = 60 * time.Microsecond
	run(5 * reprobeEvery)
	if n := run(10 * reprobeEvery); n[0] > 10 {
		t.Fatalf("after several goroutines became faster: %v", n)
	}
}
