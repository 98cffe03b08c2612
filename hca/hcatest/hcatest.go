// Package hcatest builds small fabrics of soft HCAs for tests: devices with the UD
// transport, one switch, cables, LIDs and Active ports set through the HCA's management
// API (what the SMA does once a subnet manager runs).
package hcatest

import (
	"fmt"
	"os"
	"testing"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ud"
)

// Fabric is n single-port HCAs on one switch: HCA i is on switch port i+1 with LID i+1.
type Fabric struct {
	Devs   []*hca.Device
	Switch *fabric.Switch
	Cables []*fabric.Cable
	// With Options.Attached (or PIBGW_TEST_ATTACHED=1), Devs are mirrors in attach
	// sessions and Daemon the devices on the fabric they stand for.
	Daemon   []*hca.Device
	Sessions []*attach.Session
}

// Options tune NewFabric; the zero value is a 4096-byte MTU fabric.
type Options struct {
	MTU hca.MTU
	// Register installs extra transports (rc.Register) on each device.
	Register func(*hca.Device)
	// Wrap, if set, wraps both directions of HCA i's cable (fault injection, capture).
	Wrap func(i int, d fabric.Direction, l fabric.Link) fabric.Link
	// Clock is the devices' clock (default: real time).
	Clock clock.Clock
	// Attached hands out devices used through the attach channel (see AttachedEnv).
	Attached bool
}

// NewFabric builds the fabric.
func NewFabric(tb testing.TB, n int, o Options) *Fabric {
	tb.Helper()
	if o.MTU == 0 {
		o.MTU = hca.MTU4096
	}
	f := &Fabric{Switch: fabric.NewSwitch(fabric.SwitchConfig{Ports: n})}
	for i := 0; i < n; i++ {
		d, err := hca.NewDevice(hca.Config{
			Name:     fmt.Sprintf("pib_%d", i),
			NodeGUID: 0x0002_c903_0000_0000 | uint64(i+3)<<8,
			Clock:    o.Clock,
		})
		if err != nil {
			tb.Fatal(err)
		}
		ud.Register(d)
		if o.Register != nil {
			o.Register(d)
		}
		var opts []fabric.CableOption
		if o.Wrap != nil {
			i := i
			for _, dir := range []fabric.Direction{fabric.AtoB, fabric.BtoA} {
				dir := dir
				opts = append(opts, fabric.WithDirectionWrapper(dir, func(l fabric.Link) fabric.Link { return o.Wrap(i, dir, l) }))
			}
		}
		c := fabric.NewCable(d.Port(1), f.Switch.Port(i+1), opts...)
		p := d.Port(1)
		p.SetLID(uint16(i+1), 0)
		p.SetSM(1, 0)
		p.SetActiveMTU(o.MTU)
		p.SetState(hca.PortActive)
		f.Switch.SetLFT(uint16(i+1), uint8(i+1))
		f.Devs = append(f.Devs, d)
		f.Cables = append(f.Cables, c)
	}
	if o.Attached || AttachedFromEnv() {
		attachAll(tb, f, o)
	}
	return f
}

// Attached reports whether f's devices are mirrors in attach sessions.
func (f *Fabric) Attached() bool { return f.Sessions != nil }

// OnSwitch is HCA i as the switch sees it: the daemon's device when f is attached, whose
// port is the one at the end of the cable (the subnet manager sets its P_Keys, it checks
// the ICRC of what arrives, it forwards multicast only to processes attached to the
// group), else f.Devs[i].
func (f *Fabric) OnSwitch(i int) *hca.Device {
	if f.Daemon != nil {
		return f.Daemon[i]
	}
	return f.Devs[i]
}

// AttachedFromEnv reports whether NewFabric hands out attached devices even without
// Options.Attached (PIBGW_TEST_ATTACHED=1), for tests that must choose their parameters
// before they build the fabric.
func AttachedFromEnv() bool { return os.Getenv(AttachedEnv) == "1" }
