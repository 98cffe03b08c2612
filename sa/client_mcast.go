package sa

import (
	"context"
	"slices"
	"sync"

	"github.com/pibgw/pibgw/wire"
)

// MCGroup is an MCMemberRecord as the client returns it: the group's parameters and
// this port's membership.
type MCGroup struct {
	MGID, PortGID  wire.GID
	QKey           uint32
	MLID           uint16
	MTU            uint8 // IBA encoding
	TClass         uint8
	PKey           uint16
	Rate           uint8 // IBA encoding
	PacketLifeTime uint8
	SL             uint8
	FlowLabel      uint32
	HopLimit       uint8
	Scope          uint8
	JoinState      uint8 // JoinFull | JoinNonMember | JoinSendOnlyNonMember
	ProxyJoin      bool
}

// MCGroupFromRecord decodes an MCMemberRecord.
func MCGroupFromRecord(r wire.MCMemberRecord) MCGroup {
	return MCGroup{
		MGID: r.MGID(), PortGID: r.PortGID(), QKey: r.QKey(), MLID: r.MLID(), MTU: r.MTU(),
		TClass: r.TClass(), PKey: r.PKey(), Rate: r.Rate(), PacketLifeTime: r.PacketLifeTime(),
		SL: r.SL(), FlowLabel: r.FlowLabel(), HopLimit: r.HopLimit(), Scope: r.Scope(),
		JoinState: r.JoinState(), ProxyJoin: r.ProxyJoin(),
	}
}

// JoinParams are the optional parts of a join. Without Create the join names only the
// group (MGID, or zero for an SA-assigned one), the port and the JoinState, plus PKey when
// set; the SA answers with the group's parameters (how IPoIB joins its broadcast group).
// With Create the parameters go along, so that the SA can create the group if it does
// not exist; if it does, they must agree with it.
type JoinParams struct {
	PKey uint16 // 0: the P_Key at the client's PKeyIndex

	Create    bool
	QKey      uint32
	MTU       uint8 // IBA encoding; 0 leaves the MTU to the SA
	Rate      uint8 // IBA encoding; 0 leaves the rate to the SA
	SL        uint8
	TClass    uint8
	FlowLabel uint32
	HopLimit  uint8
	Scope     uint8 // 0: link-local (2)
}

// membership is the port's membership of one group: what each holder holds, the
// parameters to join again with, and the SA's last answer.
type membership struct {
	holders map[any]uint8 // JoinState by holder
	params  JoinParams
	group   MCGroup
}

// state is the port's JoinState: the union of its holders' (IBA 15.2.5.17: the SA keeps
// one member per port GID).
func (m *membership) state() uint8 {
	var s uint8
	for _, h := range m.holders {
		s |= h
	}
	return s
}

// groupLock serializes the joins and leaves of one MGID, so that a holder's join and
// another's last leave cannot cross at the SA (the Set answered, then the Delete taking
// the membership the joiner was told it has).
type groupLock struct {
	mu   sync.Mutex
	refs int
}

func (c *Client) lockGroup(mgid wire.GID) func() {
	c.mcMu.Lock()
	if c.mcLocks == nil {
		c.mcLocks = make(map[wire.GID]*groupLock)
	}
	l := c.mcLocks[mgid]
	if l == nil {
		l = &groupLock{}
		c.mcLocks[mgid] = l
	}
	l.refs++
	c.mcMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mcMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.mcLocks, mgid)
		}
		c.mcMu.Unlock()
	}
}

func (c *Client) defaultPKey() uint16 {
	k, _ := c.port.PKey(int(c.opts.PKeyIndex))
	return k
}

