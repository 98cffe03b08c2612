package attach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// Server serves the attach socket: it gives attached processes the daemon's devices,
// QP numbers, multicast membership and CM routing, moves their packets between their
// rings and the daemon's ports, and polices what they send.
type Server struct {
	// Devices are the daemon's HCAs, in the order processes see them.
	Devices []*hca.Device
	// Host answers address and route resolution for rdma_cm in attached processes (the
	// daemon's IPoIB interfaces); nil refuses them with ENODEV.
	Host rdmacm.Host
	// Logger; nil is slog.Default().
	Logger *slog.Logger
	// Observed reports whether something in the daemon's fabric observes or alters
	// packets between its ports (a capture, a fault, a trace): then attached processes
	// send everything through the daemon, none through direct rings (direct.go). Call
	// Invalidate when its answer may have changed. nil: always observed.
	Observed func() bool
	// Limits bound the connections and what each process may hold (limits.go); the
	// zero value is the defaults.
	Limits Limits

	log       *slog.Logger
	mu        sync.Mutex
	ln        *net.UnixListener
	closed    bool
	sessions  map[uint32]*session
	nextID    uint32
	listens   map[listenKey]*session
	claims    map[listenKey]*ibcm.ID // the listens' registrations in the daemon's CMs (sid.go)
	unwatch   []func()
	traces    map[*traceSub]bool // pibgw trace followers (trace.go)
	gen       *genPage           // direct rings' generation word (direct.go)
	directs   map[pairKey]*direct
	nextRing  uint64
	ownersVer atomic.Uint64 // versions of the QP number lists sent to receivers
	wg        sync.WaitGroup
	dropsDead atomic.Uint64
	adm       admission                      // connections by user, limits, refusals (limits.go)
	retry     control.AcceptRetry            // failing accepts (EMFILE …)
	done      chan struct{}                  // closed by Close
	pitfalls  [hca.NumPitfalls]atomic.Uint64 // attached processes' warnings (manner.go)
}

type listenKey struct {
	dev  int
	port uint8
	sid  uint64
}

// Listen creates the attach socket at path with the given permission bits (0666 lets any
// local user attach, as /dev/infiniband/uverbs* does; the daemon's policing makes that
// safe). A stale socket at path is replaced.
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("attach socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("attach socket %s: exists and is not a socket", path)
		}
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("attach socket %s: another daemon serves it", path)
		}
		os.Remove(path)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("attach socket %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("attach socket %s: %w", path, err)
	}
	return ln, nil
}

// Serve accepts processes on ln until Close. It installs the server's MAD router on
// every port of its devices.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.log = s.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ln = ln
	if s.done == nil {
		s.done = make(chan struct{})
	}
	var nofile syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	s.adm.lim = s.Limits.effective(nofile.Cur)
	s.adm.conns = make(map[*net.UnixConn]int)
	s.adm.perUser = make(map[int]int)
	if lim := s.adm.lim; s.Limits.MaxProcesses > lim.MaxProcesses {
		s.log.Warn("attach: fewer processes than configured: the descriptor limit allows no more",
			"max_processes", lim.MaxProcesses, "configured", s.Limits.MaxProcesses, "rlimit_nofile", nofile.Cur)
	}
	if s.gen == nil {
		g, err := newGenPage()
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.gen = g
	}
	s.sessions = make(map[uint32]*session)
	s.listens = make(map[listenKey]*session)
	s.claims = make(map[listenKey]*ibcm.ID)
	for di, d := range s.Devices {
		for _, p := range d.Ports() {
			p.SetMADRouter(cmRouter{s, di})
			p.SetCountersHook(s.foldAll) // direct rings' traffic (direct.go)
		}
		s.unwatch = append(s.unwatch, d.WatchPorts(func(port uint8) { s.portChanged(di, port) }))
	}
	s.mu.Unlock()
	s.retry.What, s.retry.Logger = "attach socket", s.log
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			// Out of descriptors (EMFILE, ENFILE) is a moment's trouble: wait and
			// accept again, as net/http does. It ended the loop, and the socket
			// answered no one any more.
			if s.retry.Failed(err, s.done) {
				continue
			}
			return err
		}
		s.retry.OK()
		s.accepted(c)
	}
}

