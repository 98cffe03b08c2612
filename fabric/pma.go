package fabric

import (
	"sync/atomic"

	"github.com/pibgw/pibgw/wire"
)

type atomicU64 = atomic.Uint64

// resetTotal zeroes a packet total without changing the unicast count derived from it.
func (p *swPort) resetTotal(total *atomicU64, adj *atomic.Int64) {
	adj.Add(int64(total.Swap(0)))
}

// resetUnicast zeroes the unicast count derived from total and mcast.
func (p *swPort) resetUnicast(total, mcast *atomicU64, adj *atomic.Int64) {
	adj.Store(-int64(total.Load() - mcast.Load()))
}

// The switch's performance management agent (IBA 16.1): ClassPortInfo, PortCounters and
// PortCountersExtended of port 0, of each external port, or summed over all external
// ports (PortSelect 0xFF), from the switch's real per-port counters.

// swPMACapMask: AllPortSelect, PortCountersExtended with the unicast/multicast counters,
// and PortXmitWait (always 0: a soft link never waits for credits).
const swPMACapMask = wire.PMACapAllPortSelect | wire.PMACapExtendedWidthSupported |
	wire.PMACapPortCountersXmitWaitSupported

// relayDrops are the drops PortRcvSwitchRelayErrors counts (IBA 16.1.3.5: packets the
// switch relay could not forward).
var relayDrops = [...]DropReason{DropLID0, DropNoRoute, DropNoMFT, DropRawLNH, DropBadPort, DropPermissive}

func (sw *Switch) answerPMA(in int, req, resp wire.MAD) {
	var status uint16
	switch method := resp.Method(); {
	case resp.ClassVersion() != wire.ClassVersionPerf:
		status = wire.StatusBadVersion
	case method != wire.MethodGet && method != wire.MethodSet:
		status = wire.StatusMethodNotSupported
	default:
		status = sw.pmaAttr(method == wire.MethodSet, resp.AttrID(), req.PMAData(), resp.PMAData())
	}
	resp.SetMethod(wire.MethodGetResp)
	resp.SetStatus(status)
}

// pmaPorts returns the ports PortSelect sel addresses.
func (sw *Switch) pmaPorts(sel uint8) (lo, hi int, ok bool) {
	switch {
	case sel == wire.PortSelectAll:
		return 1, sw.nports, true
	case int(sel) <= sw.nports:
		return int(sel), int(sel), true
	}
	return 0, 0, false
}

