package ipoib

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// The neighbour cache (IP → 20-byte address, ip-neighbour's states) and the path cache
// (GID → an AH built from the SA's PathRecord).

type nudState uint8

const (
	nudIncomplete nudState = iota
	nudReachable
	nudStale
	nudFailed
)

var nudNames = [...]string{"INCOMPLETE", "REACHABLE", "STALE", "FAILED"}

func (s nudState) String() string { return nudNames[s] }

const (
	// retransTime is the ARP/NS retransmission interval (Linux retrans_time_ms).
	retransTime = time.Second
	// maxProbes is how many solicitations go unanswered before the entry FAILs
	// (Linux mcast_solicit / ucast_solicit).
	maxProbes = 3
	// maxQueued packets wait per unresolved neighbour (Linux unres_qlen is larger;
	// a few cover the first packets of a connection), maxQueuedBytes bytes at most
	// (Linux unres_qlen_bytes: connected mode's packets reach 64 KiB).
	maxQueued      = 8
	maxQueuedBytes = 212992
)

func queuedBytes(q []queued) int {
	n := 0
	for _, p := range q {
		n += len(p.pkt)
	}
	return n
}

// queued is a packet waiting for its neighbour's (or group's) address.
type queued struct {
	etype uint16
	pkt   []byte
}

type neighbor struct {
	ip        netip.Addr
	hw        HWAddr
	state     nudState
	updated   time.Time // last confirmation, or last state change
	lastProbe time.Time
	probes    int
	ah        *hca.AH
	pathBusy  bool
	due       time.Time // when its timer fires (neightimer.go), while heapIdx ≥ 0
	heapIdx   int       // its place in the table's timer heap, -1 when not armed
	queue     []queued
}

// neighborAH returns the AH and QPN of dst's neighbour, or queues pkt and starts the
// resolution. It is the transmit path's lookup: a read lock and a map access.
func (i *Interface) neighborAH(dst netip.Addr, now time.Time, etype uint16, pkt []byte, partial bool) (*hca.AH, uint32, bool) {
	if ah, hw, ok := i.neighborLookup(dst, now); ok {
		return ah, hw.QPN(), true
	}
	i.resolve(dst, now, etype, pkt, partial)
	return nil, 0, false
}

// neighborLookup returns the AH and hardware address of dst's neighbour if it is
// resolved and has a path, re-probing an aged entry.
func (i *Interface) neighborLookup(dst netip.Addr, now time.Time) (*hca.AH, HWAddr, bool) {
	i.nb.mu.RLock()
	n := i.nb.m[dst]
	if n != nil && n.ah != nil && (n.state == nudReachable || n.state == nudStale) {
		ah, hw := n.ah, n.hw
		aged := n.state == nudReachable && now.Sub(n.updated) >= i.cfg.NeighborTimeout
		probe := n.state == nudStale && now.Sub(n.lastProbe) >= retransTime
		i.nb.mu.RUnlock()
		if aged || probe {
			i.reprobe(dst, now)
		}
		return ah, hw, true
	}
	i.nb.mu.RUnlock()
	return nil, HWAddr{}, false
}

// clonePacket copies a packet to be queued; one whose transport checksum is partial
// (CHECKSUM_PARTIAL, from a tun with offloads) gets it completed, because queued packets
// go out later without checksum offload.
func clonePacket(p []byte, partial bool) []byte {
	c := append([]byte(nil), p...)
	if partial {
		inet.CompletePartial(c)
	}
	return c
}

