package wire

import (
	"encoding/binary"
	"errors"
)

// Parse errors. Each names one reason a packet is dropped, so that callers
// can count drops by reason (IBA 7.9 link packet checks, 9.6 transport
// header checks).
var (
	ErrShort   = errors.New("wire: packet shorter than its headers")
	ErrLVer    = errors.New("wire: unsupported LRH link version")
	ErrPktLen  = errors.New("wire: LRH PktLen does not match packet length")
	ErrLNH     = errors.New("wire: packet does not match its LRH next header")
	ErrGRH     = errors.New("wire: bad GRH (IPVer, NxtHdr or PayLen)")
	ErrOpcode  = errors.New("wire: unknown or unsupported BTH opcode")
	ErrTVer    = errors.New("wire: unsupported BTH transport version")
	ErrPad     = errors.New("wire: BTH PadCnt exceeds the payload")
	ErrPayload = errors.New("wire: payload present on an opcode that carries none")
)

// RWHLen is the length of the Raw Header of raw (LNH 0) packets: 16 reserved
// bits then an EtherType (IBA 5.4).
const RWHLen = 4

// IPv6HeaderLen is the fixed IPv6 header length (raw IPv6 packets, LNH 1).
const IPv6HeaderLen = 40

// Packet is one parsed packet: views into the buffer given to Parse, nil
// for headers that are absent. Parse fills it without allocating, so one
// Packet can be reused for every packet of a batch.
type Packet struct {
	LRH          LRH
	GRH          GRH
	BTH          BTH
	RDETH        RDETH
	DETH         DETH
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	XRCETH       XRCETH
	// Payload is the payload without its pad bytes. For raw packets it is
	// everything after the LRH (the RWH or IPv6 header included).
	Payload []byte
	// ICRC is the four ICRC bytes; nil for raw packets.
	ICRC []byte
}

// PadFor returns the number of pad bytes (0-3) that bring a payload of n
// bytes to a multiple of four (IBA 9.2, PadCnt).
func PadFor(n int) int { return -n & 3 }

// Parse parses b, one packet from the first LRH byte through the ICRC and
// without a VCRC (how packets cross in-process links), into p. It checks
// what the link and transport layers check before looking at state: the
// LRH version and packet length (IBA 7.7.2, 7.7.8), the next-header chain
// (IBA 7.7.5, 8.3), the opcode and transport version (IBA 9.2.1, 9.2),
// the room for every extended transport header, and the pad count (IBA
// 9.2). It does not check the ICRC (see CheckICRC). On error p holds
// whatever was parsed so far. Parse never panics and never allocates.
func (p *Packet) Parse(b []byte) error {
	*p = Packet{}
	if len(b) < LRHLen {
		return ErrShort
	}
	lrh := LRH(b[:LRHLen])
	p.LRH = lrh
	if lrh.LVer() != LRHVersion {
		return ErrLVer
	}
	if int(lrh.PktLen())*4 != len(b) {
		return ErrPktLen
	}
	off := LRHLen
	switch lrh.LNH() {
	case LNHRaw:
		// IBA 5.4: raw packets carry a Raw Header and no ICRC.
		if len(b) < off+RWHLen {
			return ErrLNH
		}
		p.Payload = b[off:]
		return nil
	case LNHIPv6:
		if len(b) < off+IPv6HeaderLen || b[off]>>4 != 6 {
			return ErrLNH
		}
		p.Payload = b[off:]
		return nil
	case LNHGlobal:
		if len(b) < off+GRHLen {
			return ErrShort
		}
		g := GRH(b[off : off+GRHLen])
		p.GRH = g
		// IBA 8.3: PayLen counts from the end of the GRH through the ICRC.
		if g.IPVer() != GRHIPVer || g.NxtHdr() != NxtHdrBTH ||
			int(g.PayLen()) != len(b)-off-GRHLen {
			return ErrGRH
		}
		off += GRHLen
	}
	if len(b) < off+BTHLen+ICRCLen {
		return ErrShort
	}
	bth := BTH(b[off : off+BTHLen])
	p.BTH = bth
	off += BTHLen
	op := bth.OpCode()
	if !op.Valid() {
		return ErrOpcode
	}
	if bth.TVer() != BTHTVer {
		return ErrTVer
	}
	end := len(b) - ICRCLen
	if off+op.HeaderLen() > end {
		return ErrShort
	}
	h := op.Headers()
	if h&HasRDETH != 0 {
		p.RDETH = RDETH(b[off : off+RDETHLen])
		off += RDETHLen
	}
	if h&HasDETH != 0 {
		p.DETH = DETH(b[off : off+DETHLen])
		off += DETHLen
	}
	if h&HasXRCETH != 0 {
		p.XRCETH = XRCETH(b[off : off+XRCETHLen])
		off += XRCETHLen
	}
	if h&HasRETH != 0 {
		p.RETH = RETH(b[off : off+RETHLen])
		off += RETHLen
	}
	if h&HasAtomicETH != 0 {
		p.AtomicETH = AtomicETH(b[off : off+AtomicETHLen])
		off += AtomicETHLen
	}
	if h&HasAETH != 0 {
		p.AETH = AETH(b[off : off+AETHLen])
		off += AETHLen
	}
	if h&HasAtomicAckETH != 0 {
		p.AtomicAckETH = AtomicAckETH(b[off : off+AtomicAckETHLen])
		off += AtomicAckETHLen
	}
	if h&HasImmDt != 0 {
		p.ImmDt = ImmDt(b[off : off+ImmDtLen])
		off += ImmDtLen
	}
	if h&HasIETH != 0 {
		p.IETH = IETH(b[off : off+IETHLen])
		off += IETHLen
	}
	p.ICRC = b[end:]
	pay := b[off:end]
	pad := int(bth.PadCnt())
	if !op.HasPayload() {
		if len(pay) != 0 {
			return ErrPayload
		}
		if pad != 0 {
			return ErrPad
		}
		return nil
	}
	if pad > len(pay) {
		return ErrPad
	}
	p.Payload = pay[:len(pay)-pad]
	return nil
}

// ICRCValue returns the ICRC carried by the packet, or 0 for raw packets.
func (p *Packet) ICRCValue() uint32 {
	if len(p.ICRC) != ICRCLen {
		return 0
	}
	return binary.LittleEndian.Uint32(p.ICRC)
}
