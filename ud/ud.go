// Package ud is the Unreliable Datagram transport (IBA 9.8, 10.2.5) and the datagram
// side of the special QPs QP0 (SMI) and QP1 (GSI): one packet per message, Q_Key and
// P_Key checks, the optional GRH, multicast.
package ud

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Register installs the UD transport on d for UD, SMI and GSI QPs.
func Register(d *hca.Device) {
	t := &Transport{}
	d.SetTransport(hca.QPTypeUD, t)
	d.SetTransport(hca.QPTypeSMI, t)
	d.SetTransport(hca.QPTypeGSI, t)
}

// Transport implements hca.Transport for datagram QPs.
type Transport struct{}

// GRHLen is the receive-buffer area that precedes every UD payload (IBA 11.4.1.1;
// libibverbs: "the first 40 bytes of the receive buffer hold the GRH, if present").
const GRHLen = wire.GRHLen

// QKeyGSI is QP1's well-known Q_Key (IBA 13.5.3.1).
const QKeyGSI = 0x80010000

const maxHeaders = wire.LRHLen + wire.GRHLen + wire.BTHLen + wire.DETHLen + wire.ImmDtLen

// sendBatch is a pooled set of packet buffers: a batch of WRs becomes one Transmit, so
// a switch forwards runs and the receiver completes a burst at once.
type sendBatch struct {
	// bufs are allocated as first used, so a pooled batch that only ever carries
	// single sends costs one packet buffer, not batchMax of them.
	bufs [batchMax]*[maxPacket]byte
	pkts [batchMax][]byte
	wrs  [batchMax]*hca.SendWR
	lens [batchMax]uint32
	n    int
}

// batchMax is the most packets one Transmit carries.
const batchMax = 32

const maxPacket = maxHeaders + 4096 + 3 + wire.ICRCLen

var batchPool = sync.Pool{New: func() any { return new(sendBatch) }}

type qpState struct {
	psn  atomic.Uint32
	pace pacer // sends waiting for their AH's static rate (pace.go)
}

func state(qp *hca.QP) *qpState {
	if s, ok := qp.TransportState.(*qpState); ok {
		return s
	}
	return nil
}

// Modified resets the send PSN on entry to RTS.
func (t *Transport) Modified(qp *hca.QP, from, to hca.QPState) {
	if st := state(qp); st != nil && (to == hca.QPStateErr || to == hca.QPStateReset) {
		t.flushPaced(qp, st, to == hca.QPStateErr)
	}
	if to == hca.QPStateReset || qp.TransportState == nil {
		qp.TransportState = &qpState{}
	}
	if to == hca.QPStateRTS && from == hca.QPStateRTR {
		state(qp).psn.Store(qp.Attr().SQPSN)
	}
}

// PostSend sends one WR (hca.Transport).
func (t *Transport) PostSend(qp *hca.QP, wr *hca.SendWR) error {
	_, err := t.PostSendBatch(qp, unsafe.Slice(wr, 1))
	return err
}

// PostSendBatch builds a packet per WR (LRH, [GRH], BTH, DETH, [ImmDt], payload, pad,
// ICRC) and hands them to the port in batches; each WR completes once its packet has
// left (a UD send completes when transmitted: nothing acknowledges it). It returns how many WRs it
// took; an error names the WR at that index.
func (t *Transport) PostSendBatch(qp *hca.QP, wrs []hca.SendWR) (int, error) {
	port := qp.Port()
	st := state(qp)
	b := batchPool.Get().(*sendBatch)
	defer batchPool.Put(b)
	for i := range wrs {
		wr := &wrs[i]
		if wr.AH != nil && wr.AH.Pace() != 0 || st.pace.queued.Load() != 0 {
			// Static rate control (pace.go): this send, or one before it, waits for an
			// AH's rate; what is batched goes first.
			t.flush(qp, port, b)
			if err := t.postPaced(qp, port, st, wr); err != nil {
				return i, err
			}
			continue
		}
		if b.n == batchMax {
			t.flush(qp, port, b)
		}
		if b.bufs[b.n] == nil {
			b.bufs[b.n] = new([maxPacket]byte)
		}
		n, status, err := t.build(qp, port, wr, b.bufs[b.n][:])
		if err != nil {
			t.flush(qp, port, b)
			return i, err
		}
		if status != hca.WCSuccess {
			// IBA 10.8.3: the WR completes in error and the QP enters SQE; those that
			// follow are flushed by hca's post path.
			t.flush(qp, port, b)
			qp.SendError(wr, status)
			return i + 1, nil
		}
		b.pkts[b.n], b.wrs[b.n], b.lens[b.n] = b.bufs[b.n][:n], wr, uint32(hca.MessageLen(wr.SGL))
		b.n++
	}
	t.flush(qp, port, b)
	return len(wrs), nil
}

