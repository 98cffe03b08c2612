package attach

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/trace"
)

// Debugging requests the daemon sends to an attached process (`pibgw inspect`,
// `pibgw inject`): the process owns its verbs objects, so only it can list them or put
// them in error. They travel on the control socket the other way round: the daemon's
// message carries Req (its own request number) instead of ID, and the process answers
// with the same Req. A long answer comes in several messages, each but the last with
// More set, so that none exceeds maxMsg.
const (
	opInspect  = "inspect"
	opInject   = "inject"
	opPitfalls = "pitfalls"
)

// chunkBytes bounds the objects of one inspect answer message (below maxMsg, leaving
// room for the envelope).
const chunkBytes = maxMsg - 4096

// debugCalls are a session's requests to its process awaiting answers.
type debugCalls struct {
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan *msg
	dropped atomic.Uint64 // answers dropped because their asker's channel was full
}

// ask sends m to the process and returns its answers (one, or the run that ended with
// More false).
func (x *session) ask(ctx context.Context, m *msg, fds ...int) ([]*msg, error) {
	ch := make(chan *msg, 4)
	x.dbg.mu.Lock()
	x.dbg.next++
	m.Req = x.dbg.next
	if x.dbg.pending == nil {
		x.dbg.pending = make(map[uint64]chan *msg)
	}
	x.dbg.pending[m.Req] = ch
	x.dbg.mu.Unlock()
	defer func() {
		x.dbg.mu.Lock()
		delete(x.dbg.pending, m.Req)
		x.dbg.mu.Unlock()
	}()
	if err := x.write(m, fds...); err != nil {
		return nil, fmt.Errorf("process %d: %w", x.pid, err)
	}
	var out []*msg
	// take adds an answer; done when it was the last.
	take := func(r *msg) (done bool, err error) {
		if !r.OK {
			return true, &Error{Op: m.Op, Errno: syscall.Errno(r.Errno), Msg: fmt.Sprintf("process %d: %s", x.pid, r.Err)}
		}
		out = append(out, r)
		return !r.More, nil
	}
	for {
		select {
		case r := <-ch:
			if done, err := take(r); done {
				return out, err
			}
		case <-x.ctx.Done():
			// The process went; its answers, read before the session ended, may still
			// wait in ch (a process may exit right after answering: an injected error).
			for {
				select {
				case r := <-ch:
					if done, err := take(r); done {
						return out, err
					}
				default:
					return nil, fmt.Errorf("process %d detached", x.pid)
				}
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("process %d did not answer %s: %w", x.pid, m.Op, ctx.Err())
		}
	}
}

// answered hands an answer from the process to the ask waiting for it (a late answer to
// an ask that gave up is dropped).
func (x *session) answered(m *msg) {
	x.dbg.mu.Lock()
	ch := x.dbg.pending[m.Req]
	x.dbg.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	default:
		// Never block the session's reader: a trace follower that fell behind loses
		// answers (and says so); an ask reads as fast as they come.
		x.dbg.dropped.Add(1)
	}
}

func (s *Server) sessionsOf(pid int) []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*session
	for _, x := range s.sessions {
		if pid == 0 || x.pid == pid {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b *session) int { return int(a.id) - int(b.id) })
	return out
}

// Inspect lists the verbs objects of kind ("" for all) that attached processes own: the
// one with pid, or all (pid 0). The processes are asked at once, each bounded by ctx. For
// one pid, a process that does not answer in time is an error; for all, the answers of
// the others come back with a *PartialError that names the silent ones, so one stuck
// process does not hide everyone's objects.
func (s *Server) Inspect(ctx context.Context, pid int, kind string) ([]hca.ObjectInfo, error) {
	sess := s.sessionsOf(pid)
	if pid != 0 && len(sess) == 0 {
		return nil, fmt.Errorf("no attached process %d (see pibgw ps)", pid)
	}
	objs := make([][]hca.ObjectInfo, len(sess))
	errs := make([]error, len(sess))
	var wg sync.WaitGroup
	for i, x := range sess {
		wg.Go(func() { objs[i], errs[i] = x.inspect(ctx, kind) })
	}
	wg.Wait()
	out := []hca.ObjectInfo{}
	var missing []error
	for i := range sess {
		if errs[i] != nil {
			if pid != 0 {
				return nil, errs[i]
			}
			missing = append(missing, errs[i])
			continue
		}
		out = append(out, objs[i]...)
	}
	if missing != nil {
		return out, &PartialError{Errs: missing}
	}
	return out, nil
}

// inspect asks the process for its objects of kind.
func (x *session) inspect(ctx context.Context, kind string) ([]hca.ObjectInfo, error) {
	rs, err := x.ask(ctx, &msg{Op: opInspect, Kind: kind})
	if err != nil {
		return nil, err
	}
	var out []hca.ObjectInfo
	for _, r := range rs {
		for _, raw := range r.Objects {
			var oi hca.ObjectInfo
			if err := json.Unmarshal(raw, &oi); err != nil {
				return nil, fmt.Errorf("process %d: bad object: %w", x.pid, err)
			}
			oi.Owner, oi.PID = strconv.Itoa(x.pid), x.pid
			out = append(out, oi)
		}
	}
	return out, nil
}

