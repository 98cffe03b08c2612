package attach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/shmring"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/ud"
	"github.com/pibgw/pibgw/wire"
)

// Session is a process's attachment to a running daemon: the daemon's devices as this
// process sees them. Verbs on them work as on in-process devices.
type Session struct {
	c      conn
	id     uint32
	pid    int // the daemon's
	devs   []*hca.Device
	log    *slog.Logger
	clk    clock.Clock
	ctx    context.Context
	cancel context.CancelFunc

	tx   *shmring.Ring // this process writes (txMu)
	rx   *shmring.Ring // the daemon writes; rxMu serialises the takers
	txMu sync.Mutex
	rxMu sync.Mutex
	// idlePolls (rxMu) counts the empty CQ polls in a row.
	idlePolls int
	// quickYields counts pollRx's yields in a row that came straight back.
	quickYields atomic.Int32
	// lastPoll is when the program last polled a CQ of this session (nanotime).
	lastPoll atomic.Int64
	// grace is how long after the program's last poll the receive goroutine leaves the
	// rings to it (ns): pollGrace while the program keeps polling, less, down to none,
	// when it stops polling without waiting on an event (adaptGrace).
	grace atomic.Int64
	// waiting counts the session's armed CQs (hca.Waiter); rxKick wakes the receive
	// goroutine from its grace wait when one is armed (kickRx).
	waiting atomic.Int32
	// spinAt is when a thread waiting for a completion event last polled (SpinPoll).
	spinAt atomic.Int64
	rxKick chan struct{}

	nextReq atomic.Uint64
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[uint64]chan *msg
	closed  bool
	done    chan struct{} // closed when the control reader ends
	err     error         // why it ended

	cmMu sync.Mutex
	cms  map[*hca.Port]*ibcm.CM

	traces processTraces // trace streams for the daemon (trace.go)

	direct directState // rings to and from other processes (directc.go)

	wg sync.WaitGroup
}

// Options configures Dial. The zero value is valid.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
}

// SocketPath returns the attach socket to use for path: path itself, else
// $PIBGW_ATTACH, else DefaultPath.
func SocketPath(path string) string {
	if path != "" {
		return path
	}
	if p := os.Getenv("PIBGW_ATTACH"); p != "" {
		return p
	}
	return DefaultPath
}

// Dial attaches to the daemon serving path ("" is SocketPath's default) and returns its
// devices as mirrors in this process.
func Dial(ctx context.Context, path string, o *Options) (*Session, error) {
	if o == nil {
		o = &Options{}
	}
	path = SocketPath(path)
	nc, err := dialSocket(ctx, path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("attach: no pibgw daemon at %s (start one with `pibgw up`, or set PIBGW_ATTACH): %w", path, err)
		}
		return nil, fmt.Errorf("attach: %s: %w", path, err)
	}
	s := &Session{c: conn{nc.(*net.UnixConn)}, log: o.Logger, clk: o.Clock,
		pending: make(map[uint64]chan *msg), done: make(chan struct{}), rxKick: make(chan struct{}, 1), cms: make(map[*hca.Port]*ibcm.CM)}
	s.grace.Store(int64(pollGrace))
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.hello(ctx); err != nil {
		s.c.c.Close()
		s.cancel()
		return nil, err
	}
	s.wg.Add(3)
	go s.readLoop()
	go s.rxLoop()
	go s.reportDrops()
	return s, nil
}

// busyDialFor bounds how long dialSocket retries a full accept queue when ctx has no
// deadline of its own.
const busyDialFor = 10 * time.Second

