package sa

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Multicast groups (IBA 15.2.5.17, MCMemberRecord): Set joins, Delete leaves, Get and
// GetTable list memberships. The SA keeps the groups (MGID, MLID, Q_Key, P_Key, MTU, rate,
// …) and their members; after every change it hands the whole membership to the SM
// (MulticastProgrammer.SetMulticastGroup) before answering, so on an in-process fabric the
// MFTs are in place when the joiner hears back. Each partition configured with IPoIB has
// its broadcast group ff12:401b:<pkey>::ffff:ffff pre-created with Q_Key 0x0B1B
// (opensm's default); such groups outlive their members, other groups go when the last
// member leaves.

// saMLIDBase is the first multicast LID (IBA 4.1.3), for agents without an SM.
const saMLIDBase = 0xC000

// mcCreateMask is what a join that creates a group must specify (OpenSM's
// REQUIRED_MC_CREATE_COMP_MASK; IBA 15.2.5.17 o15-0.2.x).
const mcCreateMask = wire.MCRCompMGID | wire.MCRCompPortGID | wire.MCRCompJoinState | wire.MCRCompQKey |
	wire.MCRCompTClass | wire.MCRCompPKey | wire.MCRCompFlowLabel | wire.MCRCompSL

// mcJoinMask is what every join and leave must specify.
const mcJoinMask = wire.MCRCompMGID | wire.MCRCompPortGID | wire.MCRCompJoinState

// DefaultMaxSendOnlyGroups is AgentConfig.MaxSendOnlyGroups's default: three quarters
// of the 1024 MLIDs a switch's MFT covers (fabric.DefaultMFTCap), so that a flood of
// send-only joins — IPoIB's for the solicited-node group of every address it is asked to
// resolve — leaves a quarter for groups that receive.
const DefaultMaxSendOnlyGroups = 768

// mcStats counts what the SA refused for want of multicast LIDs, and limits its logging.
type mcStats struct {
	mlidExhausted   atomic.Uint64
	sendOnlyRefused atomic.Uint64

	logMLID, logSendOnly logLimit
}

// logLimit lets one kind of warning through at most once every 10 s.
type logLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed uint64
}

// MulticastStats are the SA's multicast counters (control status, metrics).
type MulticastStats struct {
	Groups         int // groups now, persistent ones included
	SendOnlyGroups int // groups none of whose members receives
	// MLIDExhausted counts joins refused (NO_RESOURCES) because the SM had no free
	// multicast LID; SendOnlyRefused counts send-only joins refused because
	// MaxSendOnlyGroups groups without receivers exist.
	MLIDExhausted   uint64
	SendOnlyRefused uint64
}

// MulticastStats returns the SA's multicast counters.
func (a *Agent) MulticastStats() MulticastStats {
	a.mu.Lock()
	st := MulticastStats{Groups: len(a.groups), SendOnlyGroups: a.sendOnlyGroupsLocked()}
	a.mu.Unlock()
	st.MLIDExhausted = a.mc.mlidExhausted.Load()
	st.SendOnlyRefused = a.mc.sendOnlyRefused.Load()
	return st
}

// sendOnlyGroupsLocked counts the non-persistent groups no member receives from.
func (a *Agent) sendOnlyGroupsLocked() int {
	n := 0
	for _, g := range a.groups {
		if !g.persistent && !g.receivesLocked() {
			n++
		}
	}
	return n
}

func (g *mcGroup) receivesLocked() bool {
	for _, m := range g.members {
		if m.state&(JoinFull|JoinNonMember) != 0 {
			return true
		}
	}
	return false
}

