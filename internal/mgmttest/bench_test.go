package mgmttest

import (
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// drLoop prepares a directed-route Get along path from A, with a response handler that
// only counts, so that one call of the returned function is one SMP round trip.
func drLoop(tb testing.TB, r *rig, attr uint16, path ...uint8) (func(), *int) {
	tb.Helper()
	var got int
	h := hca.MADHandlerFunc(func(m *hca.MAD) { got++ })
	r.pa.RegisterMADHandler(wire.MgmtClassSubnDirected, true, h)
	b := newMAD(wire.MgmtClassSubnDirected, wire.MethodGet, attr, 0, 1)
	s := wire.SMP(b)
	s.SetHopCount(uint8(len(path)))
	s.SetDrSLID(0xFFFF)
	s.SetDrDLID(0xFFFF)
	copy(s.InitialPath()[1:], path)
	a := hca.MADAddr{DLID: 0xFFFF}
	return func() { _ = r.pa.SendSMP(a, b) }, &got
}

// TestSMPRoundTripAllocs: an SMP answered by the local SMA, a switch, or a far HCA
// allocates nothing in the agents and the SMI in steady state (the SM's fat-tree sweep
// sends thousands). The one allocation left per MAD an HCA receives from the link is the
// MAD layer's (hca/mad.go receiveMAD: its GlobalRoute escapes); the limit tightens to 0
// when that goes.
func TestSMPRoundTripAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	r := newRig(t, nil)
	for _, path := range [][]uint8{nil, {1}, {1, portSw}} {
		// The MAD layer and the agents allocate nothing per MAD.
		hcaRx := 0
		for _, attr := range []uint16{wire.AttrNodeInfo, wire.AttrPortInfo} {
			f, got := drLoop(t, r, attr, path...)
			if n := testing.AllocsPerRun(200, f); n > float64(hcaRx) {
				t.Errorf("path %v attr %#x: %.1f allocations per round trip, want at most %d", path, attr, n, hcaRx)
			}
			if *got == 0 {
				t.Errorf("path %v: no responses", path)
			}
		}
	}
}

// BenchmarkSMPRoundTrip measures a directed-route Get NodeInfo answered at hop 0 (the
// SM's own port), hop 1 (the switch) and hop 2 (the far HCA).
func BenchmarkSMPRoundTrip(b *testing.B) {
	for _, c := range []struct {
		name string
		path []uint8
	}{{"hop0", nil}, {"hop1", []uint8{1}}, {"hop2", []uint8{1, portSw}}} {
		b.Run(c.name, func(b *testing.B) {
			r := newRig(b, nil)
			f, got := drLoop(b, r, wire.AttrNodeInfo, c.path...)
			b.ReportAllocs()
			for b.Loop() {
				f()
			}
			if *got == 0 {
				b.Fatal("no responses")
			}
		})
	}
}
