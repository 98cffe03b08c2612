package attach

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/shmring"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/wire"
)

// session is the daemon's side of one attached process.
type session struct {
	srv   *Server
	c     conn
	id    uint32
	pid   int
	uid   int
	since time.Time

	ctx     context.Context
	cancel  context.CancelFunc
	txDone  chan struct{} // closed when txLoop has sent everything the process wrote
	started bool          // start ran (on the session's connection goroutine)

	tx   *shmring.Ring // the process writes, the daemon reads
	rx   *shmring.Ring // the daemon writes (rxMu), the process reads
	rxMu sync.Mutex
	// stalled (rxMu): until then packets for a process that stopped reading are dropped.
	stalled time.Time

	wmu sync.Mutex // control writes

	mu      sync.Mutex
	qpns    map[int]map[uint32]struct{} // by device index
	mcast   map[mcastKey]struct{}
	joins   map[joinKey]rdmacm.Device
	mcJoins mcJoins            // how often the process joined each group (mcast.go)
	conns   map[uint32]*cmConn // CM connections by the process's comm ID (cmtrack.go)
	// quarantine holds QP numbers the process freed while receivers of its direct rings
	// may still take them for its own, with the owner-list version current at the free:
	// the number stays reserved until every such receiver acknowledged a newer list
	// (releaseQuarantined), so that it cannot pass for another process's QP meanwhile.
	quarantine map[quarKey]uint64
	dirty      map[tagKey]struct{}
	kick       chan struct{}

	listens int          // service IDs listened on (srv.mu)
	slowN   atomic.Int32 // requests in flight on their own goroutines (handle)

	police policeCounters
	dbg    debugCalls   // the daemon's requests to the process (debug.go)
	warns  pitfallLimit // the process's pitfall warnings logged (manner.go)
}

type mcastKey struct {
	dev  int
	port uint8
	gid  wire.GID
	qpn  uint32
}

type joinKey struct {
	dev  int
	port uint8
	gid  wire.GID
}

type tagKey struct {
	dev  int
	port uint8
}

func newRing() (*shmring.Ring, error) { return shmring.Create(ringSize) }

func (x *session) write(m *msg, fds ...int) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return x.c.write(m, fds...)
}

// start runs the session's goroutines: the transmit loop and the port-state pusher.
func (x *session) start() {
	x.started = true
	go x.txLoop()
	go x.eventLoop()
}

// close releases the rings.
func (x *session) close() {
	if x.tx != nil {
		x.tx.Close()
	}
	if x.rx != nil {
		x.rxMu.Lock()
		x.rx.Close()
		x.rxMu.Unlock()
	}
}

// release frees the process's QP numbers, groups and SA joins, then its rings.
func (x *session) release() {
	x.mu.Lock()
	qpns := x.qpns
	x.qpns = map[int]map[uint32]struct{}{}
	joins := x.joins
	x.joins = map[joinKey]rdmacm.Device{}
	x.mcast = map[mcastKey]struct{}{}
	quarantined := x.quarantine
	x.quarantine = nil
	x.mu.Unlock()
	for dev, set := range qpns {
		for qpn := range set {
			x.srv.Devices[dev].ReleaseQPN(qpn, x)
		}
	}
	for k := range quarantined {
		x.srv.Devices[k.dev].ReleaseQPN(k.qpn, x)
	}
	x.releaseJoins(joins)
	x.close()
}

// Forward is hca.Forwarder: a packet for one of the process's QPs goes into its ring.
// A full ring drops it (counted): the daemon never waits for a process.
func (x *session) Forward(p *hca.Port, raw []byte, loopback bool) { x.forward(p, raw, loopback) }