func (sw *Switch) pmaAttr(set bool, attr uint16, req, out []byte) uint16 {
	switch attr {
	case wire.AttrClassPortInfo:
		if set {
			return wire.StatusMethodAttrNotSupp
		}
		wire.FillPMAClassPortInfo(out, swPMACapMask, 18)
	case wire.AttrPortCounters:
		in := wire.PortCounters(req)
		lo, hi, ok := sw.pmaPorts(in.PortSelect())
		if !ok {
			return wire.StatusInvalidAttrOrModVal
		}
		if set {
			for i := lo; i <= hi; i++ {
				p := &sw.ports[i]
				for _, f := range [...]struct {
					c wire.PortCounter
					v *atomicU64
				}{
					{wire.PCPortRcvErrors, &p.rcvErrors}, {wire.PCPortXmitDiscards, &p.xmitDiscards},
					{wire.PCPortXmitData, &p.xmitData}, {wire.PCPortRcvData, &p.rcvData},
				} {
					if in.Selected(f.c) {
						f.v.Store(0)
					}
				}
				if in.Selected(wire.PCPortXmitPkts) {
					p.resetTotal(&p.xmitPkts, &p.ucXmitAdj)
				}
				if in.Selected(wire.PCPortRcvPkts) {
					p.resetTotal(&p.rcvPkts, &p.ucRcvAdj)
				}
				if in.Selected(wire.PCPortRcvSwitchRelayErrors) {
					for _, r := range relayDrops {
						p.drops[r].Store(0)
					}
				}
			}
		}
		var c PortCounters
		var relay uint64
		for i := lo; i <= hi; i++ {
			pc := sw.Counters(i)
			c.XmitPkts += pc.XmitPkts
			c.RcvPkts += pc.RcvPkts
			c.XmitData += pc.XmitData
			c.RcvData += pc.RcvData
			c.XmitDiscards += pc.XmitDiscards
			c.RcvErrors += pc.RcvErrors
			for _, r := range relayDrops {
				relay += pc.Drops[r]
			}
		}
		o := wire.PortCounters(out)
		clear(o[4:wire.PortCountersLen])
		o.SetCounter(wire.PCPortRcvErrors, c.RcvErrors)
		o.SetCounter(wire.PCPortRcvSwitchRelayErrors, relay)
		o.SetCounter(wire.PCPortXmitDiscards, c.XmitDiscards)
		o.SetCounter(wire.PCPortXmitData, c.XmitData)
		o.SetCounter(wire.PCPortRcvData, c.RcvData)
		o.SetCounter(wire.PCPortXmitPkts, c.XmitPkts)
		o.SetCounter(wire.PCPortRcvPkts, c.RcvPkts)
	case wire.AttrPortCountersExtended:
		in := wire.PortCountersExtended(req)
		lo, hi, ok := sw.pmaPorts(in.PortSelect())
		if !ok {
			return wire.StatusInvalidAttrOrModVal
		}
		if set {
			sel := in.CounterSelect()
			for i := lo; i <= hi; i++ {
				p := &sw.ports[i]
				if sel&wire.CounterSelectExtPortXmitData != 0 {
					p.xmitData.Store(0)
				}
				if sel&wire.CounterSelectExtPortRcvData != 0 {
					p.rcvData.Store(0)
				}
				if sel&wire.CounterSelectExtPortXmitPkts != 0 {
					p.resetTotal(&p.xmitPkts, &p.ucXmitAdj)
				}
				if sel&wire.CounterSelectExtPortRcvPkts != 0 {
					p.resetTotal(&p.rcvPkts, &p.ucRcvAdj)
				}
				if sel&wire.CounterSelectExtPortUnicastXmitPkts != 0 {
					p.resetUnicast(&p.xmitPkts, &p.mcXmit, &p.ucXmitAdj)
				}
				if sel&wire.CounterSelectExtPortUnicastRcvPkts != 0 {
					p.resetUnicast(&p.rcvPkts, &p.mcRcv, &p.ucRcvAdj)
				}
				if sel&wire.CounterSelectExtPortMulticastXmitPkts != 0 {
					p.ucXmitAdj.Add(-int64(p.mcXmit.Swap(0)))
				}
				if sel&wire.CounterSelectExtPortMulticastRcvPkts != 0 {
					p.ucRcvAdj.Add(-int64(p.mcRcv.Swap(0)))
				}
			}
		}
		var c PortCounters
		for i := lo; i <= hi; i++ {
			pc := sw.Counters(i)
			c.XmitData += pc.XmitData
			c.RcvData += pc.RcvData
			c.XmitPkts += pc.XmitPkts
			c.RcvPkts += pc.RcvPkts
			c.UnicastXmitPkts += pc.UnicastXmitPkts
			c.UnicastRcvPkts += pc.UnicastRcvPkts
			c.MulticastXmitPkts += pc.MulticastXmitPkts
			c.MulticastRcvPkts += pc.MulticastRcvPkts
		}
		o := wire.PortCountersExtended(out)
		clear(o[4:wire.PortCountersExtendedLen])
		o.SetPortXmitData(c.XmitData)
		o.SetPortRcvData(c.RcvData)
		o.SetPortXmitPkts(c.XmitPkts)
		o.SetPortRcvPkts(c.RcvPkts)
		o.SetPortUnicastXmitPkts(c.UnicastXmitPkts)
		o.SetPortUnicastRcvPkts(c.UnicastRcvPkts)
		o.SetPortMulticastXmitPkts(c.MulticastXmitPkts)
		o.SetPortMulticastRcvPkts(c.MulticastRcvPkts)
	default:
		return wire.StatusMethodAttrNotSupp
	}
	return 0
}
