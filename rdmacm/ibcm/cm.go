// Package ibcm is the InfiniBand communication manager (IBA chapter 12): the CM MADs of
// class 0x07 on QP1 and the connection state machines of both sides — REQ, MRA, REJ,
// REP, RTU, DREQ, DREP, and service ID resolution (SIDR_REQ/SIDR_REP) for UD — with
// retransmission from the CM response timeouts and max_cm_retries, duplicate handling,
// stale connections and TIMEWAIT. It is Linux's ib_cm in shape: a CM per port, IDs with
// an event handler, and Send* calls that move an ID through its states. The rdma_cm
// API (package rdmacm) is built on it.
//
// The CM runs wherever the QP lives: it talks to its port through the small Port seam,
// so the daemon, an attached process and a test fabric use the same code. All timers run
// on a clock.Clock.
package ibcm

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Port is what the CM needs of an HCA port: QP1 MADs in and out, and its identity.
// *hca.Port provides it through HCAPort.
type Port interface {
	SendMAD(a hca.MADAddr, mad []byte) error
	RegisterMADHandler(class uint8, responses bool, h hca.MADHandler)
	TID() uint64
	LID() uint16
	GID(index int) (wire.GID, bool)
	// CAGUID is the node GUID of the channel adapter (REQ/REP's Local CA GUID).
	CAGUID() uint64
	FindPKey(pkey uint16) int
}

// HCAPort adapts an *hca.Port to Port.
func HCAPort(p *hca.Port) Port { return hcaPort{p} }

type hcaPort struct{ *hca.Port }

func (p hcaPort) CAGUID() uint64 { return p.Device().Query().NodeGUID }

// Errors of the Send calls.
var (
	ErrState   = errors.New("ibcm: not allowed in the ID's current state")
	ErrClosed  = errors.New("ibcm: CM closed")
	ErrBusy    = errors.New("ibcm: service ID already listened on")
	ErrPrivate = errors.New("ibcm: private data too long")
)

// State is an ID's state (IBA 12.9.6, figures 142–144).
type State int

const (
	Idle State = iota
	Listen
	ReqSent
	ReqRcvd
	MRAReqSent
	MRAReqRcvd
	RepSent
	RepRcvd
	MRARepSent
	MRARepRcvd
	Established
	DReqSent
	DReqRcvd
	TimeWait
	SIDRReqSent
	SIDRReqRcvd
)

