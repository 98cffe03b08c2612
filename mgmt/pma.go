package mgmt

import "github.com/pibgw/pibgw/wire"

// Counter is one of the port counters the PMA reads and resets.
type Counter uint8

// The counters, in PortCountersExtended's CounterSelect bit order first.
const (
	XmitData Counter = iota
	RcvData
	XmitPkts
	RcvPkts
	UnicastXmitPkts
	UnicastRcvPkts
	MulticastXmitPkts
	MulticastRcvPkts
	RcvErrors
	RcvSwitchRelayErrors
	XmitDiscards
	VL15Dropped
	NumCounters
)

// CounterSet is a set of counters, bit c for Counter c.
type CounterSet uint16

// Has reports whether c is in the set.
func (s CounterSet) Has(c Counter) bool { return s>>c&1 != 0 }

// Counters are one port's counters (or several ports' sums).
type Counters [NumCounters]uint64

// PMANode is a node's side of the PMA: the ports a PortSelect addresses, and each
// port's counters.
type PMANode interface {
	// PMAPorts returns the ports PortSelect sel addresses: on a CA the port the MAD came
	// in on, by number (IBA 16.1.3.5); on a switch one port, or all with PortSelectAll.
	PMAPorts(sel uint8) (lo, hi int, ok bool)
	// PMACounters adds port i's counters into c.
	PMACounters(i int, c *Counters)
	// PMAReset zeroes port i's counters in set.
	PMAReset(i int, set CounterSet)
}

// pcCounters maps PortCounters' fields to the counters behind them; the others (symbol
// errors, link recovery, constraint errors, XmitWait…) have no cause in a soft link and
// stay 0. The 32-bit fields saturate (IBA 16.1.3.5).
var pcCounters = [...]struct {
	pc wire.PortCounter
	c  Counter
}{
	{wire.PCPortRcvErrors, RcvErrors},
	{wire.PCPortRcvSwitchRelayErrors, RcvSwitchRelayErrors},
	{wire.PCPortXmitDiscards, XmitDiscards},
	{wire.PCVL15Dropped, VL15Dropped},
	{wire.PCPortXmitData, XmitData},
	{wire.PCPortRcvData, RcvData},
	{wire.PCPortXmitPkts, XmitPkts},
	{wire.PCPortRcvPkts, RcvPkts},
}

// AnswerPMA answers one PMA request of attr (IBA 16.1): req is the request's PMA data,
// out the response's (a copy of req on entry); capMask and respTime go into
// ClassPortInfo. It returns the MAD status. PortCounters and PortCountersExtended read the
// same 64-bit counters, and a Set of either resets them (the counters CounterSelect
// chooses, on every port PortSelect addresses).
func AnswerPMA(n PMANode, capMask uint16, respTime uint8, set bool, attr uint16, req, out []byte) uint16 {
	switch attr {
	case wire.AttrClassPortInfo:
		if set {
			return wire.StatusMethodAttrNotSupp
		}
		wire.FillPMAClassPortInfo(out, capMask, respTime)
	case wire.AttrPortCounters:
		in := wire.PortCounters(req)
		lo, hi, ok := n.PMAPorts(in.PortSelect())
		if !ok {
			return wire.StatusInvalidAttrOrModVal
		}
		var sel CounterSet
		for _, f := range pcCounters {
			if set && in.Selected(f.pc) {
				sel |= 1 << f.c
			}
		}
		c := resetAndRead(n, lo, hi, sel)
		o := wire.PortCounters(out)
		clear(o[4:wire.PortCountersLen])
		for _, f := range pcCounters {
			o.SetCounter(f.pc, c[f.c])
		}
	case wire.AttrPortCountersExtended:
		in := wire.PortCountersExtended(req)
		lo, hi, ok := n.PMAPorts(in.PortSelect())
		if !ok {
			return wire.StatusInvalidAttrOrModVal
		}
		var sel CounterSet
		if set {
			// CounterSelect's bits are the first eight Counters.
			sel = CounterSet(in.CounterSelect() & wire.CounterSelectExtAll)
		}
		c := resetAndRead(n, lo, hi, sel)
		o := wire.PortCountersExtended(out)
		clear(o[4:wire.PortCountersExtendedLen])
		o.SetPortXmitData(c[XmitData])
		o.SetPortRcvData(c[RcvData])
		o.SetPortXmitPkts(c[XmitPkts])
		o.SetPortRcvPkts(c[RcvPkts])
		o.SetPortUnicastXmitPkts(c[UnicastXmitPkts])
		o.SetPortUnicastRcvPkts(c[UnicastRcvPkts])
		o.SetPortMulticastXmitPkts(c[MulticastXmitPkts])
		o.SetPortMulticastRcvPkts(c[MulticastRcvPkts])
	default:
		return wire.StatusMethodAttrNotSupp
	}
	return 0
}

// resetAndRead zeroes the counters in sel on ports lo..hi, then sums their counters.
func resetAndRead(n PMANode, lo, hi int, sel CounterSet) Counters {
	var c Counters
	for i := lo; i <= hi; i++ {
		if sel != 0 {
			n.PMAReset(i, sel)
		}
		n.PMACounters(i, &c)
	}
	return c
}
