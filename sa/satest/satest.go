// Package satest builds fabrics for subnet-manager tests and benchmarks: soft HCAs with
// their agents and the UD transport, switches, cables, and an SM on the first HCA. Nothing
// is configured by hand: LIDs, routes and port states come from the SM's sweep.
package satest

import (
	"fmt"
	"testing"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/ud"
)

// GUID bases of the nodes a Fabric builds.
const (
	HCAGUIDBase    = 0x0002_c903_0000_0000 // HCA i: base | (i+1)<<8, port 1 = | 1
	SwitchGUIDBase = 0x0002_c902_0000_0000 // switch i: base | (i+1)<<8
)

// Fabric is a built fabric. HCAs[0] is where the SM runs.
type Fabric struct {
	HCAs     []*hca.Device
	Switches []*fabric.Switch
	// HCACables[i] plugs HCA i's port 1 into its switch (or into HCA 1, back to back).
	HCACables []*fabric.Cable
	// Links are the switch-to-switch cables, in build order.
	Links []Link
	Clock clock.Clock
	SM    *sa.SM
	guids []uint64 // Options.NodeGUIDs
}

// Link is a switch-to-switch cable and where it plugs in.
type Link struct {
	Cable        *fabric.Cable
	A, B         int // switch indices
	PortA, PortB int
}

// Options tune the builders; the zero value uses a fake clock at a fixed start time.
type Options struct {
	Clock clock.Clock
	// NodeGUIDs, where set and nonzero, gives HCA i its node GUID instead of the
	// numbered one (OneSwitch): two HCAs can then share one, as misconfigured hosts do.
	NodeGUIDs []uint64
}

func (o *Options) clock() clock.Clock {
	if o.Clock == nil {
		o.Clock = clock.NewFake(fakeStart)
	}
	return o.Clock
}

var fakeStart = clockStart()