func (x *session) forward(p *hca.Port, raw []byte, loopback bool) {
	dev := x.srv.devIndex(p.Device())
	if dev < 0 {
		return
	}
	var flags uint16
	if loopback {
		flags = flagLoopback
	}
	one := [1][]byte{raw}
	t := tag(dev, p.Num())
	x.rxMu.Lock()
	n, err := x.rx.Write(x.ctx, one[:], t, flags, false)
	if n == 0 && err == nil && time.Now().After(x.stalled) {
		// IB links are lossless: a full ring holds the sender back, as link credits do,
		// but only for a switch's head-of-queue lifetime (IBA 18.2.5.4); then the packet
		// is discarded and, as a stalled VL does, so is everything for the process until
		// 8 lifetimes have passed: a process that stops reading cannot stall the fabric.
		ctx, cancel := context.WithTimeout(x.ctx, hoqLife)
		n, err = x.rx.Write(ctx, one[:], t, flags, true)
		cancel()
		if n == 0 {
			x.stalled = time.Now().Add(8 * hoqLife)
		}
	}
	x.rxMu.Unlock()
	if n == 0 || err != nil {
		x.police.inc(cntRxRingFull)
	} else {
		x.police.inc(cntRxPackets)
	}
}

// hoqLife is how long the daemon waits for room in a process's ring: OpenSM's default
// head-of-queue lifetime for switch ports toward channel adapters
// (leaf_head_of_queue_lifetime 0x10: 4.096 µs × 2^16 ≈ 268 ms).
const hoqLife = 268 * time.Millisecond

// txLoop reads the process's packets, copies each out of shared memory, checks it and
// sends what passes from the daemon's port.
func (x *session) txLoop() {
	defer close(x.txDone)
	var bufs [64][maxPacket]byte
	batch := make([][]byte, 0, len(bufs))
	for {
		err := x.tx.Wait(x.ctx, daemonSpin)
		if errors.Is(err, context.Canceled) || errors.Is(err, shmring.ErrClosed) {
			// The process is gone: what it sent before it went (a DREQ as it closed a
			// connection) still goes out, as an HCA sends what was posted.
			err = nil
			defer func() { x.tx.TryRead(len(bufs), x.transmit(&bufs, &batch)) }()
			return
		}
		if err == nil {
			_, err = x.tx.TryRead(len(bufs), x.transmit(&bufs, &batch))
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, shmring.ErrClosed) {
				x.srv.log.Warn("attach: process ring", "pid", x.pid, "err", err)
				x.c.c.Close() // a corrupted ring ends the session
			}
			return
		}
	}
}

// transmit returns the ring callback that copies each packet out of shared memory into
// bufs, checks it and sends what passes from the daemon's port.
func (x *session) transmit(bufs *[64][maxPacket]byte, batchp *[][]byte) func(t uint16, _ uint16, pkts [][]byte) {
	return func(t uint16, _ uint16, pkts [][]byte) {
		batch := (*batchp)[:0]
		dev, pn := untag(t)
		var port *hca.Port
		if dev < len(x.srv.Devices) {
			port = x.srv.Devices[dev].Port(int(pn))
		}
		for i, b := range pkts {
			if port == nil || len(b) > maxPacket {
				x.police.inc(cntMalformed)
				continue
			}
			c := bufs[i][:len(b)]
			copy(c, b)
			if x.check(dev, port, c) {
				batch = append(batch, c)
			}
		}
		if len(batch) > 0 {
			x.police.add(cntTxPackets, uint64(len(batch)))
			port.Transmit(batch)
		}
		*batchp = batch
	}
}

// txSync waits until the daemon has sent what the process wrote into its ring before the
// request being handled. Packets and requests travel apart (the ring, the socket), and a
// request that takes something away must not overtake the packets posted before it: a
// UD program sends its last message and destroys its QP at once, and the policing would
// drop that message as coming from a QPN the process no longer owns. The wait is bounded:
// txLoop may itself wait a head-of-queue lifetime for a slow receiver.
func (x *session) txSync() {
	_, head := x.tx.Indexes()
	deadline := time.Now().Add(2 * hoqLife)
	for {
		tail, _ := x.tx.Indexes()
		if int64(tail-head) >= 0 || x.ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		select {
		case <-x.txDone:
			return
		case <-time.After(20 * time.Microsecond):
		}
	}
}

