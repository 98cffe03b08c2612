package sa

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Min-hop unicast routing (opensm's minhop): for every destination LID, every switch
// forwards toward a neighbour one hop closer to the destination's switch. Among the
// equally short ports, the one carrying the fewest LIDs so far wins, which spreads the
// destinations across parallel links and the spines of a fat tree.

// computeRoutes fills LFT of every switch among nodes. Each switch's table depends only on
// the distances and on its own ports' loads, so the switches are routed in parallel; per
// switch and destination switch, the ports one hop closer are found once and shared by
// the destinations behind that switch (the 18 HCAs of a fat tree's edge switch).
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
	// Destinations, in the order that decides the load spreading: every end port with a
	// LID, attached to switch t at port q.
	type dest struct {
		lid      uint16
		t        int32
		q        uint8
		isSwitch bool
	}
	var dests []dest
	for _, n := range nodes {
		for _, p := range n.Ports {
			if p == nil || !p.Endport() || p.LID == 0 {
				continue
			}
			d := dest{lid: p.LID, isSwitch: n.IsSwitch()}
			if d.isSwitch {
				d.t = int32(idx[n])
			} else {
				if !p.linked() || !p.Remote.Node.IsSwitch() {
					continue
				}
				d.t, d.q = int32(idx[p.Remote.Node]), p.Remote.Num
			}
			dests = append(dests, d)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), ns)
	parallel := func(n int, f func(i int, scratch *[]int32)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var scratch []int32
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					f(i, &scratch)
				}
			}()
		}
		wg.Wait()
	}
	// dist[t*ns+s] = hops between switches s and t.
	const inf = 0x7FFF
	dist := make([]int16, ns*ns)
	parallel(ns, func(t int, queue *[]int32) {
		d := dist[t*ns : (t+1)*ns]
		for i := range d {
			d[i] = inf
		}
		d[t] = 0
		q := append((*queue)[:0], int32(t))
		for h := 0; h < len(q); h++ {
			u := q[h]
			for _, e := range adj[u] {
				if d[e.to] == inf {
					d[e.to] = d[u] + 1
					q = append(q, e.to)
				}
			}
		}
		*queue = q
	})
	parallel(ns, func(s int, _ *[]int32) {
		sw := sws[s]
		lft := make([]uint8, int(maxLID)+1)
		for j := range lft {
			lft[j] = 0xFF
		}
		load := make([]uint32, len(sw.Ports)) // LIDs routed out of each port so far
		// cand[t]: the ports one hop closer to switch t, in adjacency order, in one
		// backing array (a switch's ports toward all targets: at most ns × its degree).
		cand := make([][]uint8, ns)
		done := make([]bool, ns)
		var backing []uint8
		for _, d := range dests {
			if int(d.t) == s {
				lft[d.lid] = d.q
				continue
			}
			// Links are bidirectional, so distances are symmetric: row s holds s's
			// distance to every t, contiguous for this switch's walk over destinations.
			t := int(d.t)
			ds := dist[s*ns+t]
			if ds == inf {
				continue
			}
			if !done[d.t] {
				done[d.t] = true
				from := len(backing)
				for _, e := range adj[s] {
					if dist[int(e.to)*ns+t] == ds-1 {
						backing = append(backing, e.port)
					}
				}
				cand[d.t] = backing[from:len(backing):len(backing)]
			}
			best, bestLoad := uint8(0xFF), uint32(1<<32-1)
			for _, port := range cand[d.t] {
				if load[port] < bestLoad {
					best, bestLoad = port, load[port]
				}
			}
			if best != 0xFF {
				lft[d.lid] = best
				if !d.isSwitch {
					load[best]++
				}
			}
		}
		sw.LFT = lft
	})
}
