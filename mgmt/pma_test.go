package mgmt

import (
	"testing"

	"github.com/pibgw/pibgw/wire"
)

// fakeNode is a switch-like node with ports 1..2 (PortSelectAll sums them).
type fakeNode struct{ c [3]Counters }

func (n *fakeNode) PMAPorts(sel uint8) (int, int, bool) {
	switch {
	case sel == wire.PortSelectAll:
		return 1, 2, true
	case sel >= 1 && sel <= 2:
		return int(sel), int(sel), true
	}
	return 0, 0, false
}

func (n *fakeNode) PMACounters(i int, c *Counters) {
	for k := range c {
		c[k] += n.c[i][k]
	}
}

func (n *fakeNode) PMAReset(i int, set CounterSet) {
	for k := range n.c[i] {
		if set.Has(Counter(k)) {
			n.c[i][k] = 0
		}
	}
}

func TestAnswerPMA(t *testing.T) {
	n := &fakeNode{}
	for i := 1; i <= 2; i++ {
		for k := range n.c[i] {
			n.c[i][k] = uint64(10*i + k)
		}
	}
	req := make([]byte, wire.PMADataLen)
	out := make([]byte, wire.PMADataLen)
	pc := wire.PortCounters(req)
	pc.SetPortSelect(wire.PortSelectAll)
	if st := AnswerPMA(n, 0x100, 18, false, wire.AttrPortCounters, req, out); st != 0 {
		t.Fatalf("Get PortCounters(all): status %#x", st)
	}
	if got := wire.PortCounters(out).Counter(wire.PCPortXmitPkts); got != 10+2+20+2 {
		t.Errorf("PortXmitPkts over both ports = %d, want 34", got)
	}
	// Set with CounterSelect PortXmitPkts resets only that counter, on port 2 only.
	pc.SetPortSelect(2)
	pc.SetCounterSelect(1 << wire.PCPortXmitPkts)
	if st := AnswerPMA(n, 0x100, 18, true, wire.AttrPortCounters, req, out); st != 0 {
		t.Fatalf("Set PortCounters: status %#x", st)
	}
	if n.c[2][XmitPkts] != 0 || n.c[2][RcvPkts] == 0 || n.c[1][XmitPkts] == 0 {
		t.Errorf("after Set: port 1 %v port 2 %v", n.c[1], n.c[2])
	}
	// PortCountersExtended: CounterSelect bit 3 is PortRcvPkts.
	ext := wire.PortCountersExtended(req)
	clear(req)
	ext.SetPortSelect(1)
	ext.SetCounterSelect(1 << 3)
	if st := AnswerPMA(n, 0x100, 18, true, wire.AttrPortCountersExtended, req, out); st != 0 || n.c[1][RcvPkts] != 0 || n.c[1][RcvData] == 0 {
		t.Errorf("Set PortCountersExtended: status %#x, port 1 %v", st, n.c[1])
	}
	if st := AnswerPMA(n, 0x100, 18, false, wire.AttrPortCountersExtended, req, out); st != 0 || wire.PortCountersExtended(out).PortXmitData() != 10 {
		t.Errorf("Get PortCountersExtended(1): status %#x", st)
	}
	// Errors: a port the node lacks, ClassPortInfo Set, an unknown attribute.
	clear(req)
	wire.PortCounters(req).SetPortSelect(7)
	for _, c := range []struct {
		set  bool
		attr uint16
		want uint16
	}{
		{false, wire.AttrPortCounters, wire.StatusInvalidAttrOrModVal},
		{true, wire.AttrClassPortInfo, wire.StatusMethodAttrNotSupp},
		{false, 0x7777, wire.StatusMethodAttrNotSupp},
	} {
		if st := AnswerPMA(n, 0x100, 18, c.set, c.attr, req, out); st != c.want {
			t.Errorf("attr %#x set %v: status %#x, want %#x", c.attr, c.set, st, c.want)
		}
	}
}
