package sa

import (
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// PathRecords (IBA 15.2.5.16). The SA answers from the LFTs the SM programmed: a path
// exists when the route from the source end port reaches the destination; its MTU is the
// smallest NeighborMTU and its rate the slowest link on the way; it is reversible when
// the route back exists too. Source and destination come from SGID/SLID and DGID/DLID;
// a Get without a source means the requester's port, a GetTable without one means every
// port (as OpenSM). P_Key: the requested one, which both ports must share, or else the
// first P_Key they share.

// pathInfo is what a walk over the programmed route finds.
type pathInfo struct {
	mtu  uint8 // IBA encoding
	rate int   // 100 Mb/s units
	hops int
}

// saWalkPath follows the LFTs from src to dst without allocating (the route the SM
// programmed, as Topology.Route follows it).
func saWalkPath(src, dst *Port) (pi pathInfo, ok bool) {
	pi.mtu, pi.rate = uint8(hca.MTU4096), 1<<30
	link := func(p *Port) {
		if p.NeighborMTU != 0 && p.NeighborMTU < pi.mtu {
			pi.mtu = p.NeighborMTU
		}
		if r := LinkRate(p.LinkWidthActive, p.LinkSpeedActive); r != 0 && r < pi.rate {
			pi.rate = r
		}
		pi.hops++
	}
	defer func() {
		if pi.rate == 1<<30 {
			pi.rate = 100 // 4x SDR when no link reports a rate
		}
	}()
	if src == dst {
		return pi, true
	}
	var sw *Node
	var in uint8
	if src.Node.IsSwitch() {
		sw, in = src.Node, 0
	} else {
		if src.Remote == nil {
			return pi, false
		}
		link(src)
		if src.Remote == dst {
			return pi, true
		}
		sw, in = src.Remote.Node, src.Remote.Num
		if !sw.IsSwitch() {
			return pi, false
		}
	}
	_ = in
	dlid := dst.LID
	for n := 0; n <= 64; n++ {
		if int(dlid) >= len(sw.LFT) {
			return pi, false
		}
		out := sw.LFT[dlid]
		if out == 0 {
			return pi, dst.Node == sw
		}
		if int(out) >= len(sw.Ports) || sw.Ports[out] == nil || sw.Ports[out].Remote == nil {
			return pi, false
		}
		link(sw.Ports[out])
		r := sw.Ports[out].Remote
		if !r.Node.IsSwitch() {
			return pi, r == dst
		}
		sw, in = r.Node, r.Num
	}
	return pi, false
}

// saRates lists the rate encodings in increasing speed with their 100 Mb/s values
// (IBA 15.2.5.16 Rate).
var saRates = [...]struct {
	enc uint8
	r   int
}{
	{wire.SARate2_5Gbps, 25}, {wire.SARate5Gbps, 50}, {wire.SARate10Gbps, 100},
	{wire.SARate20Gbps, 200}, {wire.SARate30Gbps, 300}, {wire.SARate40Gbps, 400},
	{wire.SARate60Gbps, 600}, {wire.SARate80Gbps, 800}, {wire.SARate120Gbps, 1200},
}

// saRateEncoding is the encoding of the fastest rate not above r (100 Mb/s units).
func saRateEncoding(r int) uint8 {
	enc := uint8(wire.SARate2_5Gbps)
	for _, x := range saRates {
		if x.r <= r {
			enc = x.enc
		}
	}
	return enc
}

// saRateValue is the speed of a rate encoding in 100 Mb/s units (0 if unknown).
func saRateValue(enc uint8) int {
	for _, x := range saRates {
		if x.enc == enc {
			return x.r
		}
	}
	return 0
}

// saSelectOrdered applies an MTU/rate selector (IBA 15.2.5.16) to what the path offers.
// Values compare through rank; a path can always carry less than it offers.
func saSelectMTU(sel, want, avail uint8) (uint8, bool) {
	switch sel {
	case wire.SASelectorGreater:
		return avail, avail > want
	case wire.SASelectorLess:
		if want <= 1 {
			return 0, false
		}
		return min(avail, want-1), true
	case wire.SASelectorExactly:
		return want, want >= 1 && want <= avail
	}
	return avail, true
}

func saSelectRate(sel, want, avail uint8) (uint8, bool) {
	w, v := saRateValue(want), saRateValue(avail)
	switch sel {
	case wire.SASelectorGreater:
		return avail, v > w
	case wire.SASelectorLess:
		if v < w {
			return avail, true
		}
		enc, ok := uint8(0), false
		for _, x := range saRates {
			if x.r < w {
				enc, ok = x.enc, true
			}
		}
		return enc, ok
	case wire.SASelectorExactly:
		return want, w != 0 && w <= v
	}
	return avail, true
}

// saSelectLifetime applies a PacketLifeTime selector: a longer lifetime than the SA's
// estimate can always be promised, a shorter one cannot.
func saSelectLifetime(sel, want, avail uint8) (uint8, bool) {
	switch sel {
	case wire.SASelectorGreater:
		return max(avail, want+1), want < 63
	case wire.SASelectorLess:
		return avail, avail < want
	case wire.SASelectorExactly:
		return want, want >= avail
	}
	return avail, true
}

// saPKeys is a port's P_Key table; ports without one (switch port 0) use the default.
var saDefaultPKeys = []uint16{0xFFFF}

func saPortPKeys(p *Port) []uint16 {
	if len(p.PKeys) == 0 {
		return saDefaultPKeys
	}
	return p.PKeys
}

// saHasPKey reports whether the table holds a P_Key with pkey's low 15 bits, and
// whether that entry is a full member.
func saHasPKey(tbl []uint16, pkey uint16) (found, full bool) {
	for _, k := range tbl {
		if k&0x7FFF != 0 && k&0x7FFF == pkey&0x7FFF {
			found = true
			if k&0x8000 != 0 {
				full = true
			}
		}
	}
	return found, full
}

// saPathPKey picks the P_Key of a path: want (if asked for) must be in both tables with
// at least one full member (IBA 10.9.3); otherwise the first shared one.
func saPathPKey(src, dst *Port, want uint16, given bool) (uint16, bool) {
	st, dt := saPortPKeys(src), saPortPKeys(dst)
	if given {
		f1, full1 := saHasPKey(st, want)
		f2, full2 := saHasPKey(dt, want)
		return want, f1 && f2 && (full1 || full2)
	}
	for _, k := range st {
		if k&0x7FFF == 0 {
			continue
		}
		if f, full := saHasPKey(dt, k); f && (full || k&0x8000 != 0) {
			if full {
				return k | 0x8000, true
			}
			return k, true
		}
	}
	return 0, false
}

// buildPath writes the PathRecord from src to dst that q (under mask) asks for into out;
// false when there is no such path.
func (a *Agent) buildPath(t *Topology, src, dst *Port, q wire.PathRecord, mask uint64, out wire.PathRecord) bool {
	if src.LID == 0 || dst.LID == 0 {
		return false
	}
	pi, ok := saWalkPath(src, dst)
	if !ok {
		return false
	}
	_, back := saWalkPath(dst, src)
	if mask&wire.PRCompReversible != 0 && q.Reversible() && !back {
		return false
	}
	pkey, ok := saPathPKey(src, dst, q.PKey(), mask&wire.PRCompPKey != 0)
	if !ok {
		return false
	}
	mtu := pi.mtu
	if mask&wire.PRCompMTU != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.PRCompMTUSelector != 0 {
			sel = q.MTUSelector()
		}
		if mtu, ok = saSelectMTU(sel, q.MTU(), mtu); !ok {
			return false
		}
	}
	rate := saRateEncoding(pi.rate)
	if mask&wire.PRCompRate != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.PRCompRateSelector != 0 {
			sel = q.RateSelector()
		}
		if rate, ok = saSelectRate(sel, q.Rate(), rate); !ok {
			return false
		}
	}
	plt := a.cfg.PacketLifeTime
	if mask&wire.PRCompPacketLifeTime != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.PRCompPktLifeSel != 0 {
			sel = q.PacketLifeTimeSelector()
		}
		if plt, ok = saSelectLifetime(sel, q.PacketLifeTime(), plt); !ok {
			return false
		}
	}
	if mask&wire.PRCompRawTraffic != 0 && q.RawTraffic() {
		return false // raw datagrams have no PathRecords in pibgw
	}
	clear(out)
	if mask&wire.PRCompServiceID != 0 {
		out.SetServiceID(q.ServiceID())
	}
	out.SetDGID(gidOfPort(t, dst))
	out.SetSGID(gidOfPort(t, src))
	out.SetDLID(dst.LID)
	out.SetSLID(src.LID)
	if mask&wire.PRCompFlowLabel != 0 {
		out.SetFlowLabel(q.FlowLabel())
	}
	if mask&wire.PRCompTClass != 0 {
		out.SetTClass(q.TClass())
	}
	out.SetReversible(back)
	out.SetNumbPath(1)
	out.SetPKey(pkey)
	if mask&wire.PRCompQoSClass != 0 {
		out.SetQoSClass(q.QoSClass())
	}
	if mask&wire.PRCompSL != 0 {
		out.SetSL(q.SL())
	}
	out.SetMTUSelector(wire.SASelectorExactly)
	out.SetMTU(mtu)
	out.SetRateSelector(wire.SASelectorExactly)
	out.SetRate(rate)
	out.SetPacketLifeTimeSelector(wire.SASelectorExactly)
	out.SetPacketLifeTime(plt)
	return true
}

