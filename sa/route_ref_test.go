package sa

import (
	"bytes"
	"testing"
)

// referenceRoutes is min-hop routing written plainly, one switch and one destination at
// a time (the first implementation): computeRoutes must produce exactly its tables.
func referenceRoutes(nodes []*Node, _ bool) {
	var sws []*Node
	idx := make(map[*Node]int)
	var maxLID uint16
	for _, n := range nodes {
		if n.IsSwitch() {
			idx[n] = len(sws)
			sws = append(sws, n)
		}
		for _, p := range n.Ports {
			if p != nil && p.Endport() {
				maxLID = maxu16(maxLID, p.LID)
			}
		}
	}
	ns := len(sws)
	if ns == 0 {
		return
	}
	// Adjacency between switches: (port, neighbour index).
	type edge struct {
		port uint8
		to   int32
	}
	adj := make([][]edge, ns)
	for i, n := range sws {
		for _, p := range n.Ports[1:] {
			if p.linked() && p.Remote.Node.IsSwitch() && p.Remote.linked() {
				adj[i] = append(adj[i], edge{p.Num, int32(idx[p.Remote.Node])})
			}
		}
	}
	// dist[t*ns+s] = hops from switch s to switch t; computed lazily per target switch.
	const inf = 0x7FFF
	dist := make([]int16, ns*ns)
	have := make([]bool, ns)
	queue := make([]int32, 0, ns)
	bfs := func(t int) []int16 {
		d := dist[t*ns : (t+1)*ns]
		if have[t] {
			return d
		}
		have[t] = true
		for i := range d {
			d[i] = inf
		}
		d[t] = 0
		queue = append(queue[:0], int32(t))
		for h := 0; h < len(queue); h++ {
			u := queue[h]
			for _, e := range adj[u] {
				if d[e.to] == inf {
					d[e.to] = d[u] + 1
					queue = append(queue, e.to)
				}
			}
		}
		return d
	}
	// load[i][port] = LIDs routed out of port so far.
	load := make([][]uint32, ns)
	for i, n := range sws {
		n.LFT = make([]uint8, int(maxLID)+1)
		for j := range n.LFT {
			n.LFT[j] = 0xFF
		}
		load[i] = make([]uint32, len(n.Ports))
	}
	// Destinations: every end port with a LID, attached to switch t at port q.
	for _, n := range nodes {
		for _, p := range n.Ports {
			if p == nil || !p.Endport() || p.LID == 0 {
				continue
			}
			var t int
			var q uint8
			if n.IsSwitch() {
				t, q = idx[n], 0
			} else {
				if !p.linked() || !p.Remote.Node.IsSwitch() {
					continue
				}
				t, q = idx[p.Remote.Node], p.Remote.Num
			}
			d := bfs(t)
			lid := p.LID
			for s, sw := range sws {
				if s == t {
					sw.LFT[lid] = q
					continue
				}
				if d[s] == inf {
					continue
				}
				best, bestLoad := uint8(0xFF), uint32(1<<32-1)
				for _, e := range adj[s] {
					if d[e.to] == d[s]-1 && load[s][e.port] < bestLoad {
						best, bestLoad = e.port, load[s][e.port]
					}
				}
				if best != 0xFF {
					sw.LFT[lid] = best
					if !n.IsSwitch() {
						load[s][best]++
					}
				}
			}
		}
	}
}

// mkFat3 builds the model of a three-level fat tree of k-port switches (as
// satest.FatTree3 cables it) with LIDs: HCAs first, then switches.
func mkFat3(k int) *Topology {
	t := &Topology{}
	var sws []*Node
	h := k / 2
	for i := 0; i < k*k+h*h; i++ {
		n := &Node{Type: NodeTypeSwitch, GUID: 0x1000 + uint64(i), NumPorts: k, MulticastFDBCap: 1024}
		n.Ports = make([]*Port, k+1)
		for p := range n.Ports {
			n.Ports[p] = &Port{Node: n, Num: uint8(p), GUID: n.GUID, PhysState: PhysStateLinkUp}
		}
		sws = append(sws, n)
	}
	link := func(a, b *Port) { a.Remote, b.Remote = b, a }
	edge := func(p, e int) int { return p*k + e }
	agg := func(p, a int) int { return p*k + h + a }
	for p := 0; p < k; p++ {
		for e := 0; e < h; e++ {
			for a := 0; a < h; a++ {
				link(sws[edge(p, e)].Ports[h+1+a], sws[agg(p, a)].Ports[1+e])
			}
		}
		for a := 0; a < h; a++ {
			for j := 0; j < h; j++ {
				link(sws[agg(p, a)].Ports[h+1+j], sws[k*k+a*h+j].Ports[1+p])
			}
		}
	}
	lid := uint16(1)
	for i := 0; i < k*k*k/4; i++ {
		n := &Node{Type: NodeTypeCA, GUID: 0x100000 + uint64(i)<<8, NumPorts: 1}
		p := &Port{Node: n, Num: 1, GUID: n.GUID | 1, PhysState: PhysStateLinkUp, LID: lid}
		lid++
		n.Ports = []*Port{nil, p}
		e := i / h
		link(p, sws[edge(e/h, e%h)].Ports[1+i%h])
		t.Nodes = append(t.Nodes, n)
	}
	for _, n := range sws {
		n.Ports[0].LID = lid
		lid++
		t.Nodes = append(t.Nodes, n)
	}
	return t
}

// TestRoutesMatchReference: the parallel routing with shared candidate lists produces the
// reference's tables, entry for entry, on two- and three-level trees.
func TestRoutesMatchReference(t *testing.T) {
	for name, top := range map[string]*Topology{
		"tree 36×18, 18 spines": mkTree(36, 18, 18), "tree 3×5, 2 spines": mkTree(3, 5, 2),
		"fat tree k=8": mkFat3(8), "fat tree k=12": mkFat3(12),
		"tree 70×2, 2 spines (more than 64 inter-switch links)": mkTree(70, 2, 2),
	} {
		computeRoutes(top.Nodes, false)
		var got [][]uint8
		for _, n := range top.Nodes {
			if n.IsSwitch() {
				got = append(got, n.LFT)
			}
		}
		referenceRoutes(top.Nodes, false)
		i := 0
		for _, n := range top.Nodes {
			if n.IsSwitch() {
				if !bytes.Equal(n.LFT, got[i]) {
					t.Fatalf("%s: switch %d's LFT differs from the reference", name, i)
				}
				i++
			}
		}
	}
}

// BenchmarkComputeRoutes routes the 11,664-HCA three-level fat tree of 36-port switches
// (1,620 switches, 13,284 LIDs): "masks" finds each switch's candidate ports toward every
// target from contiguous rows of the distance table, "scan" (the baseline, as before)
// from one column entry per neighbour and target.
func BenchmarkComputeRoutes(b *testing.B) {
	top := mkFat3(36)
	for _, c := range []struct {
		name  string
		links int
	}{{"scan", 0}, {"masks", 64}} {
		b.Run(c.name, func(b *testing.B) {
			defer func(n int) { maskLinks = n }(maskLinks)
			maskLinks = c.links
			b.ReportAllocs()
			for b.Loop() {
				computeRoutes(top.Nodes, false)
			}
		})
	}
}
