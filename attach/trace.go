package attach

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/trace"
)

// Tracing attached processes (`pibgw trace`): each process records into its own ring
// (package trace); while someone traces, the daemon asks every process — those attached
// later too — to follow its ring, and the process sends the records that pass the filter
// as answers with More set, until the daemon sends trace_stop with the same Req.
const (
	opTrace     = "trace"
	opTraceStop = "trace_stop"
	opTraceMark = "trace_mark"
)

// traceSub is one `pibgw trace` following attached processes.
type traceSub struct {
	ctx    context.Context
	pid    int // 0: every process
	filter trace.Filter
	fn     func([]trace.Record)
}

// Trace hands fn the trace records of the attached process pid (0: every process, and
// every one that attaches before ctx ends), filtered by f, until ctx ends. fn runs on one
// goroutine per process.
func (s *Server) Trace(ctx context.Context, pid int, f trace.Filter, fn func([]trace.Record)) {
	sub := &traceSub{ctx: ctx, pid: pid, filter: f, fn: fn}
	s.mu.Lock()
	if s.traces == nil {
		s.traces = make(map[*traceSub]bool)
	}
	s.traces[sub] = true
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.traces, sub)
		s.mu.Unlock()
	})
	for _, x := range s.sessionsOf(pid) {
		go x.follow(sub)
	}
}

// startTraces makes a process that just attached follow the traces running.
func (s *Server) startTraces(x *session) {
	if !s.tracing(x.pid) {
		return
	}
	s.mu.Lock()
	var subs []*traceSub
	for sub := range s.traces {
		if sub.pid == 0 || sub.pid == x.pid {
			subs = append(subs, sub)
		}
	}
	s.mu.Unlock()
	for _, sub := range subs {
		go x.follow(sub)
	}
}

// tracing reports whether a trace follows process pid.
func (s *Server) tracing(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.traces {
		if sub.pid == 0 || sub.pid == pid {
			return true
		}
	}
	return false
}

// Mark puts a bookmark into every attached process's trace.
func (s *Server) Mark(text string) {
	for _, x := range s.sessionsOf(0) {
		x.dbg.mu.Lock()
		x.dbg.next++
		req := x.dbg.next
		x.dbg.mu.Unlock()
		x.write(&msg{Op: opTraceMark, Req: req, Addr: text}) // its answer finds no asker and is dropped
	}
}

// traceAnswers is how many answer messages of one trace stream may wait for the
// daemon's follower; more are dropped and reported as lost.
const traceAnswers = 256

