package shmring

import (
	"context"
)

// Two consumers in one process: a goroutine that sleeps until records arrive (Wait) and
// callers that take in what is there without waiting (TryRead) — the attach channel's
// receive goroutine and a CQ poll that drains the channel itself. The caller serialises
// TryRead calls (and Read) with its own lock; Wait only looks, so it may run beside them.

// TryRead delivers the records in the ring now, as Read does, without waiting; it reports
// whether there were any.
func (r *Ring) TryRead(max int, fn func(tag, flags uint16, pkts [][]byte)) (bool, error) {
	if !r.enter() {
		return false, ErrClosed
	}
	defer r.exit()
	if r.corrupt {
		return false, ErrCorrupt
	}
	if max < 1 {
		max = 1
	}
	head := r.head.Load()
	if head == r.ctail {
		if r.closed.Load() || r.shClosed.Load() != 0 {
			return false, ErrClosed
		}
		return false, nil
	}
	return true, r.deliver(head, max, fn)
}

// Wait returns when the ring holds a record that nobody has taken yet (nil), ctx ends,
// or the ring is closed (ErrClosed). It re-checks spin times (yielding now and then)
// before it sleeps on the data doorbell.
func (r *Ring) Wait(ctx context.Context, spin int) error {
	if !r.enter() {
		return ErrClosed
	}
	defer r.exit()
	for i := 0; ; i++ {
		// The shared tail, not ctail: a TryRead may be moving it on another goroutine.
		if r.head.Load() != r.tail.Load() {
			return nil
		}
		if r.closed.Load() || r.shClosed.Load() != 0 {
			return ErrClosed
		}
		if i < spin {
			spinPause(i)
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		r.consSleep.Store(1)
		if r.head.Load() != r.tail.Load() || r.shClosed.Load() != 0 || r.closed.Load() {
			r.consSleep.Store(0)
			continue
		}
		if err := r.sleep(ctx, bellData); err != nil {
			r.consSleep.Store(0)
			if r.closed.Load() {
				return ErrClosed
			}
			return err
		}
	}
}
