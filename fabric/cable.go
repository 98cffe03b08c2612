package fabric

import "sync/atomic"

// Direction names one half of a Cable: AtoB carries what port a sends to port b.
type Direction int

const (
	AtoB Direction = iota
	BtoA
)

func (d Direction) String() string {
	if d == BtoA {
		return "b->a"
	}
	return "a->b"
}

// LinkStateReceiver is implemented by a Port that wants to know when the physical link
// of its cable goes up or down (IBA 14.2.5.6 PortInfo:PortPhysicalState). A Cable calls
// it when it attaches and on every SetUp that changes the state.
type LinkStateReceiver interface {
	LinkStateChanged(up bool)
}

// CableCounters counts one direction of a cable.
type CableCounters struct {
	Packets   uint64 // delivered to the far port
	Bytes     uint64 // delivered, LRH through ICRC
	DownDrops uint64 // dropped because the cable was unplugged
}

// CableOption configures NewCable.
type CableOption func(*Cable)

// WithLinkWrapper wraps both directions of the cable, e.g. with a FaultLink or a
// capture link. The wrapper receives the Link that delivers to the far port.
func WithLinkWrapper(w func(Link) Link) CableOption {
	return func(c *Cable) {
		c.ends[AtoB].wrap(w)
		c.ends[BtoA].wrap(w)
	}
}

// WithDirectionWrapper wraps one direction of the cable only.
func WithDirectionWrapper(d Direction, w func(Link) Link) CableOption {
	return func(c *Cable) { c.ends[d].wrap(w) }
}

// Cable is an in-process cable between two ports. Each direction delivers synchronously:
// a Send on one end runs the other port's Receive on the caller's goroutine.
type Cable struct {
	a, b Port
	up   atomic.Bool
	ends [2]cableEnd
}

// cableEnd is the Link a port transmits on. It checks the cable state before the
// wrappers (a capture on an unplugged cable sees nothing) and again at delivery (a
// packet a wrapper delayed is lost if the cable went down meanwhile).
type cableEnd struct {
	c     *Cable
	to    Port
	head  atomic.Pointer[linkBox] // wrappers, ending in deliver
	final deliverLink

	pkts, bytes, drops atomic.Uint64
}

type linkBox struct{ l Link }

type deliverLink struct{ e *cableEnd }

func (d deliverLink) Send(pkts [][]byte) { d.e.deliver(pkts) }

// NewCable plugs a and b together with a cable that is up, and attaches each port to its
// transmit Link.
func NewCable(a, b Port, opts ...CableOption) *Cable {
	c := &Cable{a: a, b: b}
	c.ends[AtoB] = cableEnd{c: c, to: b}
	c.ends[BtoA] = cableEnd{c: c, to: a}
	for i := range c.ends {
		e := &c.ends[i]
		e.final = deliverLink{e}
		e.head.Store(&linkBox{e.final})
	}
	for _, o := range opts {
		o(c)
	}
	c.up.Store(true)
	a.Attach(&c.ends[AtoB])
	b.Attach(&c.ends[BtoA])
	notifyState(a, true)
	notifyState(b, true)
	return c
}

func notifyState(p Port, up bool) {
	if n, ok := p.(LinkStateReceiver); ok {
		n.LinkStateChanged(up)
	}
}

func (e *cableEnd) wrap(w func(Link) Link) {
	if w == nil {
		return
	}
	for {
		old := e.head.Load()
		if e.head.CompareAndSwap(old, &linkBox{w(old.l)}) {
			return
		}
	}
}

// Send implements Link.
func (e *cableEnd) Send(pkts [][]byte) {
	if !e.c.up.Load() {
		e.drops.Add(uint64(len(pkts)))
		return
	}
	e.head.Load().l.Send(pkts)
}

func (e *cableEnd) deliver(pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	if !e.c.up.Load() {
		e.drops.Add(uint64(len(pkts)))
		return
	}
	var n uint64
	for _, p := range pkts {
		n += uint64(len(p))
	}
	e.pkts.Add(uint64(len(pkts)))
	e.bytes.Add(n)
	e.to.Receive(pkts)
}

// Wrap adds a wrapper around the current link of direction d at run time (for example a
// capture started on a running fabric). Wrappers stack: the newest is outermost.
func (c *Cable) Wrap(d Direction, w func(Link) Link) { c.ends[d].wrap(w) }

// Unwrap removes every wrapper of direction d.
func (c *Cable) Unwrap(d Direction) {
	e := &c.ends[d]
	e.head.Store(&linkBox{e.final})
}

// SetUp plugs the cable in (true) or pulls it out (false). While it is down, packets
// sent in either direction are dropped and counted.
func (c *Cable) SetUp(up bool) {
	if c.up.Swap(up) == up {
		return
	}
	notifyState(c.a, up)
	notifyState(c.b, up)
}

// Up reports whether the cable is plugged in.
func (c *Cable) Up() bool { return c.up.Load() }

// Counters returns a snapshot of direction d's counters.
func (c *Cable) Counters(d Direction) CableCounters {
	e := &c.ends[d]
	return CableCounters{Packets: e.pkts.Load(), Bytes: e.bytes.Load(), DownDrops: e.drops.Load()}
}

// Link returns the Link that port a (AtoB) or port b (BtoA) transmits on.
func (c *Cable) Link(d Direction) Link { return &c.ends[d] }

// Detach takes the cable away: it goes down and both ports are attached to nil.
func (c *Cable) Detach() {
	c.SetUp(false)
	c.a.Attach(nil)
	c.b.Attach(nil)
}