// flush transmits the batch and completes its WRs.
func (t *Transport) flush(qp *hca.QP, port *hca.Port, b *sendBatch) {
	if b.n == 0 {
		return
	}
	port.TransmitQP(qp, b.pkts[:b.n])
	for k := 0; k < b.n; k++ {
		if wr := b.wrs[k]; qp.Signaled(wr) {
			wc := hca.WC{WRID: wr.WRID, Status: hca.WCSuccess, Opcode: hca.WCSend, ByteLen: b.lens[k]}
			if wr.Opcode == hca.WRSendWithImm {
				wc.WCFlags = hca.WCWithImm // rxe's make_send_cqe, mlx5's handle_good_req
			}
			qp.CompleteSend(&wc)
		}
		b.pkts[k], b.wrs[k] = nil, nil
	}
	b.n = 0
}

// build writes wr's packet into buf and returns its length; a local protection problem
// is a WC status, an invalid WR an error.
func (t *Transport) build(qp *hca.QP, port *hca.Port, wr *hca.SendWR, buf []byte) (int, hca.WCStatus, error) {
	n := hca.MessageLen(wr.SGL)
	// A UD message must fit in one packet of the path (port) MTU (IBA 9.8; ibv_post_send(3)
	// fails it with IBV_WC_LOC_LEN_ERR on hardware).
	if mtu := port.ActiveMTU().Bytes(); n > uint64(mtu) {
		return 0, 0, hca.Errorf("post_send", hca.EINVAL, "UD message of %d bytes exceeds the port's active MTU %d", n, mtu)
	}
	ah := wr.AH.Attr()
	if ah.PortNum != port.Num() {
		return 0, 0, hca.Errorf("post_send", hca.EINVAL, "address handle for port %d on a QP of port %d", ah.PortNum, port.Num())
	}
	hdr := wire.LRHLen + wire.BTHLen + wire.DETHLen
	lnh := wire.LNHLocal
	if ah.IsGlobal {
		hdr += wire.GRHLen
		lnh = wire.LNHGlobal
	}
	op := wire.UDSendOnly
	if wr.Opcode == hca.WRSendWithImm {
		hdr += wire.ImmDtLen
		op = wire.UDSendOnlyImm
	}
	pad := wire.PadFor(int(n))
	total := hdr + int(n) + pad + wire.ICRCLen
	b := buf[:total]
	lrh := wire.LRH(b)
	b[0], b[1] = 0, 0
	lrh.SetLNH(lnh)
	lrh.SetSL(ah.SL)
	if qp.Type() == hca.QPTypeSMI {
		lrh.SetVL(15) // IBA 7.6.5: SMPs travel on VL15
	}
	lrh.SetDLID(ah.DLID)
	lrh.SetPktLen(uint16(total / 4))
	lmcMask := uint16(1)<<port.LMC() - 1
	lrh.SetSLID(port.LID() | uint16(ah.SrcPathBits)&lmcMask)
	off := wire.LRHLen
	if ah.IsGlobal {
		g := wire.GRH(b[off : off+wire.GRHLen])
		g.SetIPVer(6)
		g.SetTClass(ah.GRH.TrafficClass)
		g.SetFlowLabel(ah.GRH.FlowLabel)
		g.SetPayLen(uint16(total - wire.LRHLen - wire.GRHLen))
		g.SetNxtHdr(wire.NxtHdrBTH)
		g.SetHopLmt(ah.GRH.HopLimit)
		sgid, _ := port.GID(int(ah.GRH.SGIDIndex))
		g.SetSGID(sgid)
		g.SetDGID(wire.GID(ah.GRH.DGID))
		off += wire.GRHLen
	}
	bth := wire.BTH(b[off : off+wire.BTHLen])
	clear(bth)
	bth.SetOpCode(op)
	bth.SetSE(wr.SendFlags&hca.SendSolicited != 0)
	bth.SetPadCnt(uint8(pad))
	pkey := uint16(hca.DefaultPKey) // IBA 14.2.1: SMPs carry the default P_Key
	if qp.Type() != hca.QPTypeSMI {
		pkey, _ = port.PKey(int(qp.PKeyIndex()))
	}
	bth.SetPKey(pkey)
	bth.SetDestQP(wr.RemoteQPN)
	bth.SetPSN((state(qp).psn.Add(1) - 1) & 0xFFFFFF)
	off += wire.BTHLen
	deth := wire.DETH(b[off : off+wire.DETHLen])
	qkey := wr.RemoteQKey
	if qkey&0x80000000 != 0 && qp.Type() == hca.QPTypeUD {
		// IBA 10.2.5: a WR Q_Key with the high bit set means "use the QP's Q_Key".
		qkey = qp.QKey()
	}
	deth.SetQKey(qkey)
	deth.SetSrcQP(qp.Num())
	off += wire.DETHLen
	if op == wire.UDSendOnlyImm {
		wire.ImmDt(b[off : off+wire.ImmDtLen]).SetImm(wr.ImmData)
		off += wire.ImmDtLen
	}
	if status := qp.Gather(wr, b[off:off+int(n)]); status != hca.WCSuccess {
		return 0, status, nil
	}
	clear(b[off+int(n) : off+int(n)+pad])
	wire.SetICRCPending(b)
	if wr.SendFlags&hca.SendIPCsum != 0 && qp.Type() == hca.QPTypeUD {
		// The checksum engine's work is deferred like the ICRC's (wire.SetCsumPending).
		if !wire.SetCsumPending(b, wr.CsumStart, wr.CsumOffset, wr.CsumNoZero) {
			return 0, hca.WCLocQPOpErr, nil
		}
	}
	return total, hca.WCSuccess, nil
}