func (f *Fabric) newHCA(tb testing.TB, i int) *hca.Device {
	tb.Helper()
	guid := HCAGUIDBase | uint64(i+1)<<8
	if i < len(f.guids) && f.guids[i] != 0 {
		guid = f.guids[i]
	}
	d, err := hca.NewDevice(hca.Config{
		Name:     fmt.Sprintf("pib_%d", i),
		NodeGUID: guid,
		NodeDesc: fmt.Sprintf("pibgw HCA-%d", i+1),
		Clock:    f.Clock,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ud.Register(d)
	d.StartAgents()
	f.HCAs = append(f.HCAs, d)
	return d
}

func (f *Fabric) newSwitch(ports int) *fabric.Switch {
	i := len(f.Switches)
	sw := newSwitch(fabric.SwitchConfig{Ports: ports}, SwitchGUIDBase|uint64(i+1)<<8, fmt.Sprintf("pibgw switch-%d", i+1))
	f.Switches = append(f.Switches, sw)
	return sw
}

func (f *Fabric) link(a, pa, b, pb int) {
	c := fabric.NewCable(f.Switches[a].Port(pa), f.Switches[b].Port(pb))
	f.Links = append(f.Links, Link{Cable: c, A: a, B: b, PortA: pa, PortB: pb})
}

// BackToBack is two HCAs cabled together with no switch.
func BackToBack(tb testing.TB, o Options) *Fabric {
	f := &Fabric{Clock: o.clock()}
	a, b := f.newHCA(tb, 0), f.newHCA(tb, 1)
	f.HCACables = append(f.HCACables, fabric.NewCable(a.Port(1), b.Port(1)))
	f.HCACables = append(f.HCACables, f.HCACables[0])
	return f
}

// OneSwitch is n HCAs on one switch with n ports: HCA i on port i+1.
func OneSwitch(tb testing.TB, n int, o Options) *Fabric {
	f := &Fabric{Clock: o.clock(), guids: o.NodeGUIDs}
	sw := f.newSwitch(n)
	for i := 0; i < n; i++ {
		d := f.newHCA(tb, i)
		f.HCACables = append(f.HCACables, fabric.NewCable(d.Port(1), sw.Port(i+1)))
	}
	return f
}

// Tree is a two-level tree: leaves leaf switches with perLeaf HCAs each (ports
// 1..perLeaf) and one uplink to each of spines spine switches (leaf port perLeaf+1+s to
// spine s's port 1+leaf). Switches are numbered leaves first, then spines; HCA i sits
// on leaf i/perLeaf.
func Tree(tb testing.TB, leaves, perLeaf, spines int, o Options) *Fabric {
	f := &Fabric{Clock: o.clock()}
	for l := 0; l < leaves; l++ {
		f.newSwitch(perLeaf + spines)
	}
	for s := 0; s < spines; s++ {
		f.newSwitch(leaves)
	}
	for l := 0; l < leaves; l++ {
		for s := 0; s < spines; s++ {
			f.link(l, perLeaf+1+s, leaves+s, 1+l)
		}
	}
	for i := 0; i < leaves*perLeaf; i++ {
		d := f.newHCA(tb, i)
		f.HCACables = append(f.HCACables, fabric.NewCable(d.Port(1), f.Switches[i/perLeaf].Port(1+i%perLeaf)))
	}
	return f
}

// SmallTree is issue 3's two-level tree: 4 leaf switches × 8 HCAs, 2 spines.
func SmallTree(tb testing.TB, o Options) *Fabric { return Tree(tb, 4, 8, 2, o) }

// FatTree648 is ../shared/data/topologies/fat648.ibnd built in code: 36 leaf and 18
// spine switches of 36 ports, 18 HCAs per leaf (648 HCAs), every leaf cabled once to
// every spine.
func FatTree648(tb testing.TB, o Options) *Fabric { return Tree(tb, 36, 18, 18, o) }

// FatTree3 is a three-level fat tree of k-port switches (k even), the folded Clos that
// k-port switches build at most: k pods of k/2 edge and k/2 aggregation switches, and
// (k/2)² core switches; k³/4 HCAs. Edge switch e of pod p has HCAs on ports 1..k/2 and
// aggregation switch a of its pod on port k/2+1+a; aggregation switch a has the pod's edge
// e on port 1+e and core switch a·k/2+j on port k/2+1+j; core switch c has pod p's
// aggregation switch c/(k/2) on port 1+p. Switches are numbered pod by pod (edges, then
// aggregations), then the cores; HCA i sits on edge i/(k/2) (k = 36: 11,664 HCAs, 1,620
// switches).
func FatTree3(tb testing.TB, k int, o Options) *Fabric {
	f := &Fabric{Clock: o.clock()}
	h := k / 2
	edge := func(p, e int) int { return p*k + e }
	agg := func(p, a int) int { return p*k + h + a }
	core := func(c int) int { return k*k + c }
	for i := 0; i < k*k+h*h; i++ {
		f.newSwitch(k)
	}
	for p := 0; p < k; p++ {
		for e := 0; e < h; e++ {
			for a := 0; a < h; a++ {
				f.link(edge(p, e), h+1+a, agg(p, a), 1+e)
			}
		}
		for a := 0; a < h; a++ {
			for j := 0; j < h; j++ {
				f.link(agg(p, a), h+1+j, core(a*h+j), 1+p)
			}
		}
	}
	for i := 0; i < k*k*k/4; i++ {
		d := f.newHCA(tb, i)
		e := i / h
		f.HCACables = append(f.HCACables, fabric.NewCable(d.Port(1), f.Switches[edge(e/h, e%h)].Port(1+i%h)))
	}
	return f
}

// StartSM creates the SM on HCA 0's port 1 with cfg (Port and Clock are filled in) and
// starts it. On these in-process fabrics the first sweep is complete on return.
func (f *Fabric) StartSM(tb testing.TB, cfg sa.Config) *sa.SM {
	tb.Helper()
	cfg.Port = f.HCAs[0].Port(1)
	if cfg.Clock == nil {
		cfg.Clock = f.Clock
	}
	sm, err := sa.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := sm.Start(); err != nil {
		tb.Fatal(err)
	}
	f.SM = sm
	tb.Cleanup(sm.Close)
	return sm
}

// Ports returns port 1 of every HCA.
func (f *Fabric) Ports() []*hca.Port {
	ps := make([]*hca.Port, len(f.HCAs))
	for i, d := range f.HCAs {
		ps[i] = d.Port(1)
	}
	return ps
}
