package wire

import "encoding/binary"

// Performance management (class MgmtClassPerfMgt, IBA 16.1). A PMA MAD
// has the common header, 40 reserved bytes, and the attribute at byte 64
// (IBA 16.1.1).
const (
	PMADataOffset = 64
	PMADataLen    = MADLen - PMADataOffset
)

// PMAData returns the 192 bytes of a PMA MAD's attribute data.
func (m MAD) PMAData() []byte { return m[PMADataOffset:MADLen] }

// Performance management attribute IDs (IBA 16.1.2);
// ClassPortInfo is AttrClassPortInfo.
const (
	AttrPortSamplesControl   = 0x0010
	AttrPortSamplesResult    = 0x0011
	AttrPortCounters         = 0x0012
	AttrPortCountersExtended = 0x001D
)

// PMA ClassPortInfo CapabilityMask bits (IBA 16.1.2; opensm
// ib_types.h IB_PM_*).
const (
	PMACapAllPortSelect                 = 1 << 8 // PortSelect 0xFF sums all ports
	PMACapExtendedWidthSupported        = 1 << 9 // PortCountersExtended implemented
	PMACapExtendedWidthNoIETFSupported  = 1 << 10
	PMACapSamplesOnlySupported          = 1 << 11
	PMACapPortCountersXmitWaitSupported = 1 << 12
	PMACapInhibitLimitedPKeyMcastConstr = 1 << 13
	PMACapRSFECCountersSupported        = 1 << 14
	PMACapQP1DropSupported              = 1 << 15
)

// PMA ClassPortInfo CapabilityMask2 bits.
const (
	PMACap2PMKeySupported                = 1 << 0
	PMACap2AdditionalPortCountersExtSupp = 1 << 1
)

// PortSelectAll in PortSelect addresses every port of a switch at once
// (Get sums them, Set resets all) when PMACapAllPortSelect is set.
const PortSelectAll = 0xff

// ---------------------------------------------------------------------
// PortCounters (IBA 16.1.3.5)

// PortCountersLen is the size of PortCounters.
const PortCountersLen = 44

// PortCounter names one PortCounters counter. Its value is also the bit
// of the combined 24-bit select mask CounterSelect | CounterSelect2<<16
// (the mask perfquery and libibmad use): counters 0-15 are CounterSelect
// bits 0-15, PCXmitWait and PCQP1Dropped CounterSelect2 bits 0 and 1.
type PortCounter uint8

// PortCounters counters, in CounterSelect bit order (IBA 16.1.3.5).
const (
	PCSymbolErrorCounter PortCounter = iota
	PCLinkErrorRecoveryCounter
	PCLinkDownedCounter
	PCPortRcvErrors
	PCPortRcvRemotePhysicalErrors
	PCPortRcvSwitchRelayErrors
	PCPortXmitDiscards
	PCPortXmitConstraintErrors
	PCPortRcvConstraintErrors
	PCLocalLinkIntegrityErrors
	PCExcessiveBufferOverrunErrors
	PCVL15Dropped
	PCPortXmitData
	PCPortRcvData
	PCPortXmitPkts
	PCPortRcvPkts
	PCPortXmitWait // CounterSelect2 bit 0
	PCQP1Dropped   // CounterSelect2 bit 1
	NumPortCounters
)

// CounterSelect bits (IBA 16.1.3.5); a Set(PortCounters) writes the
// selected counters (to zero, in practice).
const (
	CounterSelectSymbolError                  = 1 << PCSymbolErrorCounter
	CounterSelectLinkErrorRecovery            = 1 << PCLinkErrorRecoveryCounter
	CounterSelectLinkDowned                   = 1 << PCLinkDownedCounter
	CounterSelectPortRcvErrors                = 1 << PCPortRcvErrors
	CounterSelectPortRcvRemotePhysicalErrors  = 1 << PCPortRcvRemotePhysicalErrors
	CounterSelectPortRcvSwitchRelayErrors     = 1 << PCPortRcvSwitchRelayErrors
	CounterSelectPortXmitDiscards             = 1 << PCPortXmitDiscards
	CounterSelectPortXmitConstraintErrors     = 1 << PCPortXmitConstraintErrors
	CounterSelectPortRcvConstraintErrors      = 1 << PCPortRcvConstraintErrors
	CounterSelectLocalLinkIntegrityErrors     = 1 << PCLocalLinkIntegrityErrors
	CounterSelectExcessiveBufferOverrunErrors = 1 << PCExcessiveBufferOverrunErrors
	CounterSelectVL15Dropped                  = 1 << PCVL15Dropped
	CounterSelectPortXmitData                 = 1 << PCPortXmitData
	CounterSelectPortRcvData                  = 1 << PCPortRcvData
	CounterSelectPortXmitPkts                 = 1 << PCPortXmitPkts
	CounterSelectPortRcvPkts                  = 1 << PCPortRcvPkts
	CounterSelectAll                          = 0xffff

	CounterSelect2PortXmitWait = 1 << 0
	CounterSelect2QP1Dropped   = 1 << 1
)