// resolve queues pkt for dst and starts (or continues) its resolution.
func (i *Interface) resolve(dst netip.Addr, now time.Time, etype uint16, pkt []byte, partial bool) {
	solicit, path := false, false
	i.nb.mu.Lock()
	n := i.nb.m[dst]
	switch {
	case n == nil:
		dropped := 0
		ok := i.nb.admit(now, i.cfg.NeighborTimeout, &dropped)
		if !ok || dropped > 0 {
			i.cnt.add(cDropNoNeighbor, uint64(dropped))
		}
		if !ok {
			i.nb.mu.Unlock()
			i.cnt.inc(cDropNeighOverflow)
			return
		}
		n = &neighbor{ip: dst, state: nudIncomplete, updated: now, heapIdx: -1}
		i.nb.m[dst] = n
		solicit = true
	case n.state == nudFailed:
		n.state, n.probes, n.updated = nudIncomplete, 0, now
		solicit = true
	case n.state != nudIncomplete && n.ah == nil && !n.pathBusy:
		n.pathBusy = true
		path = true
	}
	if pkt != nil {
		if len(n.queue) < maxQueued && queuedBytes(n.queue)+len(pkt) <= maxQueuedBytes {
			n.queue = append(n.queue, queued{etype, clonePacket(pkt, partial)})
		} else {
			i.cnt.inc(cDropNoNeighbor)
		}
	}
	if solicit {
		n.probes, n.lastProbe = 1, now
		i.armResolveTimer(n)
	}
	i.nb.mu.Unlock()
	if solicit {
		i.solicit(dst, netip.Addr{}, pkt)
	}
	if path {
		i.ctl.jobs.push(func() { i.resolvePath(dst) })
	}
}

// The neighbour table is bounded as Linux bounds its ARP and ND tables (neigh_alloc and
// neigh_forced_gc, with net.ipv4.neigh.default.gc_thresh1/2/3 = 128/512/1024): at
// thresh2 entries a garbage collection runs at most every 5 s, at thresh3 one runs
// at once (at most every 100 ms), and a new entry that still finds the table full is
// refused — its packet dropped and counted drop_neigh_overflow. The collection takes
// FAILED entries and those neither REACHABLE nor resolving that have not been
// confirmed for NeighborTimeout (gc_stale_time); it never takes an entry that is
// resolving or in use, so traffic to real peers goes on while a scan of unresolvable
// addresses fills the table.

// admit (under mu) reports whether a new entry fits, collecting first if the table is
// above its thresholds; timeout is the entries' gc_stale_time. The collection's dropped
// queued packets are added to *dropped.
func (t *neighTable) admit(now time.Time, timeout time.Duration, dropped *int) bool {
	n := len(t.m)
	switch {
	case n < t.thresh2:
		return true
	case n < t.thresh3:
		if now.Sub(t.lastGC) >= 5*time.Second {
			*dropped += t.gc(now, timeout)
		}
		return true
	}
	if now.Sub(t.lastGC) >= 100*time.Millisecond {
		*dropped += t.gc(now, timeout)
	}
	return len(t.m) < t.thresh3
}

// gc (under mu) removes the collectable entries while the table is above thresh1, and
// returns how many queued packets went with them.
func (t *neighTable) gc(now time.Time, timeout time.Duration) (dropped int) {
	t.lastGC = now
	for _, n := range t.m {
		if len(t.m) <= t.thresh1 {
			return dropped
		}
		switch {
		case n.state == nudFailed,
			n.state == nudStale && len(n.queue) == 0 && now.Sub(n.updated) >= timeout,
			n.state == nudReachable && now.Sub(n.updated) >= 2*timeout:
			dropped += t.forget(n)
		}
	}
	return dropped
}

// forget (under mu) removes n from the table, waking Resolve's waiters for it, and
// returns how many queued packets it dropped.
func (t *neighTable) forget(n *neighbor) int {
	t.timers.stop(n)
	dropped := len(n.queue)
	n.queue = nil
	delete(t.m, n.ip)
	t.wake(n.ip)
	return dropped
}

// wake (under mu) wakes the Resolve calls waiting for ip.
func (t *neighTable) wake(ip netip.Addr) {
	for _, w := range t.waiters[ip] {
		close(w)
	}
	delete(t.waiters, ip)
}

// trimPaths (under mu) bounds the path cache as the table is bounded: the AHs no entry
// uses go (destroyed on Close, as the transmit path may still hold one).
func (t *neighTable) trimPaths() {
	used := make(map[wire.GID]bool, len(t.m))
	for _, n := range t.m {
		if n.ah != nil {
			used[n.hw.GID()] = true
		}
	}
	for gid, ah := range t.ahs {
		if !used[gid] {
			t.dead = append(t.dead, ah)
			delete(t.ahs, gid)
			delete(t.paths, gid)
		}
	}
}

// armResolveTimer (under nb.mu) schedules the next retransmission for n.
func (i *Interface) armResolveTimer(n *neighbor) {
	i.armNeighTimer(n, retransTime)
}

