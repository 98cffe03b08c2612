package ipoib

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/pibgw/pibgw/clock"
)

// The neighbour table's timers (solicitation retransmissions, FAILED entries' expiry) share
// one clock timer per interface, with the armed entries in a heap by due time. A scan of
// unresolvable addresses arms a timer for each of up to MaxNeighbors entries within
// milliseconds; a timer each would fire them together, a goroutine each (clock.AfterFunc),
// queued on the table's lock and each growing a stack to send its solicitation — tens of MB
// at once. Here one goroutine handles the due entries in turn (Linux too runs its
// neighbour timers one after another, from softirq). The heap holds each armed entry once,
// so it is bounded by the table.

// neighTimers is the table's timer heap; guarded by neighTable.mu.
type neighTimers struct {
	due   neighHeap
	timer clock.Timer // fires at next; nil until first armed
	next  time.Time   // when timer fires; zero when it is stopped
}

// neighHeap orders armed neighbours by due time; each knows its index (heapIdx, -1 when
// not armed).
type neighHeap []*neighbor

func (h neighHeap) Len() int           { return len(h) }
func (h neighHeap) Less(a, b int) bool { return h[a].due.Before(h[b].due) }
func (h neighHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].heapIdx, h[b].heapIdx = a, b
}
func (h *neighHeap) Push(x any) {
	n := x.(*neighbor)
	n.heapIdx = len(*h)
	*h = append(*h, n)
}
func (h *neighHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.heapIdx = -1
	return n
}

// armNeighTimer (under nb.mu) arms n's timer to fire d from now, replacing an armed one.
func (i *Interface) armNeighTimer(n *neighbor, d time.Duration) {
	t := &i.nb.timers
	n.due = i.clk.Now().Add(d)
	if n.heapIdx >= 0 {
		heap.Fix(&t.due, n.heapIdx)
	} else {
		heap.Push(&t.due, n)
	}
	if t.next.IsZero() || n.due.Before(t.next) {
		t.next = n.due
		if t.timer == nil {
			t.timer = i.clk.AfterFunc(d, i.neighTimersFire)
		} else {
			t.timer.Reset(d)
		}
	}
}

// stop (under nb.mu) disarms n's timer. The clock timer may then fire early
// for nothing; it re-arms for the next entry.
func (t *neighTimers) stop(n *neighbor) {
	if n.heapIdx >= 0 {
		heap.Remove(&t.due, n.heapIdx)
	}
}

// stopAll (under nb.mu) disarms every entry and the clock timer (the interface closes).
func (t *neighTimers) stopAll() {
	for _, n := range t.due {
		n.heapIdx = -1
	}
	t.due = nil
	if t.timer != nil {
		t.timer.Stop()
	}
	t.next = time.Time{}
}

// neighTimersFire runs the due entries' timeouts in turn and re-arms for the next.
func (i *Interface) neighTimersFire() {
	if !i.enterCallback() {
		return
	}
	defer i.wg.Done()
	now := i.clk.Now()
	var due []netip.Addr
	i.nb.mu.Lock()
	t := &i.nb.timers
	t.next = time.Time{}
	for t.due.Len() > 0 && !t.due[0].due.After(now) {
		due = append(due, heap.Pop(&t.due).(*neighbor).ip)
	}
	if t.due.Len() > 0 {
		t.next = t.due[0].due
		t.timer.Reset(t.next.Sub(now))
	}
	i.nb.mu.Unlock()
	for _, ip := range due {
		i.resolveTimeout(ip)
	}
}
