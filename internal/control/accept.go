package control

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// AcceptRetry paces a listener's failing Accepts as net/http's Server.Serve does: an
// error such as EMFILE or ENFILE (the process or the system out of descriptors) is not
// the listener's end, so the loop sleeps — 5 ms, doubling to 1 s — and accepts again.
// Failures are counted and logged at most once every LogEvery, with the number since
// the last line: a flood of failures must not become a flood of log lines.
type AcceptRetry struct {
	// What names the socket in log lines ("control socket").
	What   string
	Logger *slog.Logger

	mu         sync.Mutex
	delay      time.Duration
	failures   uint64
	lastLog    time.Time
	suppressed uint64
}

// LogEvery is the least time between two log lines of one AcceptRetry.
const LogEvery = 10 * time.Second

const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// Failed handles a failed Accept: it reports false if the listener was closed (the loop
// ends), else it logs, sleeps and reports true (the loop accepts again). It returns
// early, false, when done is closed.
func (r *AcceptRetry) Failed(err error, done <-chan struct{}) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	r.mu.Lock()
	r.failures++
	if r.delay == 0 {
		r.delay = minAcceptDelay
	} else {
		r.delay = min(2*r.delay, maxAcceptDelay)
	}
	delay := r.delay
	now := time.Now()
	logIt := now.Sub(r.lastLog) >= LogEvery
	suppressed := r.suppressed
	if logIt {
		r.lastLog, r.suppressed = now, 0
	} else {
		r.suppressed++
	}
	r.mu.Unlock()
	if logIt && r.Logger != nil {
		r.Logger.Warn(r.What+": accept failed; retrying", "err", err, "retry_in", delay, "failures_not_logged", suppressed)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// OK notes a successful Accept: the next failure waits the shortest time again.
func (r *AcceptRetry) OK() {
	r.mu.Lock()
	r.delay = 0
	r.mu.Unlock()
}

// Failures counts the failed Accepts.
func (r *AcceptRetry) Failures() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}
