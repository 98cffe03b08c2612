package attach

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The attach socket is open to every local user (mode 0666 by default), so what one
// process — or one user with many — can hold of the daemon is bounded: connections
// (each a descriptor, and seven once attached), the time a connection may take to say
// hello, and each process's QP numbers, listens, multicast attachments and requests
// in flight. A
// refusal is the errno the kernel gives for the like (EAGAIN for too many processes,
// as fork under RLIMIT_NPROC; ENOMEM beyond a QP limit, as uverbs), and is counted.

// Limits bound what the processes attached through the socket may hold. The zero value
// of each field is its default.
type Limits struct {
	// MaxProcesses bounds the connections at once, attached or still to say hello
	// (default 1024). Serve lowers it to what the daemon's descriptor limit
	// (RLIMIT_NOFILE) allows after FDReserve.
	MaxProcesses int
	// MaxPerUser bounds the connections of one user, the uid of the peer's credentials
	// (SO_PEERCRED) (default 256).
	MaxPerUser int
	// HelloTimeout is how long a new connection may take to send its hello before the
	// daemon closes it (default 5 s).
	HelloTimeout time.Duration
	// MaxQPs bounds the QP numbers one process holds on one device (default 16384, an
	// eighth of the device's max_qp: no process can take the device's QPs from the
	// others or the daemon).
	MaxQPs int
}

// Defaults of Limits.
const (
	DefaultMaxProcesses = 1024
	DefaultMaxPerUser   = 256
	DefaultHelloTimeout = 5 * time.Second
	DefaultMaxQPs       = 16384
)

// Fixed per-process bounds: far above what a program uses, far below what would hurt.
const (
	// maxListens bounds a process's CM listens (service IDs).
	maxListens = 4096
	// maxMcast bounds a process's multicast attachments (QP, group), a quarter of a
	// port's groups (hca.MaxMcastGroups).
	maxMcast = 2048
	// maxSlow bounds a process's requests in flight that wait on the fabric (neighbour
	// resolution, path queries, joins: each holds a goroutine for up to 30 s).
	maxSlow = 256
)

// FDReserve is how many descriptors the attach server leaves to the rest of the daemon
// (the control socket and its captures, TUN devices, namespaces, log files) when it
// derives its connection limit from RLIMIT_NOFILE.
const FDReserve = 256

// fdsPerProcess is what an attached process costs the daemon in descriptors: its socket
// and its two rings' memory and doorbells (3 each).
const fdsPerProcess = 7

// RaiseFileLimit raises the process's soft RLIMIT_NOFILE to its hard limit, as the
// daemon does at start, and returns the new soft limit.
func RaiseFileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return 0, err
		}
	}
	return r.Cur, nil
}

// effective fills the defaults in and lowers MaxProcesses (and MaxPerUser with it) to
// what nofile descriptors allow.
func (l Limits) effective(nofile uint64) Limits {
	if l.MaxProcesses <= 0 {
		l.MaxProcesses = DefaultMaxProcesses
	}
	if l.MaxPerUser <= 0 {
		l.MaxPerUser = DefaultMaxPerUser
	}
	if l.HelloTimeout <= 0 {
		l.HelloTimeout = DefaultHelloTimeout
	}
	if l.MaxQPs <= 0 {
		l.MaxQPs = DefaultMaxQPs
	}
	if nofile > 0 {
		fit := 1
		if nofile > FDReserve+fdsPerProcess {
			fit = int(min((nofile-FDReserve)/fdsPerProcess, 1<<20))
		}
		l.MaxProcesses = min(l.MaxProcesses, fit)
	}
	l.MaxProcesses = min(l.MaxProcesses, maxSessions)
	l.MaxPerUser = min(l.MaxPerUser, l.MaxProcesses)
	return l
}

// maxSessions is how many processes can be attached at once: session IDs are CM ID
// prefixes (ibcm.IDPrefixBits), 0 being the daemon's.
const maxSessions = 1<<12 - 1

