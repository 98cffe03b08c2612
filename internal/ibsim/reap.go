package ibsim

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Clients that vanish: a libumad2sim process that is killed sends no DISCONNECT, and a
// slot (its data socket, its reader's thread) is otherwise freed only when a MAD for it
// finds its socket gone. Any local user can attach (the abstract sockets have no
// permissions), so the server looks for such clients itself, every ReapInterval and
// whenever every slot is taken.

// refusalLogInterval is the least time between two warnings about refused control
// requests; the second counts those in between.
const refusalLogInterval = 10 * time.Second

// reapLoop reaps every ReapInterval, and writes the count of refusals not yet logged,
// until Close.
func (s *Server) reapLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case now := <-t.C:
			s.reap()
			if n := s.refusals.flush(now); n > 0 {
				s.log.Warn("ibsim control requests refused", "count", n)
			}
		}
	}
}

// reap detaches the clients whose data socket's address no longer exists and returns
// how many.
func (s *Server) reap() int {
	s.mu.RLock()
	var cls []*client
	for _, c := range s.slots {
		if c != nil && c.ready.Load() {
			cls = append(cls, c)
		}
	}
	s.mu.RUnlock()
	n := 0
	for _, c := range cls {
		if vanished(c.peer) {
			s.removeQuiet(c)
			n++
		}
	}
	if n > 0 {
		s.reaped.Add(uint64(n))
		s.log.Info("ibsim clients gone without DISCONNECT detached", "count", n)
	}
	return n
}

// vanished reports whether nothing is bound at the client's data address any more. Only
// a Unix socket tells: connecting to an abstract name nobody binds fails with
// ECONNREFUSED, and sends nothing to one that exists. (A UDP client is found gone at
// the first MAD for it, by the ICMP error.)
func vanished(peer unix.Sockaddr) bool {
	if _, ok := peer.(*unix.SockaddrUnix); !ok {
		return false
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, peer) == unix.ECONNREFUSED
}

// removeQuiet is remove without a log line per client (reap logs one for all).
func (s *Server) removeQuiet(c *client) {
	s.mu.Lock()
	if s.slots[c.id] != c {
		s.mu.Unlock()
		return
	}
	s.slots[c.id] = nil
	s.nclient--
	s.mu.Unlock()
	s.log.Debug("ibsim client detached", "client", c.id, "pid", c.pid, "why", "gone")
	s.detach(c)
	s.serveVendorClasses(c.ep)
}

// logLimiter lets one line through per interval and counts the rest.
type logLimiter struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	held  uint64 // events not logged since the last line
}

// allow reports whether an event at now may be logged, and how many were held back
// since the last line (which that line then accounts for).
func (l *logLimiter) allow(now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.held++
		return false, 0
	}
	n := l.held
	l.last, l.held = now, 0
	return true, n
}

// flush returns the events held back when the interval since the last line has passed,
// for a line of its own.
func (l *logLimiter) flush(now time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == 0 || now.Sub(l.last) < l.every {
		return 0
	}
	n := l.held
	l.last, l.held = now, 0
	return n
}