// dialSocket connects to the attach socket. A connect refused with EAGAIN means the
// socket's accept queue is full — the daemon is working through a burst of connections,
// perhaps another user's flood — which passes: it is retried, 1 ms apart doubling to
// 50 ms, until ctx ends or busyDialFor has passed (opening /dev/infiniband/uverbs0 has
// no such failure, so neither may attaching).
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	end := time.Now().Add(busyDialFor)
	if dl, ok := ctx.Deadline(); ok {
		end = dl
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		nc, err := d.DialContext(ctx, "unixpacket", path)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().Add(wait).After(end) {
			return nc, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

func (s *Session) hello(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		s.c.c.SetDeadline(dl)
		defer s.c.c.SetDeadline(time.Time{})
	}
	if err := s.c.write(&msg{ID: 1, Op: opHello, Version: Version}); err != nil {
		return fmt.Errorf("attach: hello: %w", err)
	}
	buf, oob := make([]byte, maxMsg), make([]byte, 256)
	m, fds, err := s.c.read(buf, oob)
	if err != nil {
		return fmt.Errorf("attach: hello: %w", err)
	}
	if !m.OK {
		closeAll(fds)
		return &Error{Op: opHello, Errno: syscall.Errno(m.Errno), Msg: m.Err}
	}
	if len(fds) != 7 {
		closeAll(fds)
		return fmt.Errorf("attach: hello: %d descriptors, want 7", len(fds))
	}
	if err := s.initDirect(fds[6]); err != nil {
		closeAll(fds[:6])
		return err
	}
	if s.tx, err = shmring.Open(fds[0], fds[1], fds[2]); err != nil {
		closeAll(fds[3:])
		return fmt.Errorf("attach: ring: %w", err)
	}
	if s.rx, err = shmring.Open(fds[3], fds[4], fds[5]); err != nil {
		s.tx.Close()
		return fmt.Errorf("attach: ring: %w", err)
	}
	s.id, s.pid = m.Session, m.PID
	if m.Trace {
		s.traces.startEarly(s.clk)
	}
	for i, di := range m.Devices {
		d, err := s.mirror(i, di)
		if err != nil {
			return err
		}
		if m.Manner != nil {
			d.SetManner(*m.Manner)
		}
		d.SetPitfallReporter(s.pitfallReporter(i, mannerStderr()))
		s.devs = append(s.devs, d)
	}
	s.initStats()
	return nil
}

// mirror builds this process's copy of daemon device i.
func (s *Session) mirror(i int, di deviceInfo) (*hca.Device, error) {
	d, err := hca.NewDevice(hca.Config{
		Name: di.Name, NodeGUID: di.NodeGUID, SysImageGUID: di.SysImageGUID, NumPorts: len(di.Ports),
		FWVer: di.FWVer, VendorID: di.VendorID, VendorPartID: di.VendorPartID, HWVer: di.HWVer,
		NodeDesc: di.NodeDesc, MaxMTU: di.MaxMTU, Clock: s.clk, Logger: s.log,
		Remote: remoteDev{s, i},
	})
	if err != nil {
		return nil, fmt.Errorf("attach: device %s: %w", di.Name, err)
	}
	ud.Register(d)
	rc.Register(d)
	if len(di.PKeys) != len(di.Ports) {
		return nil, fmt.Errorf("attach: device %s: %d P_Key tables for %d ports", di.Name, len(di.PKeys), len(di.Ports))
	}
	for k, p := range d.Ports() {
		p.Attach(portLink{s, tag(i, p.Num())})
		p.Mirror(di.Ports[k], di.PKeys[k])
	}
	return d, nil
}

// Devices are the daemon's devices, as mirrors in this process (ibv_get_device_list).
func (s *Session) Devices() []*hca.Device { return s.devs }

// Device returns the device called name, or nil.
func (s *Session) Device(name string) *hca.Device {
	for _, d := range s.devs {
		if d.Name() == name {
			return d
		}
	}
	return nil
}

// ID is the session's number at the daemon (pibgw ps).
func (s *Session) ID() uint32 { return s.id }

// DaemonPID is the daemon's process ID.
func (s *Session) DaemonPID() int { return s.pid }

// Done is closed when the channel to the daemon is gone (Close, or the daemon exited);
// Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended, nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close detaches: the daemon frees this process's QP numbers, groups and listeners.
// Objects made on the devices stop working.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cmMu.Lock()
	cms := s.cms
	s.cms = map[*hca.Port]*ibcm.CM{}
	s.cmMu.Unlock()
	for _, cm := range cms {
		cm.Close()
	}
	s.traces.stopAll() // the trace streams send what was recorded until now
	s.cancel()
	s.kickRx()
	s.c.c.Close()
	s.wg.Wait()
	s.txMu.Lock()
	s.tx.Close()
	s.txMu.Unlock()
	s.rx.Close()
	s.closeDirect()
	return nil
}

