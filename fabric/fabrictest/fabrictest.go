// Package fabrictest holds in-memory fakes for tests of code that uses the fabric seam:
// a Recorder port that keeps copies of what it receives, a Sink port that only counts,
// and builders of small valid packets.
package fabrictest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/fabric"
)

// Recorder is a fabric.Port that records a copy of every packet it receives. It can also
// transmit on the link it is attached to.
type Recorder struct {
	mu      sync.Mutex
	pkts    [][]byte
	link    fabric.Link
	up      bool
	changed chan struct{} // closed and replaced on every Receive
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{changed: make(chan struct{})} }

// Receive implements fabric.Receiver: it copies pkts.
func (r *Recorder) Receive(pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	r.mu.Lock()
	for _, p := range pkts {
		r.pkts = append(r.pkts, append([]byte(nil), p...))
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Attach implements fabric.Port.
func (r *Recorder) Attach(l fabric.Link) {
	r.mu.Lock()
	r.link = l
	r.mu.Unlock()
}

// LinkStateChanged implements fabric.LinkStateReceiver.
func (r *Recorder) LinkStateChanged(up bool) {
	r.mu.Lock()
	r.up = up
	r.mu.Unlock()
}

// LinkUp reports the last link state the cable announced.
func (r *Recorder) LinkUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

// Send transmits pkts on the attached link; it reports false when none is attached.
func (r *Recorder) Send(pkts ...[]byte) bool {
	r.mu.Lock()
	l := r.link
	r.mu.Unlock()
	if l == nil {
		return false
	}
	l.Send(pkts)
	return true
}

// Len returns the number of packets recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pkts)
}

// Packets returns the packets recorded so far, in arrival order.
func (r *Recorder) Packets() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.pkts...)
}

// Take returns the packets recorded so far and forgets them.
func (r *Recorder) Take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pkts
	r.pkts = nil
	return p
}

// Reset forgets the recorded packets.
func (r *Recorder) Reset() { r.Take() }

// Changed returns a channel that is closed at the next Receive.
func (r *Recorder) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Wait blocks until at least n packets are recorded or ctx is done, and returns the
// first n packets. It wakes on each Receive; it never polls.
func (r *Recorder) Wait(ctx context.Context, n int) ([][]byte, error) {
	for {
		r.mu.Lock()
		if len(r.pkts) >= n {
			p := append([][]byte(nil), r.pkts[:n]...)
			r.mu.Unlock()
			return p, nil
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Sink is a fabric.Port that counts what it receives and keeps nothing: the cheapest
// far end, for benchmarks.
type Sink struct {
	Packets atomic.Uint64
	Bytes   atomic.Uint64
	link    atomic.Pointer[linkBox]
}

type linkBox struct{ l fabric.Link }

// Receive implements fabric.Receiver.
func (s *Sink) Receive(pkts [][]byte) {
	var n int
	for _, p := range pkts {
		n += len(p)
	}
	s.Packets.Add(uint64(len(pkts)))
	s.Bytes.Add(uint64(n))
}

// Attach implements fabric.Port.
func (s *Sink) Attach(l fabric.Link) {
	if l == nil {
		s.link.Store(nil)
		return
	}
	s.link.Store(&linkBox{l})
}

// Link returns the attached link, or nil.
func (s *Sink) Link() fabric.Link {
	if b := s.link.Load(); b != nil {
		return b.l
	}
	return nil
}