// Receive delivers a UD packet into the next receive WQE: the GRH (when present) in the
// first 40 bytes, the payload after it.
func (t *Transport) Receive(qp *hca.QP, p *hca.Packet) {
	port := qp.Port()
	if p.BTH.OpCode().Transport() != wire.TransportUD || p.DETH == nil {
		port.Drop(hca.CntDropQPType, p.Raw)
		return
	}
	// IBA 10.2.5: the Q_Key must match the QP's; QP0 is exempt, QP1's is fixed.
	if qp.Type() != hca.QPTypeSMI && p.DETH.QKey() != qp.QKey() {
		port.Drop(hca.CntQKeyViolations, p.Raw)
		return
	}
	var w hca.RecvWQE
	if !qp.TakeRecv(&w) {
		port.Drop(hca.CntDropNoRecvWQE, p.Raw)
		return
	}
	n := len(p.Payload)
	if uint64(GRHLen+n) > w.Len() {
		qp.RecvError(&w, hca.WCLocLenErr, hca.WCRecv)
		return
	}
	flags := hca.WCFlags(0)
	if wire.CsumPending(p.Raw) {
		// Checksum offload on the receive side: the data are intact (the packet never
		// left the process); either hand the partial checksum on or complete it.
		if qp.IPCsumPartial() {
			flags |= hca.WCIPCsumOK | hca.WCIPCsumPartial
		} else {
			wire.FinalizeCsum(p.Raw)
			flags |= hca.WCIPCsumOK
		}
	}
	if p.GRH != nil {
		if st := qp.Scatter(&w, 0, p.GRH); st != hca.WCSuccess {
			qp.RecvError(&w, st, hca.WCRecv)
			return
		}
		flags |= hca.WCGRH
	}
	if st := qp.Scatter(&w, GRHLen, p.Payload); st != hca.WCSuccess {
		qp.RecvError(&w, st, hca.WCRecv)
		return
	}
	wc := hca.WC{
		WRID: w.WRID, Status: hca.WCSuccess, Opcode: hca.WCRecv, ByteLen: uint32(GRHLen + n),
		SrcQP: p.DETH.SrcQP(), SLID: p.LRH.SLID(), SL: p.LRH.SL(), PKeyIndex: p.PKeyIndex,
	}
	if p.ImmDt != nil {
		flags |= hca.WCWithImm
		wc.ImmData = p.ImmDt.Imm()
	}
	if dlid := p.LRH.DLID(); dlid < 0xC000 {
		wc.DLIDPathBits = uint8(dlid & (uint16(1)<<port.LMC() - 1))
	}
	wc.WCFlags = flags
	qp.CompleteRecv(&wc, p.BTH.SE())
}
