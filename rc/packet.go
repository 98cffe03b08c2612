package rc

import (
	"sync"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// path is what a connection's packets need from the QP's attributes, cached at each
// ModifyQP so the packet path reads it with one atomic load.
type path struct {
	port    *hca.Port
	dlid    uint16
	slid    uint16
	sl      uint8
	global  bool
	grh     hca.GlobalRoute
	sgid    wire.GID
	pkey    uint16
	destQPN uint32
	mtu     int
	migReq  bool // BTH:MigReq: the QP is in the MIGRATED state (IBA 9.2, 17.2.8)
	xrc     bool // XRC opcodes; requests carry an XRCETH (Annex A14)
	// pace is the static rate (IBA 9.11) in bytes per second the QP's packets on this
	// path must not exceed; 0: the link's rate.
	pace int64
}

const (
	maxHeaders = wire.LRHLen + wire.GRHLen + wire.BTHLen + wire.AtomicETHLen + wire.ImmDtLen
	maxPacket  = maxHeaders + 4096 + 3 + wire.ICRCLen
	batchMax   = 16
)

// batch is a pooled set of packet buffers a drain fills and transmits at once.
type batch struct {
	bufs [batchMax][maxPacket]byte
	pkts [batchMax][]byte
	n    int
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func (b *batch) full() bool { return b.n == batchMax }

// hdr describes one packet to build.
type hdr struct {
	op      wire.Opcode
	psn     uint32
	ackReq  bool
	se      bool
	payload int    // bytes
	srqn    uint32 // XRC requests: the XRCETH's destination SRQ
}

// start writes LRH, optional GRH and BTH for a packet with ethLen bytes of extended
// headers and h.payload bytes of payload into the next buffer of b. It returns the
// buffer (cut to the packet's length) and the offset of the first extended header.
func (b *batch) start(p *path, h hdr, ethLen int) ([]byte, int) {
	xrceth := false
	if p.xrc {
		// Annex A14: XRC opcodes are RC's with transport bits 101; requests (not read
		// responses and acknowledgements, 0x0D..0x12) carry an XRCETH after the BTH.
		low := h.op & 0x1F
		h.op = low | wire.Opcode(wire.TransportXRC)<<5
		xrceth = low < 0x0D || low > 0x12
		if xrceth {
			ethLen += wire.XRCETHLen
		}
	}
	pad := wire.PadFor(h.payload)
	n := wire.LRHLen + wire.BTHLen + ethLen + h.payload + pad + wire.ICRCLen
	if p.global {
		n += wire.GRHLen
	}
	buf := b.bufs[b.n][:n]
	lrh := wire.LRH(buf)
	buf[0], buf[1] = 0, 0
	lrh.SetSL(p.sl)
	lrh.SetLNH(wire.LNHLocal)
	lrh.SetDLID(p.dlid)
	lrh.SetPktLen(uint16(n / 4))
	lrh.SetSLID(p.slid)
	off := wire.LRHLen
	if p.global {
		lrh.SetLNH(wire.LNHGlobal)
		g := wire.GRH(buf[off : off+wire.GRHLen])
		clear(g[:8])
		g.SetIPVer(6)
		g.SetTClass(p.grh.TrafficClass)
		g.SetFlowLabel(p.grh.FlowLabel)
		g.SetPayLen(uint16(n - off - wire.GRHLen))
		g.SetNxtHdr(wire.NxtHdrBTH)
		g.SetHopLmt(p.grh.HopLimit)
		g.SetSGID(p.sgid)
		g.SetDGID(wire.GID(p.grh.DGID))
		off += wire.GRHLen
	}
	bth := wire.BTH(buf[off : off+wire.BTHLen])
	clear(bth)
	bth.SetOpCode(h.op)
	bth.SetSE(h.se)
	bth.SetPadCnt(uint8(pad))
	bth.SetPKey(p.pkey)
	bth.SetDestQP(p.destQPN)
	bth.SetAckReq(h.ackReq)
	bth.SetMigReq(p.migReq)
	bth.SetPSN(h.psn)
	off += wire.BTHLen
	if xrceth {
		wire.XRCETH(buf[off : off+wire.XRCETHLen]).SetSRQ(h.srqn)
		off += wire.XRCETHLen
	}
	if pad > 0 {
		clear(buf[n-wire.ICRCLen-pad : n-wire.ICRCLen])
	}
	return buf, off
}

// finish queues the packet, its ICRC deferred until it becomes observable
// (wire.SetICRCPending).
func (b *batch) finish(buf []byte) {
	wire.SetICRCPending(buf)
	b.pkts[b.n] = buf
	b.n++
}

// npackets is the number of packets a message of n bytes takes at MTU mtu (at least one).
func npackets(n uint64, mtu int) uint32 {
	if n == 0 {
		return 1
	}
	return uint32((n + uint64(mtu) - 1) / uint64(mtu))
}
