package hca

import "github.com/pibgw/pibgw/wire"

// The performance management agent of an HCA port (IBA 16.1): ClassPortInfo,
// PortCounters and PortCountersExtended, read from the port's real counters. Like the
// SMA it answers synchronously from a pooled buffer.

// pmaCapMask is the PMA's ClassPortInfo:CapabilityMask: PortCountersExtended with the
// unicast/multicast counters, and PortXmitWait (always 0: a soft link never waits for
// credits). A CA has one port per PortSelect, so no AllPortSelect (IBA 16.1.2).
const pmaCapMask = wire.PMACapExtendedWidthSupported | wire.PMACapPortCountersXmitWaitSupported

// pmaRespTimeValue is ClassPortInfo:RespTimeValue, as ibsim reports it.
const pmaRespTimeValue = 18

type pmaHandler struct{ p *Port }

func (h pmaHandler) HandleMAD(m *MAD) { h.p.handlePMA(m) }

func (p *Port) handlePMA(m *MAD) {
	s := madScratchPool.Get().(*madScratch)
	resp := wire.MAD(s.b[:])
	copy(resp, m.Data)
	var status uint16
	switch method := resp.Method(); {
	case resp.ClassVersion() != wire.ClassVersionPerf:
		status = wire.StatusBadVersion
	case method != wire.MethodGet && method != wire.MethodSet:
		status = wire.StatusMethodNotSupported
	default:
		status = p.pmaAttr(method == wire.MethodSet, resp.AttrID(), wire.MAD(m.Data).PMAData(), resp.PMAData())
	}
	resp.SetMethod(wire.MethodGetResp)
	resp.SetStatus(status)
	_ = p.ReplyMAD(m, resp)
	madScratchPool.Put(s)
}

// pmaAttr answers one PMA attribute; req is the request's data, out the response's
// (a copy of req on entry).
func (p *Port) pmaAttr(set bool, attr uint16, req, out []byte) uint16 {
	switch attr {
	case wire.AttrClassPortInfo:
		if set {
			return wire.StatusMethodAttrNotSupp
		}
		wire.FillPMAClassPortInfo(out, pmaCapMask, pmaRespTimeValue)
	case wire.AttrPortCounters:
		in := wire.PortCounters(req)
		// IBA 16.1.3.5: on a CA, PortSelect names the port (the one the MAD came in on).
		if in.PortSelect() != p.num {
			return wire.StatusInvalidAttrOrModVal
		}
		if set {
			for _, f := range pmaCounterMap {
				if in.Selected(f.pc) {
					p.counters.v[f.hc].Store(in.Counter(f.pc))
				}
			}
		}
		o := wire.PortCounters(out)
		clear(o[4:wire.PortCountersLen])
		for _, f := range pmaCounterMap {
			o.SetCounter(f.pc, p.counters.Get(f.hc))
		}
	case wire.AttrPortCountersExtended:
		in := wire.PortCountersExtended(req)
		if in.PortSelect() != p.num {
			return wire.StatusInvalidAttrOrModVal
		}
		if set {
			sel := in.CounterSelect()
			for i, hc := range pmaExtCounters {
				if sel>>i&1 != 0 {
					p.counters.v[hc].Store(0)
				}
			}
		}
		o := wire.PortCountersExtended(out)
		clear(o[4:wire.PortCountersExtendedLen])
		c := &p.counters
		o.SetPortXmitData(c.Get(CntXmitData))
		o.SetPortRcvData(c.Get(CntRcvData))
		o.SetPortXmitPkts(c.Get(CntXmitPkts))
		o.SetPortRcvPkts(c.Get(CntRcvPkts))
		o.SetPortUnicastXmitPkts(c.Get(CntUnicastXmitPkts))
		o.SetPortUnicastRcvPkts(c.Get(CntUnicastRcvPkts))
		o.SetPortMulticastXmitPkts(c.Get(CntMulticastXmitPkts))
		o.SetPortMulticastRcvPkts(c.Get(CntMulticastRcvPkts))
	default:
		return wire.StatusMethodAttrNotSupp
	}
	return 0
}

// pmaCounterMap names the port counter behind each PortCounters field pibgw counts; the
// others (symbol errors, link recovery, constraint errors, XmitWait…) have no cause in
// a soft link and stay 0. PortCounters and PortCountersExtended read the same 64-bit
// counters: the 32-bit fields saturate (IBA 16.1.3.5), and a Set of either resets both.
var pmaCounterMap = [...]struct {
	pc wire.PortCounter
	hc Counter
}{
	{wire.PCPortRcvErrors, CntRcvErrors},
	{wire.PCPortXmitDiscards, CntXmitDiscards},
	{wire.PCVL15Dropped, CntVL15Dropped},
	{wire.PCPortXmitData, CntXmitData},
	{wire.PCPortRcvData, CntRcvData},
	{wire.PCPortXmitPkts, CntXmitPkts},
	{wire.PCPortRcvPkts, CntRcvPkts},
}

// pmaExtCounters is PortCountersExtended's counters in CounterSelect bit order.
var pmaExtCounters = [...]Counter{
	CntXmitData, CntRcvData, CntXmitPkts, CntRcvPkts,
	CntUnicastXmitPkts, CntUnicastRcvPkts, CntMulticastXmitPkts, CntMulticastRcvPkts,
}
