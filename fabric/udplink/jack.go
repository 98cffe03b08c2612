package udplink

import (
	"sync/atomic"

	"github.com/pibgw/pibgw/fabric"
)

// Jack joins a UDP session to an in-process port through a fabric.Cable, so that
// everything that works on cables works on UDP links too: captures and fault wrappers,
// cable counters, and the physical link state (IBA 14.2.5.6 PortPhysicalState), which
// follows the session: the cable is up while a session is attached and down otherwise.
//
// The Jack's UDP side (UDP) is the fabric.Port a Dialer or a Listener's Acceptor gets;
// its cable side is plugged into the local port.
type Jack struct {
	cable *fabric.Cable
	side  jackCable
	udp   jackUDP
	out   atomic.Pointer[linkBox] // the session's Link (toward the far process)
	drops atomic.Uint64
}

type linkBox struct{ l fabric.Link }

// jackCable is the Jack's end of the cable.
type jackCable struct {
	j    *Jack
	link atomic.Pointer[linkBox] // the cable, toward the local port
}

// jackUDP is the Jack's UDP end.
type jackUDP struct{ j *Jack }

// NewJack cables p to a new Jack; the cable is down until a session is attached.
func NewJack(p fabric.Port, opts ...fabric.CableOption) *Jack {
	j := &Jack{}
	j.side.j, j.udp.j = j, j
	j.cable = fabric.NewCable(p, &j.side, opts...)
	j.cable.SetUp(false)
	return j
}

// Cable is the Jack's cable: AtoB carries what the local port sends (toward the far
// process), BtoA what arrives from there.
func (j *Jack) Cable() *fabric.Cable { return j.cable }

// UDP is the port a Dialer or Acceptor attaches the session to.
func (j *Jack) UDP() fabric.Port { return &j.udp }

// Up reports whether a session is attached.
func (j *Jack) Up() bool { return j.out.Load() != nil }

// Drops counts packets the local port sent while no session was attached (the cable
// counts them too, as DownDrops).
func (j *Jack) Drops() uint64 { return j.drops.Load() }

// Receive takes what the local port sent: it goes out on the session.
func (c *jackCable) Receive(pkts [][]byte) {
	if b := c.j.out.Load(); b != nil {
		b.l.Send(pkts)
		return
	}
	c.j.drops.Add(uint64(len(pkts)))
}

func (c *jackCable) Attach(l fabric.Link) {
	if l == nil {
		c.link.Store(nil)
		return
	}
	c.link.Store(&linkBox{l})
}

// Receive takes what arrived on the session: it goes into the cable.
func (u *jackUDP) Receive(pkts [][]byte) {
	if b := u.j.side.link.Load(); b != nil {
		b.l.Send(pkts)
	}
}

// Attach plugs a session in (the cable comes up) or takes it away (the cable goes down).
func (u *jackUDP) Attach(l fabric.Link) {
	if l == nil {
		u.j.out.Store(nil)
		u.j.cable.SetUp(false)
		return
	}
	u.j.out.Store(&linkBox{l})
	u.j.cable.SetUp(true)
}
