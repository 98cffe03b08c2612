package fabric

import (
	"sync/atomic"

	"github.com/pibgw/pibgw/mgmt"
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

// pmaAttr answers one PMA attribute by the fabric's one PMA (mgmt.AnswerPMA).
func (sw *Switch) pmaAttr(set bool, attr uint16, req, out []byte) uint16 {
	return mgmt.AnswerPMA(switchPMA{sw}, swPMACapMask, 18, set, attr, req, out)
}

// switchPMA is the switch as mgmt's PMA sees it.
type switchPMA struct{ sw *Switch }

func (x switchPMA) PMAPorts(sel uint8) (lo, hi int, ok bool) { return x.sw.pmaPorts(sel) }

func (x switchPMA) PMACounters(i int, c *mgmt.Counters) {
	pc := x.sw.Counters(i)
	c[mgmt.XmitData] += pc.XmitData
	c[mgmt.RcvData] += pc.RcvData
	c[mgmt.XmitPkts] += pc.XmitPkts
	c[mgmt.RcvPkts] += pc.RcvPkts
	c[mgmt.UnicastXmitPkts] += pc.UnicastXmitPkts
	c[mgmt.UnicastRcvPkts] += pc.UnicastRcvPkts
	c[mgmt.MulticastXmitPkts] += pc.MulticastXmitPkts
	c[mgmt.MulticastRcvPkts] += pc.MulticastRcvPkts
	c[mgmt.RcvErrors] += pc.RcvErrors
	c[mgmt.XmitDiscards] += pc.XmitDiscards
	for _, r := range relayDrops {
		c[mgmt.RcvSwitchRelayErrors] += pc.Drops[r]
	}
}

// PMAReset zeroes port i's counters in set. The unicast counts are derived (total −
// multicast + adjustment), so resetting a total or a multicast count keeps the unicast
// one, and resetting the unicast one moves the adjustment.
func (x switchPMA) PMAReset(i int, set mgmt.CounterSet) {
	p := &x.sw.ports[i]
	if set.Has(mgmt.RcvErrors) {
		p.rcvErrors.Store(0)
	}
	if set.Has(mgmt.XmitDiscards) {
		p.xmitDiscards.Store(0)
	}
	if set.Has(mgmt.XmitData) {
		p.xmitData.Store(0)
	}
	if set.Has(mgmt.RcvData) {
		p.rcvData.Store(0)
	}
	if set.Has(mgmt.XmitPkts) {
		p.resetTotal(&p.xmitPkts, &p.ucXmitAdj)
	}
	if set.Has(mgmt.RcvPkts) {
		p.resetTotal(&p.rcvPkts, &p.ucRcvAdj)
	}
	if set.Has(mgmt.UnicastXmitPkts) {
		p.resetUnicast(&p.xmitPkts, &p.mcXmit, &p.ucXmitAdj)
	}
	if set.Has(mgmt.UnicastRcvPkts) {
		p.resetUnicast(&p.rcvPkts, &p.mcRcv, &p.ucRcvAdj)
	}
	if set.Has(mgmt.MulticastXmitPkts) {
		p.ucXmitAdj.Add(-int64(p.mcXmit.Swap(0)))
	}
	if set.Has(mgmt.MulticastRcvPkts) {
		p.ucRcvAdj.Add(-int64(p.mcRcv.Swap(0)))
	}
	if set.Has(mgmt.RcvSwitchRelayErrors) {
		for _, r := range relayDrops {
			p.drops[r].Store(0)
		}
	}
}
