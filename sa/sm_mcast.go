package sa

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
)

// Multicast forwarding (IBA 14.2.5.11, 18.2.4.2): for each group the SM builds one
// spanning tree over the switches that connect its members, rooted at the switch closest
// to all of them, and programs every switch's MulticastForwardingTable with the tree
// ports plus the CA ports of members that receive. Send-only members are on the tree (so
// what they send reaches the group) but their own port is not in any mask.

// mlidBase is the first multicast LID (IBA 4.1.3).
const mlidBase = 0xC000

// JoinState bits (MCMemberRecord:JoinState, IBA 15.2.5.17).
const (
	JoinFull              = 1 << 0
	JoinNonMember         = 1 << 1
	JoinSendOnlyNonMember = 1 << 2
	// JoinSendOnlyFull is the send-only full member of IBA 1.3 (MCMemberRecord
	// JoinState bit 3): it sends, does not receive, and may create the group as a full
	// member does — what Linux's ipoib uses for send-only multicast when the SA
	// advertises it (ClassPortInfo CapabilityMask2 SendOnlyFullMemberSupport).
	JoinSendOnlyFull = 1 << 3
)

// MCMember is one port's membership of a multicast group.
type MCMember struct {
	PortGUID  uint64
	JoinState uint8 // JoinFull | JoinNonMember | JoinSendOnlyNonMember | JoinSendOnlyFull
}

// receives reports whether the member gets the group's packets: full members and
// non-members do, send-only non-members do not (IBA 15.2.5.17).
func (m MCMember) receives() bool { return m.JoinState&(JoinFull|JoinNonMember) != 0 }

// mftEntry is the set of ports an MLID is forwarded to, bit i for port i.
type mftEntry [4]uint64

func (e *mftEntry) set(i uint8)          { e[i>>6] |= 1 << (i & 63) }
func (e mftEntry) bits16(pos int) uint16 { return uint16(e[pos*16/64] >> (pos * 16 % 64)) }

// ErrNoMLID is returned when every multicast LID is in use.
var ErrNoMLID = errors.New("sa: no free multicast LID")

// AllocMLID reserves a free multicast LID, the lowest from 0xC000. The group has no
// members until SetMulticastGroup.
func (sm *SM) AllocMLID() (uint16, error) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	limit := mlidBase + sm.mftCap()
	for mlid := mlidBase; mlid < limit; mlid++ {
		if _, used := sm.groups[uint16(mlid)]; !used {
			sm.groups[uint16(mlid)] = nil
			return uint16(mlid), nil
		}
	}
	return 0, ErrNoMLID
}

// mftCap is the smallest MulticastFDBCap of the switches (1024 before any sweep).
func (sm *SM) mftCap() int {
	c := 1024
	if t := sm.topo.Load(); t != nil {
		for _, n := range t.Nodes {
			if n.IsSwitch() && n.MulticastFDBCap != 0 && int(n.MulticastFDBCap) < c {
				c = int(n.MulticastFDBCap)
			}
		}
	}
	return c
}

// FreeMLID removes the group's forwarding entries and releases mlid.
func (sm *SM) FreeMLID(mlid uint16) {
	sm.mu.Lock()
	_, ok := sm.groups[mlid]
	delete(sm.groups, mlid)
	if ok {
		sm.mcDirty = true
	}
	sm.mu.Unlock()
	if ok {
		sm.kick()
	}
}

// SetMulticastGroup sets the members of the group with multicast LID mlid (reserving
// mlid if AllocMLID did not) and reprograms the switches' MFTs to match. The SA calls it
// after every MCMemberRecord join or leave, with the group's whole membership. The MFTs
// are programmed by SMPs: on in-process fabrics they are in place when this returns.
func (sm *SM) SetMulticastGroup(mlid uint16, members []MCMember) error {
	if mlid < mlidBase || mlid == 0xFFFF {
		return fmt.Errorf("sa: %#x is not a multicast LID", mlid)
	}
	sm.mu.Lock()
	if sm.closed {
		sm.mu.Unlock()
		return ErrClosed
	}
	sm.groups[mlid] = slices.Clone(members)
	sm.mcDirty = true
	sm.mu.Unlock()
	sm.kick()
	return nil
}

