package mgmt

import (
	"testing"

	"github.com/pibgw/pibgw/wire"
)

var caps = PortCaps{
	WidthSupported: wire.LinkWidth1X | wire.LinkWidth4X, SpeedSupported: wire.LinkSpeedSDR | wire.LinkSpeedQDR,
	VLCap: wire.VLCapVL0To1, MTUCap: wire.MTU256 + 3, // 2048
}

func TestCheckPortInfoSet(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(wire.PortInfo)
		ok   bool
		want PortInfoSet
	}{
		{"all zero: no change", func(wire.PortInfo) {}, true, PortInfoSet{}},
		{"width subset", func(p wire.PortInfo) { p.SetLinkWidthEnabled(wire.LinkWidth4X) }, true,
			PortInfoSet{WidthEnabled: wire.LinkWidth4X, WidthActive: wire.LinkWidth4X}},
		{"width all supported", func(p wire.PortInfo) { p.SetLinkWidthEnabled(wire.LinkWidthSetSupported) }, true,
			PortInfoSet{WidthEnabled: caps.WidthSupported, WidthActive: wire.LinkWidth4X}},
		{"width unsupported", func(p wire.PortInfo) { p.SetLinkWidthEnabled(wire.LinkWidth12X) }, false, PortInfoSet{}},
		{"speed fastest active", func(p wire.PortInfo) { p.SetLinkSpeedEnabled(wire.LinkSpeedSDR | wire.LinkSpeedQDR) }, true,
			PortInfoSet{SpeedEnabled: wire.LinkSpeedSDR | wire.LinkSpeedQDR, SpeedActive: wire.LinkSpeedQDR}},
		{"MTU within cap", func(p wire.PortInfo) { p.SetNeighborMTU(4) }, true, PortInfoSet{NeighborMTU: 4}},
		{"MTU above cap", func(p wire.PortInfo) { p.SetNeighborMTU(5) }, false, PortInfoSet{}},
		{"MTU code invalid", func(p wire.PortInfo) { p.SetNeighborMTU(7) }, false, PortInfoSet{}},
		{"OperVLs within VLCap", func(p wire.PortInfo) { p.SetOperationalVLs(2) }, true, PortInfoSet{OperVLs: 2}},
		{"OperVLs above VLCap", func(p wire.PortInfo) { p.SetOperationalVLs(3) }, false, PortInfoSet{}},
		{"LinkDownDefault Polling", func(p wire.PortInfo) { p.SetLinkDownDefaultState(2) }, true, PortInfoSet{LinkDownDefault: 2}},
		{"LinkDownDefault 3", func(p wire.PortInfo) { p.SetLinkDownDefaultState(3) }, false, PortInfoSet{}},
		{"phys Disabled", func(p wire.PortInfo) { p.SetPortPhysicalState(wire.PhysStateDisabled) }, true, PortInfoSet{PhysState: wire.PhysStateDisabled}},
		{"phys LinkUp", func(p wire.PortInfo) { p.SetPortPhysicalState(5) }, false, PortInfoSet{}},
		{"state Armed", func(p wire.PortInfo) { p.SetPortState(wire.PortStateArmed) }, true, PortInfoSet{PortState: wire.PortStateArmed}},
		{"state Init", func(p wire.PortInfo) { p.SetPortState(wire.PortStateInit) }, false, PortInfoSet{}},
		{"state ActiveDefer", func(p wire.PortInfo) { p.SetPortState(wire.PortStateActiveDefer) }, false, PortInfoSet{}},
	} {
		pi := make(wire.PortInfo, wire.PortInfoLen)
		c.edit(pi)
		got, ok := CheckPortInfoSet(pi, caps)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestNextPortState(t *testing.T) {
	const (
		no, down, init_, armed, active = wire.PortStateNoChange, wire.PortStateDown, wire.PortStateInit, wire.PortStateArmed, wire.PortStateActive
	)
	for _, c := range []struct {
		cur, req, next uint8
		ok             bool
	}{
		{init_, no, init_, true}, {active, no, active, true},
		{init_, armed, armed, true}, {armed, armed, armed, true}, {active, armed, armed, false}, {down, armed, armed, false},
		{armed, active, active, true}, {active, active, active, true}, {init_, active, active, false},
		{active, down, down, true}, {init_, down, down, true},
		{init_, init_, init_, false}, {init_, 5, init_, false},
	} {
		if next, ok := NextPortState(c.cur, c.req); next != c.next || ok != c.ok {
			t.Errorf("%d → %d: %d %v, want %d %v", c.cur, c.req, next, ok, c.next, c.ok)
		}
	}
	if !ValidUnicastLID(0) || !ValidUnicastLID(0xBFFF) || ValidUnicastLID(0xC000) || ValidUnicastLID(0xFFFF) {
		t.Error("ValidUnicastLID")
	}
}
