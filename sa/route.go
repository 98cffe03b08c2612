package sa

// Min-hop unicast routing (opensm's minhop): for every destination LID, every switch
// forwards toward a neighbour one hop closer to the destination's switch. Among the
// equally short ports, the one carrying the fewest LIDs so far wins, which spreads the
// destinations across parallel links and the spines of a fat tree.

// computeRoutes fills LFT of every switch among nodes.
func computeRoutes(nodes []*Node, _ bool) {
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
