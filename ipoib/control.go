package ipoib

import "sync"

// jobQueue feeds the control loop: SA queries and joins, bring-up after events. It is
// unbounded so that the data path never blocks on it; what it holds is rare work.
type jobQueue struct {
	mu     sync.Mutex
	q      []func()
	notify chan struct{}
	closed bool
}

func (j *jobQueue) init() { j.notify = make(chan struct{}, 1) }

func (j *jobQueue) push(f func()) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	j.q = append(j.q, f)
	j.mu.Unlock()
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

func (j *jobQueue) close() {
	j.mu.Lock()
	j.closed = true
	j.q = nil
	j.mu.Unlock()
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// take returns the queued jobs, waiting for some; nil once closed.
func (j *jobQueue) take(buf []func()) []func() {
	for {
		j.mu.Lock()
		if j.closed {
			j.mu.Unlock()
			return nil
		}
		if len(j.q) > 0 {
			buf = append(buf[:0], j.q...)
			clear(j.q)
			j.q = j.q[:0]
			j.mu.Unlock()
			return buf
		}
		j.mu.Unlock()
		<-j.notify
	}
}

// controlLoop runs the jobs one at a time.
func (i *Interface) controlLoop() {
	defer i.wg.Done()
	var buf []func()
	for {
		buf = i.ctl.jobs.take(buf)
		if buf == nil {
			return
		}
		for k, f := range buf {
			if i.closed.Load() {
				break
			}
			f()
			buf[k] = nil
		}
	}
}
