package attach

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/shmring"
)

// Direct rings ("cut-through"): unicast data packets from one attached process to a QP
// of another go through a shared-memory ring between the two, which the daemon creates
// (one per ordered pair of sessions, on first need) and hands to both over their control
// sockets, instead of through the daemon's ports and switch. Everything else — QP0/QP1,
// multicast, loopback to the process's own QPs, packets to the daemon's own QPs or to
// other hosts — keeps the daemon path.
//
// The daemon decides (op "route"): the destination LID is a port of this daemon, the
// destination QP number is reserved by another session, both ports are Active and
// nothing in the daemon's fabric observes or alters packets (Server.Observed: captures,
// faults, traces); otherwise "via the daemon". Clients cache the answer per destination
// until the generation number changes: a word in a read-only shared page (genPage) that
// the daemon bumps whenever an answer may change (QP numbers reserved or freed, a session
// ended, a port changed, Server.Invalidate).
//
// Ordering: before the daemon answers "direct", it waits until it has sent what the
// process wrote to its ring before the request (txSync) and tells the receiver the
// position of its daemon ring those packets reached (the barrier): the receiver takes
// nothing from the direct ring until it has taken everything before the barrier from
// the daemon's. The other way round, a sender leaving a direct ring waits (bounded) until
// the receiver emptied it before it sends through the daemon.
//
// Policing moves to the receiver, with police.go's rules, on a copy of each record; the
// ownership facts (the sender's QP numbers) come from the daemon with the barrier. Drops
// are reported to the daemon (op "policed"), which counts them on the sender's row of
// pibgw ps. The rings' statistics words carry the traffic counts (sender: packets and
// bytes per source port; receiver: packets delivered per destination port), which the
// daemon adds to the sessions' and ports' counters.
const (
	opRoute    = "route"     // process → daemon: the path to {dev, port, lid, qpn}
	opDirectIn = "direct_in" // daemon → receiving process: a ring, its barrier, the sender's QPNs
	opPoliced  = "policed"   // receiving process → daemon: drops on direct rings, by sender
)

// directRingSize is the data area of a direct ring: as large as the daemon's rings.
const directRingSize = ringSize

// The receiver's statistics words of a direct ring: per port of the daemon (the k-th port of
// the devices in order: words 2k and 2k+1),
// packets and 4-byte words that passed its policing, by the sender's port (statSrc) and by
// the receiver's (statDst). maxStatPorts bounds the ports counted.
const (
	statSrc      = shmring.NumStats / 2
	statDst      = statSrc + shmring.NumStats/4
	maxStatPorts = shmring.NumStats / 8
)

// genPage is the daemon's generation word, in a sealed memfd page that processes map
// read-only (F_SEAL_FUTURE_WRITE: no writable mapping can be made after the seal).
type genPage struct {
	fd   int
	mem  []byte
	word *atomic.Uint64
}

func newGenPage() (*genPage, error) {
	fd, err := unix.MemfdCreate("pibgw-attach-gen", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("attach: generation page: %w", err)
	}
	if err := unix.Ftruncate(fd, genPageSize); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach: generation page: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, genPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach: generation page: %w", err)
	}
	const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, fmt.Errorf("attach: generation page: sealing: %w", err)
	}
	g := &genPage{fd: fd, mem: mem, word: (*atomic.Uint64)(unsafe.Pointer(&mem[0]))}
	g.word.Store(1)
	return g, nil
}

const genPageSize = 4096

func (g *genPage) close() {
	unix.Munmap(g.mem)
	unix.Close(g.fd)
}

