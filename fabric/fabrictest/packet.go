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