// accepted admits a new connection within the limits and serves it.
func (s *Server) accepted(c *net.UnixConn) {
	pid, uid, err := peerCred(c)
	if err != nil {
		s.log.Warn("attach: peer credentials", "err", err)
		c.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	if err := s.admitLocked(c, uid); err != nil {
		s.mu.Unlock()
		s.refuse(c, pid, uid, err)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer s.leave(c)
		s.serveConn(c, pid, uid)
	}()
}

// Close stops accepting, ends every session (their processes see the channel close)
// and removes the MAD routers.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ln := s.ln
	conns := make([]*net.UnixConn, 0, len(s.adm.conns))
	for c := range s.adm.conns { // attached processes and those saying hello
		conns = append(conns, c)
	}
	unwatch := s.unwatch
	s.unwatch = nil
	if s.done != nil {
		close(s.done)
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	for _, f := range unwatch {
		f()
	}
	for _, d := range s.Devices {
		for _, p := range d.Ports() {
			p.SetMADRouter(nil)
			p.SetCountersHook(nil)
		}
	}
	s.mu.Lock()
	if s.gen != nil {
		s.gen.close()
		s.gen = nil
	}
	s.mu.Unlock()
	return nil
}

// SessionInfo describes an attached process (pibgw ps).
type SessionInfo struct {
	ID       uint32            `json:"id"`
	PID      int               `json:"pid"`
	UID      int               `json:"uid"`
	User     string            `json:"user"`
	Since    time.Time         `json:"since"`
	QPs      []string          `json:"qps"` // "pib_0:0x4a"
	Listens  int               `json:"listens"`
	Counters map[string]uint64 `json:"counters"`
}

// Sessions lists the attached processes.
func (s *Server) Sessions() []SessionInfo {
	s.foldAll()
	s.mu.Lock()
	sess := make([]*session, 0, len(s.sessions))
	for _, x := range s.sessions {
		sess = append(sess, x)
	}
	nl := map[*session]int{}
	for _, x := range s.listens {
		nl[x]++
	}
	s.mu.Unlock()
	var out []SessionInfo
	for _, x := range sess {
		out = append(out, x.info(nl[x]))
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return int(a.ID) - int(b.ID) })
	return out
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// serveConn runs one attached process's session until its socket closes.
func (s *Server) serveConn(c *net.UnixConn, pid, uid int) {
	defer c.Close()
	cc := conn{c}
	buf, oob := make([]byte, maxMsg), make([]byte, 256)
	// A connection that says nothing holds a descriptor: it has HelloTimeout to speak.
	c.SetReadDeadline(time.Now().Add(s.adm.lim.HelloTimeout))
	m, fds, err := cc.read(buf, oob)
	closeAll(fds)
	if err != nil || m.Op != opHello {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			s.mu.Lock()
			s.adm.stats.HelloTimeouts++
			s.mu.Unlock()
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	if m.Version != Version {
		cc.write(&msg{ID: m.ID, Errno: int(syscall.EPROTONOSUPPORT),
			Err: fmt.Sprintf("the daemon speaks attach protocol %d, this program %d: use a pibgw of the same version", Version, m.Version)})
		return
	}
	x, err := s.newSession(cc, pid, uid)
	if err != nil {
		cc.write(&msg{ID: m.ID, Errno: int(syscall.EAGAIN), Err: err.Error()})
		return
	}
	defer s.endSession(x)
	hello := &msg{ID: m.ID, OK: true, Version: Version, Session: x.id, PID: os.Getpid(), Trace: s.tracing(pid)}
	for _, d := range s.Devices {
		hello.Devices = append(hello.Devices, describe(d))
	}
	if len(s.Devices) > 0 {
		m := s.Devices[0].Manner()
		hello.Manner = &m
	}
	tm, td, ts := x.tx.Fds()
	rm, rd, rs := x.rx.Fds()
	if err := x.write(hello, tm, td, ts, rm, rd, rs, s.gen.fd); err != nil {
		return
	}
	s.log.Info("process attached", "pid", pid, "uid", uid, "session", x.id)
	x.start()
	s.startTraces(x)
	for {
		m, fds, err := cc.read(buf, oob)
		closeAll(fds)
		if err != nil {
			return
		}
		if m.Req != 0 {
			x.answered(m)
			continue
		}
		if m.ID == 0 {
			if m.Op == opPitfall {
				x.pitfall(m) // a notice: no answer
			}
			continue
		}
		x.handle(m)
	}
}

func (s *Server) newSession(c conn, pid, uid int) (*session, error) {
	x := &session{srv: s, c: c, pid: pid, uid: uid, since: time.Now(),
		qpns: make(map[int]map[uint32]struct{}), mcast: make(map[mcastKey]struct{}),
		joins: make(map[joinKey]rdmacm.Device), dirty: make(map[tagKey]struct{}), kick: make(chan struct{}, 1),
		txDone: make(chan struct{})}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	var err error
	if x.tx, err = newRing(); err != nil {
		return nil, err
	}
	if x.rx, err = newRing(); err != nil {
		x.tx.Close()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		x.close()
		return nil, net.ErrClosed
	}
	// Session IDs are the CM ID prefixes of the processes; 0 is the daemon's.
	const maxID = 1<<ibcm.IDPrefixBits - 1
	for range maxID {
		s.nextID = s.nextID%maxID + 1
		if s.sessions[s.nextID] == nil {
			x.id = s.nextID
			s.sessions[x.id] = x
			return x, nil
		}
	}
	x.close()
	return nil, fmt.Errorf("%d processes are attached already", maxID)
}

// endSession frees everything a process had when its socket closed.
func (s *Server) endSession(x *session) {
	x.cancel()
	if x.started {
		<-x.txDone
	}
	x.disconnectAll()
	s.mu.Lock()
	delete(s.sessions, x.id)
	claims := s.dropListensLocked(x)
	s.mu.Unlock()
	for _, c := range claims {
		c.Destroy()
	}
	x.release()
	s.dropDirects(x)
	s.log.Info("process detached", "pid", x.pid, "session", x.id)
}

func (s *Server) session(id uint32) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// portChanged pushes a port's new state to every attached process.
func (s *Server) portChanged(dev int, port uint8) {
	s.mu.Lock()
	sess := make([]*session, 0, len(s.sessions))
	for _, x := range s.sessions {
		sess = append(sess, x)
	}
	s.mu.Unlock()
	s.Invalidate()
	for _, x := range sess {
		x.markDirty(dev, port)
	}
}

func (s *Server) devIndex(d *hca.Device) int {
	for i, x := range s.Devices {
		if x == d {
			return i
		}
	}
	return -1
}

// cmRouter hands the CM MADs that belong to attached processes to them: REQs and
// SIDR_REQs for service IDs a process listens on, other messages by the prefix of the
// receiver's comm ID (ibcm.Options.IDPrefix). Everything else stays with the daemon.
type cmRouter struct {
	s   *Server
	dev int
}

func (r cmRouter) RouteMAD(p *hca.Port, pk *hca.Packet) bool {
	d, ok := ibcm.RouteOf(pk.Payload)
	if !ok {
		return false
	}
	s := r.s
	var x *session
	if d.Request {
		s.mu.Lock()
		x = s.listenerLocked(r.dev, p.Num(), d.ServiceID)
		s.mu.Unlock()
		if x == nil {
			return false
		}
	} else {
		prefix := ibcm.IDPrefixOf(d.CommID)
		if prefix == 0 {
			return false
		}
		if x = s.session(prefix); x == nil {
			// The process is gone; the daemon sent its peers a DREQ (cmtrack.go). A peer's
			// own DREQ — sent before ours reached it — gets its DREP, as from a kernel
			// whose CM no longer has the connection (cm_issue_drep): else it resends it
			// for a minute before it reports DISCONNECTED (perftest -R waits for that).
			s.dropsDead.Add(1)
			if wire.MAD(pk.Payload).AttrID() == wire.AttrCMDReq {
				_ = p.SendMAD(hca.MADAddr{DLID: pk.LRH.SLID(), SL: pk.LRH.SL(), QPN: pk.DETH.SrcQP(),
					QKey: hca.GSIQKey, PKeyIndex: pk.PKeyIndex}, ibcm.DRepFor(pk.Payload))
			}
			return true
		}
	}
	x.trackIn(p, pk)
	x.forward(p, pk.Raw, pk.Loopback)
	return true
}

// listenerLocked finds the session listening on sid at a port; s.mu held.
func (s *Server) listenerLocked(dev int, port uint8, sid uint64) *session {
	return s.listens[listenKey{dev, port, sid}]
}
