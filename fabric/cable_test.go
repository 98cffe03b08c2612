package fabric_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
)

func udPkt(dlid uint16, payload string) []byte {
	return fabrictest.UD{DLID: dlid, SLID: 1, DestQP: 0x11, SrcQP: 0x22, QKey: 0x80010000, Payload: []byte(payload)}.Build()
}

func TestCableDeliversBothWays(t *testing.T) {
	a, b := fabrictest.NewRecorder(), fabrictest.NewRecorder()
	c := fabric.NewCable(a, b)
	if !c.Up() || !a.LinkUp() || !b.LinkUp() {
		t.Fatal("new cable is not up")
	}
	p1, p2 := udPkt(2, "to b"), udPkt(1, "to a!")
	a.Send(p1)
	b.Send(p2, p2)
	if got := b.Packets(); len(got) != 1 || !bytes.Equal(got[0], p1) {
		t.Fatalf("b got %x", got)
	}
	if got := a.Len(); got != 2 {
		t.Fatalf("a got %d packets, want 2", got)
	}
	ab, ba := c.Counters(fabric.AtoB), c.Counters(fabric.BtoA)
	if ab.Packets != 1 || ab.Bytes != uint64(len(p1)) || ba.Packets != 2 || ba.Bytes != uint64(2*len(p2)) {
		t.Fatalf("counters a->b %+v b->a %+v", ab, ba)
	}
}

func TestCableUpDown(t *testing.T) {
	a, b := fabrictest.NewRecorder(), fabrictest.NewRecorder()
	c := fabric.NewCable(a, b)
	c.SetUp(false)
	if c.Up() || a.LinkUp() || b.LinkUp() {
		t.Fatal("cable still up after SetUp(false)")
	}
	a.Send(udPkt(2, "x"), udPkt(2, "y"))
	b.Send(udPkt(1, "z"))
	if a.Len()+b.Len() != 0 {
		t.Fatal("packets crossed an unplugged cable")
	}
	if d := c.Counters(fabric.AtoB).DownDrops; d != 2 {
		t.Fatalf("a->b down drops %d, want 2", d)
	}
	if d := c.Counters(fabric.BtoA).DownDrops; d != 1 {
		t.Fatalf("b->a down drops %d, want 1", d)
	}
	c.SetUp(true)
	a.Send(udPkt(2, "again"))
	if b.Len() != 1 || !b.LinkUp() {
		t.Fatal("replugged cable does not deliver")
	}
	c.Detach()
	if a.Send(udPkt(2, "gone")) {
		t.Fatal("port still attached after Detach")
	}
}

func TestCableWrappers(t *testing.T) {
	a, b := fabrictest.NewRecorder(), fabrictest.NewRecorder()
	var seen []string
	tag := func(name string) func(fabric.Link) fabric.Link {
		return func(l fabric.Link) fabric.Link {
			return fabric.LinkFunc(func(p [][]byte) { seen = append(seen, name); l.Send(p) })
		}
	}
	c := fabric.NewCable(a, b, fabric.WithLinkWrapper(tag("both")), fabric.WithDirectionWrapper(fabric.BtoA, tag("ba")))
	a.Send(udPkt(2, "x"))
	b.Send(udPkt(1, "y"))
	if want := []string{"both", "ba", "both"}; !equalStrings(seen, want) {
		t.Fatalf("wrappers ran %v, want %v", seen, want)
	}
	seen = nil
	c.Wrap(fabric.AtoB, tag("runtime"))
	a.Send(udPkt(2, "x"))
	c.Unwrap(fabric.AtoB)
	a.Send(udPkt(2, "x"))
	if want := []string{"runtime", "both"}; !equalStrings(seen, want) {
		t.Fatalf("wrappers ran %v, want %v", seen, want)
	}
	if b.Len() != 3 {
		t.Fatalf("b got %d packets, want 3", b.Len())
	}
}

// A packet a wrapper holds (here: a delay) is lost if the cable goes down before it is
// delivered, and counted once.
func TestCableDownDropsDelayedPackets(t *testing.T) {
	clk := clock.NewFake(time.Unix(1700000000, 0))
	a, b := fabrictest.NewRecorder(), fabrictest.NewRecorder()
	c := fabric.NewCable(a, b, fabric.WithDirectionWrapper(fabric.AtoB,
		fabric.FaultWrapper(fabric.FaultConfig{Delay: time.Millisecond, Clock: clk}, nil)))
	a.Send(udPkt(2, "late"))
	c.SetUp(false)
	clk.Advance(time.Millisecond)
	if b.Len() != 0 {
		t.Fatal("delayed packet crossed an unplugged cable")
	}
	if d := c.Counters(fabric.AtoB).DownDrops; d != 1 {
		t.Fatalf("down drops %d, want 1", d)
	}
}

func equalStrings(a, b []string) bool {
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