// MulticastGroup returns the members set for mlid, and whether mlid is allocated.
func (sm *SM) MulticastGroup(mlid uint16) ([]MCMember, bool) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	m, ok := sm.groups[mlid]
	return slices.Clone(m), ok
}

// startMulticast recomputes every group's tree on the current Topology and sends the
// MFT blocks that changed; then runs after they are done.
func (sm *SM) startMulticast(then func()) {
	t := sm.topo.Load()
	if t == nil {
		if then != nil {
			then()
		}
		return
	}
	sm.mu.Lock()
	groups := make(map[uint16][]MCMember, len(sm.groups))
	for k, v := range sm.groups {
		groups[k] = v
	}
	sm.mu.Unlock()
	want := computeMFTs(t, groups)
	for _, n := range t.Nodes {
		if !n.IsSwitch() {
			continue
		}
		sm.programMFT(n, want[n])
	}
	// Forget switches that left the subnet.
	for guid := range sm.mfts {
		if t.Node(guid) == nil {
			delete(sm.mfts, guid)
		}
	}
	sm.publishMFTs()
	if then != nil {
		sm.onDrain = then
	}
}

// programMFT sends the MulticastForwardingTable blocks of n whose entries differ from
// what the SM programmed before.
func (sm *SM) programMFT(n *Node, want map[uint16]mftEntry) {
	old, known := sm.mfts[n.GUID]
	positions := (n.NumPorts + mftPortsPerPos) / mftPortsPerPos // ports 0..NumPorts
	type blockPos struct {
		block int
		pos   int
	}
	dirty := make(map[blockPos]bool)
	mark := func(mlid uint16, a, b mftEntry) {
		for pos := 0; pos < positions; pos++ {
			if a.bits16(pos) != b.bits16(pos) || !known {
				dirty[blockPos{int(mlid-mlidBase) / mftBlockLen, pos}] = true
			}
		}
	}
	for mlid, e := range want {
		mark(mlid, old[mlid], e)
	}
	for mlid, e := range old {
		if _, ok := want[mlid]; !ok {
			mark(mlid, e, mftEntry{})
		}
	}
	if len(dirty) == 0 {
		sm.mfts[n.GUID] = want
		return
	}
	keys := make([]blockPos, 0, len(dirty))
	for k := range dirty {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b blockPos) int {
		if a.block != b.block {
			return a.block - b.block
		}
		return a.pos - b.pos
	})
	for _, k := range keys {
		// IBA 14.2.5.11: modifier bits 31-28 the port-mask position, 8-0 the block.
		t := sm.newTxn(opMFTSet, n, 0, uint32(k.pos)<<28|uint32(k.block), n.DRPath)
		for i := 0; i < mftBlockLen; i++ {
			mlid := uint16(mlidBase + k.block*mftBlockLen + i)
			be.PutUint16(t.data[2*i:], want[mlid].bits16(k.pos))
		}
		sm.enqueue(t)
	}
	sm.mfts[n.GUID] = want
}

func (sm *SM) mcFailed(t *txn) {
	sm.log.Warn("MulticastForwardingTable Set failed", "node", t.node.Description, "mod", t.mod, "status", t.status)
	delete(sm.mfts, t.node.GUID)
	sm.publishMFTs()
}

// publishMFTs stores a copy of the MFTs programmed for MFTs.
func (sm *SM) publishMFTs() {
	v := maps.Clone(sm.mfts)
	sm.mftView.Store(&v)
}