// pmaCounterFields holds each PortCounter's IBA bit offset and width in
// PortCounters.
var pmaCounterFields = [NumPortCounters]struct{ off, w uint16 }{
	PCSymbolErrorCounter:           {32, 16},
	PCLinkErrorRecoveryCounter:     {48, 8},
	PCLinkDownedCounter:            {56, 8},
	PCPortRcvErrors:                {64, 16},
	PCPortRcvRemotePhysicalErrors:  {80, 16},
	PCPortRcvSwitchRelayErrors:     {96, 16},
	PCPortXmitDiscards:             {112, 16},
	PCPortXmitConstraintErrors:     {128, 8},
	PCPortRcvConstraintErrors:      {136, 8},
	PCLocalLinkIntegrityErrors:     {152, 4},
	PCExcessiveBufferOverrunErrors: {156, 4},
	PCVL15Dropped:                  {176, 16},
	PCPortXmitData:                 {192, 32},
	PCPortRcvData:                  {224, 32},
	PCPortXmitPkts:                 {256, 32},
	PCPortRcvPkts:                  {288, 32},
	PCPortXmitWait:                 {320, 32},
	PCQP1Dropped:                   {160, 16},
}

// Width returns the counter's width in bits (4, 8, 16 or 32).
func (c PortCounter) Width() int { return int(pmaCounterFields[c].w) }

// Max returns the counter's saturated value, all ones.
func (c PortCounter) Max() uint64 { return 1<<pmaCounterFields[c].w - 1 }

// PortCounters reports a port's error and traffic counters (IBA 16.1.3.5):
//
//	byte 0:      Reserved
//	byte 1:      PortSelect
//	bytes 2-3:   CounterSelect
//	bytes 4-5:   SymbolErrorCounter
//	byte 6:      LinkErrorRecoveryCounter
//	byte 7:      LinkDownedCounter
//	bytes 8-9:   PortRcvErrors
//	bytes 10-11: PortRcvRemotePhysicalErrors
//	bytes 12-13: PortRcvSwitchRelayErrors
//	bytes 14-15: PortXmitDiscards
//	byte 16:     PortXmitConstraintErrors
//	byte 17:     PortRcvConstraintErrors
//	byte 18:     CounterSelect2
//	byte 19:     LocalLinkIntegrityErrors(4) ExcessiveBufferOverrunErrors(4)
//	bytes 20-21: QP1Dropped (formerly reserved; PMACapQP1DropSupported)
//	bytes 22-23: VL15Dropped
//	bytes 24-27: PortXmitData (in 4-octet words)
//	bytes 28-31: PortRcvData (in 4-octet words)
//	bytes 32-35: PortXmitPkts
//	bytes 36-39: PortRcvPkts
//	bytes 40-43: PortXmitWait (PMACapPortCountersXmitWaitSupported)
//
// IBA 16.1.3.5: the counters do not wrap; each stops at all ones until
// reset. SetCounter and AddCounter saturate; the plain setters store the
// value given.
type PortCounters []byte

// Counter returns counter c.
func (p PortCounters) Counter(c PortCounter) uint64 {
	f := pmaCounterFields[c]
	return uint64(smGetBits(p, int(f.off), int(f.w)))
}

// SetCounter stores v in counter c, saturating at c.Max().
func (p PortCounters) SetCounter(c PortCounter, v uint64) {
	f := pmaCounterFields[c]
	smSetBits(p, int(f.off), int(f.w), uint32(min(v, c.Max())))
}

// AddCounter adds n to counter c, saturating at c.Max().
func (p PortCounters) AddCounter(c PortCounter, n uint64) {
	v := p.Counter(c)
	if n > c.Max()-v {
		v = c.Max()
	} else {
		v += n
	}
	p.SetCounter(c, v)
}

// SelectMask returns CounterSelect | CounterSelect2<<16: bit c is set if
// counter c is selected.
func (p PortCounters) SelectMask() uint32 {
	return uint32(p.CounterSelect()) | uint32(p.CounterSelect2())<<16
}