// warnMcast logs a refusal at most once every 10 s for its kind, with how many went
// unlogged since: a flood of joins must not become a flood of log lines.
func (a *Agent) warnMcast(l *logLimit, msg string, args ...any) {
	l.mu.Lock()
	now := a.clk.Now()
	if !l.last.IsZero() && now.Sub(l.last) < 10*time.Second {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	a.log.Warn(msg, append(args, "not_logged_since", n)...)
}

type mcGroup struct {
	mgid       wire.GID
	mlid       uint16
	qkey       uint32
	pkey       uint16
	mtu, rate  uint8
	plt, sl    uint8
	tclass     uint8
	hopLimit   uint8
	scope      uint8
	flowLabel  uint32
	persistent bool
	members    map[uint64]*mcMember // by port GUID
}

type mcMember struct {
	guid  uint64
	gid   wire.GID
	state uint8
	proxy bool
}

// ensureBroadcastGroups pre-creates the IPoIB broadcast group of every partition that
// asks for one, once per Topology generation.
func (a *Agent) ensureBroadcastGroups(t *Topology) {
	parts := a.cfg.Partitions
	var gen uint64
	if parts == nil && t != nil {
		parts, gen = t.Partitions, t.Generation
	}
	if parts == nil {
		parts = []Partition{DefaultPartition()}
	}
	a.mu.Lock()
	if a.bcastSet && (a.cfg.Partitions != nil || gen == a.bcastGen) {
		a.mu.Unlock()
		return
	}
	a.bcastSet, a.bcastGen = true, gen
	a.mu.Unlock()
	for _, p := range parts {
		if !p.IPoIB {
			continue
		}
		a.createBroadcastGroup(p)
	}
}

func (a *Agent) createBroadcastGroup(p Partition) {
	pkey := p.PKey | 0x8000
	mgid := wire.IPoIBBroadcastMGID(pkey)
	a.mu.Lock()
	if g := a.groups[mgid]; g != nil {
		g.persistent = true
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	mlid, err := a.allocMLID()
	if err != nil {
		a.mc.mlidExhausted.Add(1)
		a.warnMcast(&a.mc.logMLID, "no free multicast LID for the IPoIB broadcast group", "pkey", pkey, "err", err)
		return
	}
	g := &mcGroup{
		mgid: mgid, mlid: mlid, qkey: p.QKey, pkey: pkey, mtu: p.MTU, rate: p.Rate,
		plt: a.cfg.PacketLifeTime, sl: p.SL, scope: wire.MGIDScopeLinkLocal, persistent: true,
		members: make(map[uint64]*mcMember),
	}
	if g.qkey == 0 {
		g.qkey = wire.IPoIBBroadcastQKey
	}
	if g.mtu == 0 {
		g.mtu = uint8(hca.MTU2048)
	}
	if g.rate == 0 {
		g.rate = wire.SARate10Gbps
	}
	a.mu.Lock()
	if a.groups[mgid] != nil {
		a.mu.Unlock()
		a.freeMLID(mlid)
		return
	}
	a.groups[mgid] = g
	a.byMLID[mlid] = g
	a.mu.Unlock()
}

// maxSendOnly is AgentConfig.MaxSendOnlyGroups with its default.
func (a *Agent) maxSendOnly() int {
	if n := a.cfg.MaxSendOnlyGroups; n != 0 {
		return n
	}
	return DefaultMaxSendOnlyGroups
}

// sendOnlyFull reports whether a send-only join may not create another group: groups
// that only send-only members hold would take the MLIDs of groups that receive.
func (a *Agent) sendOnlyFull() bool {
	max := a.maxSendOnly()
	if max < 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sendOnlyGroupsLocked() >= max
}

func (a *Agent) allocMLID() (uint16, error) {
	if a.cfg.Multicast != nil {
		return a.cfg.Multicast.AllocMLID()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.byMLID[a.mlidNext] != nil {
		a.mlidNext++
	}
	m := a.mlidNext
	a.mlidNext++
	return m, nil
}

func (a *Agent) freeMLID(mlid uint16) {
	if a.cfg.Multicast != nil {
		a.cfg.Multicast.FreeMLID(mlid)
	}
}

// Groups returns the MGIDs of the groups the SA knows (for tools and tests).
func (a *Agent) Groups() []wire.GID {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]wire.GID, 0, len(a.groups))
	for g := range a.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(x, y wire.GID) int { return slices.Compare(x[:], y[:]) })
	return out
}

