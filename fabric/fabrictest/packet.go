package fabrictest

import "github.com/pibgw/pibgw/wire"

// UD describes a UD SEND Only packet without GRH (IBA 9.2, 9.3). The zero
// value is a valid packet from LID 0 with P_Key 0xFFFF; set at least DLID.
type UD struct {
	VL, SL     uint8
	DLID, SLID uint16
	PKey       uint16 // 0 means the default P_Key 0xFFFF
	DestQP     uint32
	PSN        uint32
	SE         bool
	QKey       uint32
	SrcQP      uint32
	Payload    []byte
}

// Build returns the packet, LRH through ICRC, with the payload padded to a multiple of
// four bytes (BTH.PadCnt) and a correct ICRC.
func (u UD) Build() []byte {
	pad := (4 - len(u.Payload)%4) % 4
	n := wire.LRHLen + wire.BTHLen + wire.DETHLen + len(u.Payload) + pad + wire.ICRCLen
	pkt := make([]byte, n)

	lrh := wire.LRH(pkt[:wire.LRHLen])
	lrh.SetVL(u.VL)
	lrh.SetLVer(wire.LRHVersion)
	lrh.SetSL(u.SL)
	lrh.SetLNH(wire.LNHLocal)
	lrh.SetDLID(u.DLID)
	lrh.SetPktLen(uint16(n / 4))
	lrh.SetSLID(u.SLID)

	bth := wire.BTH(pkt[wire.LRHLen:])
	bth.SetOpCode(wire.UDSendOnly)
	bth.SetSE(u.SE)
	bth.SetPadCnt(uint8(pad))
	bth.SetTVer(wire.BTHTVer)
	pkey := u.PKey
	if pkey == 0 {
		pkey = 0xFFFF
	}
	bth.SetPKey(pkey)
	bth.SetDestQP(u.DestQP)
	bth.SetPSN(u.PSN)

	deth := wire.DETH(pkt[wire.LRHLen+wire.BTHLen:])
	deth.SetQKey(u.QKey)
	deth.SetSrcQP(u.SrcQP)

	copy(pkt[wire.LRHLen+wire.BTHLen+wire.DETHLen:], u.Payload)
	wire.SetICRC(pkt)
	return pkt
}

// WithLNH returns a copy of p with its LRH.LNH set to lnh, for
// tests of switch drop rules. It leaves the ICRC as it was.
func WithLNH(p []byte, lnh wire.LNH) []byte {
	q := append([]byte(nil), p...)
	wire.LRH(q).SetLNH(lnh)
	return q
}

// DRSMP returns a directed-route SubnGet(attr) SMP (IBA 14.2.2) as an SM sends it from
// its own port: on VL15 from QP0 to QP0, DLID and SLID permissive, DrSLID and DrDLID
// permissive, hop pointer 0, and the initial path given by path (the port to leave by at
// hops 1, 2, ...).
func DRSMP(tid uint64, attr uint16, path ...uint8) []byte {
	mad := make([]byte, wire.MADLen)
	smp := wire.SMP(mad)
	m := smp.MAD()
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassSubnDirected)
	m.SetClassVersion(wire.ClassVersionSM)
	m.SetMethod(wire.MethodGet)
	m.SetTID(tid)
	m.SetAttrID(attr)
	smp.SetHopPointer(0)
	smp.SetHopCount(uint8(len(path)))
	smp.SetDrSLID(0xFFFF)
	smp.SetDrDLID(0xFFFF)
	copy(smp.InitialPath()[1:], path)
	return UD{VL: 15, DLID: 0xFFFF, SLID: 0xFFFF, Payload: mad}.Build()
}
