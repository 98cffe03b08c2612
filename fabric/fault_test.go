package fabric_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/wire"
)

// collect is a Link that keeps copies of what it is sent.
type collect struct{ pkts [][]byte }

func (c *collect) Send(p [][]byte) {
	for _, q := range p {
		c.pkts = append(c.pkts, append([]byte(nil), q...))
	}
}

// seqPkt is a UD packet whose PSN is i, so the tests can tell packets apart.
func seqPkt(i int) []byte {
	p := udPkt(2, "payload of some length")
	wire.BTH(p[wire.LRHLen:]).SetPSN(uint32(i))
	wire.SetICRC(p)
	return p
}

func psn(p []byte) int { return int(wire.BTH(p[wire.LRHLen:]).PSN()) }

// runFaults sends n packets in batches of 7 through a FaultLink and returns what came out.
func runFaults(cfg fabric.FaultConfig, n int) (*collect, *fabric.FaultLink) {
	out := &collect{}
	f := fabric.NewFaultLink(out, cfg)
	var batch [][]byte
	for i := 0; i < n; i++ {
		batch = append(batch, seqPkt(i))
		if len(batch) == 7 || i == n-1 {
			f.Send(batch)
			batch = batch[:0]
		}
	}
	f.Flush()
	return out, f
}

func TestFaultDeterministic(t *testing.T) {
	cfg := fabric.FaultConfig{Seed: 42, Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1}
	a, _ := runFaults(cfg, 5000)
	b, _ := runFaults(cfg, 5000)
	if len(a.pkts) != len(b.pkts) {
		t.Fatalf("same seed gave %d and %d packets", len(a.pkts), len(b.pkts))
	}
	for i := range a.pkts {
		if !bytes.Equal(a.pkts[i], b.pkts[i]) {
			t.Fatalf("same seed differs at packet %d", i)
		}
	}
	cfg.Seed = 43
	c, _ := runFaults(cfg, 5000)
	same := len(a.pkts) == len(c.pkts)
	for i := 0; same && i < len(a.pkts); i++ {
		same = bytes.Equal(a.pkts[i], c.pkts[i])
	}
	if same {
		t.Fatal("different seeds gave the same outcome")
	}
}

func TestFaultRates(t *testing.T) {
	const n = 100_000
	const p = 0.05
	cfg := fabric.FaultConfig{Seed: 7, Loss: p, Duplicate: p, Reorder: p, Corrupt: p}
	out, f := runFaults(cfg, n)
	c := f.Counters()
	// Five standard deviations of a binomial count.
	tol := 5 * math.Sqrt(n*p*(1-p))
	check := func(name string, got uint64, want float64) {
		if math.Abs(float64(got)-want) > tol {
			t.Errorf("%s = %d, want %.0f ± %.0f", name, got, want, tol)
		}
	}
	check("lost", c.Lost, n*p)
	check("corrupted", c.Corrupted, n*(1-p)*p)
	check("duplicated", c.Duplicated, n*(1-p)*p)
	check("reordered", c.Reordered, n*(1-p)*p*0.95) // a packet is not held while another is
	if c.Packets != n {
		t.Errorf("Packets = %d", c.Packets)
	}
	if want := n - c.Lost + c.Duplicated; c.Passed != want || uint64(len(out.pkts)) != want {
		t.Errorf("passed %d, delivered %d, want %d", c.Passed, len(out.pkts), want)
	}
	bad := 0
	for _, q := range out.pkts {
		if !wire.CheckICRC(q) {
			bad++
		}
	}
	// A duplicated corrupted packet fails twice.
	if lo, hi := int(c.Corrupted), int(c.Corrupted)*2; bad < lo || bad > hi {
		t.Errorf("%d packets fail the ICRC, corrupted %d", bad, c.Corrupted)
	}
}

func TestFaultCorruptFlipsOneBitAfterLRH(t *testing.T) {
	out, f := runFaults(fabric.FaultConfig{Seed: 1, Corrupt: 1}, 200)
	if f.Counters().Corrupted != 200 || len(out.pkts) != 200 {
		t.Fatalf("corrupted %d of %d", f.Counters().Corrupted, len(out.pkts))
	}
	for _, q := range out.pkts {
		// The PSN may itself be hit; compare against the packet with the same LRH and
		// find exactly one differing bit.
		var orig []byte
		for i := 0; i < 200; i++ {
			cand := seqPkt(i)
			if diffBits(cand, q) == 1 {
				orig = cand
				break
			}
		}
		if orig == nil {
			t.Fatal("corrupted packet is not one bit away from any original")
		}
		if !bytes.Equal(orig[:wire.LRHLen], q[:wire.LRHLen]) {
			t.Fatal("corruption touched the LRH")
		}
		if wire.CheckICRC(q) {
			t.Fatal("corrupted packet passes the ICRC check")
		}
	}
}