// fillRecord writes g's parameters, and the member's PortGID and JoinState, to r.
func (g *mcGroup) fillRecord(r wire.MCMemberRecord, m *mcMember) {
	clear(r)
	r.SetMGID(g.mgid)
	if m != nil {
		r.SetPortGID(m.gid)
		r.SetJoinState(m.state)
		r.SetProxyJoin(m.proxy)
	}
	r.SetQKey(g.qkey)
	r.SetMLID(g.mlid)
	r.SetMTUSelector(wire.SASelectorExactly)
	r.SetMTU(g.mtu)
	r.SetTClass(g.tclass)
	r.SetPKey(g.pkey)
	r.SetRateSelector(wire.SASelectorExactly)
	r.SetRate(g.rate)
	r.SetPacketLifeTimeSelector(wire.SASelectorExactly)
	r.SetPacketLifeTime(g.plt)
	r.SetSL(g.sl)
	r.SetFlowLabel(g.flowLabel)
	r.SetHopLimit(g.hopLimit)
	r.SetScope(g.scope)
}

// membersLocked is g's membership as the SM takes it, in port GUID order.
func (g *mcGroup) membersLocked() []MCMember {
	out := make([]MCMember, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, MCMember{PortGUID: m.guid, JoinState: m.state})
	}
	slices.SortFunc(out, func(x, y MCMember) int {
		switch {
		case x.PortGUID < y.PortGUID:
			return -1
		case x.PortGUID > y.PortGUID:
			return 1
		}
		return 0
	})
	return out
}

func (a *Agent) handleMCMember(m *hca.MAD) {
	t := a.topology()
	a.ensureBroadcastGroups(t)
	req := wire.SAMAD(m.Data)
	switch req.MAD().Method() {
	case wire.MethodSet:
		a.mcJoin(m, t)
	case wire.MethodDelete:
		a.mcLeave(m, t)
	case wire.MethodGet, wire.MethodGetTable:
		a.mcQuery(m)
	default:
		a.replyError(m, wire.StatusMethodAttrNotSupp)
	}
}

// mcPort resolves the joining port and checks that the requester may act for it.
func (a *Agent) mcPort(m *hca.MAD, t *Topology, q wire.MCMemberRecord) (*Port, uint16) {
	if t == nil {
		return nil, wire.SAStatusNoResources
	}
	p := portByGID(t, q.PortGID())
	if p == nil {
		return nil, wire.SAStatusInvalidGID
	}
	// IBA 15.2.5.17: without ProxyJoin a port joins only itself.
	if !q.ProxyJoin() && p.LID != m.From.SLID {
		return nil, wire.SAStatusReqInvalid
	}
	return p, 0
}

// saMTUOK checks a requested MTU/rate selector against a group's value.
func saSelectorOK(sel, want, have uint8, rank func(uint8) int) bool {
	w, h := rank(want), rank(have)
	switch sel {
	case wire.SASelectorGreater:
		return h > w
	case wire.SASelectorLess:
		return h < w
	case wire.SASelectorExactly:
		return h == w
	}
	return true
}

func saMTURank(v uint8) int { return int(v) }

func saRateRank(v uint8) int { return saRateValue(v) }

// mcParamsOK checks a join's optional components against an existing group.
func mcParamsOK(g *mcGroup, q wire.MCMemberRecord, mask uint64) bool {
	if mask&wire.MCRCompQKey != 0 && q.QKey() != g.qkey {
		return false
	}
	if mask&wire.MCRCompPKey != 0 && q.PKey()&0x7FFF != g.pkey&0x7FFF {
		return false
	}
	if mask&wire.MCRCompMLID != 0 && q.MLID() != 0 && q.MLID() != g.mlid {
		return false
	}
	if mask&wire.MCRCompMTU != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.MCRCompMTUSelector != 0 {
			sel = q.MTUSelector()
		}
		if !saSelectorOK(sel, q.MTU(), g.mtu, saMTURank) {
			return false
		}
	}
	if mask&wire.MCRCompRate != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.MCRCompRateSelector != 0 {
			sel = q.RateSelector()
		}
		if !saSelectorOK(sel, q.Rate(), g.rate, saRateRank) {
			return false
		}
	}
	if mask&wire.MCRCompSL != 0 && q.SL() != g.sl {
		return false
	}
	if mask&wire.MCRCompTClass != 0 && q.TClass() != g.tclass {
		return false
	}
	if mask&wire.MCRCompFlowLabel != 0 && q.FlowLabel() != g.flowLabel {
		return false
	}
	return true
}

