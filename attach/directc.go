package attach

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/shmring"
	"github.com/pibgw/pibgw/wire"
)

// The process's side of the direct rings (direct.go): the sender's route cache and rings
// out, the receiver's rings in with their policing.

// directState is a Session's direct rings.
type directState struct {
	gen    *atomic.Uint64 // the daemon's generation word (read-only mapping; txMu after Dial)
	genMem []byte

	// Sending (txMu).
	routes   map[uint64]*routeEntry
	outs     map[uint64]*directOut // by ring number
	lastKey  uint64
	lastRt   *routeEntry
	statIdx  map[uint16]int // a port's statistics words (statIndex), by tag
	txDrops  atomic.Uint64  // packets for a stalled or closed direct ring, dropped
	drainOut atomic.Uint64  // path switches that found the old ring not emptied in time

	// Receiving: the rings in, copied on change under inMu; read under rxMu.
	inMu   sync.Mutex
	ins    atomic.Pointer[[]*directIn]
	bufs   *[64][maxPacket]byte // rxMu: the copies policing checks
	batch  [][]byte             // rxMu
	report chan struct{}        // wakes the drop reporter
}

// routeEntry is the cached path to one destination {port, DLID, DQPN}.
type routeEntry struct {
	gen uint64
	out *directOut // nil: via the daemon
}

// directOut is a direct ring this process writes.
type directOut struct {
	id      uint64
	peer    uint32
	ring    *shmring.Ring
	dead    bool      // closed by the other side or the daemon
	stalled time.Time // until then packets for it are dropped (hoqLife rule)
}

// directIn is a direct ring this process reads.
type directIn struct {
	id      uint64
	from    uint32 // the sender's session
	ring    *shmring.Ring
	barrier atomic.Uint64
	owners  atomic.Pointer[map[uint64]struct{}] // dev<<32 | QPN
	ownVer  uint64                              // owners' version (inMu)
	drops   [numCounters]atomic.Uint64          // policing, not yet reported
}

