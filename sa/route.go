package sa

import (
	"runtime"
	"slices"
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
	// scratch is one worker's reusable memory.
	type scratch struct {
		queue []int32
		masks []uint64
	}
	parallel := func(n int, f func(i int, w *scratch)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var w scratch
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					f(i, &w)
				}
			}()
		}
		wg.Wait()
	}
	// dist[t*ns+s] = hops between switches s and t.
	const inf = 0x7FFF
	dist := make([]int16, ns*ns)
	parallel(ns, func(t int, w *scratch) {
		d := dist[t*ns : (t+1)*ns]
		for i := range d {
			d[i] = inf
		}
		d[t] = 0
		q := append(w.queue[:0], int32(t))
		for h := 0; h < len(q); h++ {
			u := q[h]
			for _, e := range adj[u] {
				if d[e.to] == inf {
					d[e.to] = d[u] + 1
					q = append(q, e.to)
				}
			}
		}
		w.queue = q
	})
	parallel(ns, func(s int, w *scratch) {
		sw := sws[s]
		lft := make([]uint8, int(maxLID)+1)
		for j := range lft {
			lft[j] = 0xFF
		}
		load := make([]uint32, len(sw.Ports)) // LIDs routed out of each port so far
		// The ports one hop closer to switch t, in adjacency order, as a candidate list;
		// targets with the same ports share one list (on a fat tree's edge switch, every
		// target outside it), so that a list's pick can be kept between destinations.
		listOf := make([]int32, ns) // target → list index + 1; 0 = not yet computed
		var lists []candList
		byKey := map[uint64]int32{}
		var scratch []uint8
		// With at most maskLinks inter-switch links, the ports one hop closer to every
		// target are found at once as bit masks over adj[s], walking each neighbour's
		// row of dist (contiguous; dist is symmetric) rather than one column entry per
		// neighbour and target: the same lists, from sequential reads.
		var masks []uint64
		if len(adj[s]) <= maskLinks {
			if cap(w.masks) < ns {
				w.masks = make([]uint64, ns)
			}
			masks = w.masks[:ns]
			clear(masks)
			ds := dist[s*ns : (s+1)*ns]
			for k, e := range adj[s] {
				row := dist[int(e.to)*ns : (int(e.to)+1)*ns]
				bit := uint64(1) << k
				for t, dt := range row {
					if dt+1 == ds[t] {
						masks[t] |= bit
					}
				}
			}
		}
		byMask := map[uint64]int32{}
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
			li := listOf[t] - 1
			if li < 0 && masks != nil {
				m := masks[t]
				j, ok := byMask[m]
				if !ok {
					j = int32(len(lists))
					var ports []uint8
					for k, e := range adj[s] {
						if m&(1<<k) != 0 {
							ports = append(ports, e.port)
						}
					}
					lists = append(lists, candList{ports: ports, best: -1})
					byMask[m] = j
				}
				li = j
				listOf[t] = li + 1
			}
			if li < 0 {
				scratch = scratch[:0]
				h := uint64(14695981039346656037) // FNV-1a over the ports
				for _, e := range adj[s] {
					if dist[int(e.to)*ns+t] == ds-1 {
						scratch = append(scratch, e.port)
						h = (h ^ uint64(e.port)) * 1099511628211
					}
				}
				li = -1
				if j, ok := byKey[h]; ok && string(lists[j].ports) == string(scratch) {
					li = j
				}
				if li < 0 {
					li = int32(len(lists))
					lists = append(lists, candList{ports: append([]uint8(nil), scratch...), best: -1})
					if _, ok := byKey[h]; !ok {
						byKey[h] = li
					}
				}
				listOf[t] = li + 1
			}
			l := &lists[li]
			if len(l.ports) == 0 {
				continue
			}
			best := l.pick(load)
			lft[d.lid] = best
			if d.isSwitch {
				continue // switch LIDs do not count toward the load
			}
			load[best]++
			l.advance(load)
		}
		sw.LFT = lft
	})
}

// maskLinks is the most inter-switch links a switch may have for computeRoutes to find
// its candidate ports as bit masks (64, a mask's bits; BenchmarkComputeRoutes sets 0 to
// time the per-target scan as its baseline).
var maskLinks = 64

// candList is a switch's candidate ports toward some targets, with the pick among them
// kept between destinations: the least-loaded port, the first of equals (the rule the
// routes follow). Loads only grow, so a kept pick whose own load has not changed is still
// the first least-loaded port, whatever other lists did meanwhile; after this list's pick
// the next is the first later port still at the old minimum, else a rescan.
type candList struct {
	ports    []uint8
	best     int    // index of the kept pick; -1 when it must be found again
	bestLoad uint32 // its port's load when it was found
}

// pick returns the least-loaded port, the first of equals.
func (l *candList) pick(load []uint32) uint8 {
	if l.best < 0 || load[l.ports[l.best]] != l.bestLoad {
		l.best = 0
		for i, p := range l.ports {
			if load[p] < load[l.ports[l.best]] {
				l.best = i
			}
		}
		l.bestLoad = load[l.ports[l.best]]
	}
	return l.ports[l.best]
}

// advance moves the kept pick on after its port's load went up by one.
func (l *candList) advance(load []uint32) {
	was := l.bestLoad
	for i := l.best + 1; i < len(l.ports); i++ {
		if load[l.ports[i]] == was {
			l.best = i
			return
		}
	}
	l.best = -1
}

// route fills the LFT of every switch among nodes: computeRoutes, unless the subnet is
// the one the SM routed last (same nodes in the same order, same ports, links and
// LIDs: everything computeRoutes reads), whose tables are then reused. A heavy sweep
// that finds nothing changed — a trap, a light sweep's PortStateChange that came back,
// SM.Resweep — then costs its discovery SMPs only (routing the 11,664-HCA fat tree is
// about a second of CPU).
func (sm *SM) route(nodes []*Node) {
	key := routeKey(nodes, sm.routeScratch[:0])
	sm.routeScratch = key
	if sm.routedLFTs != nil && slices.Equal(key, sm.routed) {
		i := 0
		for _, n := range nodes {
			if n.IsSwitch() {
				n.LFT = sm.routedLFTs[i]
				i++
			}
		}
		return
	}
	computeRoutes(nodes, sm.cfg.PartitionEnforcement)
	sm.routings.Add(1)
	sm.routed, sm.routeScratch = key, sm.routed
	sm.routedLFTs = sm.routedLFTs[:0]
	for _, n := range nodes {
		if n.IsSwitch() {
			sm.routedLFTs = append(sm.routedLFTs, n.LFT)
		}
	}
}

// routeKey appends to key what computeRoutes reads of nodes, in its order: each node's
// GUID, type and ports; each port's number, LID, whether it is an end port, its link
// state and the port (node GUID and number) at the other end.
func routeKey(nodes []*Node, key []uint64) []uint64 {
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	for _, n := range nodes {
		key = append(key, n.GUID, uint64(n.Type)|uint64(len(n.Ports))<<8)
		for _, p := range n.Ports {
			if p == nil {
				key = append(key, 0)
				continue
			}
			w := 1 | b2u(p.Endport())<<1 | b2u(p.linked())<<2 | uint64(p.LID)<<8 | uint64(p.Num)<<24
			var rg uint64
			if r := p.Remote; r != nil {
				w |= 1<<3 | b2u(r.linked())<<4 | uint64(r.Num)<<32 | uint64(r.Node.Type)<<40
				rg = r.Node.GUID
			}
			key = append(key, w, rg)
		}
	}
	return key
}
