package ibcm

import (
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// EventType is what happened to an ID (Linux's enum ib_cm_event_type).
type EventType int

const (
	EventReqError        EventType = iota // REQ retries exhausted (or MRA's service timeout passed)
	EventReqReceived                      // a REQ for a listened service: a new ID
	EventRepError                         // REP retries exhausted
	EventRepReceived                      // the passive side accepted: send RTU (or REJ)
	EventRTUReceived                      // the connection is established (passive side)
	EventUserEstablished                  // established by the first data packet (Established)
	EventDReqError                        // DREQ retries exhausted; the ID is in TIMEWAIT
	EventDReqReceived                     // the peer disconnects: send DREP
	EventDRepReceived                     // our DREQ was answered; the ID is in TIMEWAIT
	EventTimeWaitExit                     // TIMEWAIT is over; the QP may be reused
	EventMRAReceived                      // the peer needs more time
	EventRejReceived                      // the peer rejected (Reason, ARI, Private)
	EventSIDRReqReceived                  // a SIDR_REQ for a listened service: a new ID
	EventSIDRRepReceived                  // the answer to our SIDR_REQ (SIDRStatus, QPN, QKey)
	EventSIDRReqError                     // SIDR_REQ retries exhausted
	EventLAPError                         // LAP retries exhausted (lap.go)
	EventLAPReceived                      // the peer proposes an alternate path (AltPath): send APR
	EventAPRReceived                      // the answer to our LAP (APStatus, Info)
)

var eventNames = [...]string{"REQ_ERROR", "REQ_RECEIVED", "REP_ERROR", "REP_RECEIVED",
	"RTU_RECEIVED", "USER_ESTABLISHED", "DREQ_ERROR", "DREQ_RECEIVED", "DREP_RECEIVED",
	"TIMEWAIT_EXIT", "MRA_RECEIVED", "REJ_RECEIVED", "SIDR_REQ_RECEIVED",
	"SIDR_REP_RECEIVED", "SIDR_REQ_ERROR", "LAP_ERROR", "LAP_RECEIVED", "APR_RECEIVED"}

func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "?"
}

// Event is delivered to an ID's handler. Req is set for REQ_RECEIVED, Rep for
// REP_RECEIVED; Private is the message's private data (its full length, as received).
type Event struct {
	Type    EventType
	Req     *ReqParam
	Rep     *RepParam
	Reason  uint16 // REJ_RECEIVED: the IBA reason (wire.Rej*)
	ARI     []byte // REJ_RECEIVED: additional rejection information
	Private []byte

	// SIDR_REQ_RECEIVED: the P_Key; SIDR_REP_RECEIVED: status, QPN and Q_Key.
	PKey       uint16
	SIDRStatus uint8
	QPN        uint32
	QKey       uint32
	// From is where the message came from (the peer's port LID and QP1).
	From hca.MADAddr

	// LAP_RECEIVED: the alternate path, from the receiver's view (SLID its own port);
	// APR_RECEIVED: the status (wire.APR*) and additional information.
	AltPath  *sa.Path
	APStatus uint8
	Info     []byte
}

// Handler receives an ID's events, one at a time, on the CM's goroutine.
type Handler func(id *ID, ev *Event)

// ReqParam is a connection request (ib_cm_req_param): what the active side sends in REQ,
// and what the passive side receives.
type ReqParam struct {
	ServiceID      uint64
	QPN            uint32
	QPType         hca.QPType // RC or UC
	StartingPSN    uint32
	PKey           uint16
	Path           sa.Path // primary path: sent from the sender's view (SLID = its port), received from the receiver's (DLID = the sender)
	ResponderRes   uint8   // RDMA READs/atomics the sender accepts at once
	InitiatorDepth uint8   // RDMA READs/atomics the sender issues at once
	// CM timeouts (4.096 µs × 2^n): RemoteCMResponseTimeout is the wait for the REP,
	// LocalCMResponseTimeout how long the sender takes to answer the REP.
	RemoteCMResponseTimeout uint8
	LocalCMResponseTimeout  uint8
	RetryCount              uint8 // transport retries (3 bits)
	RNRRetryCount           uint8 // 7 = infinite
	MaxCMRetries            uint8
	SRQ                     bool
	FlowControl             bool
	Private                 []byte
	// CAGUID is the sender's (set on receive).
	CAGUID uint64
}

// RepParam is a connection reply (ib_cm_rep_param).
type RepParam struct {
	QPN              uint32
	StartingPSN      uint32
	ResponderRes     uint8
	InitiatorDepth   uint8
	TargetACKDelay   uint8
	FailoverAccepted uint8
	FlowControl      bool
	RNRRetryCount    uint8
	SRQ              bool
	Private          []byte
	CAGUID           uint64 // set on receive
}

// ID is one endpoint of the CM: a listener, a connection, or a SIDR request.
type ID struct {
	cm      *CM
	handler Handler
	Context any // the user's

	// The rest is guarded by cm.mu.
	state     State
	local     uint32 // local comm ID (or SIDR request ID)
	remote    uint32 // remote comm ID
	remoteCA  uint64
	service   uint64
	mask      uint64
	listener  *ID
	addr      hca.MADAddr // the peer's QP1
	pkeyIdx   uint16
	req       ReqParam // REQ sent or received
	lastMsg   []byte   // the last REQ/REP/DREQ/SIDR_REQ sent, for retransmission
	lastReply []byte   // the last REP/RTU/MRA/DREP/REJ sent, for duplicates
	tid       uint64
	timer     clock.Timer
	gen       uint64
	tries     uint8
	maxTries  uint8
	wait      time.Duration
	twWait    time.Duration // TIMEWAIT length
	remoteQPN uint32
	byRemote  bool
	lap       lapState // alternate path exchange (lap.go)
	lapReply  []byte   // the last APR sent, for a duplicate LAP
}