// Selected reports whether counter c is selected by CounterSelect or
// CounterSelect2.
func (p PortCounters) Selected(c PortCounter) bool { return p.SelectMask()>>c&1 != 0 }

// PortSelect returns the port the counters are for (PortSelectAll: all).
func (p PortCounters) PortSelect() uint8 { return p[1] }

// CounterSelect returns the CounterSelect* bits.
func (p PortCounters) CounterSelect() uint16 { return binary.BigEndian.Uint16(p[2:]) }

// SymbolErrorCounter returns SymbolErrorCounter.
func (p PortCounters) SymbolErrorCounter() uint16 { return binary.BigEndian.Uint16(p[4:]) }

// LinkErrorRecoveryCounter returns LinkErrorRecoveryCounter.
func (p PortCounters) LinkErrorRecoveryCounter() uint8 { return p[6] }

// LinkDownedCounter returns LinkDownedCounter.
func (p PortCounters) LinkDownedCounter() uint8 { return p[7] }

// PortRcvErrors returns PortRcvErrors.
func (p PortCounters) PortRcvErrors() uint16 { return binary.BigEndian.Uint16(p[8:]) }

// PortRcvRemotePhysicalErrors returns PortRcvRemotePhysicalErrors.
func (p PortCounters) PortRcvRemotePhysicalErrors() uint16 { return binary.BigEndian.Uint16(p[10:]) }

// PortRcvSwitchRelayErrors returns PortRcvSwitchRelayErrors.
func (p PortCounters) PortRcvSwitchRelayErrors() uint16 { return binary.BigEndian.Uint16(p[12:]) }

// PortXmitDiscards returns PortXmitDiscards.
func (p PortCounters) PortXmitDiscards() uint16 { return binary.BigEndian.Uint16(p[14:]) }

// PortXmitConstraintErrors returns PortXmitConstraintErrors.
func (p PortCounters) PortXmitConstraintErrors() uint8 { return p[16] }

// PortRcvConstraintErrors returns PortRcvConstraintErrors.
func (p PortCounters) PortRcvConstraintErrors() uint8 { return p[17] }

// CounterSelect2 returns the CounterSelect2* bits.
func (p PortCounters) CounterSelect2() uint8 { return p[18] }

// LocalLinkIntegrityErrors returns the 4-bit LocalLinkIntegrityErrors.
func (p PortCounters) LocalLinkIntegrityErrors() uint8 { return p[19] >> 4 }

// ExcessiveBufferOverrunErrors returns the 4-bit
// ExcessiveBufferOverrunErrors.
func (p PortCounters) ExcessiveBufferOverrunErrors() uint8 { return p[19] & 0xf }

// QP1Dropped returns QP1Dropped.
func (p PortCounters) QP1Dropped() uint16 { return binary.BigEndian.Uint16(p[20:]) }

// VL15Dropped returns VL15Dropped.
func (p PortCounters) VL15Dropped() uint16 { return binary.BigEndian.Uint16(p[22:]) }

// PortXmitData returns PortXmitData, in 4-octet words.
func (p PortCounters) PortXmitData() uint32 { return binary.BigEndian.Uint32(p[24:]) }

// PortRcvData returns PortRcvData, in 4-octet words.
func (p PortCounters) PortRcvData() uint32 { return binary.BigEndian.Uint32(p[28:]) }

// PortXmitPkts returns PortXmitPkts.
func (p PortCounters) PortXmitPkts() uint32 { return binary.BigEndian.Uint32(p[32:]) }

// PortRcvPkts returns PortRcvPkts.
func (p PortCounters) PortRcvPkts() uint32 { return binary.BigEndian.Uint32(p[36:]) }

// PortXmitWait returns PortXmitWait.
func (p PortCounters) PortXmitWait() uint32 { return binary.BigEndian.Uint32(p[40:]) }

// SetPortSelect sets PortSelect.
func (p PortCounters) SetPortSelect(v uint8) { p[1] = v }

// SetCounterSelect sets CounterSelect.
func (p PortCounters) SetCounterSelect(v uint16) { binary.BigEndian.PutUint16(p[2:], v) }

// SetSymbolErrorCounter sets SymbolErrorCounter.
func (p PortCounters) SetSymbolErrorCounter(v uint16) { binary.BigEndian.PutUint16(p[4:], v) }

// SetLinkErrorRecoveryCounter sets LinkErrorRecoveryCounter.
func (p PortCounters) SetLinkErrorRecoveryCounter(v uint8) { p[6] = v }

// SetLinkDownedCounter sets LinkDownedCounter.
func (p PortCounters) SetLinkDownedCounter(v uint8) { p[7] = v }

