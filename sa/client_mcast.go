package sa

import (
	"context"
	"slices"

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

type membership struct {
	state  uint8
	params JoinParams
	group  MCGroup
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
func (c *Client) Join(ctx context.Context, mgid wire.GID, joinState uint8, p JoinParams) (MCGroup, error) {
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
		m = &membership{}
		c.members[g.MGID] = m
	}
	m.state |= joinState
	m.params = p
	m.group = g
	c.mcMu.Unlock()
	return g, nil
}

// Leave removes joinState from this port's membership of mgid (IBA 15.2.5.17, Delete).
func (c *Client) Leave(ctx context.Context, mgid wire.GID, joinState uint8) error {
	var rec [wire.MCMemberRecordLen]byte
	mask := c.joinRecord(rec[:], mgid, joinState, JoinParams{})
	_, err := c.Query(ctx, wire.MethodDelete, wire.AttrMCMemberRecord, mask, rec[:])
	c.mcMu.Lock()
	if m := c.members[mgid]; m != nil {
		m.state &^= joinState
		if m.state == 0 {
			delete(c.members, mgid)
		}
	}
	c.mcMu.Unlock()
	return err
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
		jobs = append(jobs, job{mgid, m.state, m.params})
	}
	c.mcMu.Unlock()
	for _, j := range jobs {
		g, err := c.join(ctx, j.mgid, j.state, j.p)
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