// PartialError is the answer of a request to every attached process when some of them
// failed it: Errs, one per process, say which and why; the result holds the others'.
type PartialError struct{ Errs []error }

func (e *PartialError) Error() string { return errors.Join(e.Errs...).Error() }

func (e *PartialError) Unwrap() []error { return e.Errs }

// OwnerOfQPN returns the pid of the attached process that owns QP number qpn on device
// dev, or 0.
func (s *Server) OwnerOfQPN(dev int, qpn uint32) int {
	for _, x := range s.sessionsOf(0) {
		if x.ownsQPN(dev, qpn) {
			return x.pid
		}
	}
	return 0
}

// Inject asks the attached process pid to inject an error into one of its objects
// (pibgw inject): kind hca.KindQP with the QPN, hca.KindCQ or hca.KindSRQ with the
// object id, on device dev.
func (s *Server) Inject(ctx context.Context, pid, dev int, kind string, id uint32) error {
	sess := s.sessionsOf(pid)
	if pid == 0 || len(sess) == 0 {
		return fmt.Errorf("no attached process %d (see pibgw ps)", pid)
	}
	_, err := sess[0].ask(ctx, &msg{Op: opInject, Dev: dev, Kind: kind, Obj: id})
	return err
}

// serveDaemon answers a request the daemon sent (readLoop runs it on its own goroutine).
func (s *Session) serveDaemon(m *msg) {
	var replies []*msg
	switch m.Op {
	case opTrace:
		s.serveTrace(m)
		return
	case opTraceStop:
		s.stopTrace(m.Req)
		return
	case opTraceMark:
		trace.Mark(m.Addr)
		return
	case opPitfalls:
		counts := map[string]uint64{}
		for _, d := range s.devs {
			for k, v := range d.PitfallCounts() {
				counts[k] += v
			}
		}
		replies = []*msg{{OK: true, Counts: counts}}
	case opInspect:
		rs, err := s.inspect(m.Kind)
		if err != nil {
			replies = []*msg{{Errno: int(syscall.EINVAL), Err: err.Error()}}
		} else {
			replies = rs
		}
	case opInject:
		do, err := s.injection(m.Dev, m.Kind, m.Obj)
		if err != nil {
			replies = []*msg{{Errno: int(syscall.ENOENT), Err: err.Error()}}
			break
		}
		// Answer first: a program may exit on the error it sees (rping does), before an
		// answer sent after could leave.
		s.answer(m.Req, &msg{OK: true})
		do()
		return
	default:
		replies = []*msg{{Errno: int(syscall.EOPNOTSUPP), Err: fmt.Sprintf("unknown request %q", m.Op)}}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, r := range replies {
		r.Req = m.Req
		if err := s.c.write(r); err != nil {
			return
		}
	}
}

// inspect snapshots this process's objects into answer messages of at most chunkBytes
// of objects each.
func (s *Session) inspect(kind string) ([]*msg, error) {
	var objs []json.RawMessage
	for _, d := range s.devs {
		oi, err := d.Inspect(kind)
		if err != nil {
			return nil, err
		}
		for i := range oi {
			b, err := json.Marshal(&oi[i])
			if err != nil {
				return nil, err
			}
			objs = append(objs, b)
		}
	}
	out := []*msg{{OK: true}}
	size := 0
	for _, b := range objs {
		last := out[len(out)-1]
		if size+len(b) > chunkBytes && len(last.Objects) > 0 {
			last.More = true
			last = &msg{OK: true}
			out = append(out, last)
			size = 0
		}
		last.Objects = append(last.Objects, b)
		size += len(b) + 1
	}
	return out, nil
}

// injection finds the object to inject an error into and returns the injection.
func (s *Session) injection(dev int, kind string, id uint32) (func(), error) {
	if dev < 0 || dev >= len(s.devs) {
		return nil, fmt.Errorf("no device %d", dev)
	}
	d := s.devs[dev]
	switch kind {
	case hca.KindQP:
		if qp := d.LookupLocalQP(id); qp != nil {
			return qp.InjectFatal, nil
		}
		return nil, fmt.Errorf("%s has no QP %#x", d.Name(), id)
	case hca.KindCQ:
		if cq := d.LookupCQ(id); cq != nil {
			return cq.InjectError, nil
		}
		return nil, fmt.Errorf("%s has no CQ %d", d.Name(), id)
	case hca.KindSRQ:
		if srq := d.LookupSRQ(id); srq != nil {
			return srq.InjectError, nil
		}
		return nil, fmt.Errorf("%s has no SRQ %d", d.Name(), id)
	}
	return nil, fmt.Errorf("cannot inject into a %q (qp, cq or srq)", kind)
}

// PitfallCounts sums the pitfall checks that fired in attached processes, by name: those
// processes reported (manner.go), the ones that have since exited too.
func (s *Server) PitfallCounts(ctx context.Context) (map[string]uint64, error) {
	out := make(map[string]uint64, hca.NumPitfalls)
	for i := range s.pitfalls {
		out[hca.Pitfall(i).String()] = s.pitfalls[i].Load()
	}
	return out, nil
}