// joinRecord writes the join/leave template and returns its component mask.
func (c *Client) joinRecord(r wire.MCMemberRecord, mgid wire.GID, state uint8, p JoinParams) uint64 {
	clear(r)
	r.SetMGID(mgid)
	r.SetPortGID(c.ownGID())
	r.SetJoinState(state)
	mask := uint64(wire.MCRCompMGID | wire.MCRCompPortGID | wire.MCRCompJoinState)
	pkey := p.PKey
	if pkey == 0 {
		pkey = c.defaultPKey()
	}
	if pkey != 0 {
		r.SetPKey(pkey)
		mask |= wire.MCRCompPKey
	}
	if !p.Create {
		return mask
	}
	r.SetQKey(p.QKey)
	r.SetSL(p.SL)
	r.SetTClass(p.TClass)
	r.SetFlowLabel(p.FlowLabel)
	mask |= wire.MCRCompQKey | wire.MCRCompSL | wire.MCRCompTClass | wire.MCRCompFlowLabel
	if p.MTU != 0 {
		r.SetMTUSelector(wire.SASelectorExactly)
		r.SetMTU(p.MTU)
		mask |= wire.MCRCompMTUSelector | wire.MCRCompMTU
	}
	if p.Rate != 0 {
		r.SetRateSelector(wire.SASelectorExactly)
		r.SetRate(p.Rate)
		mask |= wire.MCRCompRateSelector | wire.MCRCompRate
	}
	if p.HopLimit != 0 {
		r.SetHopLimit(p.HopLimit)
		mask |= wire.MCRCompHopLimit
	}
	scope := p.Scope
	if scope == 0 {
		scope = wire.MGIDScopeLinkLocal
	}
	r.SetScope(scope)
	mask |= wire.MCRCompScope
	return mask
}

func (c *Client) join(ctx context.Context, mgid wire.GID, state uint8, p JoinParams) (MCGroup, error) {
	var rec [wire.MCMemberRecordLen]byte
	mask := c.joinRecord(rec[:], mgid, state, p)
	out, err := c.Query(ctx, wire.MethodSet, wire.AttrMCMemberRecord, mask, rec[:])
	if err != nil {
		return MCGroup{}, err
	}
	return MCGroupFromRecord(out), nil
}

// Join joins this port to the multicast group mgid (zero: let the SA assign one, which
// needs p.Create) with joinState (JoinFull, JoinNonMember, JoinSendOnlyNonMember; IBA
// 15.2.5.17) and returns the group's record: Q_Key, MLID, MTU, rate, … The client
// remembers the membership and joins again after an SM restart (ClientOptions.OnRejoin).
// Attaching QPs to the group (hca.QP.AttachMcast with MGID and MLID) is the caller's.
// It holds the membership for the client's own user (JoinFor with the client as holder).
func (c *Client) Join(ctx context.Context, mgid wire.GID, joinState uint8, p JoinParams) (MCGroup, error) {
	return c.JoinFor(ctx, c, mgid, joinState, p)
}

// JoinFor is Join on behalf of holder, one of the port's users (an IPoIB interface,
// rdma_cm, an attached process): the port joins once and the SA sees one member, whose
// JoinState is the union of what the holders hold; each holder's share is kept apart, so
// that a leave by one does not take another's (Linux's ib_sa multicast.c counts a port's
// members per JoinState bit in the same way). Joining again what a holder holds is a no-op
// for the count. holder must be comparable.
func (c *Client) JoinFor(ctx context.Context, holder any, mgid wire.GID, joinState uint8, p JoinParams) (MCGroup, error) {
	unlock := c.lockGroup(mgid)
	defer unlock()
	g, err := c.join(ctx, mgid, joinState, p)
	if err != nil {
		return MCGroup{}, err
	}
	if p.Create {
		// A rejoin recreates the group as it was, with the MGID the SA assigned.
		p.QKey, p.MTU, p.Rate, p.SL, p.TClass, p.FlowLabel = g.QKey, g.MTU, g.Rate, g.SL, g.TClass, g.FlowLabel
		p.PKey = g.PKey
	}
	c.mcMu.Lock()
	m := c.members[g.MGID]
	if m == nil {
		m = &membership{holders: make(map[any]uint8)}
		c.members[g.MGID] = m
	}
	m.holders[holder] |= joinState
	if p.Create || !m.params.Create {
		m.params = p
	}
	m.group = g
	c.mcMu.Unlock()
	return g, nil
}

// Leave removes joinState from this port's membership of mgid (IBA 15.2.5.17, Delete):
// LeaveFor with the client as holder.
func (c *Client) Leave(ctx context.Context, mgid wire.GID, joinState uint8) error {
	return c.LeaveFor(ctx, c, mgid, joinState)
}