// resolveTimeout retransmits a solicitation, or fails the entry after maxProbes.
func (i *Interface) resolveTimeout(ip netip.Addr) {
	if i.closed.Load() {
		return
	}
	now := i.clk.Now()
	i.nb.mu.Lock()
	n := i.nb.m[ip]
	if n != nil && n.state == nudFailed {
		// A FAILED entry is collected once it has been unused for NeighborTimeout
		// (Linux's gc_stale_time); a new packet for it would have restarted probing.
		if now.Sub(n.updated) >= i.cfg.NeighborTimeout {
			i.nb.forget(n) // FAILED entries hold no queue
		}
		i.nb.mu.Unlock()
		return
	}
	if n == nil || (n.state != nudIncomplete && n.state != nudStale) {
		i.nb.mu.Unlock()
		return
	}
	if n.probes >= maxProbes {
		dropped := len(n.queue)
		n.queue = nil
		n.state, n.updated = nudFailed, now
		i.armNeighTimer(n, i.cfg.NeighborTimeout)
		i.nb.wake(ip)
		i.nb.mu.Unlock()
		i.cnt.add(cDropARPTimeout, uint64(dropped))
		i.cnt.inc(cNeighborsFailed)
		return
	}
	n.probes++
	n.lastProbe = now
	i.armResolveTimer(n)
	i.nb.mu.Unlock()
	i.solicit(ip, netip.Addr{}, nil)
}

// reprobe moves an aged entry to STALE and solicits it again, still using the old
// address meanwhile (Linux: STALE → DELAY → PROBE).
func (i *Interface) reprobe(dst netip.Addr, now time.Time) {
	i.nb.mu.Lock()
	n := i.nb.m[dst]
	if n == nil {
		i.nb.mu.Unlock()
		return
	}
	if n.state == nudReachable {
		if now.Sub(n.updated) < i.cfg.NeighborTimeout {
			i.nb.mu.Unlock()
			return
		}
		n.state = nudStale
		n.probes = 0
	}
	if n.state != nudStale || now.Sub(n.lastProbe) < retransTime {
		i.nb.mu.Unlock()
		return
	}
	n.lastProbe = now
	n.probes++
	i.armResolveTimer(n)
	i.nb.mu.Unlock()
	i.solicit(dst, netip.Addr{}, nil)
}

// solicit sends an ARP request (IPv4) or a neighbour solicitation (IPv6) for dst.
// src, when valid, is the address to ask from; trigger the packet that caused it.
func (i *Interface) solicit(dst, src netip.Addr, trigger []byte) {
	ls := i.link.Load()
	if !ls.up {
		return
	}
	addrs := i.addrs.Load()
	if !src.IsValid() {
		var ok bool
		src, ok = addrs.source(dst)
		if !ok && dst.Is4() && len(trigger) >= 20 && trigger[0]>>4 == 4 {
			src, ok = netip.AddrFrom4([4]byte(trigger[12:16])), true
		}
		if !ok {
			src = netip.IPv4Unspecified()
		}
	}
	if dst.Is4() {
		var b [arpLen]byte
		arp := buildARP(b[:], arpOpRequest, ls.hw, src, HWAddr{}, dst)
		i.sendARP(ls.bcastAH, MulticastQPN, arp)
		return
	}
	var b [ipv6HeaderLen + ndMsgLen + ndOptLen]byte
	i.xmit(buildNS(b[:], src, dst, ls.hw))
	i.cnt.inc(cTxND)
}

// learnIfMoved is learn for an announcement: an entry for ip that holds another
// hardware address takes hw; anything else is left as it is (an entry still resolving
// waits for the answer to its own request).
func (i *Interface) learnIfMoved(ip netip.Addr, hw HWAddr, now time.Time) {
	i.nb.mu.RLock()
	n := i.nb.m[ip]
	moved := n != nil && n.hw != hw && n.hw != (HWAddr{})
	i.nb.mu.RUnlock()
	if moved {
		i.learn(ip, hw, now, false)
	}
}

