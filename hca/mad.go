package hca

import (
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/wire"
)

// The MAD layer of a port (IBA 13.4, 13.5): packets to QP0 (SMPs) and QP1 (GMPs) go to
// the agent registered for their management class — requests to the class's request
// handler (the SMA, the PMA, the SA…), responses to its response handler (the SM, the SA
// client…) — and agents send MADs from QP0/QP1 through SendMAD. A MAD for which no
// handler is registered goes to the port's SMI/GSI verbs QP if one exists, else is dropped
// and counted.

// MADAddr is where a MAD goes, or where it came from.
type MADAddr struct {
	DLID uint16 // LRH:DLID; the permissive LID 0xFFFF for directed-route SMPs
	SLID uint16 // LRH:SLID (receive)
	SL   uint8
	// QPN is the remote QP: 0 for SMPs, 1 for GMPs to a class agent, or a client's QP.
	QPN uint32
	// QKey for GMPs: QP1's well-known Q_Key 0x80010000 unless a client QP is addressed.
	QKey uint32
	// PKeyIndex selects the P_Key a GMP is sent with; on receive, the matching entry.
	PKeyIndex uint16
	// GRH is set on receive when the MAD carried one, and makes SendMAD add one.
	GRH *GlobalRoute
}

// MAD is a received management datagram.
type MAD struct {
	Port *Port
	From MADAddr
	// Data is the 256-byte MAD; it is valid only during the handler call.
	Data []byte

	grh GlobalRoute // storage for From.GRH
}

// MADHandler consumes MADs. It runs on the goroutine that delivered the packet, so it
// must not block; it may send (reply) synchronously.
type MADHandler interface {
	HandleMAD(m *MAD)
}

// MADHandlerFunc adapts a function to a MADHandler.
type MADHandlerFunc func(m *MAD)

func (f MADHandlerFunc) HandleMAD(m *MAD) { f(m) }

// QP1's well-known Q_Key (IBA 13.5.3.1).
const GSIQKey = 0x80010000

// MADRouter sees every GMP that arrives at QP1 of a port before the class handlers, and
// takes those that belong to someone else: the daemon hands an attached process the CM
// MADs of its connections. RouteMAD reports whether it took pk; it runs on the fabric's
// goroutine, must not block and must not keep pk.
type MADRouter interface {
	RouteMAD(p *Port, pk *Packet) bool
}

type routerBox struct{ r MADRouter }

// SetMADRouter installs r (nil removes it).
func (p *Port) SetMADRouter(r MADRouter) {
	if r == nil {
		p.router.Store(nil)
		return
	}
	p.router.Store(&routerBox{r})
}

type madTable struct {
	mu sync.RWMutex
	h  [256][2]MADHandler // [class][response]

	ext   atomic.Pointer[madHandlerBox] // responses with TIDExternal (SetExternalMADHandler)
	smFwd atomic.Pointer[madHandlerBox] // SMInfo requests for an SM outside (SetSMInfoHandler)
}

type madHandlerBox struct{ h MADHandler }

// TIDExternal is bit 63 of a transaction ID (fabric.TIDExternal, which a switch's port 0
// honours too). The ibsim server sets it (with its client's slot and generation in bits
// 48-62) in every request one of its clients (opensm, infiniband-diags) sends from a port,
// and the port hands responses carrying it to the external handler instead of the
// class's response handler — as the kernel's MAD layer routes a response to the agent
// whose hi_tid is in the TID's upper bits (IBA 13.4.6.4: the requester chooses the TID and the responder
// returns it unchanged). Port.TID never sets it.
const TIDExternal = fabric.TIDExternal

// SetExternalMADHandler installs h, which receives every response (and TrapRepress)
// arriving at the port, on QP0 or QP1, whose TID has TIDExternal set; nil removes it.
func (p *Port) SetExternalMADHandler(h MADHandler) {
	if h == nil {
		p.mads.ext.Store(nil)
		return
	}
	p.mads.ext.Store(&madHandlerBox{h})
}

// responseHandler returns the handler of a response of class with transaction ID tid.
func (p *Port) responseHandler(class uint8, tid uint64) MADHandler {
	if tid&TIDExternal != 0 {
		if b := p.mads.ext.Load(); b != nil {
			return b.h
		}
	}
	return p.madHandler(class, true)
}