// Stats are the attach server's admission counters (control status).
type Stats struct {
	Connections   int    `json:"connections"`    // open now: attached or saying hello
	MaxProcesses  int    `json:"max_processes"`  // the limit in force
	MaxPerUser    int    `json:"max_per_user"`   // likewise, per user
	Refused       uint64 `json:"refused"`        // connections refused: MaxProcesses reached
	RefusedUser   uint64 `json:"refused_user"`   // refused: the user's MaxPerUser reached
	HelloTimeouts uint64 `json:"hello_timeouts"` // closed without a hello in HelloTimeout
	AcceptErrors  uint64 `json:"accept_errors"`  // failed accepts (EMFILE …), retried
}

// admission is the server's count of connections, per user and in all (Server.mu).
type admission struct {
	lim     Limits
	conns   map[*net.UnixConn]int // open connection → its user
	perUser map[int]int
	stats   Stats

	lingering atomic.Int32 // refused connections waiting for their hello

	logMu      sync.Mutex
	lastLog    time.Time
	suppressed uint64
}

// admit counts c of user uid in, or returns why it is refused; s.mu held.
func (s *Server) admitLocked(c *net.UnixConn, uid int) error {
	a := &s.adm
	if len(a.conns) >= a.lim.MaxProcesses {
		a.stats.Refused++
		return fmt.Errorf("the daemon serves %d connections, its limit (daemon.attach_max_processes)", len(a.conns))
	}
	if a.perUser[uid] >= a.lim.MaxPerUser {
		a.stats.RefusedUser++
		return fmt.Errorf("user %s has %d connections, the limit of one user (daemon.attach_max_per_user)", userName(uid), a.perUser[uid])
	}
	a.conns[c] = uid
	a.perUser[uid]++
	return nil
}

// leave counts c out.
func (s *Server) leave(c *net.UnixConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &s.adm
	uid, ok := a.conns[c]
	if !ok {
		return
	}
	delete(a.conns, c)
	if a.perUser[uid]--; a.perUser[uid] <= 0 {
		delete(a.perUser, uid)
	}
}

// refuse answers a connection over a limit with the reason and closes it. The answer
// goes out whatever the process sent: its hello is the first message it reads. Closed
// at once, the socket would fail the hello a process writes after connecting (EPIPE)
// before it reads the reason; so the daemon waits a moment for the hello — for up to
// maxLingering refusals at once, else it closes at once.
func (s *Server) refuse(c *net.UnixConn, pid, uid int, why error) {
	c.SetDeadline(time.Now().Add(lingerRefused))
	conn{c}.write(&msg{ID: 1, Errno: int(syscall.EAGAIN), Err: why.Error()})
	s.logLimited("attach: connection refused", "pid", pid, "uid", uid, "reason", why.Error())
	if s.adm.lingering.Add(1) > maxLingering {
		s.adm.lingering.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer s.adm.lingering.Add(-1)
		var b [1]byte
		c.Read(b[:]) // the hello (truncated), the peer's close, or the deadline
		c.Close()
	}()
}

// A refused connection waits up to lingerRefused for the process's hello; at most
// maxLingering wait at once.
const (
	lingerRefused = 200 * time.Millisecond
	maxLingering  = 64
)

// logLimited logs a warning at most once every 10 s, with the number left unlogged
// since: a flood of refusals must not become a flood of log lines.
func (s *Server) logLimited(text string, args ...any) {
	a := &s.adm
	a.logMu.Lock()
	now := time.Now()
	if now.Sub(a.lastLog) < 10*time.Second {
		a.suppressed++
		a.logMu.Unlock()
		return
	}
	n := a.suppressed
	a.lastLog, a.suppressed = now, 0
	a.logMu.Unlock()
	s.log.Warn(text, append(args, "not_logged_since", n)...)
}

// Stats returns the admission counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := s.adm.stats
	st.Connections = len(s.adm.conns)
	st.MaxProcesses, st.MaxPerUser = s.adm.lim.MaxProcesses, s.adm.lim.MaxPerUser
	s.mu.Unlock()
	st.AcceptErrors = s.retry.Failures()
	return st
}