func (s *Session) initDirect(genFd int) error {
	mem, err := openGenPage(genFd)
	if err != nil {
		return err
	}
	ds := &s.direct
	ds.genMem = mem
	ds.gen = (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	ds.routes = make(map[uint64]*routeEntry)
	ds.outs = make(map[uint64]*directOut)
	ds.statIdx = make(map[uint16]int)
	ds.bufs = new([64][maxPacket]byte)
	ds.batch = make([][]byte, 0, 64)
	ds.report = make(chan struct{}, 1)
	return nil
}

// initStats fills the statistics word table once the devices are known.
func (s *Session) initStats() {
	k := 0
	for i, d := range s.devs {
		for _, p := range d.Ports() {
			if k < maxStatPorts {
				s.direct.statIdx[tag(i, p.Num())] = 2 * k
			}
			k++
		}
	}
}

// send writes packets from the port tagged t: each run of packets with the same path goes
// into the daemon's ring or a direct one. txMu held.
func (s *Session) send(t uint16, pkts [][]byte) {
	for i := 0; i < len(pkts); {
		out := s.pathOf(t, pkts[i])
		j := i + 1
		for j < len(pkts) && s.pathOf(t, pkts[j]) == out {
			j++
		}
		if out == nil {
			s.tx.Write(s.ctx, pkts[i:j], t, 0, true)
		} else {
			s.sendDirect(out, t, pkts[i:j])
		}
		i = j
	}
}

// routeKey packs a destination: the sending port's tag, DLID and DQPN.
func routeKey(t uint16, dlid uint16, dqpn uint32) uint64 {
	return uint64(t)<<48 | uint64(dlid)<<32 | uint64(dqpn)
}

// pathOf returns the direct ring a packet goes into, nil for the daemon's. txMu held.
func (s *Session) pathOf(t uint16, b []byte) *directOut {
	ds := &s.direct
	if ds.gen == nil || len(b) < wire.LRHLen+wire.BTHLen {
		return nil
	}
	lrh := wire.LRH(b)
	dlid := lrh.DLID()
	off := wire.LRHLen
	switch lrh.LNH() {
	case wire.LNHLocal:
	case wire.LNHGlobal:
		off += wire.GRHLen
	default:
		return nil
	}
	// Unicast data only: multicast, the permissive LID, QP0 and QP1 keep the daemon's path.
	if dlid == 0 || dlid >= 0xC000 || lrh.VL() == 15 || len(b) < off+wire.BTHLen {
		return nil
	}
	dqpn := wire.BTH(b[off:]).DestQP()
	if dqpn <= 1 {
		return nil
	}
	k := routeKey(t, dlid, dqpn)
	g := ds.gen.Load()
	r := ds.lastRt
	if k != ds.lastKey || r == nil {
		r = ds.routes[k]
	}
	if r == nil || r.gen != g {
		r = s.reroute(k, r, t, dlid, dqpn)
	}
	ds.lastKey, ds.lastRt = k, r
	if r.out != nil && r.out.dead {
		return nil
	}
	return r.out
}

// reroute asks the daemon for the path to a destination; before a new path is used, the
// old direct ring is emptied (bounded), so that the destination sees no reordering.
func (s *Session) reroute(k uint64, r *routeEntry, t uint16, dlid uint16, dqpn uint32) *routeEntry {
	ds := &s.direct
	g := ds.gen.Load()
	if r == nil {
		if len(ds.routes) >= maxRoutes {
			clear(ds.routes) // forget them all: they are asked again when used
			ds.lastRt = nil
		}
		r = &routeEntry{}
		ds.routes[k] = r
	}
	dev, pn := untag(t)
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	a, err := s.call(ctx, &msg{Op: opRoute, Dev: dev, Port: pn, LID: dlid, QPN: dqpn})
	cancel()
	var out *directOut
	gen := g
	if err == nil {
		gen = max(a.Gen, g)
		if a.Direct {
			out = ds.outs[a.Ring]
			if out == nil && len(a.fds) == 3 {
				ring, err := shmring.Open(a.fds[0], a.fds[1], a.fds[2])
				a.fds = nil
				if err == nil {
					out = &directOut{id: a.Ring, peer: a.Session, ring: ring}
					ds.outs[a.Ring] = out
				} else {
					s.log.Warn("attach: direct ring", "err", err)
				}
			}
		}
		closeAll(a.fds)
	}
	if old := r.out; old != nil && old != out && !old.dead {
		s.drain(old)
	}
	r.gen, r.out = gen, out
	return r
}

// maxRoutes bounds the route cache.
const maxRoutes = 4096

// drain waits until the receiver took everything out of a direct ring, for at most a
// head-of-queue lifetime.
func (s *Session) drain(out *directOut) {
	deadline := time.Now().Add(hoqLife)
	for i := 0; ; i++ {
		tail, head := out.ring.Indexes()
		if tail == head || s.ctx.Err() != nil {
			return
		}
		if time.Now().After(deadline) {
			s.direct.drainOut.Add(1)
			return
		}
		if i < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// sendDirect writes packets into a direct ring. A full ring holds the sender back for at
// most a head-of-queue lifetime, as the daemon's forwarding does (session.forward), then
// everything for the ring is dropped for 8 lifetimes; a closed one drops them.
func (s *Session) sendDirect(out *directOut, t uint16, pkts [][]byte) {
	if !out.stalled.IsZero() && time.Now().Before(out.stalled) {
		s.direct.txDrops.Add(uint64(len(pkts)))
		return
	}
	n, err := out.ring.Write(s.ctx, pkts, t, 0, false)
	if n < len(pkts) && err == nil {
		ctx, cancel := context.WithTimeout(s.ctx, hoqLife)
		var m int
		m, err = out.ring.Write(ctx, pkts[n:], t, 0, true)
		cancel()
		n += m
		if n < len(pkts) && err != nil && !errors.Is(err, shmring.ErrClosed) {
			out.stalled = time.Now().Add(8 * hoqLife)
		}
	}
	if errors.Is(err, shmring.ErrClosed) || errors.Is(err, shmring.ErrCorrupt) {
		out.dead = true
	}
	if n < len(pkts) {
		s.direct.txDrops.Add(uint64(len(pkts) - n))
	}
}

// directIn handles the daemon's direct_in request on the reader goroutine: a ring to read
// (its descriptors come the first time), its barrier and the sender's QP numbers.
func (s *Session) directIn(m *msg) {
	ds := &s.direct
	owners := make(map[uint64]struct{})
	for dev, qs := range m.Owners {
		for _, q := range qs {
			owners[uint64(dev)<<32|uint64(q)] = struct{}{}
		}
	}
	ds.inMu.Lock()
	var in *directIn
	if p := ds.ins.Load(); p != nil {
		for _, x := range *p {
			if x.id == m.Ring {
				in = x
			}
		}
	}
	added := false
	if in == nil {
		if len(m.fds) != 3 || ds.gen == nil {
			ds.inMu.Unlock()
			closeAll(m.fds)
			s.answer(m.Req, &msg{Errno: int(syscall.EINVAL), Err: "direct ring without descriptors"})
			return
		}
		r, err := shmring.Open(m.fds[0], m.fds[1], m.fds[2])
		m.fds = nil
		if err != nil {
			ds.inMu.Unlock()
			s.answer(m.Req, &msg{Errno: int(syscall.EINVAL), Err: err.Error()})
			return
		}
		in = &directIn{id: m.Ring, from: m.Session, ring: r}
		var list []*directIn
		if p := ds.ins.Load(); p != nil {
			list = append(list, *p...)
		}
		list = append(list, in)
		ds.ins.Store(&list)
		added = true
	}
	closeAll(m.fds)
	if m.Gen >= in.ownVer { // a list sent later may arrive first
		in.ownVer = m.Gen
		in.owners.Store(&owners)
	}
	if m.Barrier > in.barrier.Load() { // only the daemon's route requests move it, forward
		in.barrier.Store(m.Barrier)
	}
	ds.inMu.Unlock()
	if added {
		s.rx.Wake() // the receive goroutine sleeps on the rings it knew
	}
	s.answer(m.Req, &msg{OK: true})
}

// rxRings are the rings the receive goroutine waits on: the daemon's, then the direct
// ones.
func (s *Session) rxRings(buf []*shmring.Ring) []*shmring.Ring {
	buf = append(buf[:0], s.rx)
	if p := s.direct.ins.Load(); p != nil {
		for _, in := range *p {
			buf = append(buf, in.ring)
		}
	}
	return buf
}

// takeAll hands what the daemon's ring and the direct rings hold to the mirror ports;
// rxMu held. A direct ring waits until the daemon's ring passed its barrier.
func (s *Session) takeAll() (bool, error) {
	got, err := s.rx.TryRead(64, s.deliver)
	if err != nil {
		return got, err
	}
	p := s.direct.ins.Load()
	if p == nil || len(*p) == 0 {
		return got, nil
	}
	tail, _ := s.rx.Indexes()
	drops := false
	for _, in := range *p {
		if int64(tail-in.barrier.Load()) < 0 {
			continue
		}
		g, err := in.ring.TryRead(64, func(t, _ uint16, pkts [][]byte) {
			if s.takeDirect(in, t, pkts) {
				drops = true
			}
		})
		got = got || g
		if err != nil {
			if !errors.Is(err, shmring.ErrClosed) {
				s.log.Warn("attach: direct ring", "from", in.from, "err", err)
			}
			s.dropIn(in)
		}
	}
	if drops {
		select {
		case s.direct.report <- struct{}{}:
		default:
		}
	}
	return got, nil
}

// dropIn forgets a direct ring that was closed or broken.
func (s *Session) dropIn(in *directIn) {
	ds := &s.direct
	ds.inMu.Lock()
	if p := ds.ins.Load(); p != nil {
		var list []*directIn
		for _, x := range *p {
			if x != in {
				list = append(list, x)
			}
		}
		ds.ins.Store(&list)
	}
	ds.inMu.Unlock()
	go in.ring.Close() // not from inside its Read; Close waits for other users
}

// takeDirect copies a run of records from a direct ring out of shared memory, checks each
// (police.go's rules, at the receiver), and hands what passes to the mirror port its
// DLID names. It reports whether it dropped any.
func (s *Session) takeDirect(in *directIn, t uint16, pkts [][]byte) bool {
	ds := &s.direct
	dev, pn := untag(t)
	var src *hca.Port
	if dev < len(s.devs) {
		src = s.devs[dev].Port(int(pn))
	}
	batch := ds.batch[:0]
	var dst *hca.Port
	dropped := false
	flush := func() {
		if len(batch) > 0 && dst != nil {
			dst.ReceiveFrom(batch, false)
			// What passed, for the daemon's counters (direct.go foldLocked): sent from
			// the sender's port, received on this one.
			var words uint64
			for _, b := range batch {
				words += uint64(len(b)+wire.VCRCLen) / 4
			}
			if i, ok := ds.statIdx[t]; ok {
				in.ring.AddStat(statSrc+i, uint64(len(batch)))
				in.ring.AddStat(statSrc+i+1, words)
			}
			if i, ok := ds.statIdx[s.tagOf(dst)]; ok {
				in.ring.AddStat(statDst+i, uint64(len(batch)))
				in.ring.AddStat(statDst+i+1, words)
			}
		}
		batch = batch[:0]
	}
	for i, b := range pkts {
		if src == nil || len(b) > maxPacket {
			in.drops[cntMalformed].Add(1)
			dropped = true
			continue
		}
		c := ds.bufs[i][:len(b)]
		copy(c, b)
		to, bad := s.checkDirect(in, dev, src, c)
		if bad != 0 {
			in.drops[bad].Add(1)
			dropped = true
			continue
		}
		if to != dst {
			flush()
			dst = to
		}
		batch = append(batch, c)
	}
	flush()
	clear(ds.batch[:cap(ds.batch)])
	return dropped
}

func (s *Session) tagOf(p *hca.Port) uint16 {
	for i, d := range s.devs {
		if d == p.Device() {
			return tag(i, p.Num())
		}
	}
	return 0xFFFF
}

// checkDirect applies the daemon's policing rules (police.go) to a packet (a private
// copy) another process put into a direct ring, from its port src (this process's
// mirror of it): it returns the mirror port the packet is for, or the rule it broke.
func (s *Session) checkDirect(in *directIn, dev int, src *hca.Port, b []byte) (*hca.Port, counter) {
	var pk wire.Packet
	if err := pk.Parse(b); err != nil || pk.BTH == nil {
		return nil, cntMalformed
	}
	if bad := portRules(&pk, src); bad != 0 {
		return nil, bad
	}
	// MADs never take a direct ring: the daemon routes them.
	if pk.BTH.DestQP() == 1 || pk.DETH != nil && pk.DETH.SrcQP() == 1 {
		return nil, cntMAD
	}
	if pk.DETH != nil {
		owned := false
		if o := in.owners.Load(); o != nil {
			_, owned = (*o)[uint64(dev)<<32|uint64(pk.DETH.SrcQP())]
		}
		if bad := udRules(&pk, owned); bad != 0 {
			return nil, bad
		}
	}
	// The packet goes where the fabric would take it: the port of this process that
	// has the DLID.
	dlid := pk.LRH.DLID()
	for _, d := range s.devs {
		for _, p := range d.Ports() {
			if l, m := p.LID(), p.LMC(); l != 0 && dlid>>m == l>>m {
				return p, 0
			}
		}
	}
	return nil, cntMalformed
}

// reportDrops sends the daemon the policing drops of the direct rings, so that pibgw ps
// shows them on the senders' rows.
func (s *Session) reportDrops() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.direct.report:
		}
		p := s.direct.ins.Load()
		if p == nil {
			continue
		}
		for _, in := range *p {
			counts := map[string]uint64{}
			for i := range in.drops {
				if n := in.drops[i].Swap(0); n != 0 {
					counts[counterNames[i]] = n
				}
			}
			if len(counts) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			s.call(ctx, &msg{Op: opPoliced, Session: in.from, Counts: counts})
			cancel()
		}
	}
}

// closeDirect closes every direct ring (Session.Close, after the goroutines ended).
func (s *Session) closeDirect() {
	ds := &s.direct
	s.txMu.Lock()
	for _, out := range ds.outs {
		out.ring.Close()
	}
	clear(ds.outs)
	clear(ds.routes)
	ds.lastRt = nil
	if ds.genMem != nil {
		ds.gen = nil
		unix.Munmap(ds.genMem)
		ds.genMem = nil
	}
	s.txMu.Unlock()
	ds.inMu.Lock()
	if p := ds.ins.Load(); p != nil {
		for _, in := range *p {
			in.ring.Close()
		}
	}
	ds.ins.Store(nil)
	ds.inMu.Unlock()
}