// LeaveFor removes joinState from holder's share of the port's membership of mgid and
// leaves at the SA only the JoinState bits no other holder holds: while an IPoIB
// interface holds its broadcast group, an attached process that joined it too and leaves
// (or exits) does not take the port out of the group. Bits nobody holds are left at the
// SA all the same (it answers whether the port was a member).
func (c *Client) LeaveFor(ctx context.Context, holder any, mgid wire.GID, joinState uint8) error {
	unlock := c.lockGroup(mgid)
	defer unlock()
	c.mcMu.Lock()
	var others uint8
	if m := c.members[mgid]; m != nil {
		for h, s := range m.holders {
			if h != holder {
				others |= s
			}
		}
		if s := m.holders[holder] &^ joinState; s != 0 {
			m.holders[holder] = s
		} else {
			delete(m.holders, holder)
		}
		if len(m.holders) == 0 {
			delete(c.members, mgid)
		}
	}
	c.mcMu.Unlock()
	leave := joinState &^ others
	if leave == 0 {
		return nil // other holders keep the port a member
	}
	var rec [wire.MCMemberRecordLen]byte
	mask := c.joinRecord(rec[:], mgid, leave, JoinParams{})
	_, err := c.Query(ctx, wire.MethodDelete, wire.AttrMCMemberRecord, mask, rec[:])
	return err
}

// Holds returns the JoinState holder holds in mgid (for tools and tests).
func (c *Client) Holds(holder any, mgid wire.GID) uint8 {
	c.mcMu.Lock()
	defer c.mcMu.Unlock()
	if m := c.members[mgid]; m != nil {
		return m.holders[holder]
	}
	return 0
}

// Memberships returns the groups this client has joined, as last answered.
func (c *Client) Memberships() []MCGroup {
	c.mcMu.Lock()
	out := make([]MCGroup, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, m.group)
	}
	c.mcMu.Unlock()
	slices.SortFunc(out, func(a, b MCGroup) int { return slices.Compare(a.MGID[:], b.MGID[:]) })
	return out
}

// Rejoin joins every remembered group again (after the SA lost its state) and reports
// each result to ClientOptions.OnRejoin. The client calls it on client reregistration,
// SM change, LID change and port activation.
func (c *Client) Rejoin(ctx context.Context) {
	type job struct {
		mgid  wire.GID
		state uint8
		p     JoinParams
	}
	c.mcMu.Lock()
	jobs := make([]job, 0, len(c.members))
	for mgid, m := range c.members {
		jobs = append(jobs, job{mgid, m.state(), m.params})
	}
	c.mcMu.Unlock()
	for _, j := range jobs {
		unlock := c.lockGroup(j.mgid)
		g, err := c.join(ctx, j.mgid, j.state, j.p)
		unlock()
		if err != nil {
			c.log.Warn("multicast rejoin failed", "mgid", j.mgid, "err", err)
		} else {
			c.mcMu.Lock()
			if m := c.members[j.mgid]; m != nil {
				m.group = g
			}
			c.mcMu.Unlock()
		}
		if c.opts.OnRejoin != nil {
			if err != nil {
				g = MCGroup{MGID: j.mgid}
			}
			c.opts.OnRejoin(g, err)
		}
	}
}

// MCMembers lists the memberships of mgid (zero: of every group) the SA knows
// (SubnAdmGetTable of MCMemberRecord).
func (c *Client) MCMembers(ctx context.Context, mgid wire.GID) ([]MCGroup, error) {
	var rec [wire.MCMemberRecordLen]byte
	var mask uint64
	if !mgid.IsZero() {
		wire.MCMemberRecord(rec[:]).SetMGID(mgid)
		mask = wire.MCRCompMGID
	}
	t, err := c.GetTable(ctx, wire.AttrMCMemberRecord, mask, rec[:])
	if err != nil {
		return nil, err
	}
	out := make([]MCGroup, t.Count())
	for i := range out {
		out[i] = MCGroupFromRecord(t.Record(i))
	}
	return out, nil
}
