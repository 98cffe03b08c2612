package wire

import "strconv"

// Opcode is the BTH operation code (IBA 9.2.1, table 38): the upper three
// bits select the transport, the lower five the operation.
type Opcode uint8

// Transport is the transport service selected by an opcode's upper bits.
type Transport uint8

// Transports (IBA 9.2.1, table 38, OpCode[7:5]).
const (
	TransportRC  Transport = 0 // 000: reliable connection
	TransportUC  Transport = 1 // 001: unreliable connection
	TransportRD  Transport = 2 // 010: reliable datagram
	TransportUD  Transport = 3 // 011: unreliable datagram
	TransportCNP Transport = 4 // 100: congestion notification packet
	TransportXRC Transport = 5 // 101: extended reliable connection
	TransportMfr Transport = 6 // 110, 111: manufacturer specific
)

// String returns the transport's abbreviation.
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "Mfr"
}

// Opcodes (IBA 9.2.1, table 38). RC, RD and UC share the low five bits.
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastImm            Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyImm            Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastImm       Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0A
	RCRDMAWriteOnlyImm       Opcode = 0x0B
	RCRDMAReadRequest        Opcode = 0x0C
	RCRDMAReadResponseFirst  Opcode = 0x0D
	RCRDMAReadResponseMiddle Opcode = 0x0E
	RCRDMAReadResponseLast   Opcode = 0x0F
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastInv            Opcode = 0x16
	RCSendOnlyInv            Opcode = 0x17

	UCSendFirst        Opcode = 0x20
	UCSendMiddle       Opcode = 0x21
	UCSendLast         Opcode = 0x22
	UCSendLastImm      Opcode = 0x23
	UCSendOnly         Opcode = 0x24
	UCSendOnlyImm      Opcode = 0x25
	UCRDMAWriteFirst   Opcode = 0x26
	UCRDMAWriteMiddle  Opcode = 0x27
	UCRDMAWriteLast    Opcode = 0x28
	UCRDMAWriteLastImm Opcode = 0x29
	UCRDMAWriteOnly    Opcode = 0x2A
	UCRDMAWriteOnlyImm Opcode = 0x2B

	RDSendFirst              Opcode = 0x40
	RDSendMiddle             Opcode = 0x41
	RDSendLast               Opcode = 0x42
	RDSendLastImm            Opcode = 0x43
	RDSendOnly               Opcode = 0x44
	RDSendOnlyImm            Opcode = 0x45
	RDRDMAWriteFirst         Opcode = 0x46
	RDRDMAWriteMiddle        Opcode = 0x47
	RDRDMAWriteLast          Opcode = 0x48
	RDRDMAWriteLastImm       Opcode = 0x49
	RDRDMAWriteOnly          Opcode = 0x4A
	RDRDMAWriteOnlyImm       Opcode = 0x4B
	RDRDMAReadRequest        Opcode = 0x4C
	RDRDMAReadResponseFirst  Opcode = 0x4D
	RDRDMAReadResponseMiddle Opcode = 0x4E
	RDRDMAReadResponseLast   Opcode = 0x4F
	RDRDMAReadResponseOnly   Opcode = 0x50
	RDAcknowledge            Opcode = 0x51
	RDAtomicAcknowledge      Opcode = 0x52
	RDCompareSwap            Opcode = 0x53
	RDFetchAdd               Opcode = 0x54
	RDResync                 Opcode = 0x55

	UDSendOnly    Opcode = 0x64
	UDSendOnlyImm Opcode = 0x65
)

// HeaderSet is a bitmask of the extended transport headers that follow the
// BTH. When several are present they appear in the order RDETH, DETH, XRCETH,
// RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (IBA 9.2, packet header
// layouts; 9.3; Annex A14 for XRCETH, which comes first after the BTH).
type HeaderSet uint16

// Extended transport headers.
const (
	HasRDETH HeaderSet = 1 << iota
	HasDETH
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasXRCETH
)

// Has reports whether all headers in x are in s.
func (s HeaderSet) Has(x HeaderSet) bool { return s&x == x }

// Len returns the total length in bytes of the headers in s.
func (s HeaderSet) Len() int {
	n := 0
	if s&HasRDETH != 0 {
		n += RDETHLen
	}
	if s&HasDETH != 0 {
		n += DETHLen
	}
	if s&HasXRCETH != 0 {
		n += XRCETHLen
	}
	if s&HasRETH != 0 {
		n += RETHLen
	}
	if s&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if s&HasAETH != 0 {
		n += AETHLen
	}
	if s&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if s&HasImmDt != 0 {
		n += ImmDtLen
	}
	if s&HasIETH != 0 {
		n += IETHLen
	}
	return n
}

// opFlags describes one operation (the low five bits of an opcode).
type opFlags uint8

const (
	opValid opFlags = 1 << iota
	opPayload
	opFirst
	opMiddle
	opLast
	opOnly
)

type opInfo struct {
	name    string
	flags   opFlags
	headers HeaderSet // ETHs other than RDETH/DETH (which depend on transport)
	hlen    uint8     // filled by init: HeaderLen for the full opcode
}

// opTable is indexed by the full opcode. Built once by init from the
// per-operation descriptions below, following IBA 9.2.1 table 38 and the
// header layouts of IBA 9.2 (which ETHs each opcode carries).
var opTable [256]opInfo

type opDesc struct {
	low     uint8
	name    string
	flags   opFlags
	headers HeaderSet
}

const (
	pF = opValid | opPayload | opFirst
	pM = opValid | opPayload | opMiddle
	pL = opValid | opPayload | opLast
	pO = opValid | opPayload | opOnly
	nO = opValid | opOnly // no payload, single packet
)

