package fabric

import (
	"sync"

	"github.com/pibgw/pibgw/wire"
)

// The switch's management port: packets the switch forwards to port 0 (its LID,
// multicast with port 0 in the mask, the permissive DLID) reach agent, which is the
// switch's SMI (directed-route forwarding, IBA 14.2.2), SMA (sma.go) and PMA (pma.go).
// Everything runs on the delivering goroutine and answers from a pooled buffer: no
// goroutine and no allocation per MAD.

// agent is the switch's own ManagementHandler.
type agent struct{ sw *Switch }

// HandleManagement implements ManagementHandler.
func (a agent) HandleManagement(in int, pkts [][]byte) {
	for _, b := range pkts {
		a.sw.manage(in, b)
	}
}

const (
	permissiveLID = LIDPermissive
	gsiQKey       = 0x80010000 // QP1's well-known Q_Key (IBA 13.5.3.1)
	maxMgmtPacket = wire.LRHLen + wire.GRHLen + wire.BTHLen + wire.DETHLen + wire.MADLen + wire.ICRCLen
)

// mgmtBuf is a pooled packet the agent builds a response or a forwarded SMP in.
type mgmtBuf struct {
	b     [maxMgmtPacket]byte
	batch [1][]byte
}

var mgmtBufPool = sync.Pool{New: func() any { return new(mgmtBuf) }}

// getMgmtBuf returns a buffer from the switch's own few (mbCache), else from the pool.
// A directed-route SMP holds one at every switch it crosses until its response has come
// back through (each hop's send runs the next), so a switch on the path of an SM's
// sweep holds at most two at a time, one for the request and one for the response; its
// own slots take that without the pool's per-P bookkeeping.
func (sw *Switch) getMgmtBuf() *mgmtBuf {
	for i := range sw.mbCache {
		if c := &sw.mbCache[i]; c.Load() != nil {
			if mb := c.Swap(nil); mb != nil {
				return mb
			}
		}
	}
	return mgmtBufPool.Get().(*mgmtBuf)
}

func (sw *Switch) putMgmtBuf(mb *mgmtBuf) {
	for i := range sw.mbCache {
		if c := &sw.mbCache[i]; c.Load() == nil && c.CompareAndSwap(nil, mb) {
			return
		}
	}
	mgmtBufPool.Put(mb)
}

// manage handles one packet addressed to the switch that arrived at external port in.
func (sw *Switch) manage(in int, b []byte) {
	ip := &sw.ports[in]
	var pk wire.Packet
	if pk.Parse(b) != nil || pk.BTH == nil || pk.DETH == nil || pk.BTH.OpCode() != wire.UDSendOnly ||
		len(pk.Payload) != wire.MADLen || pk.BTH.PadCnt() != 0 || !icrcOK(b, pk.BTH) ||
		ip.phys.Load() == PhysStateDisabled {
		ip.drops[DropManagement].Add(1)
		return
	}
	mad := wire.MAD(pk.Payload)
	if mad.BaseVersion() != wire.MADBaseVersion {
		ip.drops[DropManagement].Add(1)
		return
	}
	madOff := len(b) - wire.ICRCLen - wire.MADLen
	class, method := mad.MgmtClass(), mad.Method()
	switch pk.BTH.DestQP() {
	case 0:
		// IBA 14.2.1: SMPs travel on VL15 without a GRH.
		if pk.LRH.VL() != 15 || pk.GRH != nil {
			break
		}
		switch class {
		case wire.MgmtClassSubnDirected:
			sw.smiDirected(in, b, madOff)
			return
		case wire.MgmtClassSubnLID:
			if method == wire.MethodTrapRepress {
				// The SM's answer to a trap 128 of ours (IBA 13.4.9): taken, not a
				// drop. The agent sends each trap once, so there is nothing to stop.
				return
			}
			// Responses and traps are for an SM, and none runs here; responses to an
			// external client's requests are its.
			if mad.IsResponse() || method == wire.MethodTrap {
				if mad.IsResponse() && sw.external(b, &pk, mad) {
					return
				}
				break
			}
			sw.replyLID(in, b, &pk, madOff)
			return
		}
	case 1:
		if pk.DETH.QKey() == gsiQKey && mad.IsResponse() && sw.external(b, &pk, mad) {
			return
		}
		if pk.DETH.QKey() != gsiQKey || mad.IsResponse() ||
			class != wire.MgmtClassPerfMgt && method != wire.MethodGet && method != wire.MethodSet {
			break
		}
		sw.replyLID(in, b, &pk, madOff)
		return
	}
	ip.drops[DropManagement].Add(1)
}

