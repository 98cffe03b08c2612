// Package trace is pibgw's event trace: a per-process ring of typed events (pib's debugfs
// trace file, driver/pib_debugfs.c: 65,536 entries) — verbs calls, packets sent and received with their
// headers decoded, drops with their reason, RC retries, completions, async events, CM
// messages and bookmarks — that `pibgw trace` streams live from the daemon and from every
// attached process.
//
// Recording is off until someone reads (Enable). Every hook on a hot path is
//
//	if trace.On() { trace.Packet(…) }
//
// a single atomic load when off; the ring itself is allocated the first time tracing is
// enabled. Recording takes the ring's lock and allocates nothing.
package trace

import (
	"sync"
	"sync/atomic"
	"time"
)

// RingSize is the number of events the ring keeps (pib's trace size).
const RingSize = 65536

// Kind is an event's type.
type Kind uint8

const (
	KindAPI        Kind = 1 + iota // a verbs call (create/modify/destroy QP, post send/recv, reg MR, …)
	KindPacket                     // a packet a port sent or received
	KindDrop                       // a packet dropped, with the reason (the counter it incremented)
	KindRetry                      // an RC retransmission: ACK timeout, sequence NAK, RNR NAK
	KindCompletion                 // a work completion queued on a CQ
	KindEvent                      // an async event
	KindCM                         // a CM message (a packet on QP1 of the CM class)
	KindMark                       // a bookmark (pibgw trace --mark)
	numKinds
)

var kindNames = [numKinds]string{"", "api", "packet", "drop", "retry", "completion", "event", "cm", "mark"}

func (k Kind) String() string {
	if k < numKinds && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// ParseKind reads a kind's name.
func ParseKind(s string) (Kind, bool) {
	for k := Kind(1); k < numKinds; k++ {
		if kindNames[k] == s {
			return k, true
		}
	}
	return 0, false
}

// KindNames lists the kinds' names.
func KindNames() []string { return append([]string(nil), kindNames[1:]...) }

// Dir is a packet's direction at the port that saw it.
type Dir uint8

const (
	DirNone Dir = iota
	DirTx
	DirRx
)

func (d Dir) String() string {
	switch d {
	case DirTx:
		return "tx"
	case DirRx:
		return "rx"
	}
	return ""
}

// Event is one entry of the ring. Strings are names the recorder already had (a device
// name, a constant reason), so recording allocates nothing.
type Event struct {
	Seq   uint64
	Nanos int64 // wall clock, Unix nanoseconds
	Kind  Kind
	Dir   Dir
	Port  uint8
	Dev   string
	QPN   uint32 // the local QP, 0 when unknown
	What  string // API call, drop reason, retry cause, event type, WC status, bookmark text
	Aux   string // WC opcode, QP state change, …
	A, B  uint64 // by kind: WR ID and length (api post, completion), PSN and count (retry)
	Pkt   Headers
}

type ring struct {
	mu    sync.Mutex
	users int // Enables not yet disabled
	buf   []Event
	next  uint64                 // Seq of the next event (the first is 1)
	subs  map[chan struct{}]bool // readers' doorbells (Subscribe)
}

var (
	on atomic.Bool
	r  = ring{next: 1, subs: map[chan struct{}]bool{}}
)

// On reports whether events are being recorded: the hot paths' one check.
func On() bool { return on.Load() }

// Enable turns recording on until every Enable's disable function has been called (each
// reader enables while it reads). The ring (about 14 MB) exists only while someone
// records: the last disable frees it; sequence numbers go on across.
func Enable() (disable func()) {
	r.mu.Lock()
	if r.buf == nil {
		r.buf = make([]Event, RingSize)
	}
	r.users++
	on.Store(true)
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.users--; r.users == 0 {
				on.Store(false)
				r.buf = nil
			}
			r.mu.Unlock()
		})
	}
}

// Add stamps ev with its sequence number and time and puts it in the ring (dropped
// when recording is off).
func Add(ev *Event) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	if r.buf == nil || !on.Load() {
		r.mu.Unlock()
		return
	}
	ev.Seq, ev.Nanos = r.next, now
	r.buf[r.next%RingSize] = *ev
	r.next++
	for ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default: // rung already
		}
	}
	r.mu.Unlock()
}

// Next is the sequence number the next event will get: a reader starting now reads from
// there.
func Next() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Read copies events from sequence number from on into dst and returns how many, the
// sequence number to read from next, and how many events were overwritten before the
// reader got to them (the reader fell more than RingSize behind).
func Read(from uint64, dst []Event) (n int, next uint64, lost uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from == 0 {
		from = 1
	}
	if r.next > RingSize && from < r.next-RingSize {
		lost = r.next - RingSize - from
		from = r.next - RingSize
	}
	if r.buf == nil {
		return 0, r.next, 0
	}
	for from < r.next && n < len(dst) {
		dst[n] = r.buf[from%RingSize]
		n++
		from++
	}
	return n, from, lost
}

// Subscribe returns a doorbell rung after events are recorded, for a reader to wait on
// between Reads; cancel releases it.
func Subscribe() (bell <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	r.subs[ch] = true
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, ch)
		r.mu.Unlock()
	}
}

// Mark records a bookmark.
func Mark(text string) {
	if On() {
		Add(&Event{Kind: KindMark, What: text})
	}
}
