package hca

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/trace"
)

// CompChannel is a completion event channel (ibv_comp_channel).
type CompChannel struct {
	ctx    *Context
	ch     chan *CQ
	notify atomic.Pointer[func(*CQ)]
}

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() *CompChannel {
	return &CompChannel{ctx: c, ch: make(chan *CQ, 4096)}
}

// Events delivers a CQ each time one of the channel's armed CQs gets a completion
// (ibv_get_cq_event); acknowledge with CQ.AckEvents.
func (ch *CompChannel) Events() <-chan *CQ { return ch.ch }

// Context is the context the channel was created on.
func (ch *CompChannel) Context() *Context { return ch.ctx }

// SetNotify has the channel's events go to fn instead of Events: fn runs on the goroutine
// that raised the event (the one delivering the completion), so that a waiter outside Go
// — a C program blocked in ibv_get_cq_event on the channel's fd — is signalled without a
// goroutine in between to be scheduled. fn must not block. nil goes back to Events.
func (ch *CompChannel) SetNotify(fn func(*CQ)) {
	if fn == nil {
		ch.notify.Store(nil)
		return
	}
	ch.notify.Store(&fn)
}

// Spin takes in what has arrived for the channel's device, as an empty CQ poll does (a
// mirror device's packets wait in the rings from the daemon and its peers), and reports
// whether anything was taken: a thread about to wait for an event calls it in a loop for
// a while first, so that the event it waits for is raised on its own thread rather than
// after two wake-ups (the receive goroutine's, then its own). SpinEnd ends the spin, before
// the thread blocks.
func (ch *CompChannel) Spin() bool {
	if sp, ok := ch.ctx.dev.cfg.Remote.(Spinner); ok {
		return sp.SpinPoll()
	}
	return false
}

// SpinEnd tells the device that the thread spinning in Spin is about to block.
func (ch *CompChannel) SpinEnd() {
	if sp, ok := ch.ctx.dev.cfg.Remote.(Spinner); ok {
		sp.SpinEnd()
	}
}

// Settle waits until the device has finished the batch of packets it is taking in, if any:
// an event is raised while its batch is still being handled (SetNotify), before the
// responder's ACKs for it have gone out, and a program that takes the event, finds its
// last completion and exits at once would take those ACKs with it — the peer's send
// then never completes (IBV_WC_RETRY_EXC_ERR). A program's thread calls it before it
// hands an event over.
func (ch *CompChannel) Settle() {
	if sp, ok := ch.ctx.dev.cfg.Remote.(Spinner); ok {
		sp.Settle()
	}
}

// Spinner is a Remote whose packets a thread waiting for a completion event takes in
// itself while it spins (CompChannel.Spin): SpinPoll is Poll for such a thread, SpinEnd
// hands the packets back to whoever takes them in for a program that sleeps.
type Spinner interface {
	SpinPoll() bool
	SpinEnd()
	Settle()
}

// CQ is a completion queue (ibv_cq).
type CQ struct {
	ctx  *Context
	id   uint32
	ch   *CompChannel
	refs atomic.Int32

	mu         sync.Mutex
	ring       []WC
	head, n    int
	armed      bool
	solOnly    bool
	overflowed bool
	stamps     bool         // SetTimestamps
	queued     atomic.Int32 // mirrors n, so an empty Poll takes no lock
	modCount   int          // event moderation (Moderate)
	modPeriod  time.Duration
	modPending bool
	modTimer   clock.Timer
	handler    atomic.Pointer[func(*CQ)]
	events     uint32 // delivered to the channel
	acked      uint32
	lost       uint64
}

// CreateCQ creates a CQ of at least cqe entries (ibv_create_cq).
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, errorf("create_cq", EINVAL, "cqe %d out of range 1..%d", cqe, MaxCQE)
	}
	if ch != nil && ch.ctx != c {
		return nil, errorf("create_cq", EINVAL, "completion channel of another context")
	}
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts.cq >= MaxCQ {
		return nil, errorf("create_cq", ENOMEM, "device has %d CQs (max_cq)", MaxCQ)
	}
	d.counts.cq++
	cq := &CQ{ctx: c, id: d.nextID(), ch: ch, ring: make([]WC, cqe)}
	d.register(cq)
	return cq, nil
}