// learn records that ip is at hw. confirm marks the entry REACHABLE; create makes an
// entry for an unknown ip (a request addressed to us, RFC 826's merge rule).
func (i *Interface) learn(ip netip.Addr, hw HWAddr, now time.Time, create bool) {
	if !ip.IsValid() || ip.IsUnspecified() || hw.IsMulticast() || hw.QPN() == 0 {
		return
	}
	i.nb.mu.Lock()
	n := i.nb.m[ip]
	if n == nil {
		if !create {
			i.nb.mu.Unlock()
			return
		}
		n = &neighbor{ip: ip, heapIdx: -1}
		i.nb.m[ip] = n
	}
	if n.hw != hw {
		n.hw = hw
		n.ah = nil
	}
	if n.state != nudReachable && n.state != nudStale {
		i.cnt.inc(cNeighborsResolved)
	}
	n.state, n.updated, n.probes = nudReachable, now, 0
	i.nb.wake(ip)
	i.nb.timers.stop(n)
	if n.ah == nil {
		n.ah = i.nb.ahs[hw.GID()]
	}
	path := false
	if n.ah == nil && !n.pathBusy {
		n.pathBusy = true
		path = true
	}
	var flush []queued
	ah := n.ah
	if ah != nil {
		flush, n.queue = n.queue, nil
	}
	i.nb.mu.Unlock()
	if path {
		i.ctl.jobs.push(func() { i.resolvePath(ip) })
	}
	i.sendQueued(ah, hw, flush)
}

// sendQueued sends packets that waited for the neighbour at hw: over a connection in
// connected mode (to a peer with the 0x80 flag), else over UD.
func (i *Interface) sendQueued(ah *hca.AH, hw HWAddr, q []queued) {
	ls := i.link.Load()
	var tx *cmTx
	if len(q) > 0 && i.connectedMode() {
		tx = i.cmRoute(hw)
	}
	for _, p := range q {
		if !ls.up {
			i.cnt.inc(cDropDown)
			continue
		}
		if p.etype == EtherTypeARP {
			i.sendARP(ah, hw.QPN(), p.pkt)
			continue
		}
		if tx != nil {
			i.cmEnqueue(tx, p.etype, p.pkt)
			continue
		}
		i.txp.snd.send(ah, hw.QPN(), ls.qkey, p.etype, p.pkt)
	}
}

// sendToNeighbor sends a control payload (an ARP reply) to ip's neighbour, waiting in
// its queue for the path if needed.
func (i *Interface) sendToNeighbor(ip netip.Addr, etype uint16, payload []byte) {
	i.nb.mu.RLock()
	n := i.nb.m[ip]
	if n != nil && n.ah != nil {
		ah, qpn := n.ah, n.hw.QPN()
		i.nb.mu.RUnlock()
		if etype == EtherTypeARP {
			i.sendARP(ah, qpn, payload)
		} else {
			ls := i.link.Load()
			i.txp.snd.send(ah, qpn, ls.qkey, etype, payload)
		}
		return
	}
	i.nb.mu.RUnlock()
	i.nb.mu.Lock()
	n = i.nb.m[ip]
	if n == nil {
		i.nb.mu.Unlock()
		i.cnt.inc(cDropNoNeighbor)
		return
	}
	if n.ah != nil {
		ah, hw := n.ah, n.hw
		i.nb.mu.Unlock()
		i.sendQueued(ah, hw, []queued{{etype, payload}})
		return
	}
	if len(n.queue) < maxQueued {
		n.queue = append(n.queue, queued{etype, clonePacket(payload, false)})
	} else {
		i.cnt.inc(cDropNoNeighbor)
	}
	i.nb.mu.Unlock()
}