// openGenPage maps the daemon's generation page read-only; it takes fd.
func openGenPage(fd int) ([]byte, error) {
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	const want = unix.F_SEAL_SHRINK | unix.F_SEAL_FUTURE_WRITE
	if err != nil || seals&want != want {
		return nil, fmt.Errorf("attach: generation page not sealed (%#x, %v)", seals, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != genPageSize {
		return nil, fmt.Errorf("attach: generation page of %d bytes (%v)", st.Size, err)
	}
	mem, err := unix.Mmap(fd, 0, genPageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("attach: generation page: %w", err)
	}
	return mem, nil
}

// Invalidate tells every attached process to ask again for the paths of its packets: the
// daemon calls it when something starts or stops observing or altering packets in its
// fabric (Observed changes).
func (s *Server) Invalidate() {
	if g := s.gen; g != nil {
		g.word.Add(1)
	}
}

// observed reports whether packets must cross the daemon's fabric to be seen.
func (s *Server) observed() bool { return s.Observed == nil || s.Observed() }

// direct is a direct ring as the daemon keeps it.
type direct struct {
	id       uint64
	from, to *session
	ring     *shmring.Ring
	fromHas  bool   // the sender has its descriptors (s.mu)
	toHas    bool   // the receiver has them
	ackedVer uint64 // the newest owner list of the sender the receiver acknowledged (s.mu)
	// folded are the statistics already added to the counters (ring words, s.mu).
	folded [shmring.NumStats]uint64
}

type pairKey struct{ from, to uint32 }

// directRing returns the ring from x to y, created on first need.
func (s *Server) directRing(x, y *session) (*direct, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.sessions[x.id] != x || s.sessions[y.id] != y {
		return nil, net_errClosed
	}
	k := pairKey{x.id, y.id}
	if d := s.directs[k]; d != nil {
		return d, nil
	}
	r, err := shmring.Create(directRingSize)
	if err != nil {
		return nil, err
	}
	s.nextRing++
	d := &direct{id: s.nextRing, from: x, to: y, ring: r}
	if s.directs == nil {
		s.directs = make(map[pairKey]*direct)
	}
	s.directs[k] = d
	return d, nil
}

var net_errClosed = fmt.Errorf("attach: the daemon is closing")

// dropDirects closes the direct rings from and to a session that ended: its peers see
// them closed (the receiver after taking what is in them), and the generation changes so
// that senders ask again.
func (s *Server) dropDirects(x *session) {
	s.mu.Lock()
	var gone []*direct
	for k, d := range s.directs {
		if d.from == x || d.to == x {
			gone = append(gone, d)
			delete(s.directs, k)
		}
	}
	for _, d := range gone {
		s.foldLocked(d)
	}
	s.mu.Unlock()
	s.Invalidate()
	for _, d := range gone {
		d.ring.Close()
		if d.from != x {
			d.from.releaseQuarantined() // one receiver fewer to wait for
		}
	}
}

type quarKey struct {
	dev int
	qpn uint32
}

// sendsDirect reports whether a receiving process holds a direct ring from x, and with
// it a list of x's QP numbers.
func (s *Server) sendsDirect(x *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, d := range s.directs {
		if k.from == x.id && d.toHas {
			return true
		}
	}
	return false
}

// releaseQuarantined gives back the QP numbers x freed that every receiver of its direct
// rings now knows are not x's: each acknowledged an owner list made after the free.
func (x *session) releaseQuarantined() {
	s := x.srv
	acked := uint64(math.MaxUint64)
	s.mu.Lock()
	for k, d := range s.directs {
		if k.from == x.id && d.toHas {
			acked = min(acked, d.ackedVer)
		}
	}
	s.mu.Unlock()
	x.mu.Lock()
	var free []quarKey
	for k, v := range x.quarantine {
		if acked > v {
			free = append(free, k)
			delete(x.quarantine, k)
		}
	}
	x.mu.Unlock()
	for _, k := range free {
		s.Devices[k.dev].ReleaseQPN(k.qpn, x)
	}
	if len(free) > 0 {
		s.Invalidate()
	}
}

// route answers op "route": the path of the process's packets to {Dev, Port, LID, QPN}.
func (x *session) route(m *msg) {
	r, fds := x.routeOf(m)
	r.ID = m.ID
	x.write(r, fds...)
}

func (x *session) routeOf(m *msg) (*msg, []int) {
	s := x.srv
	gen := s.gen.word.Load()
	via := &msg{OK: true, Gen: gen}
	d, e := x.device(m)
	if e != nil {
		return e, nil
	}
	p := d.Port(int(m.Port))
	if p == nil {
		return fail(m.Op, syscall.EINVAL, "no port %d", m.Port), nil
	}
	if m.QPN <= 1 || m.QPN > 0xFFFFFF || m.LID == 0 || m.LID >= 0xC000 || p.State() != hca.PortActive || s.observed() {
		return via, nil
	}
	y, dst := s.ownerOf(m.LID, m.QPN)
	if y == nil || y == x || dst.State() != hca.PortActive {
		return via, nil
	}
	dr, err := s.directRing(x, y)
	if err != nil {
		return via, nil
	}
	// Everything the process sent before it asked is in the receiver's daemon ring
	// before the position read here (the daemon's fabric delivers synchronously).
	x.txSync()
	y.rxMu.Lock()
	_, barrier := y.rx.Indexes()
	y.rxMu.Unlock()
	ver, owners := x.owned()
	in := &msg{Op: opDirectIn, Ring: dr.id, Session: x.id, Barrier: barrier, Owners: owners, Gen: ver}
	s.mu.Lock()
	toHas, fromHas := dr.toHas, dr.fromHas
	s.mu.Unlock()
	var inFds []int
	if !toHas {
		rm, rd, rs := dr.ring.Fds()
		inFds = []int{rm, rd, rs}
	}
	ctx, cancel := context.WithTimeout(x.ctx, 2*time.Second)
	_, err = y.ask(ctx, in, inFds...)
	cancel()
	if err != nil {
		return via, nil
	}
	s.mu.Lock()
	if s.directs[pairKey{x.id, y.id}] != dr {
		s.mu.Unlock()
		return via, nil // a session ended meanwhile
	}
	dr.toHas = true
	dr.ackedVer = max(dr.ackedVer, ver)
	s.mu.Unlock()
	x.releaseQuarantined()
	r := &msg{OK: true, Gen: gen, Direct: true, Ring: dr.id, Session: y.id}
	if !fromHas {
		rm, rd, rs := dr.ring.Fds()
		s.mu.Lock()
		dr.fromHas = true
		s.mu.Unlock()
		return r, []int{rm, rd, rs}
	}
	return r, nil
}

// ownerOf finds the session that reserved qpn on the daemon's port whose LID range holds
// lid.
func (s *Server) ownerOf(lid uint16, qpn uint32) (*session, *hca.Port) {
	for _, d := range s.Devices {
		for _, p := range d.Ports() {
			l, lmc := p.LID(), p.LMC()
			if l == 0 || lid>>lmc != l>>lmc {
				continue
			}
			y, _ := d.ForwarderOf(qpn).(*session)
			return y, p
		}
	}
	return nil, nil
}

// owned lists the session's QP numbers by device, with a version number: a receiver
// keeps the newest list it was sent.
func (x *session) owned() (uint64, map[int][]uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := make(map[int][]uint32, len(x.qpns))
	for dev, set := range x.qpns {
		for q := range set {
			m[dev] = append(m[dev], q)
		}
	}
	return x.srv.ownersVer.Add(1), m
}

// policed counts the drops a receiving process reports for packets a sender put into a
// direct ring to it.
func (x *session) policed(m *msg) {
	s := x.srv
	s.mu.Lock()
	dr := s.directs[pairKey{m.Session, x.id}]
	s.mu.Unlock()
	if dr == nil {
		return
	}
	for name, n := range m.Counts {
		for i, cn := range counterNames {
			if cn == name && counter(i) >= cntMalformed && counter(i) <= cntSGID && n < 1<<32 {
				dr.from.police.add(counter(i), n)
			}
		}
	}
}

// foldLocked adds what a direct ring's statistics words counted since the last fold to
// the sessions' and ports' counters; s.mu held.
func (s *Server) foldLocked(d *direct) {
	k := 0
	for _, dev := range s.Devices {
		for _, p := range dev.Ports() {
			if k >= maxStatPorts {
				return
			}
			i := 2 * k
			txp, txb := s.foldStat(d, statSrc+i), s.foldStat(d, statSrc+i+1)
			rxp, rxb := s.foldStat(d, statDst+i), s.foldStat(d, statDst+i+1)
			if txp != 0 {
				d.from.police.add(cntTxPackets, txp)
				d.from.police.add(cntDirectTx, txp)
				p.AddDirect(true, txp, txb)
			}
			if rxp != 0 {
				d.to.police.add(cntRxPackets, rxp)
				d.to.police.add(cntDirectRx, rxp)
				p.AddDirect(false, rxp, rxb)
			}
			k++
		}
	}
}

func (s *Server) foldStat(d *direct, i int) uint64 {
	v := d.ring.LoadStat(i)
	if v < d.folded[i] {
		return 0 // the process wrote nonsense
	}
	n := v - d.folded[i]
	d.folded[i] = v
	return n
}

// foldAll folds every direct ring's statistics.
func (s *Server) foldAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.directs {
		s.foldLocked(d)
	}
}