// SetPortRcvErrors sets PortRcvErrors.
func (p PortCounters) SetPortRcvErrors(v uint16) { binary.BigEndian.PutUint16(p[8:], v) }

// SetPortRcvRemotePhysicalErrors sets PortRcvRemotePhysicalErrors.
func (p PortCounters) SetPortRcvRemotePhysicalErrors(v uint16) {
	binary.BigEndian.PutUint16(p[10:], v)
}

// SetPortRcvSwitchRelayErrors sets PortRcvSwitchRelayErrors.
func (p PortCounters) SetPortRcvSwitchRelayErrors(v uint16) { binary.BigEndian.PutUint16(p[12:], v) }

// SetPortXmitDiscards sets PortXmitDiscards.
func (p PortCounters) SetPortXmitDiscards(v uint16) { binary.BigEndian.PutUint16(p[14:], v) }

// SetPortXmitConstraintErrors sets PortXmitConstraintErrors.
func (p PortCounters) SetPortXmitConstraintErrors(v uint8) { p[16] = v }

// SetPortRcvConstraintErrors sets PortRcvConstraintErrors.
func (p PortCounters) SetPortRcvConstraintErrors(v uint8) { p[17] = v }

// SetCounterSelect2 sets CounterSelect2.
func (p PortCounters) SetCounterSelect2(v uint8) { p[18] = v }

// SetLocalLinkIntegrityErrors sets the 4-bit LocalLinkIntegrityErrors.
func (p PortCounters) SetLocalLinkIntegrityErrors(v uint8) { p[19] = p[19]&0x0f | v<<4 }

// SetExcessiveBufferOverrunErrors sets the 4-bit
// ExcessiveBufferOverrunErrors.
func (p PortCounters) SetExcessiveBufferOverrunErrors(v uint8) { p[19] = p[19]&0xf0 | v&0xf }

// SetQP1Dropped sets QP1Dropped.
func (p PortCounters) SetQP1Dropped(v uint16) { binary.BigEndian.PutUint16(p[20:], v) }

// SetVL15Dropped sets VL15Dropped.
func (p PortCounters) SetVL15Dropped(v uint16) { binary.BigEndian.PutUint16(p[22:], v) }

// SetPortXmitData sets PortXmitData (4-octet words).
func (p PortCounters) SetPortXmitData(v uint32) { binary.BigEndian.PutUint32(p[24:], v) }

// SetPortRcvData sets PortRcvData (4-octet words).
func (p PortCounters) SetPortRcvData(v uint32) { binary.BigEndian.PutUint32(p[28:], v) }

// SetPortXmitPkts sets PortXmitPkts.
func (p PortCounters) SetPortXmitPkts(v uint32) { binary.BigEndian.PutUint32(p[32:], v) }

// SetPortRcvPkts sets PortRcvPkts.
func (p PortCounters) SetPortRcvPkts(v uint32) { binary.BigEndian.PutUint32(p[36:], v) }

// SetPortXmitWait sets PortXmitWait.
func (p PortCounters) SetPortXmitWait(v uint32) { binary.BigEndian.PutUint32(p[40:], v) }

// ---------------------------------------------------------------------
// PortCountersExtended (IBA 16.1.4.11)

// PortCountersExtendedLen is the size of PortCountersExtended up to
// PortMulticastRcvPkts (the NoIETF error counters that may follow are not
// modelled).
const PortCountersExtendedLen = 72

// PortCountersExtended CounterSelect bits (IBA 16.1.4.11).
const (
	CounterSelectExtPortXmitData          = 1 << 0
	CounterSelectExtPortRcvData           = 1 << 1
	CounterSelectExtPortXmitPkts          = 1 << 2
	CounterSelectExtPortRcvPkts           = 1 << 3
	CounterSelectExtPortUnicastXmitPkts   = 1 << 4
	CounterSelectExtPortUnicastRcvPkts    = 1 << 5
	CounterSelectExtPortMulticastXmitPkts = 1 << 6
	CounterSelectExtPortMulticastRcvPkts  = 1 << 7
	CounterSelectExtAll                   = 0xff
)

// PortCountersExtended reports 64-bit traffic counters (IBA 16.1.4.11):
//
//	byte 0:      Reserved
//	byte 1:      PortSelect
//	bytes 2-3:   CounterSelect
//	bytes 4-7:   CounterSelect2 (NoIETF counters; else reserved)
//	bytes 8-15:  PortXmitData (4-octet words)
//	bytes 16-23: PortRcvData (4-octet words)
//	bytes 24-31: PortXmitPkts
//	bytes 32-39: PortRcvPkts
//	bytes 40-47: PortUnicastXmitPkts
//	bytes 48-55: PortUnicastRcvPkts
//	bytes 56-63: PortMulticastXmitPkts
//	bytes 64-71: PortMulticastRcvPkts
type PortCountersExtended []byte