// readLoop reads replies and events from the control socket.
func (s *Session) readLoop() {
	defer s.wg.Done()
	buf, oob := make([]byte, maxMsg), make([]byte, 256)
	var err error
	for {
		var m *msg
		var fds []int
		m, fds, err = s.c.read(buf, oob)
		if err != nil {
			break
		}
		if m.Req != 0 && m.Op == opDirectIn {
			m.fds = fds
			s.directIn(m) // at once: the daemon waits for it before the sender may write
			continue
		}
		if m.Req != 0 {
			closeAll(fds)
			go s.serveDaemon(m)
			continue
		}
		if m.ID == 0 {
			closeAll(fds)
			s.event(m)
			continue
		}
		s.mu.Lock()
		ch := s.pending[m.ID]
		delete(s.pending, m.ID)
		s.mu.Unlock()
		if ch != nil {
			m.fds = fds
			ch <- m
		} else {
			closeAll(fds)
		}
	}
	s.mu.Lock()
	if !s.closed {
		s.err = fmt.Errorf("attach: the daemon closed the channel: %w", err)
		s.log.Warn("attach: channel to the daemon lost", "err", err)
	} else {
		s.err = net.ErrClosed
	}
	pend := s.pending
	s.pending = map[uint64]chan *msg{}
	s.mu.Unlock()
	for _, ch := range pend {
		close(ch)
	}
	s.cancel()
	// Without the daemon the ports are down, as if their cables were pulled.
	for _, d := range s.devs {
		for _, p := range d.Ports() {
			p.LinkStateChanged(false)
		}
	}
	close(s.done)
}

func (s *Session) event(m *msg) {
	if m.Op != opPort || m.Attr == nil || m.PKeys == nil || m.Dev < 0 || m.Dev >= len(s.devs) {
		return
	}
	if p := s.devs[m.Dev].Port(int(m.Port)); p != nil {
		p.Mirror(*m.Attr, *m.PKeys)
	}
}

// rxLoop hands the packets the daemon writes into the ring to the mirror ports when
// nobody polls for them (completion handlers, events, programs that sleep on a channel).
func (s *Session) rxLoop() {
	defer s.wg.Done()
	var grace *time.Timer
	var rings []*shmring.Ring
	var shortUntil int64 // spin rxShortSpin until then (nanotime)
	var lostRun int      // waits in a row whose spin lost the processor
	for {
		if s.polling() {
			// The program polls its CQs and takes the packets in itself: stay off the
			// CPUs it and the daemon need, and look again in a while. Not waiting on the
			// ring keeps its doorbell quiet: the daemon rings it only for a sleeper, and
			// each ring would wake this goroutine's thread for nothing.
			g := time.Duration(s.grace.Load())
			if grace == nil {
				grace = time.NewTimer(g)
			} else {
				grace.Reset(g)
			}
			start := nanotime()
			select {
			case <-s.ctx.Done():
				return
			case <-grace.C:
				rings = s.rxRings(rings)
				s.adaptGrace(start, g, rings)
			case <-s.rxKick:
			}
			continue
		}
		rings = s.rxRings(rings)
		spin := rxSpin
		if nanotime() < shortUntil {
			spin = rxShortSpin
		}
		i, lost, err := shmring.WaitAny(s.ctx, spin, rings)
		if err != nil && i <= 0 {
			return // a closed direct ring (i > 0) is forgotten by takeAll
		}
		if !lost {
			lostRun = 0
		} else if lostRun++; lostRun >= rxLostRun {
			shortUntil = nanotime() + int64(rxShortFor)
		}
		if s.polling() {
			continue
		}
		s.rxMu.Lock()
		_, err = s.takeAll()
		s.rxMu.Unlock()
		if err != nil {
			return
		}
	}
}