// ID is the object id pibgw's inspection shows.
func (cq *CQ) ID() uint32 { return cq.id }

// Context is the context the CQ was created on.
func (cq *CQ) Context() *Context { return cq.ctx }

// SetTimestamps has the CQ stamp each completion with the device clock (WC.Timestamp) as it
// is made: a CQ created with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.
func (cq *CQ) SetTimestamps(on bool) {
	cq.mu.Lock()
	cq.stamps = on
	cq.mu.Unlock()
}

// CQE is the CQ's capacity.
func (cq *CQ) CQE() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return len(cq.ring)
}

// Poll moves up to len(wcs) completions into wcs and returns how many (ibv_poll_cq).
func (cq *CQ) Poll(wcs []WC) int {
	// A consumer spinning on an empty CQ must not contend with the producers' lock.
	if cq.queued.Load() == 0 {
		// A mirror device's packets wait in the channel from the daemon: an empty poll
		// takes them in itself, as a driver's poll_cq reads the hardware's queue, instead
		// of waiting for the channel's goroutine to be scheduled.
		r := cq.ctx.dev.cfg.Remote
		if r == nil || !r.Poll() || cq.queued.Load() == 0 {
			return 0
		}
	}
	cq.ctx.dev.settleKicks()
	cq.mu.Lock()
	n := 0
	for n < len(wcs) && cq.n > 0 {
		wcs[n] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		n++
	}
	cq.queued.Store(int32(cq.n))
	cq.mu.Unlock()
	return n
}

// settleKicks waits, a little at most, until no batch being taken in on another thread
// has responses still to send (Packet.DeferKick): the completions a poll returns may be
// of that batch. A completion handler polls after its batch's kicks, so it does not
// wait for its own; the bound (settleKicksFor) keeps a poll from waiting long on a sender
// that waits itself. It yields the processor meanwhile, which the sender may need.
func (d *Device) settleKicks() {
	if d.unsentKicks.Load() <= 0 {
		return
	}
	start := time.Now()
	for d.unsentKicks.Load() > 0 && time.Since(start) < settleKicksFor {
		osYield()
	}
}

// settleKicksFor bounds settleKicks. Kicking a batch's connections takes microseconds;
// beside CPU-bound processes the thread doing it may wait a scheduler's slice or two.
var settleKicksFor = 5 * time.Millisecond // a variable for the tests

// osYield gives the processor up to any other thread that wants it (sched_yield(2)).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// clean removes the completions of QP qpn still queued and keeps the others in their
// order: a QP moved to RESET takes its completions with it, as libmlx5's mlx5_modify_qp
// does with __mlx5_cq_clean on its send and receive CQs (rxe leaves them; pibgw follows
// mlx5, so that a QP re-armed by RESET→INIT→RTR→RTS polls no stale flush errors). An
// event already raised for the CQ stays raised, and the CQ stays armed or not: only the
// entries go, as in the provider, whose cleaning never touches the CQ's notification.
func (cq *CQ) clean(qpn uint32) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	size := len(cq.ring)
	kept := 0
	for i := 0; i < cq.n; i++ {
		src := (cq.head + i) % size
		if cq.ring[src].QPNum == qpn {
			continue
		}
		if dst := (cq.head + kept) % size; dst != src {
			cq.ring[dst] = cq.ring[src]
		}
		kept++
	}
	removed := cq.n - kept
	for i := kept; i < cq.n; i++ {
		cq.ring[(cq.head+i)%size] = WC{}
	}
	cq.n = kept
	cq.queued.Store(int32(kept))
	return removed
}

