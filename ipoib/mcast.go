package ipoib

import (
	"context"
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// IP multicast over IPoIB (RFC 4391 §4): each IP group maps to an MGID in the
// partition; the groups the IP stack subscribes to (IGMP/MLD reports through the TUN
// device) and the IPv6 all-nodes and solicited-node groups of our addresses are joined
// as full members with the QP attached; a group we only send to is joined send-only.
//
// Send-only memberships are the resolution's: every unresolved IPv6 neighbour's
// solicitation goes to its solicited-node group, so a scan of addresses joins a group
// each. Each takes one of the fabric's multicast LIDs (1024 on a switch), so they are
// given back as Linux's ipoib does (its neighbour reaper, __ipoib_reap_neigh, leaves the
// send-only group of a neighbour unused for its aging time:
// ipoib_check_and_add_mcast_sendonly): a send-only group not sent to for NeighborTimeout
// is left, and an interface holds at most maxSendOnlyGroups of them, the least recently
// used left first. Full memberships are never left for them.

const (
	igmpv1Report = 0x12
	igmpv2Report = 0x16
	igmpv2Leave  = 0x17
	igmpv3Report = 0x22

	mldQuery    = 130
	mldv1Report = 131
	mldv1Done   = 132
	mldv2Report = 143

	// Group record types (RFC 3376 §4.2.12, RFC 3810 §5.2.12).
	recModeIsInclude   = 1
	recModeIsExclude   = 2
	recChangeToInclude = 3
	recChangeToExclude = 4
	recAllowNew        = 5
	recBlockOld        = 6

	// joinRetry is how long a failed send-only join waits before the next try.
	joinRetry = time.Second

	// maxSendOnlyGroups bounds an interface's send-only memberships: six interfaces
	// flooding at once stay under the SA's bound on groups without receivers
	// (sa.DefaultMaxSendOnlyGroups, 768).
	maxSendOnlyGroups = 128
)

// group is one multicast group of the interface.
type group struct {
	mgid wire.GID
	addr netip.Addr

	// Why we are a full member: the IP stack subscribed (report), or it is one of our
	// own IPv6 groups (own).
	report, own bool

	joined   uint8 // JoinState held at the SA
	attached bool
	mlid     uint16
	ah       *hca.AH
	busy     bool // a join is queued
	failedAt time.Time
	queue    []queued

	// used is set by each send to the group (the transmit path, under the read lock);
	// the expiry moves it into lastUse, when the group was last seen in use.
	used    atomic.Bool
	lastUse time.Time
}

func (g *group) wantFull() bool { return g.report || g.own }

// sendOnly reports whether g is held only as a send-only member (groupTable.mu).
func (g *group) sendOnly() bool {
	return g.joined == wire.JoinSendOnlyFullMember && !g.wantFull()
}

// sendOnlyAging is the timer that leaves idle send-only groups (groupTable.mu).
type sendOnlyAging struct {
	timer clock.Timer
	armed bool
}

// groupAHFor returns the AH of a group to send pkt to, or queues pkt and joins the
// group send-only.
func (i *Interface) groupAHFor(mgid wire.GID, addr netip.Addr, etype uint16, pkt []byte, partial bool) (*hca.AH, bool) {
	if ah := i.mc.ah(mgid); ah != nil {
		return ah, true
	}
	now := i.clk.Now()
	i.mc.mu.Lock()
	g := i.mc.m[mgid]
	if g == nil {
		if g = i.mc.add(mgid, addr, i.cfg.MaxGroups); g == nil {
			i.mc.mu.Unlock()
			i.cnt.inc(cDropGroupOverflow)
			return nil, false
		}
	}
	if g.ah != nil {
		ah := g.ah
		g.used.Store(true)
		i.mc.mu.Unlock()
		return ah, true
	}
	if !g.failedAt.IsZero() && now.Sub(g.failedAt) < joinRetry && !g.busy {
		i.mc.mu.Unlock()
		i.cnt.inc(cDropNoGroup)
		return nil, false
	}
	if len(g.queue) < maxQueued {
		g.queue = append(g.queue, queued{etype, clonePacket(pkt, partial)})
	} else {
		i.cnt.inc(cDropNoGroup)
	}
	start := !g.busy
	g.busy = true
	i.mc.mu.Unlock()
	if start {
		i.ctl.jobs.push(func() {
			i.ctl.mu.Lock()
			defer i.ctl.mu.Unlock()
			i.joinGroup(mgid)
		})
	}
	return nil, false
}

// ah is the transmit path's lookup: the AH of a joined group, or nil.
func (t *groupTable) ah(mgid wire.GID) *hca.AH {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if g := t.m[mgid]; g != nil {
		if g.ah != nil && !g.used.Load() {
			g.used.Store(true)
		}
		return g.ah
	}
	return nil
}

// add (under mu) makes a group entry, or returns nil when the table holds max groups
// even after the failed ones that nobody waits on made room.
func (t *groupTable) add(mgid wire.GID, addr netip.Addr, max int) *group {
	if len(t.m) >= max {
		for m, x := range t.m {
			if x.ah == nil && !x.busy && !x.wantFull() && x.joined == 0 {
				delete(t.m, m)
			}
		}
		if len(t.m) >= max {
			return nil
		}
	}
	g := &group{mgid: mgid, addr: addr}
	t.m[mgid] = g
	return g
}

// joinGroup (control loop, under ctl.mu) brings the SA membership and the QP attachment
// of a group in line with what we want of it.
func (i *Interface) joinGroup(mgid wire.GID) {
	ls := i.link.Load()
	i.mc.mu.Lock()
	g := i.mc.m[mgid]
	if g == nil {
		i.mc.mu.Unlock()
		return
	}
	want := uint8(0)
	switch {
	case g.wantFull():
		want = wire.JoinFullMember
	case len(g.queue) > 0:
		// Linux's ipoib_mcast_join for a send-only group: a send-only full member
		// (IBA 1.3), which creates the group when nobody has joined it yet, so the
		// packet goes out instead of being dropped.
		want = wire.JoinSendOnlyFullMember
	}
	joined, attached := g.joined, g.attached
	i.mc.mu.Unlock()

	var err error
	var rec sa.MCGroup
	if !ls.up {
		err = errDown
	} else if want == wire.JoinFullMember && joined&wire.JoinFullMember == 0 {
		rec, err = i.saJoin(mgid, wire.JoinFullMember)
		if err == nil {
			if err = i.qp.AttachMcast(mgid, rec.MLID); err == nil {
				attached = true
			}
			if joined&wire.JoinSendOnlyFullMember != 0 {
				// The full membership supersedes it.
				i.saLeave(mgid, wire.JoinSendOnlyFullMember)
			}
			joined = wire.JoinFullMember
		}
	} else if want == wire.JoinSendOnlyFullMember && joined == 0 {
		rec, err = i.saJoin(mgid, wire.JoinSendOnlyFullMember)
		if err == nil {
			joined = wire.JoinSendOnlyFullMember
		}
	} else if want == 0 && joined != 0 {
		if attached {
			_ = i.qp.DetachMcast(mgid, 0)
			attached = false
		}
		i.saLeave(mgid, joined)
		joined = 0
	}
	var ah *hca.AH
	if err == nil && rec.MLID != 0 {
		ah, err = i.pd.CreateAH(i.groupAH(rec))
	}

	i.mc.mu.Lock()
	g = i.mc.m[mgid]
	if g == nil {
		i.mc.mu.Unlock()
		return
	}
	g.busy = false
	var flush []queued
	if err != nil {
		g.failedAt = i.clk.Now()
		i.cnt.add(cDropNoGroup, uint64(len(g.queue)))
		g.queue = nil
		if want == wire.JoinFullMember {
			i.log.Debug("multicast join failed", "group", g.addr, "mgid", mgid, "err", err)
		}
	} else {
		g.failedAt = time.Time{}
		g.joined, g.attached = joined, attached
		if rec.MLID != 0 {
			g.mlid = rec.MLID
		}
		if ah != nil {
			old := g.ah
			g.ah = ah
			if old != nil {
				i.nb.mu.Lock()
				i.nb.dead = append(i.nb.dead, old)
				i.nb.mu.Unlock()
			}
		}
		if joined == 0 {
			if g.ah != nil {
				// Destroyed now, not kept for Close: send-only groups come and go with
				// every scan of addresses, and each AH counts against the device's
				// max_ah. A send the transmit path is posting with it goes out all the
				// same (the hca takes the address vector as it is; Destroy gives back
				// the count).
				_ = g.ah.Destroy()
			}
			delete(i.mc.m, mgid)
		} else {
			flush, g.queue = g.queue, nil
		}
	}
	ah = g.ah
	var expire []wire.GID
	if err == nil && g.sendOnly() {
		g.used.Store(false)
		g.lastUse = i.clk.Now()
		expire = i.boundSendOnlyLocked(g)
		i.armSendOnlyLocked()
	}
	i.mc.mu.Unlock()
	for _, q := range flush {
		i.cnt.inc(cTxMulticast)
		i.txp.snd.send(ah, MulticastQPN, ls.qkey, q.etype, q.pkt)
	}
	i.leaveGroups(expire)
}

// boundSendOnlyLocked (under mc.mu) picks the send-only groups beyond
// maxSendOnlyGroups to leave, the least recently used first, never keep (the group just
// joined for a packet); they are marked busy, their leave is the caller's.
func (i *Interface) boundSendOnlyLocked(keep *group) []wire.GID {
	var so []*group
	for _, g := range i.mc.m {
		if g.sendOnly() && !g.busy && g != keep {
			so = append(so, g)
		}
	}
	excess := len(so) + 1 - maxSendOnlyGroups
	if excess <= 0 {
		return nil
	}
	now := i.clk.Now()
	for _, g := range so {
		if g.used.Swap(false) {
			g.lastUse = now
		}
	}
	slices.SortFunc(so, func(a, b *group) int { return a.lastUse.Compare(b.lastUse) })
	out := make([]wire.GID, 0, excess)
	for _, g := range so[:excess] {
		g.busy = true
		out = append(out, g.mgid)
	}
	return out
}

// armSendOnlyLocked (under mc.mu) arms the expiry of idle send-only groups: it looks
// every half NeighborTimeout, so a group is left between one and one and a half
// NeighborTimeout after its last packet.
func (i *Interface) armSendOnlyLocked() {
	a := &i.mc.so
	if a.armed {
		return
	}
	a.armed = true
	d := max(i.cfg.NeighborTimeout/2, time.Second)
	if a.timer == nil {
		a.timer = i.clk.AfterFunc(d, i.expireSendOnly)
	} else {
		a.timer.Reset(d)
	}
}

// expireSendOnly leaves the send-only groups nobody sent to for NeighborTimeout.
func (i *Interface) expireSendOnly() {
	if !i.enterCallback() {
		return
	}
	defer i.wg.Done()
	now := i.clk.Now()
	var expire []wire.GID
	i.mc.mu.Lock()
	i.mc.so.armed = false
	left := 0
	for mgid, g := range i.mc.m {
		if !g.sendOnly() || g.busy {
			continue
		}
		if g.used.Swap(false) {
			g.lastUse = now
		}
		if now.Sub(g.lastUse) >= i.cfg.NeighborTimeout {
			g.busy = true
			expire = append(expire, mgid)
		} else {
			left++
		}
	}
	if left > 0 {
		i.armSendOnlyLocked()
	}
	i.mc.mu.Unlock()
	i.leaveGroups(expire)
}

// leaveGroups queues the leave of groups marked busy for it: joinGroup finds nothing
// wanted of them (no full membership, no packet waiting) and leaves.
func (i *Interface) leaveGroups(mgids []wire.GID) {
	for _, m := range mgids {
		i.ctl.jobs.push(func() {
			i.ctl.mu.Lock()
			defer i.ctl.mu.Unlock()
			i.joinGroup(m)
		})
	}
}

type downError struct{}

func (downError) Error() string { return "ipoib: interface down" }

var errDown error = downError{}

func (i *Interface) saJoin(mgid wire.GID, state uint8) (sa.MCGroup, error) {
	ls := i.link.Load()
	p := sa.JoinParams{PKey: i.pkey}
	if state&(wire.JoinFullMember|wire.JoinSendOnlyFullMember) != 0 {
		// Linux's ipoib_mcast_join: a full member (or a send-only full member) creates
		// the group if needed, with the broadcast group's parameters.
		b := ls.group
		p = sa.JoinParams{
			PKey: i.pkey, Create: true, QKey: b.QKey, MTU: b.MTU, Rate: b.Rate, SL: b.SL,
			TClass: b.TClass, FlowLabel: b.FlowLabel, HopLimit: b.HopLimit,
		}
	}
	ctx, cancel := context.WithTimeout(i.ctx, saTimeout)
	defer cancel()
	return i.sa.Join(ctx, mgid, state, p)
}

func (i *Interface) saLeave(mgid wire.GID, state uint8) {
	ctx, cancel := context.WithTimeout(i.ctx, saTimeout)
	defer cancel()
	_ = i.sa.Leave(ctx, mgid, state)
}

// setFull marks the group of addr as subscribed by the stack (report) or as one of ours
// (own), or unmarks it, and schedules the join or leave.
func (i *Interface) setFull(addr netip.Addr, report, own *bool) {
	var mgid wire.GID
	if addr.Is4() {
		mgid = MGIDForIPv4(addr, i.pkey, scopeLinkLocal)
	} else {
		mgid = MGIDForIPv6(addr, i.pkey, scopeLinkLocal)
	}
	i.mc.mu.Lock()
	g := i.mc.m[mgid]
	if g == nil {
		if (report == nil || !*report) && (own == nil || !*own) {
			i.mc.mu.Unlock()
			return
		}
		g = &group{mgid: mgid, addr: addr}
		i.mc.m[mgid] = g
	}
	before := g.wantFull()
	if report != nil {
		g.report = *report
	}
	if own != nil {
		g.own = *own
	}
	changed := before != g.wantFull() || (g.wantFull() && g.joined&wire.JoinFullMember == 0)
	start := changed && !g.busy
	if start {
		g.busy = true
	}
	i.mc.mu.Unlock()
	if start {
		i.ctl.jobs.push(func() {
			i.ctl.mu.Lock()
			defer i.ctl.mu.Unlock()
			i.joinGroup(mgid)
		})
	}
}

// membershipReport handles an IGMP message from the stack (RFC 2236, RFC 3376).
func (i *Interface) membershipReport(pkt []byte) {
	ihl := int(pkt[0]&0x0F) * 4
	if ihl < 20 || len(pkt) < ihl+8 {
		i.cnt.inc(cDropMalformed)
		return
	}
	m := pkt[ihl:]
	i.cnt.inc(cMembershipReports)
	yes, no := true, false
	switch m[0] {
	case igmpv1Report, igmpv2Report:
		i.setFull(netip.AddrFrom4([4]byte(m[4:8])), &yes, nil)
	case igmpv2Leave:
		i.setFull(netip.AddrFrom4([4]byte(m[4:8])), &no, nil)
	case igmpv3Report:
		n := int(binary.BigEndian.Uint16(m[6:]))
		recs := m[8:]
		for ; n > 0 && len(recs) >= 8; n-- {
			typ, aux, srcs := recs[0], int(recs[1])*4, int(binary.BigEndian.Uint16(recs[2:]))
			l := 8 + 4*srcs + aux
			if l > len(recs) {
				break
			}
			addr := netip.AddrFrom4([4]byte(recs[4:8]))
			i.applyRecord(addr, typ, srcs)
			recs = recs[l:]
		}
	}
}

// mldReport handles an MLD message from the stack (RFC 2710, RFC 3810); m starts at
// the ICMPv6 header.
func (i *Interface) mldReport(m []byte) {
	if len(m) < 8 {
		i.cnt.inc(cDropMalformed)
		return
	}
	i.cnt.inc(cMembershipReports)
	yes, no := true, false
	switch m[0] {
	case mldv1Report, mldv1Done:
		if len(m) < 24 {
			return
		}
		addr := netip.AddrFrom16([16]byte(m[8:24]))
		if m[0] == mldv1Report {
			i.setFull(addr, &yes, nil)
		} else {
			i.setFull(addr, &no, nil)
		}
	case mldv2Report:
		n := int(binary.BigEndian.Uint16(m[6:]))
		recs := m[8:]
		for ; n > 0 && len(recs) >= 20; n-- {
			typ, aux, srcs := recs[0], int(recs[1])*4, int(binary.BigEndian.Uint16(recs[2:]))
			l := 20 + 16*srcs + aux
			if l > len(recs) {
				break
			}
			addr := netip.AddrFrom16([16]byte(recs[4:20]))
			i.applyRecord(addr, typ, srcs)
			recs = recs[l:]
		}
	}
}

// applyRecord turns a group record into a join or leave: any EXCLUDE mode (or sources
// allowed) means receive, INCLUDE with no sources means leave. IB multicast has no
// source filtering; the IP stack filters sources itself.
func (i *Interface) applyRecord(addr netip.Addr, typ byte, srcs int) {
	if !addr.IsMulticast() {
		return
	}
	yes, no := true, false
	switch typ {
	case recModeIsExclude, recChangeToExclude:
		i.setFull(addr, &yes, nil)
	case recModeIsInclude, recChangeToInclude, recAllowNew:
		if srcs > 0 {
			i.setFull(addr, &yes, nil)
		} else if typ != recAllowNew {
			i.setFull(addr, &no, nil)
		}
	case recBlockOld:
	}
}

// syncOwnGroups (under ctl.mu) joins the IPv6 all-nodes group and the solicited-node
// groups of our IPv6 addresses, and leaves those of addresses we no longer have.
func (i *Interface) syncOwnGroups() {
	if !i.link.Load().up {
		return
	}
	addrs := i.addrs.Load()
	want := map[netip.Addr]bool{allNodes: true, SolicitedNode(addrs.linkLocal): true}
	for _, p := range addrs.prefixes {
		if p.Addr().Is6() {
			want[SolicitedNode(p.Addr())] = true
		}
	}
	yes, no := true, false
	i.mc.mu.RLock()
	var drop []netip.Addr
	for _, g := range i.mc.m {
		if g.own && !want[g.addr] {
			drop = append(drop, g.addr)
		}
	}
	i.mc.mu.RUnlock()
	for _, a := range drop {
		i.setFull(a, nil, &no)
	}
	for a := range want {
		i.setFull(a, nil, &yes)
	}
}

// rejoinGroups (under ctl.mu) joins again every group we are a member of (after the
// link came up or the SM changed).
func (i *Interface) rejoinGroups() {
	i.mc.mu.Lock()
	var mgids []wire.GID
	for mgid, g := range i.mc.m {
		if g.wantFull() && !g.busy {
			g.joined, g.attached = 0, false
			g.busy = true
			mgids = append(mgids, mgid)
		}
	}
	i.mc.mu.Unlock()
	for _, m := range mgids {
		i.ctl.jobs.push(func() {
			i.ctl.mu.Lock()
			defer i.ctl.mu.Unlock()
			i.joinGroup(m)
		})
	}
}

// dropGroups (under ctl.mu) forgets the memberships of a link that went down; groups
// the stack or our addresses want are kept to be joined again when it comes back.
func (i *Interface) dropGroups(leave bool) {
	i.mc.mu.Lock()
	var leaves []struct {
		mgid  wire.GID
		state uint8
	}
	for mgid, g := range i.mc.m {
		if g.attached {
			_ = i.qp.DetachMcast(mgid, g.mlid)
		}
		if leave && g.joined != 0 {
			leaves = append(leaves, struct {
				mgid  wire.GID
				state uint8
			}{mgid, g.joined})
		}
		i.cnt.add(cDropDown, uint64(len(g.queue)))
		g.queue = nil
		if g.ah != nil {
			i.nb.mu.Lock()
			i.nb.dead = append(i.nb.dead, g.ah)
			i.nb.mu.Unlock()
			g.ah = nil
		}
		g.joined, g.attached, g.busy = 0, false, false
		if !g.wantFull() {
			delete(i.mc.m, mgid)
		}
	}
	i.mc.mu.Unlock()
	for _, l := range leaves {
		ctx, cancel := context.WithTimeout(i.ctx, time.Second)
		_ = i.sa.Leave(ctx, l.mgid, l.state)
		cancel()
	}
}
