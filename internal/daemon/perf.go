package daemon

import (
	"fmt"
	"strings"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
)

// PerfCounters reads the PMA counters of port port (0: every port) of HCA ca ("": every
// HCA), as the port's PMA answers perfquery.
func (f *Fabric) PerfCounters(ca string, port int) ([]control.PerfCounters, error) {
	devs := f.Devs
	if ca != "" {
		d := f.Device(ca)
		if d == nil {
			var names []string
			for _, d := range f.Devs {
				names = append(names, d.Name())
			}
			return nil, fmt.Errorf("no HCA %q (have %s)", ca, strings.Join(names, ", "))
		}
		devs = []*hca.Device{d}
		if port != 0 && d.Port(port) == nil {
			return nil, fmt.Errorf("%s has no port %d (ports 1..%d)", ca, port, d.NumPorts())
		}
	}
	out := []control.PerfCounters{}
	for _, d := range devs {
		for _, p := range d.Ports() {
			if port != 0 && int(p.Num()) != port {
				continue
			}
			out = append(out, perfCounters(d.Name(), p))
		}
	}
	return out, nil
}

func perfCounters(ca string, p *hca.Port) control.PerfCounters {
	pc, ext, capMask := p.PerfQuery()
	dec := func(name string, v uint64) control.PerfCounter { return control.PerfCounter{Name: name, Value: v} }
	out := control.PerfCounters{CA: ca, Port: int(p.Num()), LID: p.LID(), CapMask: capMask}
	out.Counters = []control.PerfCounter{
		dec("PortSelect", uint64(pc.PortSelect())),
		{Name: "CounterSelect", Value: uint64(pc.CounterSelect()), Hex: 4},
		dec("SymbolErrorCounter", uint64(pc.SymbolErrorCounter())),
		dec("LinkErrorRecoveryCounter", uint64(pc.LinkErrorRecoveryCounter())),
		dec("LinkDownedCounter", uint64(pc.LinkDownedCounter())),
		dec("PortRcvErrors", uint64(pc.PortRcvErrors())),
		dec("PortRcvRemotePhysicalErrors", uint64(pc.PortRcvRemotePhysicalErrors())),
		dec("PortRcvSwitchRelayErrors", uint64(pc.PortRcvSwitchRelayErrors())),
		dec("PortXmitDiscards", uint64(pc.PortXmitDiscards())),
		dec("PortXmitConstraintErrors", uint64(pc.PortXmitConstraintErrors())),
		dec("PortRcvConstraintErrors", uint64(pc.PortRcvConstraintErrors())),
		{Name: "CounterSelect2", Value: uint64(pc.CounterSelect2()), Hex: 2},
		dec("LocalLinkIntegrityErrors", uint64(pc.LocalLinkIntegrityErrors())),
		dec("ExcessiveBufferOverrunErrors", uint64(pc.ExcessiveBufferOverrunErrors())),
		dec("QP1Dropped", uint64(pc.QP1Dropped())),
		dec("VL15Dropped", uint64(pc.VL15Dropped())),
		dec("PortXmitData", uint64(pc.PortXmitData())),
		dec("PortRcvData", uint64(pc.PortRcvData())),
		dec("PortXmitPkts", uint64(pc.PortXmitPkts())),
		dec("PortRcvPkts", uint64(pc.PortRcvPkts())),
		dec("PortXmitWait", uint64(pc.PortXmitWait())),
	}
	out.Extended = []control.PerfCounter{
		dec("PortSelect", uint64(ext.PortSelect())),
		{Name: "CounterSelect", Value: uint64(ext.CounterSelect()), Hex: 4},
		dec("PortXmitData", ext.PortXmitData()),
		dec("PortRcvData", ext.PortRcvData()),
		dec("PortXmitPkts", ext.PortXmitPkts()),
		dec("PortRcvPkts", ext.PortRcvPkts()),
		dec("PortUnicastXmitPkts", ext.PortUnicastXmitPkts()),
		dec("PortUnicastRcvPkts", ext.PortUnicastRcvPkts()),
		dec("PortMulticastXmitPkts", ext.PortMulticastXmitPkts()),
		dec("PortMulticastRcvPkts", ext.PortMulticastRcvPkts()),
	}
	return out
}