// ReqNotify arms the CQ: the next completion (the next solicited one, or any error, when
// solicitedOnly) sends the CQ to its channel once (ibv_req_notify_cq).
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.ch == nil {
		return errorf("req_notify_cq", EINVAL, "CQ %d has no completion channel", cq.id)
	}
	cq.mu.Lock()
	if cq.armed && !cq.solOnly {
		cq.mu.Unlock()
		return nil // already armed for every completion
	}
	was := cq.armed
	cq.armed, cq.solOnly = true, solicitedOnly
	cq.mu.Unlock()
	if w := cq.ctx.dev.waiter(); w != nil && !was {
		w.Arm()
	}
	return nil
}

// Pending reports how many completions are queued, without taking the CQ's lock.
func (cq *CQ) Pending() int { return int(cq.queued.Load()) }

// KeepReported takes back the CQ's channel events past the first n, which its consumer
// never took (the C library's, queued or still on their way to its queue when the CQ is
// destroyed): they need no acknowledgement, as the kernel drops them with the CQ and
// ibv_destroy_cq waits only for those ibv_get_cq_event returned (comp_events_reported).
func (cq *CQ) KeepReported(n uint32) {
	cq.mu.Lock()
	cq.events = min(cq.events, n)
	cq.mu.Unlock()
}

// Busy reports whether a QP uses the CQ (ibv_destroy_cq would fail with EBUSY).
func (cq *CQ) Busy() bool { return cq.refs.Load() > 0 }

// AckEvents acknowledges n channel events (ibv_ack_cq_events).
func (cq *CQ) AckEvents(n int) {
	cq.mu.Lock()
	cq.acked += uint32(n)
	cq.mu.Unlock()
}

// Lost counts completions dropped after the CQ overflowed.
func (cq *CQ) Lost() uint64 {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.lost
}