// daemonSpin is how many times the daemon re-checks a process's ring before it sleeps
// on the doorbell (a blocking poll(2), woken in about 5 µs): a little, since on a small
// machine the processes it serves need the CPUs. Measured between two processes on two
// cores (BenchmarkRDMAWrite64K, SendPingPong8, UD64, attached): 0 gave 1.5–2.5 GB/s,
// 56 µs, 184 k msgs/s; 1000 gave 3.1 GB/s, 51–59 µs, 243–260 k msgs/s; 5000 gave
// 3.1 GB/s, 83–87 µs, 178–211 k msgs/s. Since spins yield to the operating system
// (shmring), medians of 3 alternating runs on a loaded machine: 1000 gave 1.96 GB/s,
// 25 µs, 1.40 M msgs/s; 2500 gave 3.38 GB/s, 38 µs, 1.31 M; 5000 gave 3.52 GB/s, 18 µs,
// 1.50 M, but ib_send_lat (perftest) settled more often at 16.8 µs typical against 8–11
// with 1000, and the same ib_write_bw.
var daemonSpin = 1000

// maxPacket is the largest packet a port sends: LRH, GRH, BTH and the largest extended
// headers, a 4096-byte payload, ICRC.
const maxPacket = 4096 + 128

func (x *session) ownsQPN(dev int, qpn uint32) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.qpns[dev][qpn]
	return ok
}

