package hca

import "github.com/pibgw/pibgw/wire"

// PerfQuery reads the port's PortCounters and PortCountersExtended exactly as its PMA
// answers a Get for them (IBA 16.1.3.5, 16.1.4.11): what perfquery and perfquery -x
// show. capMask is the PMA's ClassPortInfo:CapabilityMask.
func (p *Port) PerfQuery() (pc wire.PortCounters, ext wire.PortCountersExtended, capMask uint16) {
	req := make([]byte, wire.PortCountersExtendedLen)
	pc = make(wire.PortCounters, wire.PortCountersLen)
	wire.PortCounters(req[:wire.PortCountersLen]).SetPortSelect(p.num)
	copy(pc, req)
	p.pmaAttr(false, wire.AttrPortCounters, req[:wire.PortCountersLen], pc)
	ext = make(wire.PortCountersExtended, wire.PortCountersExtendedLen)
	wire.PortCountersExtended(req).SetPortSelect(p.num)
	copy(ext, req)
	p.pmaAttr(false, wire.AttrPortCountersExtended, req, ext)
	return pc, ext, pmaCapMask
}