// resolvePath (control loop) asks the SA for the path to ip's GID and builds its AH.
func (i *Interface) resolvePath(ip netip.Addr) {
	i.nb.mu.RLock()
	n := i.nb.m[ip]
	var gid wire.GID
	if n != nil {
		gid = n.hw.GID()
	}
	i.nb.mu.RUnlock()
	if n == nil {
		return
	}
	ah, err := i.pathAH(gid)
	i.nb.mu.Lock()
	n = i.nb.m[ip]
	if n == nil {
		i.nb.mu.Unlock()
		return
	}
	n.pathBusy = false
	if err != nil || n.hw.GID() != gid {
		dropped := len(n.queue)
		n.queue = nil
		i.nb.mu.Unlock()
		i.cnt.add(cDropNoPath, uint64(dropped))
		if err != nil {
			i.log.Debug("no path to neighbour", "ip", ip, "gid", gid, "err", err)
		}
		return
	}
	// Every neighbour at that GID (an IPv4 and an IPv6 address of one host) shares it.
	type flushJob struct {
		hw HWAddr
		q  []queued
	}
	var jobs []flushJob
	for _, m := range i.nb.m {
		if m.ah == nil && m.hw.GID() == gid && (m.state == nudReachable || m.state == nudStale) {
			m.ah = ah
			if len(m.queue) > 0 {
				jobs = append(jobs, flushJob{m.hw, m.queue})
				m.queue = nil
			}
		}
	}
	i.nb.mu.Unlock()
	for _, j := range jobs {
		i.sendQueued(ah, j.hw, j.q)
	}
}

// pathAH returns the cached AH for gid or builds one from a PathRecord.
func (i *Interface) pathAH(gid wire.GID) (*hca.AH, error) {
	i.nb.mu.RLock()
	ah := i.nb.ahs[gid]
	i.nb.mu.RUnlock()
	if ah != nil {
		return ah, nil
	}
	i.cnt.inc(cPathQueries)
	ctx, cancel := context.WithTimeout(i.ctx, saTimeout)
	p, err := i.sa.PathRecord(ctx, sa.PathQuery{DGID: gid, PKey: i.pkey})
	cancel()
	if err != nil {
		return nil, err
	}
	ah, err = i.pd.CreateAH(hca.AHAttr{DLID: p.DLID, SL: p.SL, PortNum: i.port.Num()})
	if err != nil {
		return nil, err
	}
	i.nb.mu.Lock()
	if old := i.nb.ahs[gid]; old != nil {
		i.nb.mu.Unlock()
		_ = ah.Destroy()
		return old, nil
	}
	if len(i.nb.ahs) >= i.nb.thresh3 {
		i.nb.trimPaths()
	}
	i.nb.ahs[gid] = ah
	i.nb.paths[gid] = p
	i.nb.mu.Unlock()
	return ah, nil
}

// flushPaths forgets every AH (after an SM or LID change): the next packet to each
// neighbour asks the SA again. The old AHs are destroyed on Close, since the transmit
// path may still hold them.
func (i *Interface) flushPaths() {
	i.nb.mu.Lock()
	for _, ah := range i.nb.ahs {
		i.nb.dead = append(i.nb.dead, ah)
	}
	clear(i.nb.ahs)
	clear(i.nb.paths)
	for _, n := range i.nb.m {
		n.ah = nil
	}
	i.nb.mu.Unlock()
}

// flushNeighbors empties the cache (the link went down).
func (i *Interface) flushNeighbors() {
	i.nb.mu.Lock()
	dropped := 0
	for ip, n := range i.nb.m {
		i.nb.timers.stop(n)
		dropped += len(n.queue)
		delete(i.nb.m, ip)
	}
	for _, ah := range i.nb.ahs {
		i.nb.dead = append(i.nb.dead, ah)
	}
	clear(i.nb.ahs)
	clear(i.nb.paths)
	i.nb.mu.Unlock()
	i.cnt.add(cDropDown, uint64(dropped))
}

// Neighbors lists the neighbour cache (`pibgw neigh`). Entries past NeighborTimeout
// show as STALE.
func (i *Interface) Neighbors() []Neighbor {
	now := i.clk.Now()
	i.nb.mu.Lock()
	out := make([]Neighbor, 0, len(i.nb.m))
	for _, n := range i.nb.m {
		if n.state == nudReachable && now.Sub(n.updated) >= i.cfg.NeighborTimeout {
			n.state = nudStale
			n.probes = 0
		}
		out = append(out, Neighbor{IP: n.ip, HWAddr: n.hw, State: n.state.String(), Age: now.Sub(n.updated)})
	}
	i.nb.mu.Unlock()
	for k := range out {
		i.cmNeighbor(out[k].HWAddr, &out[k])
	}
	slices.SortFunc(out, func(a, b Neighbor) int { return a.IP.Compare(b.IP) })
	return out
}