// PortSelect returns the port the counters are for.
func (p PortCountersExtended) PortSelect() uint8 { return p[1] }

// CounterSelect returns the CounterSelectExt* bits.
func (p PortCountersExtended) CounterSelect() uint16 { return binary.BigEndian.Uint16(p[2:]) }

// CounterSelect2 returns CounterSelect2.
func (p PortCountersExtended) CounterSelect2() uint32 { return binary.BigEndian.Uint32(p[4:]) }

// PortXmitData returns PortXmitData, in 4-octet words.
func (p PortCountersExtended) PortXmitData() uint64 { return binary.BigEndian.Uint64(p[8:]) }

// PortRcvData returns PortRcvData, in 4-octet words.
func (p PortCountersExtended) PortRcvData() uint64 { return binary.BigEndian.Uint64(p[16:]) }

// PortXmitPkts returns PortXmitPkts.
func (p PortCountersExtended) PortXmitPkts() uint64 { return binary.BigEndian.Uint64(p[24:]) }

// PortRcvPkts returns PortRcvPkts.
func (p PortCountersExtended) PortRcvPkts() uint64 { return binary.BigEndian.Uint64(p[32:]) }

// PortUnicastXmitPkts returns PortUnicastXmitPkts.
func (p PortCountersExtended) PortUnicastXmitPkts() uint64 { return binary.BigEndian.Uint64(p[40:]) }

// PortUnicastRcvPkts returns PortUnicastRcvPkts.
func (p PortCountersExtended) PortUnicastRcvPkts() uint64 { return binary.BigEndian.Uint64(p[48:]) }

// PortMulticastXmitPkts returns PortMulticastXmitPkts.
func (p PortCountersExtended) PortMulticastXmitPkts() uint64 {
	return binary.BigEndian.Uint64(p[56:])
}

// PortMulticastRcvPkts returns PortMulticastRcvPkts.
func (p PortCountersExtended) PortMulticastRcvPkts() uint64 {
	return binary.BigEndian.Uint64(p[64:])
}

// SetPortSelect sets PortSelect.
func (p PortCountersExtended) SetPortSelect(v uint8) { p[1] = v }

// SetCounterSelect sets CounterSelect.
func (p PortCountersExtended) SetCounterSelect(v uint16) { binary.BigEndian.PutUint16(p[2:], v) }

// SetCounterSelect2 sets CounterSelect2.
func (p PortCountersExtended) SetCounterSelect2(v uint32) { binary.BigEndian.PutUint32(p[4:], v) }

// SetPortXmitData sets PortXmitData (4-octet words).
func (p PortCountersExtended) SetPortXmitData(v uint64) { binary.BigEndian.PutUint64(p[8:], v) }

// SetPortRcvData sets PortRcvData (4-octet words).
func (p PortCountersExtended) SetPortRcvData(v uint64) { binary.BigEndian.PutUint64(p[16:], v) }

// SetPortXmitPkts sets PortXmitPkts.
func (p PortCountersExtended) SetPortXmitPkts(v uint64) { binary.BigEndian.PutUint64(p[24:], v) }

// SetPortRcvPkts sets PortRcvPkts.
func (p PortCountersExtended) SetPortRcvPkts(v uint64) { binary.BigEndian.PutUint64(p[32:], v) }

// SetPortUnicastXmitPkts sets PortUnicastXmitPkts.
func (p PortCountersExtended) SetPortUnicastXmitPkts(v uint64) {
	binary.BigEndian.PutUint64(p[40:], v)
}

// SetPortUnicastRcvPkts sets PortUnicastRcvPkts.
func (p PortCountersExtended) SetPortUnicastRcvPkts(v uint64) {
	binary.BigEndian.PutUint64(p[48:], v)
}

// SetPortMulticastXmitPkts sets PortMulticastXmitPkts.
func (p PortCountersExtended) SetPortMulticastXmitPkts(v uint64) {
	binary.BigEndian.PutUint64(p[56:], v)
}

// SetPortMulticastRcvPkts sets PortMulticastRcvPkts.
func (p PortCountersExtended) SetPortMulticastRcvPkts(v uint64) {
	binary.BigEndian.PutUint64(p[64:], v)
}