func (x *session) markDirty(dev int, port uint8) {
	x.mu.Lock()
	x.dirty[tagKey{dev, port}] = struct{}{}
	x.mu.Unlock()
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// eventLoop pushes the state of changed ports to the process (coalesced: the newest
// state of each port that changed since the last push).
func (x *session) eventLoop() {
	for {
		select {
		case <-x.ctx.Done():
			return
		case <-x.kick:
		}
		x.mu.Lock()
		dirty := slices.Collect(maps.Keys(x.dirty))
		clear(x.dirty)
		x.mu.Unlock()
		for _, k := range dirty {
			p := x.srv.Devices[k.dev].Port(int(k.port))
			a, pk := p.Query(), p.PKeys()
			if err := x.write(&msg{Op: opPort, Dev: k.dev, Port: k.port, Attr: &a, PKeys: &pk}); err != nil {
				return
			}
		}
	}
}

func (x *session) info(listens int) SessionInfo {
	si := SessionInfo{ID: x.id, PID: x.pid, UID: x.uid, User: userName(x.uid), Since: x.since,
		Listens: listens, Counters: x.police.snapshot()}
	x.mu.Lock()
	for dev, set := range x.qpns {
		for qpn := range set {
			si.QPs = append(si.QPs, fmt.Sprintf("%s:%#x", x.srv.Devices[dev].Name(), qpn))
		}
	}
	x.mu.Unlock()
	slices.Sort(si.QPs)
	return si
}

// handle answers one request. Requests that may wait (neighbour resolution, SA queries)
// run on their own goroutine so the session keeps reading.
func (x *session) handle(m *msg) {
	switch m.Op {
	case opNeighbor, opPath, opJoin, opLeave:
		// Each waits on the fabric for up to 30 s on a goroutine of its own: a
		// process has maxSlow of them at once.
		if x.slowN.Add(1) > maxSlow {
			x.slowN.Add(-1)
			x.reply(m, fail(m.Op, syscall.EAGAIN, "the process has %d requests in flight, its limit", maxSlow))
			return
		}
		go func() {
			defer x.slowN.Add(-1)
			x.reply(m, x.slow(m))
		}()
	case opRoute:
		go x.route(m)
	case opPoliced:
		x.policed(m)
		x.reply(m, &msg{OK: true})
	default:
		x.reply(m, x.fast(m))
	}
}

func (x *session) reply(req *msg, r *msg) {
	if r == nil {
		r = &msg{}
	}
	r.ID = req.ID
	x.write(r)
}

func fail(op string, e syscall.Errno, format string, a ...any) *msg {
	return &msg{Op: op, Errno: int(e), Err: fmt.Sprintf(format, a...)}
}

func (x *session) device(m *msg) (*hca.Device, *msg) {
	if m.Dev < 0 || m.Dev >= len(x.srv.Devices) {
		return nil, fail(m.Op, syscall.ENODEV, "no device %d", m.Dev)
	}
	return x.srv.Devices[m.Dev], nil
}

func (x *session) fast(m *msg) *msg {
	s := x.srv
	switch m.Op {
	case opAllocQPN:
		d, e := x.device(m)
		if e != nil {
			return e
		}
		// A process's share of the device (daemon.attach_max_qps): beyond it, ENOMEM,
		// as uverbs' create_qp when the device has no QP left.
		x.mu.Lock()
		held := len(x.qpns[m.Dev]) + len(x.quarantine)
		x.mu.Unlock()
		if lim := s.adm.lim.MaxQPs; held >= lim {
			return fail(m.Op, syscall.ENOMEM, "the process has %d QPs on %s, its limit (daemon.attach_max_qps)", held, d.Name())
		}
		qpn, err := d.ReserveQPN(x)
		if err != nil {
			return fail(m.Op, syscall.ENOMEM, "%v", err)
		}
		x.mu.Lock()
		if x.qpns[m.Dev] == nil {
			x.qpns[m.Dev] = make(map[uint32]struct{})
		}
		x.qpns[m.Dev][qpn] = struct{}{}
		x.mu.Unlock()
		s.Invalidate() // direct rings: the receivers learn the new owner (direct.go)
		return &msg{OK: true, QPN: qpn}
	case opFreeQPN:
		d, e := x.device(m)
		if e != nil {
			return e
		}
		x.txSync()
		x.mu.Lock()
		_, ok := x.qpns[m.Dev][m.QPN]
		delete(x.qpns[m.Dev], m.QPN)
		for k := range x.mcast {
			if k.dev == m.Dev && k.qpn == m.QPN {
				delete(x.mcast, k)
			}
		}
		x.mu.Unlock()
		if !ok {
			return fail(m.Op, syscall.EINVAL, "QP %#x is not this process's", m.QPN)
		}
		if s.sendsDirect(x) {
			// Receivers of its direct rings police the process with the QP numbers they
			// were last told it owns; until each has a list without this one, the number
			// stays reserved, so the process can pass off as nobody else's QP. Packets
			// to it still go to the process, which has no QP for them.
			x.mu.Lock()
			if x.quarantine == nil {
				x.quarantine = make(map[quarKey]uint64)
			}
			x.quarantine[quarKey{m.Dev, m.QPN}] = s.ownersVer.Load()
			x.mu.Unlock()
		} else {
			d.ReleaseQPN(m.QPN, x)
		}
		s.Invalidate()
		return &msg{OK: true}
	case opMcastAttach, opMcastDetach:
		d, e := x.device(m)
		if e != nil {
			return e
		}
		p := d.Port(int(m.Port))
		gid, err := parseGID(m.GID)
		if p == nil || err != nil {
			return fail(m.Op, syscall.EINVAL, "bad port %d or GID %q", m.Port, m.GID)
		}
		if !x.ownsQPN(m.Dev, m.QPN) {
			return fail(m.Op, syscall.EINVAL, "QP %#x is not this process's", m.QPN)
		}
		k := mcastKey{m.Dev, m.Port, gid, m.QPN}
		if m.Op == opMcastDetach {
			p.DetachRemote(gid, m.QPN, x)
			x.mu.Lock()
			delete(x.mcast, k)
			x.mu.Unlock()
			return &msg{OK: true}
		}
		x.mu.Lock()
		_, had := x.mcast[k]
		n := len(x.mcast)
		x.mu.Unlock()
		if !had && n >= maxMcast {
			return fail(m.Op, syscall.ENOMEM, "the process has %d multicast attachments, its limit", n)
		}
		if err := p.AttachRemote(gid, m.QPN, x); err != nil {
			return fail(m.Op, syscall.ENOMEM, "%v", err)
		}
		x.mu.Lock()
		x.mcast[k] = struct{}{}
		x.mu.Unlock()
		return &msg{OK: true}
	case opListen, opUnlisten:
		if _, e := x.device(m); e != nil {
			return e
		}
		return x.listen(m)
	case opAddr, opDevices, opSource:
		h := s.Host
		if h == nil {
			return fail(m.Op, syscall.ENODEV, "the daemon has no IPoIB interfaces for rdma_cm")
		}
		switch m.Op {
		case opAddr:
			a, err := netip.ParseAddr(m.Addr)
			if err != nil {
				return fail(m.Op, syscall.EINVAL, "bad address %q", m.Addr)
			}
			d, err := h.LocalDevice(a)
			if err != nil {
				return errMsg(m.Op, err)
			}
			return &msg{OK: true, Ports: []portRef{x.ref(d)}}
		case opDevices:
			r := &msg{OK: true}
			for _, d := range h.Devices() {
				r.Ports = append(r.Ports, x.ref(d))
			}
			return r
		default:
			a, err := netip.ParseAddr(m.Addr)
			if err != nil {
				return fail(m.Op, syscall.EINVAL, "bad address %q", m.Addr)
			}
			src, err := h.Source(a)
			if err != nil {
				return errMsg(m.Op, err)
			}
			return &msg{OK: true, Addr: src.String()}
		}
	}
	return fail(m.Op, syscall.EOPNOTSUPP, "unknown request %q", m.Op)
}

func (x *session) ref(d rdmacm.Device) portRef {
	return portRef{Dev: x.srv.devIndex(d.Port.Device()), Port: d.Port.Num(), PKey: d.PKey}
}

// hostDevice finds the rdma_cm device of the daemon for a port reference.
func (x *session) hostDevice(m *msg) (rdmacm.Device, error) {
	for _, d := range x.srv.Host.Devices() {
		if x.srv.devIndex(d.Port.Device()) == m.Dev && d.Port.Num() == m.Port && (m.PKey == 0 || d.PKey == m.PKey) {
			return d, nil
		}
	}
	return rdmacm.Device{}, &Error{Op: m.Op, Errno: syscall.ENODEV, Msg: fmt.Sprintf("no IPoIB interface on device %d port %d", m.Dev, m.Port)}
}

func (x *session) slow(m *msg) *msg {
	h := x.srv.Host
	if h == nil {
		return fail(m.Op, syscall.ENODEV, "the daemon has no IPoIB interfaces for rdma_cm")
	}
	ctx, cancel := context.WithTimeout(x.ctx, 30*time.Second)
	defer cancel()
	switch m.Op {
	case opNeighbor:
		src, err1 := netip.ParseAddr(m.Addr)
		dst, err2 := netip.ParseAddr(m.Addr2)
		if err1 != nil || err2 != nil {
			return fail(m.Op, syscall.EINVAL, "bad addresses %q, %q", m.Addr, m.Addr2)
		}
		if m.WaitMS > 0 { // the caller's timeout, not the daemon's 30 s
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(m.WaitMS)*time.Millisecond)
			defer cancel()
		}
		gid, err := h.Neighbor(ctx, src, dst)
		if err != nil {
			return errMsg(m.Op, err)
		}
		return &msg{OK: true, GID: gidString(gid)}
	case opPath:
		d, err := x.hostDevice(m)
		if err != nil {
			return errMsg(m.Op, err)
		}
		dgid, err := parseGID(m.GID)
		if err != nil {
			return fail(m.Op, syscall.EINVAL, "%v", err)
		}
		p, err := h.PathRecord(ctx, d, dgid)
		if err != nil {
			return errMsg(m.Op, err)
		}
		return &msg{OK: true, Path: &p}
	case opJoin, opLeave:
		return x.joinLeave(ctx, h, m)
	}
	return nil
}

// errMsg turns an error into a refusal, keeping its errno if it has one.
func errMsg(op string, err error) *msg {
	e := syscall.EIO
	var en syscall.Errno
	if errors.As(err, &en) {
		e = en
	} else if errors.Is(err, context.DeadlineExceeded) {
		e = syscall.ETIMEDOUT
	}
	return &msg{Op: op, Errno: int(e), Err: err.Error()}
}