// RegisterMADHandler installs h for MADs of the management class arriving at this port:
// requests when responses is false, responses (R bit set, and TrapRepress) when true. It
// replaces the previous handler; nil removes it.
func (p *Port) RegisterMADHandler(class uint8, responses bool, h MADHandler) {
	r := 0
	if responses {
		r = 1
	}
	p.mads.mu.Lock()
	p.mads.h[class][r] = h
	p.mads.mu.Unlock()
}

func (p *Port) madHandler(class uint8, resp bool) MADHandler {
	r := 0
	if resp {
		r = 1
	}
	p.mads.mu.RLock()
	h := p.mads.h[class][r]
	p.mads.mu.RUnlock()
	return h
}

func isSMPClass(class uint8) bool {
	return class == wire.MgmtClassSubnLID || class == wire.MgmtClassSubnDirected
}

// receiveMAD handles a packet addressed to QP0 or QP1 that passed the port's checks. It
// reports whether a MAD handler took it.
func (p *Port) receiveMAD(pk *Packet) bool {
	if pk.DETH == nil || len(pk.Payload) != wire.MADLen {
		return false
	}
	m := wire.MAD(pk.Payload)
	if m.BaseVersion() != 1 {
		return false
	}
	class := m.MgmtClass()
	dqp := pk.BTH.DestQP()
	// IBA 13.5.1: SMPs travel only on QP0 and GMPs only on QP1.
	if isSMPClass(class) != (dqp == 0) {
		p.counters.Inc(CntDropMalformed)
		return true
	}
	if dqp == 1 && pk.DETH.QKey() != GSIQKey {
		p.counters.Inc(CntQKeyViolations)
		return true
	}
	if dqp == 1 {
		if r := p.router.Load(); r != nil && r.r.RouteMAD(p, pk) {
			return true
		}
	}
	resp := m.IsResponse() || m.Method() == wire.MethodTrapRepress
	var h MADHandler
	if resp {
		h = p.responseHandler(class, m.TID())
	} else {
		h = p.madHandler(class, false)
	}
	if h == nil {
		// A Get or Set no agent takes, with no QP1 consumer: answered as Linux's MAD
		// layer answers it (unmatchedHandler); anything else is the caller's drop.
		if method := m.Method(); resp || dqp != 1 || p.qp1.Load() != nil ||
			method != wire.MethodGet && method != wire.MethodSet {
			return false
		}
		h = unmatchedHandler{}
	}
	in := madPool.Get().(*MAD)
	in.Port = p
	in.Data = pk.Payload
	in.From = MADAddr{
		DLID: pk.LRH.DLID(), SLID: pk.LRH.SLID(), SL: pk.LRH.SL(), QPN: pk.DETH.SrcQP(),
		QKey: pk.DETH.QKey(), PKeyIndex: pk.PKeyIndex,
	}
	if pk.GRH != nil {
		in.grh = GlobalRoute{DGID: pk.GRH.SGID(), FlowLabel: pk.GRH.FlowLabel(), HopLimit: pk.GRH.HopLmt(), TrafficClass: pk.GRH.TClass()}
		in.From.GRH = &in.grh
	}
	h.HandleMAD(in)
	*in = MAD{}
	madPool.Put(in)
	return true
}

// unmatchedHandler answers a GMP request for a class no agent on the port registered, as
// Linux's MAD layer does (drivers/infiniband/core/mad.c, generate_unmatched_resp): a Get
// or Set comes back as a GetResp with status "method/attribute combination not
// supported" (IBA 13.4.7), so that ibping, vendstat or ibccquery aimed at a port with
// no such agent fail at once instead of timing out.
type unmatchedHandler struct{}

func (unmatchedHandler) HandleMAD(m *MAD) { ReplyUnsupported(m) }

// ReplyUnsupported answers the Get or Set m as a port with no agent for its class does
// (unmatchedHandler): a GetResp with status "method/attribute combination not supported".
func ReplyUnsupported(m *MAD) {
	s := madScratchPool.Get().(*madScratch)
	resp := wire.MAD(s.b[:])
	copy(resp, m.Data)
	resp.SetMethod(wire.MethodGetResp)
	resp.SetStatus(wire.StatusMethodAttrNotSupp)
	_ = m.Port.ReplyMAD(m, resp)
	madScratchPool.Put(s)
}

var madPool = sync.Pool{New: func() any { return new(MAD) }}

const madPacketLen = wire.LRHLen + wire.GRHLen + wire.BTHLen + wire.DETHLen + wire.MADLen + wire.ICRCLen