// Resize changes the capacity (ibv_resize_cq); EINVAL if the entries would not fit.
func (cq *CQ) Resize(cqe int) error {
	if cqe < 1 || cqe > MaxCQE {
		return errorf("resize_cq", EINVAL, "cqe %d out of range 1..%d", cqe, MaxCQE)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cqe < cq.n {
		return errorf("resize_cq", EINVAL, "cqe %d below the %d entries queued", cqe, cq.n)
	}
	ring := make([]WC, cqe)
	for i := 0; i < cq.n; i++ {
		ring[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = ring, 0
	return nil
}

// Destroy destroys the CQ; EBUSY while a QP uses it (ibv_destroy_cq).
func (cq *CQ) Destroy() error {
	if n := cq.refs.Load(); n > 0 {
		return errorf("destroy_cq", EBUSY, "CQ %d is used by %d QPs", cq.id, n)
	}
	d := cq.ctx.dev
	cq.mu.Lock()
	events, acked := cq.events, cq.acked
	cq.mu.Unlock()
	if events != acked {
		if err := d.pitfall(PitfallDestroyUnackedCQ, "destroy_cq", 0, fmt.Sprintf("CQ %d", cq.id), "destroyed with %d of its %d completion events not acknowledged", events-acked, events); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.counts.cq--
	d.mu.Unlock()
	d.unregister(cq)
	cq.mu.Lock()
	armed := cq.armed
	cq.armed = false
	cq.mu.Unlock()
	if w := d.waiter(); w != nil && armed {
		w.Disarm()
	}
	return nil
}

// Push adds a completion (transports call it through QP). A full CQ is an overrun: the
// completion is lost, the CQ enters the error state and IBV_EVENT_CQ_ERR is raised once
// (IBA 11.4.2.1).
func (cq *CQ) Push(wc *WC, solicited bool) bool {
	if trace.On() {
		cq.traceCompletion(wc)
	}
	cq.mu.Lock()
	if cq.n == len(cq.ring) || cq.overflowed {
		cq.lost++
		first := !cq.overflowed
		cq.overflowed = true
		rearm := first && cq.ch != nil && !cq.armed && cq.events > 0
		events := cq.events
		cq.mu.Unlock()
		if rearm {
			cq.ctx.dev.pitfall(PitfallChannelNotRearmed, "", wc.QPNum, fmt.Sprintf("CQ %d", cq.id), "overran (%d entries) after %d channel events, not re-armed since the last", len(cq.ring), events)
		}
		if first {
			cq.ctx.dev.raise(AsyncEvent{Type: EventCQErr, CQ: cq})
		}
		return false
	}
	var flushed WC
	if wc.Status == WCWRFlushErr {
		// A flushed WQE's completion holds its wr_id, status and QP number, every other
		// field zero — opcode too (IBV_WC_SEND): rxe's flush_send_wqe and
		// flush_recv_wqe fill no more (mlx5's leave the rest unwritten).
		flushed = WC{WRID: wc.WRID, Status: wc.Status, QPNum: wc.QPNum, VendorErr: wc.VendorErr}
		wc = &flushed
	}
	if wc.Status != WCSuccess && cq.ctx.dev.Manner().RandomErrorFields {
		randomizeError(wc)
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	if cq.stamps {
		cq.ring[i].Timestamp = cq.ctx.dev.CoreClock()
	}
	cq.n++
	cq.queued.Store(int32(cq.n))
	notify := cq.armed && (!cq.solOnly || solicited || wc.Status != WCSuccess)
	if notify && cq.modCount > 1 && cq.n < cq.modCount && wc.Status == WCSuccess {
		// Moderated: wait for more completions, or for the period to pass.
		notify = false
		if !cq.modPending {
			cq.modPending = true
			if cq.modTimer == nil {
				cq.modTimer = cq.ctx.dev.clk.AfterFunc(cq.modPeriod, cq.moderationExpired)
			} else {
				cq.modTimer.Reset(cq.modPeriod)
			}
		}
	}
	if notify {
		cq.armed, cq.modPending = false, false
		cq.events++
	}
	cq.mu.Unlock()
	if notify {
		cq.signal()
		if w := cq.ctx.dev.waiter(); w != nil {
			w.Disarm()
		}
	}
	return true
}

func (cq *CQ) signal() {
	if fn := cq.ch.notify.Load(); fn != nil {
		(*fn)(cq)
		return
	}
	select {
	case cq.ch.ch <- cq:
	default:
	}
}

// SetCompHandler installs a completion handler, like the kernel verbs' comp_handler: it
// runs on the goroutine that delivered packets to a QP using this CQ as its receive CQ,
// once per batch of packets (every RxBudget packets of a larger one), after their
// completions are queued — so a consumer can poll and pass a whole burst on (IPoIB writes
// it to its TUN device) without waking another goroutine. The handler must not block for long and must poll the CQ itself;
// completion channel events are raised as before. nil removes it.
func (cq *CQ) SetCompHandler(h func(*CQ)) {
	if h == nil {
		cq.handler.Store(nil)
		return
	}
	cq.handler.Store(&h)
}

// Moderate sets completion-event moderation, as ibv_modify_cq with IBV_CQ_MODERATE
// does on hardware that has it: an armed CQ raises its event once count completions are
// queued or period after the first of them arrived, whichever comes first, so that a
// consumer woken by the channel finds a batch. An error completion signals at once.
// count ≤ 1 turns moderation off.
func (cq *CQ) Moderate(count int, period time.Duration) error {
	if count > len(cq.ring) || period < 0 {
		return errorf("modify_cq", EINVAL, "moderation count %d / period %v out of range (cqe %d)", count, period, len(cq.ring))
	}
	cq.mu.Lock()
	cq.modCount, cq.modPeriod = count, period
	cq.mu.Unlock()
	return nil
}

func (cq *CQ) moderationExpired() {
	cq.mu.Lock()
	notify := cq.modPending && cq.armed && cq.n > 0
	cq.modPending = false
	if notify {
		cq.armed = false
		cq.events++
	}
	cq.mu.Unlock()
	if notify {
		cq.signal()
		if w := cq.ctx.dev.waiter(); w != nil {
			w.Disarm()
		}
	}
}