// pollRx is the mirror devices' Remote.Poll: an empty CQ poll takes in what the daemon
// sent, unless the receive goroutine is at it already.
func (s *Session) pollRx() bool {
	s.lastPoll.Store(nanotime())
	if !s.rxMu.TryLock() {
		return false
	}
	got, _ := s.takeAll()
	idle := 0
	if !got {
		idle = s.idlePolls + 1
	}
	s.idlePolls = idle
	s.rxMu.Unlock()
	if idle == regainPolls && s.grace.Load() < int64(minGrace) {
		s.grace.Store(int64(minGrace)) // polling in a loop again: adaptGrace takes it from here
	}
	if idle&pollOSYield == 0 && idle != 0 && (s.quickYields.Load() < quickYieldRun || idle&pollOSYieldQuiet == 0) {
		// A program that polls an empty CQ in a loop (perftest, the pingpongs) holds its
		// processor; on a machine with fewer processors than busy processes the daemon,
		// which brings what it waits for, may be queued behind it. Where the yields
		// come straight back (nothing else wanted the processor) they are only a system
		// call's cost: after quickYieldRun of those in a row, yield 8 times less often
		// until one does not come straight back.
		t := nanotime()
		shmring.OSYield()
		if nanotime()-t < int64(quickYield) {
			if s.quickYields.Load() < quickYieldRun {
				s.quickYields.Add(1)
			}
		} else {
			s.quickYields.Store(0)
		}
	}
	return got
}

// A yield that returns within quickYield gave the processor to nobody; after
// quickYieldRun of them in a row pollRx yields every pollOSYieldQuiet+1 empty polls
// instead of every pollOSYield+1 (a system call costs 1.3-1.9 us on the virtual machines
// of development: two yields were a third of a 4 KiB ping-pong's round trip).
const (
	quickYield       = 5 * time.Microsecond
	quickYieldRun    = 8
	pollOSYieldQuiet = 63
)

// pollOSYield is how many empty polls in a row (a mask) pass between two yields of the
// processor to other processes. Measured with perftest and attach's benchmarks
// (alternating runs, loaded two cores): every 32 polls left ib_send_lat at 11–17 µs
// typical, every 8 at 7–8 µs with the same bandwidth; every 2 or 4 gave ib_send_lat 5 µs
// but halved BenchmarkRDMAWrite64K (its writer, 16 writes in flight, polls an empty CQ
// most of the time).
const pollOSYield = 7

// deliver hands a run of packets for one port to it.
func (s *Session) deliver(t, flags uint16, pkts [][]byte) {
	dev, pn := untag(t)
	if dev >= len(s.devs) {
		return
	}
	if p := s.devs[dev].Port(int(pn)); p != nil {
		p.ReceiveFrom(pkts, flags&flagLoopback != 0)
	}
}

// call sends a request and waits for its reply.
func (s *Session) call(ctx context.Context, m *msg) (*msg, error) {
	m.ID = s.nextReq.Add(1) + 1 // 1 was the hello
	ch := make(chan *msg, 1)
	s.mu.Lock()
	if s.closed || s.err != nil {
		s.mu.Unlock()
		return nil, &Error{Op: m.Op, Errno: syscall.ENODEV, Msg: "not attached to a daemon any more"}
	}
	s.pending[m.ID] = ch
	s.mu.Unlock()
	s.wmu.Lock()
	err := s.c.write(m)
	s.wmu.Unlock()
	if err != nil {
		s.mu.Lock()
		delete(s.pending, m.ID)
		s.mu.Unlock()
		return nil, &Error{Op: m.Op, Errno: syscall.ENODEV, Msg: err.Error()}
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, &Error{Op: m.Op, Errno: syscall.ENODEV, Msg: "the daemon closed the channel"}
		}
		if !r.OK {
			e := syscall.Errno(r.Errno)
			if e == 0 {
				e = syscall.EIO
			}
			return nil, &Error{Op: m.Op, Errno: e, Msg: r.Err}
		}
		return r, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, m.ID)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// portLink is a mirror port's link: its packets go into the ring to the daemon. When
// the ring is full the sender waits for the daemon, as a port waits for link credits.
type portLink struct {
	s   *Session
	tag uint16
}

func (l portLink) Send(pkts [][]byte) {
	s := l.s
	s.txMu.Lock()
	s.send(l.tag, pkts)
	s.txMu.Unlock()
}

// remoteDev is hca.Remote for a mirror device: QP numbers and groups at the daemon.
type remoteDev struct {
	s   *Session
	dev int
}

func (r remoteDev) AllocQPN() (uint32, error) {
	m, err := r.s.call(context.Background(), &msg{Op: opAllocQPN, Dev: r.dev})
	if err != nil {
		return 0, err
	}
	return m.QPN, nil
}