var stateNames = [...]string{"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT",
	"MRA_REQ_RCVD", "REP_SENT", "REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED",
	"DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// Options configure a CM.
type Options struct {
	Clock  clock.Clock
	Logger *slog.Logger
	// IDPrefix goes into the top IDPrefixBits bits of every local comm ID and SIDR
	// request ID, so that the daemon can route a port's CM MADs to the process whose CM
	// they belong to (package attach): the daemon's own CMs use 0, attached processes
	// the prefix the daemon gives them.
	IDPrefix uint32
	// OnListen, if set, is told when a service ID starts (listen true) or stops being
	// listened on, before a REQ for it can arrive; an error refuses the Listen.
	OnListen func(serviceID, mask uint64, listen bool) error
}

// IDPrefixBits is how many top bits of a comm ID are Options.IDPrefix.
const IDPrefixBits = 12

// IDPrefixOf returns the prefix of a comm ID or SIDR request ID.
func IDPrefixOf(id uint32) uint32 { return id >> (32 - IDPrefixBits) }

// CM is the communication manager of one port.
type CM struct {
	port Port
	clk  clock.Clock
	log  *slog.Logger

	mu        sync.Mutex
	closed    bool
	nextID    uint32
	idPrefix  uint32 // the top IDPrefixBits of every ID, in place
	onListen  func(serviceID, mask uint64, listen bool) error
	ids       map[uint32]*ID    // by local comm ID (connections) or request ID (SIDR)
	byRemote  map[remoteKey]*ID // passive IDs by the active side's comm ID and CA GUID
	listeners map[uint64]*ID    // by service ID
	work      []func()          // received MADs and timer expiries, run by loop
	events    []pendingEvent    // events to deliver once mu is released
	out       []outMAD          // MADs to send once mu is released
	notify    chan struct{}
	done      chan struct{}
	stats     Counters
}

type remoteKey struct {
	commID uint32
	caGUID uint64
}

// outMAD is a MAD waiting for mu to be released: sending with it held could deadlock on
// a loopback connection, where the in-process port delivers to this same CM at once.
type outMAD struct {
	addr hca.MADAddr
	mad  []byte
}

type pendingEvent struct {
	id *ID
	ev Event
	h  Handler // id's handler when the event was taken for delivery
}

// Counters count what the CM saw and did.
type Counters struct {
	Sent, Received, Retransmits, Dropped, Duplicates, Rejected uint64
}

// New starts the CM of port: it takes the port's CM class (0x07) MADs.
func New(port Port, o Options) *CM {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cm := &CM{
		port: port, clk: o.Clock, log: o.Logger.With("cm", port.CAGUID()),
		nextID:    rand.Uint32() | 1,
		idPrefix:  o.IDPrefix << (32 - IDPrefixBits),
		onListen:  o.OnListen,
		ids:       make(map[uint32]*ID),
		byRemote:  make(map[remoteKey]*ID),
		listeners: make(map[uint64]*ID),
		notify:    make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	// IBA 12.6.1: CM messages are Sends, never responses; take both directions in case a
	// peer sets the R bit.
	port.RegisterMADHandler(wire.MgmtClassCM, false, hca.MADHandlerFunc(cm.receive))
	port.RegisterMADHandler(wire.MgmtClassCM, true, hca.MADHandlerFunc(cm.receive))
	go cm.loop()
	return cm
}

// Close stops the CM: pending timers no longer fire and no more events are delivered.
func (cm *CM) Close() {
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		return
	}
	cm.closed = true
	for _, id := range cm.ids {
		id.stopTimer()
	}
	cm.mu.Unlock()
	cm.port.RegisterMADHandler(wire.MgmtClassCM, false, nil)
	cm.port.RegisterMADHandler(wire.MgmtClassCM, true, nil)
	cm.kick()
	<-cm.done
}

// Stats returns the CM's counters.
func (cm *CM) Stats() Counters {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return cm.stats
}

func (cm *CM) kick() {
	select {
	case cm.notify <- struct{}{}:
	default:
	}
}

// post queues f to run on the CM's goroutine with mu held.
func (cm *CM) post(f func()) {
	cm.mu.Lock()
	if !cm.closed {
		cm.work = append(cm.work, f)
	}
	cm.mu.Unlock()
	cm.kick()
}

// loop runs queued work and delivers events, one at a time, in order. Handlers run here
// with no lock held, so they may call the ID's methods.
func (cm *CM) loop() {
	defer close(cm.done)
	for {
		cm.mu.Lock()
		work := cm.work
		cm.work = nil
		for _, f := range work {
			if cm.closed {
				break
			}
			f()
		}
		evs := cm.events
		cm.events = nil
		closed := cm.closed
		// The handlers as they are now, under mu: Destroy and SetHandler change them
		// under mu while the events below are delivered without it.
		for k := range evs {
			evs[k].h = evs[k].id.handler
		}
		cm.unlock()
		for _, pe := range evs {
			if h := pe.h; h != nil && !closed {
				h(pe.id, &pe.ev)
			}
		}
		if closed {
			return
		}
		if len(work) == 0 && len(evs) == 0 {
			<-cm.notify
		}
	}
}

// unlock releases mu, then sends the MADs queued under it and wakes the loop for the
// events queued under it.
func (cm *CM) unlock() {
	out := cm.out
	cm.out = nil
	kick := len(cm.events) > 0
	cm.mu.Unlock()
	for _, o := range out {
		if err := cm.port.SendMAD(o.addr, o.mad); err != nil {
			cm.log.Debug("cm: send", "err", err)
		}
	}
	if kick {
		cm.kick()
	}
}

// receive is the MAD handler: it copies the MAD and queues it; it never blocks.
func (cm *CM) receive(m *hca.MAD) {
	if len(m.Data) < wire.MADLen {
		return
	}
	mad := make([]byte, wire.MADLen)
	copy(mad, m.Data)
	from := m.From
	from.GRH = nil
	cm.post(func() { cm.handle(mad, from) })
}

// allocID returns a fresh local comm ID; mu held.
func (cm *CM) allocID(id *ID) uint32 {
	const low = 1<<(32-IDPrefixBits) - 1
	for {
		cm.nextID++
		n := cm.idPrefix | cm.nextID&low
		if n == 0 {
			continue
		}
		if _, busy := cm.ids[n]; !busy {
			cm.ids[n] = id
			return n
		}
	}
}

// emit queues an event for id's handler; mu held.
func (cm *CM) emit(id *ID, ev Event) {
	cm.events = append(cm.events, pendingEvent{id: id, ev: ev})
}

// send queues a copy of mad for addr, sent when mu is released; mu held.
func (cm *CM) send(addr hca.MADAddr, mad []byte) {
	cm.stats.Sent++
	cm.out = append(cm.out, outMAD{addr, append([]byte(nil), mad...)})
}

// handle dispatches a received CM MAD; mu held.
func (cm *CM) handle(mad []byte, from hca.MADAddr) {
	cm.stats.Received++
	m := wire.MAD(mad)
	if m.ClassVersion() != wire.ClassVersionCM {
		cm.stats.Dropped++
		return
	}
	switch m.AttrID() {
	case wire.AttrCMReq:
		cm.handleReq(mad, from)
	case wire.AttrCMMRA:
		cm.handleMRA(mad)
	case wire.AttrCMRej:
		cm.handleRej(mad, from)
	case wire.AttrCMRep:
		cm.handleRep(mad, from)
	case wire.AttrCMRTU:
		cm.handleRTU(mad)
	case wire.AttrCMDReq:
		cm.handleDReq(mad, from)
	case wire.AttrCMDRep:
		cm.handleDRep(mad)
	case wire.AttrCMLAP:
		cm.handleLAP(mad, from)
	case wire.AttrCMAPR:
		cm.handleAPR(mad)
	case wire.AttrCMSIDRReq:
		cm.handleSIDRReq(mad, from)
	case wire.AttrCMSIDRRep:
		cm.handleSIDRRep(mad)
	default:
		cm.stats.Dropped++
	}
}

// lookup returns the ID a message with this remote comm ID (our local one) is for.
func (cm *CM) lookup(local uint32) *ID {
	return cm.ids[local]
}

// timeout is 4.096 µs × 2^n (IBA 12.7.4).
func timeout(n uint8) time.Duration { return time.Duration(wire.CMTimeoutNanos(n)) }

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
