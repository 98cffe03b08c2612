package hca

import (
	"github.com/pibgw/pibgw/mgmt"
	"github.com/pibgw/pibgw/wire"
)

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
// (a copy of req on entry). The rules are the fabric's one PMA's (mgmt.AnswerPMA).
func (p *Port) pmaAttr(set bool, attr uint16, req, out []byte) uint16 {
	return mgmt.AnswerPMA(portPMA{p}, pmaCapMask, pmaRespTimeValue, set, attr, req, out)
}

// portPMA is the port as mgmt's PMA sees it: a CA has one port per PortSelect, the port
// the MAD came in on (IBA 16.1.3.5), so no AllPortSelect.
type portPMA struct{ p *Port }

func (x portPMA) PMAPorts(sel uint8) (lo, hi int, ok bool) {
	n := int(x.p.num)
	return n, n, sel == x.p.num
}

func (x portPMA) PMACounters(_ int, c *mgmt.Counters) {
	x.p.refreshCounters()
	for i, hc := range pmaCounters {
		if hc != cntNone {
			c[i] += x.p.counters.Get(hc)
		}
	}
}

func (x portPMA) PMAReset(_ int, set mgmt.CounterSet) {
	for i, hc := range pmaCounters {
		if hc != cntNone && set.Has(mgmt.Counter(i)) {
			x.p.counters.v[hc].Store(0)
		}
	}
}

// cntNone marks a PMA counter an HCA port does not have (switch relay errors).
const cntNone = Counter(0xFF)

// pmaCounters names the port counter behind each of mgmt's PMA counters. PortCounters'
// 32-bit fields and PortCountersExtended's 64-bit ones read the same counters.
var pmaCounters = [mgmt.NumCounters]Counter{
	mgmt.XmitData:             CntXmitData,
	mgmt.RcvData:              CntRcvData,
	mgmt.XmitPkts:             CntXmitPkts,
	mgmt.RcvPkts:              CntRcvPkts,
	mgmt.UnicastXmitPkts:      CntUnicastXmitPkts,
	mgmt.UnicastRcvPkts:       CntUnicastRcvPkts,
	mgmt.MulticastXmitPkts:    CntMulticastXmitPkts,
	mgmt.MulticastRcvPkts:     CntMulticastRcvPkts,
	mgmt.RcvErrors:            CntRcvErrors,
	mgmt.RcvSwitchRelayErrors: cntNone,
	mgmt.XmitDiscards:         CntXmitDiscards,
	mgmt.VL15Dropped:          CntVL15Dropped,
}