func (r remoteDev) FreeQPN(qpn uint32) {
	r.s.call(context.Background(), &msg{Op: opFreeQPN, Dev: r.dev, QPN: qpn})
}

func (r remoteDev) AttachMcast(port uint8, gid wire.GID, qpn uint32) error {
	_, err := r.s.call(context.Background(), &msg{Op: opMcastAttach, Dev: r.dev, Port: port, GID: gidString(gid), QPN: qpn})
	return err
}

func (r remoteDev) Poll() bool { return r.s.pollRx() }

func (r remoteDev) DetachMcast(port uint8, gid wire.GID, qpn uint32) {
	r.s.call(context.Background(), &msg{Op: opMcastDetach, Dev: r.dev, Port: port, GID: gidString(gid), QPN: qpn})
}

// CM returns the CM of a mirror port, started the first time: its comm IDs carry this
// session's prefix so that the daemon routes their MADs here, and its listens are
// registered with the daemon.
func (s *Session) CM(p *hca.Port) *ibcm.CM {
	s.cmMu.Lock()
	defer s.cmMu.Unlock()
	if cm := s.cms[p]; cm != nil {
		return cm
	}
	dev := -1
	for i, d := range s.devs {
		if d == p.Device() {
			dev = i
		}
	}
	cm := ibcm.New(ibcm.HCAPort(p), ibcm.Options{Clock: s.clk, Logger: s.log, IDPrefix: s.id,
		OnListen: func(sid, mask uint64, listen bool) error {
			op := opListen
			if !listen {
				op = opUnlisten
			}
			_, err := s.call(context.Background(), &msg{Op: op, Dev: dev, Port: p.Num(), SID: sid, Mask: mask})
			return err
		}})
	s.cms[p] = cm
	return cm
}

// polling reports whether the program polled a CQ within its grace and waits for no CQ
// event: a program blocked on a completion channel depends on the receive goroutine.
func (s *Session) polling() bool {
	now := nanotime()
	return (s.waiting.Load() <= 0 || now-s.spinAt.Load() < s.grace.Load()) && now-s.lastPoll.Load() < s.grace.Load()
}

// SpinPoll is hca.Spinner: a thread about to wait for a completion event (ibv_get_cq_event)
// takes in what the rings hold, as a polling program does, and the receive goroutine keeps
// off the rings meanwhile, as it does for such a program — though a CQ is armed.
func (r remoteDev) SpinPoll() bool {
	s := r.s
	s.spinAt.Store(nanotime())
	return s.pollRx()
}

// SpinEnd is hca.Spinner: the spinning thread is about to block; the receive goroutine
// takes the rings back at once.
func (r remoteDev) SpinEnd() {
	s := r.s
	s.spinAt.Store(0)
	s.kickRx()
}

// Settle is hca.Spinner: it returns once no goroutine is taking packets in (rxMu), so
// that everything the batch that raised an event sends — its ACKs — is on its way.
func (r remoteDev) Settle() {
	r.s.rxMu.Lock()
	r.s.rxMu.Unlock()
}

// kickRx ends the receive goroutine's grace wait: it looks at whether the program still
// polls at once.
func (s *Session) kickRx() {
	select {
	case s.rxKick <- struct{}{}:
	default:
	}
}

// Arm is hca.Waiter: a CQ was armed, its program is about to wait for the event. The
// receive goroutine stops leaving the rings to the program's polls at once, rather than
// after pollGrace: rping and every program built on completion channels wait for each
// completion so.
func (r remoteDev) Arm() {
	s := r.s
	s.waiting.Add(1)
	if nanotime()-s.spinAt.Load() < s.grace.Load() {
		// A thread that waits for its events spinning (SpinPoll) arms its CQ between
		// two waits: it takes its packets in itself, and SpinEnd kicks the receive
		// goroutine if it stops.
		return
	}
	s.kickRx()
}

// Disarm is hca.Waiter: the CQ raised its event (or was destroyed armed).
func (r remoteDev) Disarm() { r.s.waiting.Add(-1) }

// pollGrace is the longest a receive goroutine leaves the rings to a program after its
// last CQ poll (the grace of a program that keeps polling).
const pollGrace = 200 * time.Microsecond