// newGroup builds the group a creating join asks for (not yet published).
func (a *Agent) newGroup(p *Port, q wire.MCMemberRecord, mask uint64) (*mcGroup, uint16) {
	if mask&mcCreateMask != mcCreateMask {
		return nil, wire.SAStatusInsufficientComponents
	}
	// IBA 15.2.5.17: only a full member creates a group (IBA 1.3: or a send-only full
	// member).
	if q.JoinState()&(JoinFull|JoinSendOnlyFull) == 0 {
		return nil, wire.SAStatusReqInvalid
	}
	mgid := q.MGID()
	if !mgid.IsZero() && !mgid.IsMulticast() {
		return nil, wire.SAStatusInvalidGID
	}
	if found, _ := saHasPKey(saPortPKeys(p), q.PKey()); !found {
		return nil, wire.SAStatusReqInvalid
	}
	portMTU := p.NeighborMTU
	if portMTU == 0 {
		portMTU = uint8(hca.MTU2048)
	}
	mtu := portMTU
	if mask&wire.MCRCompMTU != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.MCRCompMTUSelector != 0 {
			sel = q.MTUSelector()
		}
		var ok bool
		if mtu, ok = saSelectMTU(sel, q.MTU(), portMTU); !ok {
			return nil, wire.SAStatusReqInvalid
		}
	}
	portRate := saRateEncoding(LinkRate(p.LinkWidthActive, p.LinkSpeedActive))
	if p.LinkWidthActive == 0 {
		portRate = wire.SARate10Gbps
	}
	rate := portRate
	if mask&wire.MCRCompRate != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.MCRCompRateSelector != 0 {
			sel = q.RateSelector()
		}
		var ok bool
		if rate, ok = saSelectRate(sel, q.Rate(), portRate); !ok {
			return nil, wire.SAStatusReqInvalid
		}
	}
	plt := a.cfg.PacketLifeTime
	if mask&wire.MCRCompPacketLifeTime != 0 {
		sel := uint8(wire.SASelectorExactly)
		if mask&wire.MCRCompPktLifeSel != 0 {
			sel = q.PacketLifeTimeSelector()
		}
		var ok bool
		if plt, ok = saSelectLifetime(sel, q.PacketLifeTime(), plt); !ok {
			return nil, wire.SAStatusReqInvalid
		}
	}
	scope := uint8(wire.MGIDScopeLinkLocal)
	if mask&wire.MCRCompScope != 0 && q.Scope() != 0 {
		scope = q.Scope()
	}
	g := &mcGroup{
		mgid: mgid, qkey: q.QKey(), pkey: q.PKey(), mtu: mtu, rate: rate, plt: plt,
		sl: q.SL(), tclass: q.TClass(), flowLabel: q.FlowLabel(), scope: scope,
		members: make(map[uint64]*mcMember),
	}
	if mask&wire.MCRCompHopLimit != 0 {
		g.hopLimit = q.HopLimit()
	}
	return g, 0
}