type madBuf struct {
	b     [madPacketLen]byte
	batch [1][]byte
}

var madBufPool = sync.Pool{New: func() any { return new(madBuf) }}

// SendMAD sends a 256-byte MAD to a: SMPs (classes 0x01, 0x81) from QP0 on VL15 with the
// default P_Key (IBA 14.2.1), GMPs from QP1 with the P_Key at a.PKeyIndex. The MAD is
// copied; the caller keeps mad.
func (p *Port) SendMAD(a MADAddr, mad []byte) error {
	const op = "send_mad"
	if len(mad) != wire.MADLen {
		return errorf(op, EINVAL, "MAD is %d bytes, want %d", len(mad), wire.MADLen)
	}
	class := wire.MAD(mad).MgmtClass()
	smp := isSMPClass(class)
	pi := p.info.Load()
	mb := madBufPool.Get().(*madBuf)
	defer func() { mb.batch[0] = nil; madBufPool.Put(mb) }()
	n := wire.LRHLen + wire.BTHLen + wire.DETHLen + wire.MADLen + wire.ICRCLen
	if a.GRH != nil && !smp {
		n += wire.GRHLen
	}
	b := mb.b[:n]
	clear(b)
	lrh := wire.LRH(b)
	lrh.SetSL(a.SL)
	lrh.SetDLID(a.DLID)
	lrh.SetPktLen(uint16(n / 4))
	slid := pi.lid
	if slid == 0 {
		slid = permissiveLID // IBA 14.2.2.1: a port without a LID sends DR SMPs from the permissive LID
	}
	lrh.SetSLID(slid)
	lrh.SetLNH(wire.LNHLocal)
	off := wire.LRHLen
	if a.GRH != nil && !smp {
		lrh.SetLNH(wire.LNHGlobal)
		g := wire.GRH(b[off : off+wire.GRHLen])
		g.SetIPVer(6)
		g.SetTClass(a.GRH.TrafficClass)
		g.SetFlowLabel(a.GRH.FlowLabel)
		g.SetPayLen(uint16(n - off - wire.GRHLen))
		g.SetNxtHdr(wire.NxtHdrBTH)
		g.SetHopLmt(a.GRH.HopLimit)
		g.SetSGID(wire.MakeGID(pi.gidPrefix, p.guid))
		g.SetDGID(wire.GID(a.GRH.DGID))
		off += wire.GRHLen
	}
	bth := wire.BTH(b[off : off+wire.BTHLen])
	bth.SetOpCode(wire.UDSendOnly)
	bth.SetDestQP(a.QPN)
	deth := wire.DETH(b[off+wire.BTHLen : off+wire.BTHLen+wire.DETHLen])
	if smp {
		lrh.SetVL(15)
		bth.SetPKey(DefaultPKey)
		deth.SetSrcQP(0)
	} else {
		if int(a.PKeyIndex) >= PKeyTableLen {
			return errorf(op, EINVAL, "pkey_index %d out of range", a.PKeyIndex)
		}
		bth.SetPKey(pi.pkeys[a.PKeyIndex])
		deth.SetQKey(a.QKey)
		deth.SetSrcQP(1)
	}
	bth.SetPSN(p.madPSN.Add(1) & 0xFFFFFF)
	copy(b[off+wire.BTHLen+wire.DETHLen:], mad)
	wire.SetICRCPending(b)
	mb.batch[0] = b
	p.Transmit(mb.batch[:])
	return nil
}

// ReplyMAD sends resp to where m came from: to its SLID (or back along the permissive
// LID for a directed-route SMP, whose return path the caller has written into resp) and
// its source QP with the same P_Key.
func (p *Port) ReplyMAD(m *MAD, resp []byte) error {
	a := MADAddr{DLID: m.From.SLID, SL: m.From.SL, QPN: m.From.QPN, QKey: m.From.QKey, PKeyIndex: m.From.PKeyIndex, GRH: m.From.GRH}
	if len(resp) >= 2 && resp[1] == wire.MgmtClassSubnDirected {
		a.DLID = permissiveLID
	}
	if a.QPN == 1 || a.QPN == 0 {
		a.QKey = GSIQKey
	}
	return p.SendMAD(a, resp)
}

// TID returns a fresh transaction ID for a request sent from this port.
func (p *Port) TID() uint64 {
	return uint64(p.num)<<56 | p.tid.Add(1)&(1<<56-1)
}
