package sa

import (
	"testing"
)

// mkTree builds the model of a two-level tree (as satest.Tree cables it) with LIDs:
// HCAs first (LID 1…), then switches.
func mkTree(leaves, perLeaf, spines int) *Topology {
	t := &Topology{}
	var sws []*Node
	newSw := func(i, ports int) *Node {
		n := &Node{Type: NodeTypeSwitch, GUID: 0x1000 + uint64(i), NumPorts: ports, MulticastFDBCap: 1024}
		n.Ports = make([]*Port, ports+1)
		for p := range n.Ports {
			n.Ports[p] = &Port{Node: n, Num: uint8(p), GUID: n.GUID, PhysState: PhysStateLinkUp}
		}
		sws = append(sws, n)
		return n
	}
	for l := 0; l < leaves; l++ {
		newSw(l, perLeaf+spines)
	}
	for s := 0; s < spines; s++ {
		newSw(leaves+s, leaves)
	}
	link := func(a, b *Port) { a.Remote, b.Remote = b, a }
	for l := 0; l < leaves; l++ {
		for s := 0; s < spines; s++ {
			link(sws[l].Ports[perLeaf+1+s], sws[leaves+s].Ports[1+l])
		}
	}
	lid := uint16(1)
	for i := 0; i < leaves*perLeaf; i++ {
		n := &Node{Type: NodeTypeCA, GUID: 0x10000 + uint64(i)<<8, NumPorts: 1}
		p := &Port{Node: n, Num: 1, GUID: n.GUID | 1, PhysState: PhysStateLinkUp, LID: lid}
		lid++
		n.Ports = []*Port{nil, p}
		link(p, sws[i/perLeaf].Ports[1+i%perLeaf])
		t.Nodes = append(t.Nodes, n)
	}
	for _, n := range sws {
		n.Ports[0].LID = lid
		lid++
		t.Nodes = append(t.Nodes, n)
	}
	computeRoutes(t.Nodes, false)
	t.index()
	return t
}

func TestRoutesFatTree(t *testing.T) {
	top := mkTree(36, 18, 18)
	eps := top.Endports()
	if len(eps) != 648+54 {
		t.Fatalf("%d end ports", len(eps))
	}
	for _, a := range eps {
		for _, b := range eps {
			hops, ok := top.Route(a.LID, b.LID)
			if !ok {
				t.Fatalf("no route %d -> %d (%v)", a.LID, b.LID, hops)
			}
			if !a.Node.IsSwitch() && !b.Node.IsSwitch() && a.Remote.Node != b.Remote.Node && len(hops) != 3 {
				t.Fatalf("route %d -> %d has %d switches, want 3 (min hop)", a.LID, b.LID, len(hops))
			}
		}
	}
	// Load balance: every leaf spreads the 630 remote HCAs over its 18 uplinks, 35 each.
	for _, sw := range top.Switches()[:36] {
		count := make(map[uint8]int)
		for _, ep := range eps {
			if !ep.Node.IsSwitch() && ep.Remote.Node != sw {
				count[sw.LFT[ep.LID]]++
			}
		}
		for port, c := range count {
			if c != 35 {
				t.Fatalf("leaf %#x port %d carries %d HCA LIDs, want 35", sw.GUID, port, c)
			}
		}
	}
}

func TestRoutesAvoidDeadLink(t *testing.T) {
	top := mkTree(4, 8, 2)
	// Pull leaf 0's link to spine 0: both ends down.
	p := top.Switches()[0].Ports[9]
	p.PhysState, p.Remote.PhysState = PhysStatePolling, PhysStatePolling
	computeRoutes(top.Nodes, false)
	for _, a := range top.Endports() {
		for _, b := range top.Endports() {
			hops, ok := top.Route(a.LID, b.LID)
			if !ok {
				t.Fatalf("no route %d -> %d", a.LID, b.LID)
			}
			for _, h := range hops {
				if h.Switch == top.Switches()[0] && h.OutPort == 9 {
					t.Fatalf("route %d -> %d uses the dead link", a.LID, b.LID)
				}
			}
		}
	}
}

// flood follows MFT masks from the sender's switch and returns the CA ports reached.
func flood(top *Topology, mft map[*Node]map[uint16]mftEntry, mlid uint16, from *Port) map[*Port]int {
	got := make(map[*Port]int)
	type hop struct {
		sw *Node
		in uint8
	}
	q := []hop{{from.Remote.Node, from.Remote.Num}}
	visits := 0
	for len(q) > 0 && visits < 10000 {
		h := q[0]
		q = q[1:]
		visits++
		for _, port := range mft[h.sw][mlid].ports() {
			if uint8(port) == h.in || port == 0 {
				continue
			}
			r := h.sw.Ports[port].Remote
			if r.Node.IsSwitch() {
				q = append(q, hop{r.Node, r.Num})
			} else {
				got[r]++
			}
		}
	}
	return got
}

func TestMulticastTree(t *testing.T) {
	top := mkTree(4, 8, 2)
	cas := top.Endports()[:32]
	const mlid = 0xC001
	members := []MCMember{
		{cas[0].GUID, JoinFull}, {cas[3].GUID, JoinFull}, {cas[9].GUID, JoinFull},
		{cas[20].GUID, JoinNonMember}, {cas[31].GUID, JoinSendOnlyNonMember},
	}
	mft := computeMFTs(top, map[uint16][]MCMember{mlid: members})
	receivers := map[*Port]bool{cas[0]: true, cas[3]: true, cas[9]: true, cas[20]: true}
	for _, m := range members {
		src := top.Port(m.PortGUID)
		got := flood(top, mft, mlid, src)
		for p, n := range got {
			if n != 1 {
				t.Errorf("from %d: LID %d got %d copies", src.LID, p.LID, n)
			}
			if !receivers[p] {
				t.Errorf("from %d: non-receiver LID %d got the packet", src.LID, p.LID)
			}
		}
		for p := range receivers {
			if p != src && got[p] == 0 {
				t.Errorf("from %d: receiver LID %d missed the packet", src.LID, p.LID)
			}
		}
	}
}