// icrcOK is the agent's ICRC check (IBA 7.8.1): a packet marked ICRC-pending never left
// the process and passes; any other must carry a correct ICRC (wire.CheckReceivedICRC).
func icrcOK(b []byte, bth wire.BTH) bool {
	return wire.CheckReceivedICRC(b)
}

// seal finishes a packet the agent built from a copy of another, its ICRC deferred to
// where it becomes observable (wire.SetICRCPending, wire.Finalize).
func seal(pkt []byte, bthOff int) {
	wire.SetICRCPending(pkt)
}

// replyLID answers a LID-routed SMP or a GMP request (the PMA's, or any Get or Set): the
// response goes back to the request's SLID and source QP through the switch's own
// forwarding.
func (sw *Switch) replyLID(in int, b []byte, pk *wire.Packet, madOff int) {
	mb := mgmtBufPool.Get().(*mgmtBuf)
	defer mgmtBufPool.Put(mb)
	out := mb.b[:len(b)]
	copy(out, b)
	req, resp := b[madOff:madOff+wire.MADLen], out[madOff:madOff+wire.MADLen]
	dqp := pk.BTH.DestQP()
	switch {
	case dqp == 0:
		sw.answerSMP(in, wire.SMP(req), wire.SMP(resp))
	case wire.MAD(req).MgmtClass() == wire.MgmtClassPerfMgt:
		sw.answerPMA(in, wire.MAD(req), wire.MAD(resp))
	default:
		// A Get or Set of a class the switch has no agent for (ibping, vendstat,
		// ibccquery): "method/attribute combination not supported" (IBA 13.4.7), as a
		// Linux host's MAD layer answers one (generate_unmatched_resp), not silence.
		r := wire.MAD(resp)
		r.SetMethod(wire.MethodGetResp)
		r.SetStatus(wire.StatusMethodAttrNotSupp)
	}
	lrh := wire.LRH(out)
	slid, dlid := lrh.SLID(), lrh.DLID()
	lrh.SetDLID(slid)
	lrh.SetSLID(sw.ownSLID(dlid))
	off := wire.LRHLen
	if pk.GRH != nil {
		g := wire.GRH(out[off : off+wire.GRHLen])
		s, d := g.SGID(), g.DGID()
		g.SetSGID(d)
		g.SetDGID(s)
		off += wire.GRHLen
	}
	bth := wire.BTH(out[off : off+wire.BTHLen])
	deth := wire.DETH(out[off+wire.BTHLen : off+wire.BTHLen+wire.DETHLen])
	bth.SetDestQP(pk.DETH.SrcQP())
	deth.SetSrcQP(dqp)
	if dqp == 1 {
		deth.SetQKey(gsiQKey)
	}
	seal(out, off)
	sw.sendFromPort0(out, mb)
}

// ownSLID is the SLID of a packet the agent sends: the LID a request was addressed to
// when it was the switch's (with its path bits), else port 0's LID, else permissive.
func (sw *Switch) ownSLID(reqDLID uint16) uint16 {
	if reqDLID != 0 && reqDLID < LIDMulticastMin {
		return reqDLID
	}
	if lid := sw.LID(); lid != 0 {
		return lid
	}
	return permissiveLID
}

// sendFromPort0 sends a packet the agent built (in mb) by the switch's forwarding
// tables, as if it had arrived at port 0.
func (sw *Switch) sendFromPort0(pkt []byte, mb *mgmtBuf) {
	mp := &sw.ports[0]
	mp.rcvPkts.Add(1)
	mp.rcvData.Add(uint64(len(pkt) / 4))
	r := sw.route(pkt)
	switch r & routeKindMask {
	case routeUnicast:
	case routeDrop:
		mp.drops[DropReason(r&routeValueMask)].Add(1)
		return
	default:
		mp.drops[DropManagement].Add(1)
		return
	}
	out := int(r & routeValueMask)
	if out == 0 {
		mp.drops[DropManagement].Add(1) // to the switch itself: nothing here sends to itself
		return
	}
	op := &sw.ports[out]
	if r&routeVL15 == 0 && op.state.Load() != portActive {
		mp.drops[DropPortState].Add(1)
		op.xmitDiscards.Add(1)
		return
	}
	mb.batch[0] = pkt
	op.transmit(mb.batch[:], false)
	mb.batch[0] = nil
}