// pathEnd resolves one end of a path query: a port, or all (nil, true) when the query
// names none; status is non-zero when the query is unanswerable.
func pathEnd(t *Topology, q wire.PathRecord, mask uint64, gidBit, lidBit uint64, gid wire.GID, lid uint16) (p *Port, all bool, status uint16) {
	if mask&gidBit != 0 {
		if p = portByGID(t, gid); p == nil {
			return nil, false, wire.SAStatusInvalidGID
		}
		if mask&lidBit != 0 && p.LID != lid {
			return nil, false, wire.SAStatusNoRecords
		}
		return p, false, 0
	}
	if mask&lidBit != 0 {
		if p = t.PortByLID(lid); p == nil {
			return nil, false, wire.SAStatusNoRecords
		}
		return p, false, 0
	}
	return nil, true, 0
}

func (a *Agent) handlePathRecord(m *hca.MAD) {
	req, t, ok := a.startQuery(m)
	if !ok {
		return
	}
	method := req.MAD().Method()
	mask := req.CompMask()
	q := wire.PathRecord(req.Data()[:wire.PathRecordLen])
	src, allSrc, st := pathEnd(t, q, mask, wire.PRCompSGID, wire.PRCompSLID, q.SGID(), q.SLID())
	if st == 0 && allSrc && method == wire.MethodGet {
		if src = t.PortByLID(m.From.SLID); src == nil {
			st = wire.SAStatusNoRecords
		}
		allSrc = false
	}
	if st != 0 {
		a.replyError(m, st)
		return
	}
	dst, allDst, st := pathEnd(t, q, mask, wire.PRCompDGID, wire.PRCompDLID, q.DGID(), q.DLID())
	if st == 0 && allDst && method == wire.MethodGet {
		st = wire.SAStatusInsufficientComponents
	}
	if st != 0 {
		a.replyError(m, st)
		return
	}
	if method == wire.MethodGet {
		var rec [wire.PathRecordLen]byte
		if !a.buildPath(t, src, dst, q, mask, rec[:]) {
			a.replyError(m, wire.SAStatusNoRecords)
			return
		}
		a.replyRecord(m, rec[:])
		return
	}
	var srcs, dsts []*Port
	if allSrc {
		srcs = t.Endports()
	} else {
		srcs = []*Port{src}
	}
	if allDst {
		dsts = t.Endports()
	} else {
		dsts = []*Port{dst}
	}
	b := a.getBuf()
	limit := 0
	if mask&wire.PRCompNumbPath != 0 {
		limit = int(q.NumbPath())
	}
	var rec [wire.PathRecordLen]byte
	for _, s := range srcs {
		for _, d := range dsts {
			if !a.buildPath(t, s, d, q, mask, rec[:]) {
				continue
			}
			b.recs = append(b.recs, rec[:]...)
			if limit > 0 && len(b.recs)/wire.PathRecordLen >= limit && !allSrc && !allDst {
				break
			}
		}
	}
	a.replyRecords(m, b.recs, wire.PathRecordLen)
	a.putBuf(b)
}
