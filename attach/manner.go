package attach

import (
	"os"
	"sync"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// Pitfall warnings of an attached process (hca's pitfall checks, `pibgw manner`): its
// mirror devices make the checks, and a library does not write into its program's
// output, so each warning goes to the daemon, which logs it with the process's pid; the
// process's own trace ring has it for `pibgw trace`, and the daemon counts it for `pibgw
// manner` (PitfallCounts), after the process has gone too. With PIBGW_MANNER_STDERR=1 the process's log
// (the C library's: standard error) has it too.
const (
	opPitfall = "pitfall" // process → daemon, one way (ID 0): a pitfall check fired

	// MannerStderrEnv, set to 1, also writes an attached process's pitfall warnings to
	// its own log (the C library's standard error).
	MannerStderrEnv = "PIBGW_MANNER_STDERR"
)

// mannerStderr reports whether the process asked for its pitfall warnings on its log.
func mannerStderr() bool {
	v := os.Getenv(MannerStderrEnv)
	return v != "" && v != "0"
}

// pitfallReporter is device dev's reporter: one message to the daemon per warning,
// written at once (no reply awaited), so that the warnings of a process about to exit —
// a QP destroyed with sends outstanding — are in the daemon's socket before it goes.
func (s *Session) pitfallReporter(dev int, toLog bool) hca.PitfallReporter {
	return func(p hca.Pitfall, obj, detail string) {
		if toLog {
			s.log.Warn("pitfall: "+obj+": "+detail, "pitfall", p.String(), "object", obj, "rule", p.Rule())
		}
		s.mu.Lock()
		gone := s.closed || s.err != nil
		s.mu.Unlock()
		if gone {
			return
		}
		s.wmu.Lock()
		s.c.write(&msg{Op: opPitfall, Dev: dev, Kind: p.String(), Object: obj, Detail: detail})
		s.wmu.Unlock()
	}
}

// pitfallsPerSecond bounds the warnings the daemon logs for one process: a check made
// on packets can fire for each; those over the bound are counted and the next one logged
// says how many were left out.
const pitfallsPerSecond = 20

// pitfallLimit is a session's count of logged warnings in the current second.
type pitfallLimit struct {
	mu      sync.Mutex
	second  int64
	n       int
	dropped uint64
}

// take reports whether a warning may be logged now, and how many were left out before it.
func (l *pitfallLimit) take(now time.Time) (ok bool, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sec := now.Unix(); sec != l.second {
		l.second, l.n = sec, 0
	}
	if l.n >= pitfallsPerSecond {
		l.dropped++
		return false, 0
	}
	l.n++
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}

// maxPitfallText bounds the object and detail of a pitfall message the daemon logs.
const maxPitfallText = 512

// pitfall logs a pitfall warning process x sent.
func (x *session) pitfall(m *msg) {
	p, ok := hca.PitfallByName(m.Kind)
	if !ok || m.Dev < 0 || m.Dev >= len(x.srv.Devices) {
		return
	}
	x.srv.pitfalls[p].Add(1)
	ok, dropped := x.warns.take(time.Now())
	if !ok {
		return
	}
	obj, detail := clip(m.Object, maxPitfallText), clip(m.Detail, maxPitfallText)
	args := []any{"pid", x.pid, "dev", x.srv.Devices[m.Dev].Name(), "pitfall", p.String(), "object", obj, "rule", p.Rule()}
	if dropped > 0 {
		args = append(args, "left_out", dropped)
	}
	x.srv.log.Warn("pitfall: "+obj+": "+detail, args...)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
