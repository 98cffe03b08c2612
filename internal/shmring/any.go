package shmring

import (
	"context"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A consumer of several rings (the attach channel's receiving process: one ring from the
// daemon and one from each process that sends to it directly) sleeps on all their
// doorbells at once.

// WaitAny returns when one of rs holds a record that nobody has taken yet (its index, nil),
// when one of them is closed (its index, ErrClosed), when ctx ends (-1 and ctx's error)
// or after a wake-up (-1, nil; Wake's, or one that found nothing). It re-checks spin times
// (yielding now and then), then sets every ring's "asleep" flag, looks again and blocks
// in poll(2) on all their data doorbells. ctx's end rings rs[0]'s doorbell, as does
// Wake: a caller whose set of rings changed calls Wake on rs[0] to be woken. lost reports
// that the spin was cut short because a yield lost the processor (yieldLost): the caller
// had better spin less for a while, its thread competing with one that does not give the
// processor back.
func WaitAny(ctx context.Context, spin int, rs []*Ring) (i int, lost bool, err error) {
	for i, r := range rs {
		if !r.enter() {
			for _, q := range rs[:i] {
				q.exit()
			}
			return i, false, ErrClosed
		}
	}
	defer func() {
		for _, r := range rs {
			r.exit()
		}
	}()
	check := func() (int, error) {
		for i, r := range rs {
			// The shared tail, not ctail: a TryRead may be moving it on another goroutine.
			if r.head.Load() != r.tail.Load() {
				return i, nil
			}
			if r.closed.Load() || r.shClosed.Load() != 0 {
				return i, ErrClosed
			}
		}
		return -1, nil
	}
	var pfds []unix.PollFd
	for it := 0; ; it++ {
		if i, err := check(); i >= 0 {
			return i, lost, err
		}
		if it < spin {
			if spinPause(it) {
				lost, spin = true, it // sleep from now on
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return -1, lost, err
		}
		for _, r := range rs {
			r.consSleep.Store(1)
		}
		if i, err := check(); i >= 0 {
			for _, r := range rs {
				r.consSleep.Store(0)
			}
			return i, lost, err
		}
		if pfds == nil {
			pfds = make([]unix.PollFd, len(rs))
			for i, r := range rs {
				pfds[i] = unix.PollFd{Fd: int32(r.bell[bellData]), Events: unix.POLLIN}
			}
		}
		if err := pollAll(ctx, rs[0], pfds); err != nil {
			return -1, lost, err
		}
		// Woken: the caller looks at the rings (and at its set of rings) again.
		if i, err := check(); i >= 0 {
			return i, lost, err
		}
		return -1, lost, ctx.Err()
	}
}

// pollAll blocks until one of pfds is readable, reads (resets) the readable ones, and
// returns; ctx's end rings first's data doorbell.
func pollAll(ctx context.Context, first *Ring, pfds []unix.PollFd) error {
	timeout := -1
	if ctx.Done() != nil {
		timeout = pollBackstop
		stop := context.AfterFunc(ctx, func() {
			if first.enter() {
				first.ring(bellData)
				first.exit()
			}
		})
		defer stop()
	}
	for {
		for i := range pfds {
			pfds[i].Revents = 0
		}
		n, err := unix.Poll(pfds, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return err
		}
		var buf [8]byte
		for _, p := range pfds {
			if p.Revents != 0 {
				unix.Read(int(p.Fd), buf[:])
			}
		}
		return nil
	}
}

// Wake rings the ring's data doorbell from the consumer's own process: a goroutine
// sleeping in Wait, Read or WaitAny on it wakes and looks again (WaitAny's caller, to
// take in a ring added to its set).
func (r *Ring) Wake() {
	if r.enter() {
		r.ring(bellData)
		r.exit()
	}
}

// Statistics words: NumStats counters in the header page that the ring itself never uses
// — the first half beside the producer's words, for the producer to count what it wrote,
// the second beside the consumer's. Either side's process may write any of them: they
// are reports, never trusted for the ring's own work.
const NumStats = 64

const (
	offProdStats = 512
	offConsStats = 1024
)

// AddStat adds n to statistics word i (below NumStats/2: the producer's, from there the
// consumer's); after Close it does nothing.
func (r *Ring) AddStat(i int, n uint64) {
	if r.enter() {
		r.stat(i).Add(n)
		r.exit()
	}
}

// LoadStat reads statistics word i; 0 after Close.
func (r *Ring) LoadStat(i int) uint64 {
	if !r.enter() {
		return 0
	}
	defer r.exit()
	return r.stat(i).Load()
}

func (r *Ring) stat(i int) *atomic.Uint64 {
	i &= NumStats - 1
	off := offProdStats + 8*i
	if i >= NumStats/2 {
		off = offConsStats + 8*(i-NumStats/2)
	}
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}