// adaptGrace adjusts the grace after a wait of g that started at start ran out. A program
// that polled meanwhile is in a poll loop: the grace doubles back towards pollGrace —
// unless a request waits in the rings that its polls would never ask for (takeSilent).
// One that did not poll at all stopped polling without arming a CQ — it waits for
// something else, typically a flag in its memory that the peer's RDMA WRITE sets
// (ib_write_lat, and RDMA programs that spin on a buffer): packets for it would wait out
// the grace (the two waits of a round trip took ib_write_lat from 5 to 540 µs), so the
// grace halves, and below minGrace it is none, the receive goroutine then waiting on the
// rings as for a program that polls nothing. regainPolls empty polls in a row bring back
// minGrace.
//
// ib_write_lat does both in every round trip: it polls its CQ for its own write's
// completion, then spins on its memory for the peer's write. Once the grace had grown
// to pollGrace (each window held one of those polls) it stayed there, and every write
// waited out a grace — which a Go timer under 1 ms often oversleeps to the millisecond
// of the network poller's wait — 440–530 µs typical in some runs.
func (s *Session) adaptGrace(start int64, g time.Duration, rings []*shmring.Ring) {
	if s.lastPoll.Load() > start && !s.takeSilent(rings) {
		s.grace.Store(int64(min(2*max(g, minGrace), pollGrace)))
		return
	}
	if g /= 2; g < minGrace {
		g = 0
	}
	s.grace.Store(int64(g))
}

// takeSilent takes in what the rings hold when one of their packets is a request the
// program will not poll for — it completes nothing at this end (silentRequest) — and
// reports whether it did. A program that polled during the grace and left such a packet
// waiting at its end waits for it some other way, on its memory.
func (s *Session) takeSilent(rings []*shmring.Ring) bool {
	if !s.rxMu.TryLock() {
		return false // the program is polling, and taking packets in itself
	}
	defer s.rxMu.Unlock()
	for _, r := range rings {
		if found, _ := r.Peek(silentRecord); found {
			s.takeAll()
			return true
		}
	}
	return false
}

// silentRecord is Peek's test: the record is a packet with silentRequest's opcode.
func silentRecord(_ uint16, pkt []byte) bool {
	op, ok := wire.PacketOpcode(pkt)
	return ok && silentRequest(op)
}

// silentRequest reports whether op is a request its responder carries out without a
// completion (IBA 9.7.5.1, 9.4.3–9.4.5): an RDMA WRITE packet other than one with
// immediate data (which consumes a receive WQE), an RDMA READ request, an atomic — on RC,
// UC (writes only) or XRC.
func silentRequest(op wire.Opcode) bool {
	switch op.Transport() {
	case wire.TransportRC, wire.TransportUC, wire.TransportXRC:
	default:
		return false
	}
	switch op & 0x1f {
	case wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly,
		wire.RCRDMAReadRequest, wire.RCCompareSwap, wire.RCFetchAdd:
		return true
	}
	return false
}

// minGrace is the shortest grace; regainPolls the empty polls in a row that restore it.
const (
	minGrace    = 10 * time.Microsecond
	regainPolls = 32
)

var epoch = time.Now()

// nanotime is a monotonic clock reading.
func nanotime() int64 { return int64(time.Since(epoch)) }

// rxSpin is how many times the receive goroutine re-checks the ring before it sleeps,
// when the program is not polling: a passive process (an RDMA WRITE target polls
// nothing) then takes a burst in without a wake-up per packet.
var rxSpin = 5000

// After rxLostRun waits in a row whose spin lost the processor to a thread that did not
// give it back (a program spinning on its memory, shmring's yieldLost), the receive
// goroutine spins only rxShortSpin checks — the ones before a spin starts to yield — for
// rxShortFor, and otherwise sleeps on the doorbells, so that a record's writer wakes it.
// UC ib_write_lat (both programs spin on their buffers, neither polls) went from 1.5–1.8
// ms typical to tens of µs; RC ib_write_lat, whose programs poll their CQs and yield,
// keeps the long spin that catches its reply.
const (
	rxShortSpin = 256
	rxShortFor  = 100 * time.Millisecond
	rxLostRun   = 3
)