// sendOut sends a directed-route SMP out of external port port: SMPs pass ports in any
// logical state, but not a disabled one.
func (sw *Switch) sendOut(port int, pkt []byte, mb *mgmtBuf) {
	mp := &sw.ports[0]
	mp.rcvPkts.Add(1)
	mp.rcvData.Add(uint64(len(pkt) / 4))
	if port < 1 || port > sw.nports || sw.ports[port].phys.Load() == PhysStateDisabled {
		mp.drops[DropManagement].Add(1)
		return
	}
	mb.batch[0] = pkt
	sw.ports[port].transmit(mb.batch[:], false)
	mb.batch[0] = nil
}

// smiDirected is the switch's SMI for a directed-route SMP that arrived at port in
// (IBA 14.2.2.2 C14-9 outgoing, 14.2.2.4 C14-13 returning). The packet on the link
// between hop i-1 and hop i carries hop pointer i in both directions.
func (sw *Switch) smiDirected(in int, b []byte, madOff int) {
	req := wire.SMP(b[madOff : madOff+wire.MADLen])
	hc, hp := req.HopCount(), req.HopPointer()
	if hc > wire.SMPMaxHops {
		sw.ports[in].drops[DropManagement].Add(1)
		return
	}
	mb := sw.getMgmtBuf()
	defer sw.putMgmtBuf(mb)
	out := mb.b[:len(b)]
	copy(out, b)
	s := wire.SMP(out[madOff : madOff+wire.MADLen])
	ipath, rpath := s.InitialPath(), s.ReturnPath()
	lrh := wire.LRH(out)
	drop := func() { sw.ports[in].drops[DropManagement].Add(1) }
	forward := func(hp uint8, port uint8) {
		// On the directed-route part of a path the DLID is permissive (IBA 14.2.2).
		s.SetHopPointer(hp)
		lrh.SetDLID(permissiveLID)
		seal(out, wire.LRHLen)
		sw.sendOut(int(port), out, mb)
	}
	lidRoute := func(hp uint8, dlid uint16) {
		s.SetHopPointer(hp)
		lrh.SetDLID(dlid)
		lrh.SetSLID(sw.ownSLID(0))
		seal(out, wire.LRHLen)
		sw.sendFromPort0(out, mb)
	}
	if !req.D() {
		if hp == 0 && hc != 0 && req.DrSLID() == permissiveLID {
			// The originating SMI did not advance the hop pointer (C14-9:1), as an SM
			// that sends with SendMAD rather than through its SMI does: this switch is
			// hop 1.
			hp = 1
		}
		switch {
		case hp == 0 && hc != 0:
			// C14-9:1: the directed route starts here, after a LID-routed segment from
			// DrSLID.
			forward(1, ipath[1])
		case hp != 0 && hp < hc:
			// C14-9:2: an intermediate hop. Record where the SMP came in, go on.
			rpath[hp] = uint8(in)
			forward(hp+1, ipath[hp+1])
		case hp != 0 && hp == hc:
			// C14-9:3: the end of the directed route.
			rpath[hp] = uint8(in)
			if req.DrDLID() != permissiveLID {
				// A LID-routed last segment to DrDLID follows.
				lidRoute(hp+1, req.DrDLID())
				return
			}
			// For this switch's SMA: the response returns by the return path
			// (C14-13:1 takes the hop pointer from hc+1 back to hc).
			sw.answerSMP(in, req, s)
			lrh.SetSLID(sw.ownSLID(0))
			forward(hc, rpath[hc])
		case hc != 0 && hp == hc+1:
			// C14-9:4: it came over the LID-routed last segment; answer LID routed to
			// the switch that sent it, which takes it onto the return path.
			sw.answerSMP(in, req, s)
			s.SetHopPointer(hp)
			lrh.SetDLID(lrh.SLID())
			lrh.SetSLID(sw.ownSLID(0))
			seal(out, wire.LRHLen)
			sw.sendFromPort0(out, mb)
		default:
			// C14-9:5; and a hop count of 0 never leaves the node that sent it.
			drop()
		}
		return
	}
	switch {
	case hc != 0 && hp == hc+1:
		// C14-13:1: a response back from beyond the end of the directed route.
		forward(hc, rpath[hc])
	case hp >= 2 && hp <= hc:
		// C14-13:2: an intermediate hop of the return path.
		forward(hp-1, rpath[hp-1])
	case hp == 1 && hc != 0 && req.DrSLID() != permissiveLID:
		// C14-13:3: the return path ends here; LID-routed to DrSLID from here on.
		lidRoute(0, req.DrSLID())
	case hp == 1 && hc != 0:
		// C14-13:3 with a permissive DrSLID: the SMP returned to its originator on this
		// switch, which is an external client's or no one's.
		var pk wire.Packet
		if pk.Parse(out) != nil || !sw.external(out, &pk, s.MAD()) {
			drop()
		}
	default:
		drop()
	}
}