// MFTs returns a copy of the multicast forwarding entries the SM programmed, by switch
// GUID and MLID: the ports of each entry as a bit mask (bit i for port i).
func (sm *SM) MFTs() map[uint64]map[uint16][4]uint64 {
	v := sm.mftView.Load()
	if v == nil {
		return nil
	}
	out := make(map[uint64]map[uint16][4]uint64, len(*v))
	for guid, m := range *v {
		e := make(map[uint16][4]uint64, len(m))
		for mlid, ports := range m {
			e[mlid] = ports
		}
		out[guid] = e
	}
	return out
}

// computeMFTs returns, per switch, the port mask of every group with members.
func computeMFTs(t *Topology, groups map[uint16][]MCMember) map[*Node]map[uint16]mftEntry {
	out := make(map[*Node]map[uint16]mftEntry)
	sws := t.Switches()
	idx := make(map[*Node]int, len(sws))
	for i, n := range sws {
		idx[n] = i
		out[n] = make(map[uint16]mftEntry)
	}
	bfs := func(from int) (dist []int, parent []int, via []uint8) {
		dist = make([]int, len(sws))
		parent = make([]int, len(sws))
		via = make([]uint8, len(sws)) // the port of the node leading toward the root
		for i := range dist {
			dist[i], parent[i] = -1, -1
		}
		dist[from] = 0
		q := []int{from}
		for h := 0; h < len(q); h++ {
			u := sws[q[h]]
			for _, p := range u.Ports[1:] {
				if !p.linked() || !p.Remote.Node.IsSwitch() || !p.Remote.linked() {
					continue
				}
				v := idx[p.Remote.Node]
				if dist[v] < 0 {
					dist[v], parent[v], via[v] = dist[q[h]]+1, q[h], p.Remote.Num
					q = append(q, v)
				}
			}
		}
		return
	}
	for mlid, members := range groups {
		masks := make(map[int]mftEntry)
		var memberSw []int
		seen := make(map[int]bool)
		for _, m := range members {
			p := t.Port(m.PortGUID)
			if p == nil {
				continue
			}
			var s int
			if p.Node.IsSwitch() {
				s = idx[p.Node]
				if m.receives() {
					e := masks[s]
					e.set(0)
					masks[s] = e
				}
			} else {
				if !p.linked() || !p.Remote.Node.IsSwitch() {
					continue
				}
				s = idx[p.Remote.Node]
				e := masks[s]
				if m.receives() {
					e.set(p.Remote.Num)
				}
				masks[s] = e
			}
			if !seen[s] {
				seen[s] = true
				memberSw = append(memberSw, s)
			}
		}
		if len(memberSw) == 0 {
			continue
		}
		slices.Sort(memberSw)
		// Root: the switch with the smallest total distance to the member switches.
		root := memberSw[0]
		if len(memberSw) > 1 {
			sum := make([]int, len(sws))
			for _, s := range memberSw {
				d, _, _ := bfs(s)
				for i, x := range d {
					if x < 0 || sum[i] < 0 {
						sum[i] = -1
					} else {
						sum[i] += x
					}
				}
			}
			best := -1
			for i, x := range sum {
				if x >= 0 && (best < 0 || x < sum[best]) {
					best = i
				}
			}
			if best >= 0 {
				root = best
			}
		}
		_, parent, via := bfs(root)
		onTree := make(map[int]bool)
		onTree[root] = true
		for _, s := range memberSw {
			for u := s; !onTree[u] && parent[u] >= 0; u = parent[u] {
				onTree[u] = true
				par := parent[u]
				// u reaches its parent through its port via[u].
				up := sws[u].Ports[via[u]]
				eu := masks[u]
				eu.set(up.Num)
				masks[u] = eu
				ep := masks[par]
				ep.set(up.Remote.Num)
				masks[par] = ep
			}
		}
		for s, e := range masks {
			if e != (mftEntry{}) {
				out[sws[s]][mlid] = e
			}
		}
	}
	return out
}

// Ports lists the ports in e (for tests and tools).
func (e mftEntry) ports() []int {
	var ps []int
	for w, x := range e {
		for x != 0 {
			b := bits.TrailingZeros64(x)
			ps = append(ps, w*64+b)
			x &^= 1 << b
		}
	}
	return ps
}