func (a *Agent) mcJoin(m *hca.MAD, t *Topology) {
	req := wire.SAMAD(m.Data)
	mask := req.CompMask()
	q := wire.MCMemberRecord(req.Data()[:wire.MCMemberRecordLen])
	if !a.smKeyOK(req) {
		a.replyError(m, wire.SAStatusDenied)
		return
	}
	if mask&(wire.MCRCompPortGID|wire.MCRCompJoinState) != wire.MCRCompPortGID|wire.MCRCompJoinState {
		a.replyError(m, wire.SAStatusInsufficientComponents)
		return
	}
	state := q.JoinState() & (JoinFull | JoinNonMember | JoinSendOnlyNonMember | JoinSendOnlyFull)
	if state == 0 {
		a.replyError(m, wire.SAStatusReqInvalid)
		return
	}
	p, st := a.mcPort(m, t, q)
	if st != 0 {
		a.replyError(m, st)
		return
	}
	var mgid wire.GID
	if mask&wire.MCRCompMGID != 0 {
		mgid = q.MGID()
	}
	a.mu.Lock()
	g := a.groups[mgid]
	a.mu.Unlock()
	if g == nil || mgid.IsZero() {
		ng, st := a.newGroup(p, q, mask|wire.MCRCompMGID)
		if st != 0 {
			a.replyError(m, st)
			return
		}
		if state&(JoinFull|JoinNonMember) == 0 && a.sendOnlyFull() {
			a.mc.sendOnlyRefused.Add(1)
			a.warnMcast(&a.mc.logSendOnly, "send-only multicast join refused: too many groups without receivers",
				"mgid", ng.mgid, "port", p.GUID, "max", a.maxSendOnly(), "refused", a.mc.sendOnlyRefused.Load())
			a.replyError(m, wire.SAStatusNoResources)
			return
		}
		mlid, err := a.allocMLID()
		if err != nil {
			a.mc.mlidExhausted.Add(1)
			a.warnMcast(&a.mc.logMLID, "multicast join refused: no free multicast LID", "mgid", ng.mgid, "port", p.GUID,
				"groups", len(a.Groups()), "refused", a.mc.mlidExhausted.Load(), "err", err)
			a.replyError(m, wire.SAStatusNoResources)
			return
		}
		ng.mlid = mlid
		a.mu.Lock()
		if ng.mgid.IsZero() {
			// IBA 15.2.5.17: the SA assigns an MGID; pibgw's form is
			// ff1<scope>:a01b:<pkey>::<sequence>, OpenSM's signature for SA-assigned groups.
			a.mgidSeq++
			ng.mgid[0], ng.mgid[1] = 0xFF, 0x10|ng.scope&0x0F
			binary.BigEndian.PutUint16(ng.mgid[2:], 0xA01B)
			binary.BigEndian.PutUint16(ng.mgid[4:], ng.pkey)
			binary.BigEndian.PutUint64(ng.mgid[8:], a.mgidSeq)
		}
		if g = a.groups[ng.mgid]; g == nil {
			g = ng
			a.groups[g.mgid] = g
			a.byMLID[g.mlid] = g
			ng = nil
		}
		a.mu.Unlock()
		if ng != nil {
			a.freeMLID(mlid) // lost a race with another creator
		}
	}
	a.mu.Lock()
	if !mcParamsOK(g, q, mask) {
		a.mu.Unlock()
		a.replyError(m, wire.SAStatusReqInvalid)
		return
	}
	if found, _ := saHasPKey(saPortPKeys(p), g.pkey); !found {
		a.mu.Unlock()
		a.replyError(m, wire.SAStatusReqInvalid)
		return
	}
	// IBA o15-0.2.x: a receiving port must carry the group's MTU.
	if state&(JoinFull|JoinNonMember) != 0 && p.NeighborMTU != 0 && p.NeighborMTU < g.mtu {
		a.mu.Unlock()
		a.replyError(m, wire.SAStatusReqInvalid)
		return
	}
	mem := g.members[p.GUID]
	if mem == nil {
		mem = &mcMember{guid: p.GUID, gid: q.PortGID()}
		g.members[p.GUID] = mem
	}
	mem.state |= state
	mem.proxy = q.ProxyJoin()
	var rec [wire.MCMemberRecordLen]byte
	g.fillRecord(rec[:], mem)
	mlid, members := g.mlid, g.membersLocked()
	a.mu.Unlock()
	a.program(mlid, members)
	a.replyRecord(m, rec[:])
}

func (a *Agent) program(mlid uint16, members []MCMember) {
	if a.cfg.Multicast == nil {
		return
	}
	if err := a.cfg.Multicast.SetMulticastGroup(mlid, members); err != nil {
		a.log.Warn("SetMulticastGroup failed", "mlid", mlid, "err", err)
	}
}