// follow runs sub's stream from this process until sub or the session ends.
func (x *session) follow(sub *traceSub) {
	ch := make(chan *msg, traceAnswers)
	x.dbg.mu.Lock()
	x.dbg.next++
	req := x.dbg.next
	if x.dbg.pending == nil {
		x.dbg.pending = make(map[uint64]chan *msg)
	}
	x.dbg.pending[req] = ch
	x.dbg.mu.Unlock()
	defer func() {
		x.dbg.mu.Lock()
		delete(x.dbg.pending, req)
		x.dbg.mu.Unlock()
	}()
	kinds := ""
	for i, k := range sub.filter.Kinds {
		if i > 0 {
			kinds += ","
		}
		kinds += k.String()
	}
	if err := x.write(&msg{Op: opTrace, Req: req, Obj: sub.filter.QPN, LIDFilter: sub.filter.LID, Kind: kinds}); err != nil {
		return
	}
	owner := strconv.Itoa(x.pid)
	var seenDropped uint64
	pass := func(r *msg) bool {
		if !r.OK {
			x.srv.log.Warn("attach: trace of a process", "pid", x.pid, "err", r.Err)
			return false
		}
		recs := make([]trace.Record, 0, len(r.Objects)+1)
		if d := x.dbg.dropped.Load(); d > seenDropped {
			recs = append(recs, trace.LostRecord(owner, x.pid, 0))
			recs[0].Text = "trace answers dropped: the daemon fell behind the process"
			seenDropped = d
		}
		for _, raw := range r.Objects {
			var rec trace.Record
			if json.Unmarshal(raw, &rec) == nil {
				rec.Owner, rec.PID = owner, x.pid
				recs = append(recs, rec)
			}
		}
		sub.fn(recs)
		return true
	}
	for {
		select {
		case r := <-ch:
			if !pass(r) {
				return
			}
		case <-sub.ctx.Done():
			x.write(&msg{Op: opTraceStop, Req: req})
			return
		case <-x.ctx.Done():
			// The process detached: its last answers (sent as it closed) were read
			// before the session ended; pass them on.
			for {
				select {
				case r := <-ch:
					if !pass(r) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// processTraces are the trace streams a process runs for the daemon, by Req.
type processTraces struct {
	mu      sync.Mutex
	running map[uint64]context.CancelFunc
	wg      sync.WaitGroup
	// Attached while someone traced: recording started at hello, from sequence number
	// early, so that the first stream has the program's first events too; early's
	// Enable is released when that stream starts.
	early   uint64
	release func()
}

// startEarly starts recording as the session attaches (the hello said a trace runs).
func (t *processTraces) startEarly(clk clock.Clock) {
	release := trace.Enable()
	t.mu.Lock()
	t.early, t.release = trace.Next(), release
	t.mu.Unlock()
	// Should no stream come (the trace ended meanwhile), stop recording after a while.
	clk.AfterFunc(5*time.Second, func() {
		_, release := t.takeEarly()
		release()
	})
}

// takeEarly returns where the first stream starts (0: now) and releases the early
// recording once the caller recorded itself.
func (t *processTraces) takeEarly() (from uint64, release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	from, release = t.early, t.release
	t.early, t.release = 0, nil
	if release == nil {
		release = func() {}
	}
	return from, release
}

// stopAll ends the streams after they sent what was recorded (Close: a program's last
// events are in the trace too), waiting at most a second.
func (t *processTraces) stopAll() {
	t.mu.Lock()
	for _, cancel := range t.running {
		cancel()
	}
	t.mu.Unlock()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// serveTrace follows this process's ring for the daemon's trace request m, sending the
// records as answers, until trace_stop or the session ends.
func (s *Session) serveTrace(m *msg) {
	kinds, err := trace.ParseKinds(m.Kind)
	if err != nil {
		s.answer(m.Req, &msg{Errno: int(syscall.EINVAL), Err: err.Error()})
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.traces.wg.Add(1)
	defer s.traces.wg.Done()
	s.traces.mu.Lock()
	if s.traces.running == nil {
		s.traces.running = make(map[uint64]context.CancelFunc)
	}
	s.traces.running[m.Req] = cancel
	s.traces.mu.Unlock()
	defer func() {
		s.traces.mu.Lock()
		delete(s.traces.running, m.Req)
		s.traces.mu.Unlock()
	}()
	f := trace.Filter{QPN: m.Obj, LID: m.LIDFilter, Kinds: kinds}
	from, release := s.traces.takeEarly()
	first := true
	trace.Follow(ctx, from, f, "", 0, func(recs []trace.Record) error {
		if first {
			first = false
			release() // Follow records now
		}
		var objs []json.RawMessage
		size := 0
		send := func() error {
			if len(objs) == 0 {
				return nil
			}
			err := s.answer(m.Req, &msg{OK: true, More: true, Objects: objs})
			objs, size = nil, 0
			return err
		}
		for i := range recs {
			b, err := json.Marshal(&recs[i])
			if err != nil {
				continue
			}
			if size+len(b) > chunkBytes {
				if err := send(); err != nil {
					return err
				}
			}
			objs = append(objs, b)
			size += len(b) + 1
		}
		return send()
	})
}

func (s *Session) stopTrace(req uint64) {
	s.traces.mu.Lock()
	cancel := s.traces.running[req]
	s.traces.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// answer sends one answer to the daemon's request req.
func (s *Session) answer(req uint64, r *msg) error {
	r.Req = req
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.c.write(r)
}
