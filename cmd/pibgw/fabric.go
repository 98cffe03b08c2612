package main

import (
	"fmt"
	"log/slog"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ud"
)

// The default fabric, what `pibgw up` builds when it has no configuration file: two
// single-port HCAs, pib_0 and pib_1, cabled to ports 1 and 2 of one switch.
const (
	defaultHCAs        = 2
	defaultSwitchPorts = 8 // room for more HCAs without renumbering
	// defaultGUIDBase is the node GUID of the first HCA minus its index byte: Mellanox's
	// OUI 00:02:c9, as pib used, so tools that key on vendor OUIs behave as with pib.
	defaultGUIDBase = 0x0002_c903_0000_0000
)

// Fabric is an in-process fabric: HCAs, the switch they hang off and the cables between.
type Fabric struct {
	Devs   []*hca.Device
	Switch *fabric.Switch
	Cables []*fabric.Cable
}

// defaultGUID is the node GUID of default HCA i: 0002:c903:0000:0300 for pib_0, then
// 0400, …, leaving the low byte for port GUIDs (node | port number) and the 0x02 byte
// for the system image GUID hca derives (as pib did).
func defaultGUID(i int) uint64 { return defaultGUIDBase | uint64(i+3)<<8 }

// defaultFabric builds the default fabric. The ports come up as a real HCA's do when its
// cable is plugged and no subnet manager has run yet: physical state LinkUp, logical
// state Init, LID 0. The built-in SM (sa/) will assign LIDs and make them Active.
func defaultFabric(log *slog.Logger) (*Fabric, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &Fabric{Switch: fabric.NewSwitch(fabric.SwitchConfig{Ports: defaultSwitchPorts})}
	for i := 0; i < defaultHCAs; i++ {
		d, err := hca.NewDevice(hca.Config{
			Name:     fmt.Sprintf("pib_%d", i),
			NodeGUID: defaultGUID(i),
			Logger:   log,
		})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("default fabric: %w", err)
		}
		ud.Register(d)
		c := fabric.NewCable(d.Port(1), f.Switch.Port(i+1))
		f.Devs = append(f.Devs, d)
		f.Cables = append(f.Cables, c)
		log.Debug("hca cabled to switch", "device", d.Name(), "switch_port", i+1)
	}
	return f, nil
}

// Device returns the HCA named name, or nil.
func (f *Fabric) Device(name string) *hca.Device {
	for _, d := range f.Devs {
		if d.Name() == name {
			return d
		}
	}
	return nil
}

// Close unplugs every cable.
func (f *Fabric) Close() {
	for _, c := range f.Cables {
		c.Detach()
	}
	f.Cables = nil
}