func (a *Agent) mcLeave(m *hca.MAD, t *Topology) {
	req := wire.SAMAD(m.Data)
	mask := req.CompMask()
	q := wire.MCMemberRecord(req.Data()[:wire.MCMemberRecordLen])
	if !a.smKeyOK(req) {
		a.replyError(m, wire.SAStatusDenied)
		return
	}
	if mask&mcJoinMask != mcJoinMask {
		a.replyError(m, wire.SAStatusInsufficientComponents)
		return
	}
	p, st := a.mcPort(m, t, q)
	if st != 0 {
		a.replyError(m, st)
		return
	}
	a.mu.Lock()
	g := a.groups[q.MGID()]
	var mem *mcMember
	if g != nil {
		mem = g.members[p.GUID]
	}
	if mem == nil || mem.state&q.JoinState() == 0 {
		a.mu.Unlock()
		a.replyError(m, wire.SAStatusReqInvalid)
		return
	}
	var rec [wire.MCMemberRecordLen]byte
	g.fillRecord(rec[:], mem)
	wire.MCMemberRecord(rec[:]).SetJoinState(q.JoinState() & mem.state)
	mem.state &^= q.JoinState()
	if mem.state == 0 {
		delete(g.members, p.GUID)
	}
	mlid, members := g.mlid, g.membersLocked()
	drop := len(g.members) == 0 && !g.persistent
	if drop {
		delete(a.groups, g.mgid)
		delete(a.byMLID, g.mlid)
	}
	a.mu.Unlock()
	if drop {
		a.freeMLID(mlid)
	} else {
		a.program(mlid, members)
	}
	a.replyRecord(m, rec[:])
}

// mcMatches reports whether record r agrees with query q on the masked components.
func mcMatches(r, q wire.MCMemberRecord, mask uint64) bool {
	switch {
	case mask&wire.MCRCompMGID != 0 && r.MGID() != q.MGID(),
		mask&wire.MCRCompPortGID != 0 && r.PortGID() != q.PortGID(),
		mask&wire.MCRCompQKey != 0 && r.QKey() != q.QKey(),
		mask&wire.MCRCompMLID != 0 && r.MLID() != q.MLID(),
		mask&wire.MCRCompMTU != 0 && r.MTU() != q.MTU(),
		mask&wire.MCRCompTClass != 0 && r.TClass() != q.TClass(),
		mask&wire.MCRCompPKey != 0 && r.PKey()&0x7FFF != q.PKey()&0x7FFF,
		mask&wire.MCRCompRate != 0 && r.Rate() != q.Rate(),
		mask&wire.MCRCompPacketLifeTime != 0 && r.PacketLifeTime() != q.PacketLifeTime(),
		mask&wire.MCRCompSL != 0 && r.SL() != q.SL(),
		mask&wire.MCRCompFlowLabel != 0 && r.FlowLabel() != q.FlowLabel(),
		mask&wire.MCRCompHopLimit != 0 && r.HopLimit() != q.HopLimit(),
		mask&wire.MCRCompScope != 0 && r.Scope() != q.Scope(),
		mask&wire.MCRCompJoinState != 0 && r.JoinState()&q.JoinState() != q.JoinState():
		return false
	}
	return true
}

// mcQuery answers Get and GetTable: one record per membership, and one with no port
// for a group without members when the query does not ask about ports.
func (a *Agent) mcQuery(m *hca.MAD) {
	req := wire.SAMAD(m.Data)
	mask := req.CompMask()
	q := wire.MCMemberRecord(req.Data()[:wire.MCMemberRecordLen])
	b := a.getBuf()
	var rec [wire.MCMemberRecordLen]byte
	stride := wire.SARecordStride(wire.MCMemberRecordLen)
	add := func() {
		if mcMatches(rec[:], q, mask) {
			n := len(b.recs)
			b.recs = append(b.recs, make([]byte, stride)...)
			copy(b.recs[n:], rec[:])
		}
	}
	a.mu.Lock()
	groups := make([]*mcGroup, 0, len(a.groups))
	for _, g := range a.groups {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(x, y *mcGroup) int { return int(x.mlid) - int(y.mlid) })
	for _, g := range groups {
		if len(g.members) == 0 {
			if mask&(wire.MCRCompPortGID|wire.MCRCompJoinState) == 0 {
				g.fillRecord(rec[:], nil)
				add()
			}
			continue
		}
		for _, mm := range g.membersLocked() {
			g.fillRecord(rec[:], g.members[mm.PortGUID])
			add()
		}
	}
	a.mu.Unlock()
	a.replyRecords(m, b.recs, wire.MCMemberRecordLen)
	a.putBuf(b)
}