func diffBits(a, b []byte) int {
	if len(a) != len(b) {
		return -1
	}
	n := 0
	for i := range a {
		x := a[i] ^ b[i]
		for ; x != 0; x &= x - 1 {
			n++
		}
	}
	return n
}

func TestFaultReorderAndDuplicate(t *testing.T) {
	out, f := runFaults(fabric.FaultConfig{Seed: 1, Reorder: 1}, 6)
	var got []int
	for _, q := range out.pkts {
		got = append(got, psn(q))
	}
	// Each packet that finds nothing held is held and released after the next one.
	if want := []int{1, 0, 3, 2, 5, 4}; !equalInts(got, want) {
		t.Fatalf("reorder gave %v, want %v", got, want)
	}
	if f.Counters().Reordered != 3 {
		t.Fatalf("reordered = %d", f.Counters().Reordered)
	}
	out, _ = runFaults(fabric.FaultConfig{Seed: 1, Duplicate: 1}, 3)
	got = got[:0]
	for _, q := range out.pkts {
		got = append(got, psn(q))
	}
	if want := []int{0, 0, 1, 1, 2, 2}; !equalInts(got, want) {
		t.Fatalf("duplicate gave %v, want %v", got, want)
	}
	// An odd number of packets leaves one held until Flush.
	out2 := &collect{}
	f = fabric.NewFaultLink(out2, fabric.FaultConfig{Seed: 1, Reorder: 1})
	f.Send([][]byte{seqPkt(0)})
	if len(out2.pkts) != 0 {
		t.Fatal("held packet delivered early")
	}
	f.Flush()
	if len(out2.pkts) != 1 || psn(out2.pkts[0]) != 0 {
		t.Fatal("Flush did not release the held packet")
	}
}

func TestFaultHeldPacketIsACopy(t *testing.T) {
	out := &collect{}
	f := fabric.NewFaultLink(out, fabric.FaultConfig{Reorder: 1})
	buf := seqPkt(0)
	f.Send([][]byte{buf})
	binary.BigEndian.PutUint32(buf[wire.LRHLen+8:], 99) // the caller reuses its buffer
	f.Send([][]byte{seqPkt(1)})
	if len(out.pkts) != 2 || psn(out.pkts[1]) != 0 {
		t.Fatal("held packet was not copied")
	}
}

func TestFaultDelay(t *testing.T) {
	clk := clock.NewFake(time.Unix(1700000000, 0))
	out := &collect{}
	f := fabric.NewFaultLink(out, fabric.FaultConfig{Delay: 5 * time.Millisecond, Clock: clk})
	buf := seqPkt(1)
	f.Send([][]byte{seqPkt(0), buf})
	wire.BTH(buf[wire.LRHLen:]).SetPSN(77) // the caller reuses its buffer at once
	clk.Advance(4 * time.Millisecond)
	if len(out.pkts) != 0 {
		t.Fatal("delivered before the delay")
	}
	clk.Advance(time.Millisecond)
	if len(out.pkts) != 2 || psn(out.pkts[0]) != 0 || psn(out.pkts[1]) != 1 {
		t.Fatalf("after the delay got %d packets", len(out.pkts))
	}
	if f.Counters().Delayed != 2 {
		t.Fatalf("delayed = %d", f.Counters().Delayed)
	}
}

func TestFaultSetConfig(t *testing.T) {
	out := &collect{}
	f := fabric.NewFaultLink(out, fabric.FaultConfig{Seed: 3})
	f.Send([][]byte{seqPkt(0)})
	f.SetConfig(fabric.FaultConfig{Loss: 1})
	f.Send([][]byte{seqPkt(1), seqPkt(2)})
	f.SetConfig(fabric.FaultConfig{})
	f.Send([][]byte{seqPkt(3)})
	if len(out.pkts) != 2 || psn(out.pkts[0]) != 0 || psn(out.pkts[1]) != 3 {
		t.Fatalf("got %d packets", len(out.pkts))
	}
	if f.Counters().Lost != 2 || f.Config().Loss != 0 {
		t.Fatalf("counters %+v", f.Counters())
	}
}

func TestFaultNoAllocsWhenPassing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	f := fabric.NewFaultLink(fabric.LinkFunc(func([][]byte) {}), fabric.FaultConfig{Seed: 1, Corrupt: 0.5, Reorder: 0.5, Duplicate: 0.2})
	batch := [][]byte{seqPkt(0), seqPkt(1), seqPkt(2), seqPkt(3)}
	f.Send(batch) // warm the pools
	if n := testing.AllocsPerRun(1000, func() { f.Send(batch) }); n > 0 {
		t.Fatalf("%.1f allocations per Send", n)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