// Operations shared by RC, UC and RD (low five bits, IBA table 38).
var sharedOps = []opDesc{
	{0x00, "SendFirst", pF, 0},
	{0x01, "SendMiddle", pM, 0},
	{0x02, "SendLast", pL, 0},
	{0x03, "SendLastImm", pL, HasImmDt},
	{0x04, "SendOnly", pO, 0},
	{0x05, "SendOnlyImm", pO, HasImmDt},
	{0x06, "RDMAWriteFirst", pF, HasRETH},
	{0x07, "RDMAWriteMiddle", pM, 0},
	{0x08, "RDMAWriteLast", pL, 0},
	{0x09, "RDMAWriteLastImm", pL, HasImmDt},
	{0x0A, "RDMAWriteOnly", pO, HasRETH},
	{0x0B, "RDMAWriteOnlyImm", pO, HasRETH | HasImmDt},
}

// Operations of RC and RD only.
var reliableOps = []opDesc{
	{0x0C, "RDMAReadRequest", nO, HasRETH},
	{0x0D, "RDMAReadResponseFirst", pF, HasAETH},
	{0x0E, "RDMAReadResponseMiddle", pM, 0},
	{0x0F, "RDMAReadResponseLast", pL, HasAETH},
	{0x10, "RDMAReadResponseOnly", pO, HasAETH},
	{0x11, "Acknowledge", nO, HasAETH},
	{0x12, "AtomicAcknowledge", nO, HasAETH | HasAtomicAckETH},
	{0x13, "CompareSwap", nO, HasAtomicETH},
	{0x14, "FetchAdd", nO, HasAtomicETH},
}

func init() {
	add := func(t Transport, prefix string, d opDesc, extra HeaderSet) {
		op := uint8(t)<<5 | d.low
		h := d.headers | extra
		opTable[op] = opInfo{name: prefix + d.name, flags: d.flags, headers: h, hlen: uint8(h.Len())}
	}
	for _, d := range sharedOps {
		add(TransportRC, "RC", d, 0)
		add(TransportUC, "UC", d, 0)
	}
	for _, d := range reliableOps {
		add(TransportRC, "RC", d, 0)
	}
	// IBA table 38: SEND Last/Only with Invalidate exist for RC only.
	add(TransportRC, "RC", opDesc{0x16, "SendLastInv", pL, HasIETH}, 0)
	add(TransportRC, "RC", opDesc{0x17, "SendOnlyInv", pO, HasIETH}, 0)
	// RD requests carry RDETH and DETH; RD responses (read responses, ACKs)
	// carry RDETH only (IBA 9.2, 9.3.1, 9.3.2).
	for _, d := range sharedOps {
		add(TransportRD, "RD", d, HasRDETH|HasDETH)
	}
	for _, d := range reliableOps {
		extra := HasRDETH | HasDETH
		if d.low >= 0x0D && d.low <= 0x12 {
			extra = HasRDETH
		}
		add(TransportRD, "RD", d, extra)
	}
	add(TransportRD, "RD", opDesc{0x15, "Resync", nO, 0}, HasRDETH|HasDETH)
	// UD: SEND Only and SEND Only with Immediate, with DETH (IBA 9.2, 9.3.2).
	add(TransportUD, "UD", opDesc{0x04, "SendOnly", pO, 0}, HasDETH)
	add(TransportUD, "UD", opDesc{0x05, "SendOnlyImm", pO, HasImmDt}, HasDETH)
	// XRC (IBA Annex A14): the RC operations with transport bits 101; requests carry an
	// XRCETH, responses (read responses, ACKs) do not.
	for _, d := range append(append(append([]opDesc(nil), sharedOps...), reliableOps...),
		opDesc{0x16, "SendLastInv", pL, HasIETH}, opDesc{0x17, "SendOnlyInv", pO, HasIETH}) {
		extra := HasXRCETH
		if d.low >= 0x0D && d.low <= 0x12 {
			extra = 0
		}
		add(TransportXRC, "XRC", d, extra)
	}
}

// String returns the opcode's name, e.g. "RCSendFirst", or "Opcode(0xNN)".
func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(o)|0x100, 16)[1:] + ")"
}

// Transport returns the transport selected by the upper three bits.
func (o Opcode) Transport() Transport {
	t := Transport(o >> 5)
	if t > TransportMfr {
		return TransportMfr
	}
	return t
}

// Valid reports whether o is an opcode this package knows: the RC, UC, RD,
// UD and XRC opcodes of IBA table 38 (CNP and manufacturer-specific opcodes
// are not supported).
func (o Opcode) Valid() bool { return opTable[o].flags&opValid != 0 }

// Headers returns the extended transport headers that follow the BTH.
func (o Opcode) Headers() HeaderSet { return opTable[o].headers }

// HeaderLen returns the total length in bytes of the extended transport
// headers that follow the BTH.
func (o Opcode) HeaderLen() int { return int(opTable[o].hlen) }

// HasPayload reports whether packets with this opcode carry a payload (which
// may still be empty, e.g. a zero-length SEND).
func (o Opcode) HasPayload() bool { return opTable[o].flags&opPayload != 0 }

// IsFirst reports whether o is the first packet of a multi-packet message.
func (o Opcode) IsFirst() bool { return opTable[o].flags&opFirst != 0 }

// IsMiddle reports whether o is a middle packet of a multi-packet message.
func (o Opcode) IsMiddle() bool { return opTable[o].flags&opMiddle != 0 }

// IsLast reports whether o is the last packet of a multi-packet message.
func (o Opcode) IsLast() bool { return opTable[o].flags&opLast != 0 }

// IsOnly reports whether o is the only packet of its message (including
// requests and responses without payload: read requests, ACKs, atomics).
func (o Opcode) IsOnly() bool { return opTable[o].flags&opOnly != 0 }
