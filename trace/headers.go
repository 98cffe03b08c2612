package trace

import (
	"github.com/pibgw/pibgw/wire"
)

// Headers is a packet's headers decoded when it is recorded (a copy of the fields, not
// of the bytes: the ring stays small and needs no parsing when read).
type Headers struct {
	Len      uint32 // the whole packet, LRH through ICRC
	Valid    bool   // the packet parsed (a malformed one keeps what parsed)
	HasBTH   bool
	GRH      bool
	SLID     uint16
	DLID     uint16
	SL, VL   uint8
	Opcode   wire.Opcode
	PKey     uint16
	DQPN     uint32
	PSN      uint32
	AckReq   bool
	SE       bool
	HasDETH  bool
	QKey     uint32
	SrcQP    uint32
	HasXRC   bool   // an XRC request's XRCETH (IBA Annex A14)
	XRCSRQ   uint32 // its destination XRC SRQ
	HasRETH  bool   // RETH, or AtomicETH (VA, R_Key; DMALen 8)
	VA       uint64
	RKey     uint32
	DMALen   uint32
	HasAETH  bool
	Syndrome uint8
	MSN      uint32
	HasImm   bool
	Imm      uint32
	PayLen   uint32
	// A MAD (packets to or from QP0/QP1): class, method, attribute and transaction ID.
	HasMAD    bool
	MADClass  uint8
	MADMethod uint8
	MADAttr   uint16
	MADTID    uint64
}

// Decode fills h from raw (LRH through ICRC). It never allocates and never panics.
func (h *Headers) Decode(raw []byte) {
	*h = Headers{Len: uint32(len(raw))}
	var p wire.Packet
	err := p.Parse(raw)
	h.Valid = err == nil
	if p.LRH != nil {
		h.SLID, h.DLID, h.SL, h.VL = p.LRH.SLID(), p.LRH.DLID(), p.LRH.SL(), p.LRH.VL()
	}
	h.GRH = p.GRH != nil
	if p.BTH != nil {
		h.HasBTH = true
		h.Opcode, h.PKey, h.DQPN, h.PSN = p.BTH.OpCode(), p.BTH.PKey(), p.BTH.DestQP(), p.BTH.PSN()
		h.AckReq, h.SE = p.BTH.AckReq(), p.BTH.SE()
	}
	if p.DETH != nil {
		h.HasDETH, h.QKey, h.SrcQP = true, p.DETH.QKey(), p.DETH.SrcQP()
	}
	if p.XRCETH != nil {
		h.HasXRC, h.XRCSRQ = true, p.XRCETH.SRQ()
	}
	switch {
	case p.RETH != nil:
		h.HasRETH, h.VA, h.RKey, h.DMALen = true, p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	case p.AtomicETH != nil:
		h.HasRETH, h.VA, h.RKey, h.DMALen = true, p.AtomicETH.VA(), p.AtomicETH.RKey(), 8
	}
	if p.AETH != nil {
		h.HasAETH, h.Syndrome, h.MSN = true, p.AETH.Syndrome(), p.AETH.MSN()
	}
	switch {
	case p.ImmDt != nil:
		h.HasImm, h.Imm = true, p.ImmDt.Imm()
	case p.IETH != nil:
		h.HasImm, h.Imm = true, p.IETH.RKey()
	}
	h.PayLen = uint32(len(p.Payload))
	if h.Valid && h.HasDETH && (h.DQPN <= 1 || h.SrcQP <= 1) && len(p.Payload) >= wire.MADHeaderLen {
		m := wire.MAD(p.Payload)
		h.HasMAD = true
		h.MADClass, h.MADMethod, h.MADAttr, h.MADTID = m.MgmtClass(), m.Method(), m.AttrID(), m.TID()
	}
}

// IsCM reports whether the packet is a CM message.
func (h *Headers) IsCM() bool { return h.HasMAD && h.MADClass == wire.MgmtClassCM }

// Packet records a packet a port sent (DirTx) or received (DirRx); qpn is the local QP
// when the caller knows it. CM messages are recorded as KindCM.
func Packet(dev string, port uint8, dir Dir, qpn uint32, raw []byte) {
	ev := Event{Kind: KindPacket, Dev: dev, Port: port, Dir: dir, QPN: qpn}
	ev.Pkt.Decode(raw)
	if ev.Pkt.IsCM() {
		ev.Kind = KindCM
	}
	if qpn == 0 {
		ev.QPN = ev.localQP()
	}
	Add(&ev)
}

// Drop records a packet dropped at a port for reason (the counter it incremented).
func Drop(dev string, port uint8, dir Dir, reason string, raw []byte) {
	ev := Event{Kind: KindDrop, Dev: dev, Port: port, Dir: dir, What: reason}
	ev.Pkt.Decode(raw)
	ev.QPN = ev.localQP()
	Add(&ev)
}

// localQP is the packet's QP at this end, when the packet says: the destination of what
// arrives, the DETH source of what leaves.
func (ev *Event) localQP() uint32 {
	switch {
	case ev.Dir == DirRx && ev.Pkt.HasBTH:
		return ev.Pkt.DQPN
	case ev.Dir == DirTx && ev.Pkt.HasDETH:
		return ev.Pkt.SrcQP
	}
	return 0
}

// API records a verbs call on QP qpn (0: not a QP's); a and b are its numbers (WR ID and
// length for posts), aux a detail (a state change).
func API(dev string, qpn uint32, call, aux string, a, b uint64) {
	Add(&Event{Kind: KindAPI, Dev: dev, QPN: qpn, What: call, Aux: aux, A: a, B: b})
}

// Completion records a work completion of QP qpn.
func Completion(dev string, qpn uint32, status, opcode string, wrID uint64, byteLen uint32) {
	Add(&Event{Kind: KindCompletion, Dev: dev, QPN: qpn, What: status, Aux: opcode, A: wrID, B: uint64(byteLen)})
}

// AsyncEvent records an async event (of QP qpn, or port port, or the device).
func AsyncEvent(dev string, port uint8, qpn uint32, event string) {
	Add(&Event{Kind: KindEvent, Dev: dev, Port: port, QPN: qpn, What: event})
}

// Retry records an RC retransmission of QP qpn from PSN psn: cause "timeout", "seq_nak"
// or "rnr_nak", retries the retries left.
func Retry(dev string, qpn uint32, cause string, psn uint32, retriesLeft uint8) {
	Add(&Event{Kind: KindRetry, Dev: dev, QPN: qpn, What: cause, A: uint64(psn), B: uint64(retriesLeft)})
}