// NewID creates an ID whose events go to h.
func (cm *CM) NewID(h Handler, ctx any) *ID {
	return &ID{cm: cm, handler: h, Context: ctx}
}

// SetHandler replaces the ID's handler (a passive ID starts with its listener's).
func (id *ID) SetHandler(h Handler) {
	id.cm.mu.Lock()
	id.handler = h
	id.cm.mu.Unlock()
}

// State returns the ID's state.
func (id *ID) State() State {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.state
}

// LocalCommID returns the ID's local communication ID (0 before it has one).
func (id *ID) LocalCommID() uint32 {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.local
}

// Listen makes the ID receive REQs and SIDR_REQs for serviceID (ib_cm_listen; mask 0
// means all 64 bits must match).
func (id *ID) Listen(serviceID, mask uint64) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	if cm.closed {
		return ErrClosed
	}
	if id.state != Idle {
		return ErrState
	}
	if mask == 0 {
		mask = ^uint64(0)
	}
	for sid, l := range cm.listeners {
		if sid&l.mask&mask == serviceID&l.mask&mask {
			return ErrBusy
		}
	}
	if cm.onListen != nil {
		if err := cm.onListen(serviceID, mask, true); err != nil {
			return err
		}
	}
	id.service, id.mask, id.state = serviceID, mask, Listen
	cm.listeners[serviceID] = id
	return nil
}

// findListener returns the listener for serviceID; mu held.
func (cm *CM) findListener(serviceID uint64) *ID {
	if l := cm.listeners[serviceID]; l != nil {
		return l
	}
	for sid, l := range cm.listeners {
		if sid&l.mask == serviceID&l.mask {
			return l
		}
	}
	return nil
}

// Destroy ends the ID as ib_destroy_cm_id does: a listener stops listening; a request
// in progress is rejected (REJ timeout), an established connection is disconnected
// (DREQ, without waiting for DREP); no more events are delivered.
func (id *ID) Destroy() {
	cm := id.cm
	cm.mu.Lock()
	defer cm.unlock()
	switch id.state {
	case Listen:
		delete(cm.listeners, id.service)
		if cm.onListen != nil {
			cm.onListen(id.service, id.mask, false)
		}
	case ReqSent, MRAReqRcvd, RepRcvd, MRARepSent:
		id.sendRej(wire.RejTimeout, nil, nil, msgFor(id.state))
	case ReqRcvd, MRAReqSent, RepSent, MRARepRcvd:
		id.sendRej(wire.RejConsumerReject, nil, nil, msgFor(id.state))
	case Established:
		id.buildDReq(nil)
		cm.send(id.addr, id.lastMsg)
	case DReqRcvd:
		id.buildDRep(nil)
		cm.send(id.addr, id.lastReply)
	}
	id.handler = nil
	id.release()
	id.state = Idle
}

// msgFor is the MessageRejected value for a REJ sent in state s.
func msgFor(s State) uint8 {
	switch s {
	case ReqRcvd, MRAReqSent:
		return wire.CMMsgREQ
	case RepRcvd, MRARepSent:
		return wire.CMMsgREP
	}
	return wire.CMMsgOther
}

// release forgets the ID's comm ID and timer; mu held.
func (id *ID) release() {
	id.stopTimer()
	cm := id.cm
	if id.local != 0 && cm.ids[id.local] == id {
		delete(cm.ids, id.local)
	}
	if id.byRemote {
		k := remoteKey{id.remote, id.remoteCA}
		if cm.byRemote[k] == id {
			delete(cm.byRemote, k)
		}
		id.byRemote = false
	}
}

// stopTimer cancels the ID's timer; a callback already queued sees a new generation.
func (id *ID) stopTimer() {
	id.gen++
	if id.timer != nil {
		id.timer.Stop()
		id.timer = nil
	}
}

// arm starts the retransmission timer: resend lastMsg up to maxTries times every wait,
// then call expire; mu held.
func (id *ID) arm(wait time.Duration, tries uint8, expire func()) {
	id.stopTimer()
	id.wait, id.tries, id.maxTries = wait, 0, tries
	gen := id.gen
	cm := id.cm
	var fire func()
	fire = func() {
		cm.post(func() {
			if id.gen != gen {
				return
			}
			if id.tries < id.maxTries && id.lastMsg != nil {
				id.tries++
				cm.stats.Retransmits++
				cm.send(id.addr, id.lastMsg)
				id.timer = cm.clk.AfterFunc(id.wait, fire)
				return
			}
			id.timer = nil
			expire()
		})
	}
	id.timer = cm.clk.AfterFunc(wait, fire)
}

// after runs f once, d from now, unless the timer is stopped first; mu held.
func (id *ID) after(d time.Duration, f func()) {
	id.stopTimer()
	gen := id.gen
	cm := id.cm
	id.timer = cm.clk.AfterFunc(d, func() {
		cm.post(func() {
			if id.gen == gen {
				id.timer = nil
				f()
			}
		})
	})
}
