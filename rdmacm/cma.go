// Package rdmacm is the rdma_cm API for Go programs (librdmacm's rdma_cma.h, as Linux's cma.c behaves):
// event channels, IDs in a port space, address and route resolution from IP addresses
// of IPoIB interfaces, and connection setup over the IB CM (package ibcm) with the IP CM
// service of IBA Annex A11 — so Go programs connect over the fabric as C programs do
// with librdmacm, with no kernel module and no cgo.
//
// The names and the order of calls are librdmacm's: CreateEventChannel, CreateID,
// BindAddr, ResolveAddr (ADDR_RESOLVED), ResolveRoute (ROUTE_RESOLVED), CreateQP,
// Connect (ESTABLISHED) on the active side; BindAddr, Listen, CONNECT_REQUEST on a new
// ID, CreateQP, Accept (ESTABLISHED) on the passive side; Disconnect (DISCONNECTED,
// then TIMEWAIT_EXIT). Every event is acknowledged with Ack.
//
// What the host offers (its devices, IPoIB addresses, neighbours and routes) comes
// through the Host seam, so the same code runs in the daemon, in an attached process
// and on a test fabric.
package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// PortSpace is an rdma_cm port space (enum rdma_port_space).
type PortSpace uint16

const (
	PSIPoIB PortSpace = 0x0002
	PSIB    PortSpace = 0x013F
	PSTCP   PortSpace = 0x0106
	PSUDP   PortSpace = 0x0111
)

func (ps PortSpace) String() string {
	switch ps {
	case PSIPoIB:
		return "RDMA_PS_IPOIB"
	case PSIB:
		return "RDMA_PS_IB"
	case PSTCP:
		return "RDMA_PS_TCP"
	case PSUDP:
		return "RDMA_PS_UDP"
	}
	return fmt.Sprintf("PortSpace(%#x)", uint16(ps))
}

// UDPQKey is the Q_Key of RDMA_PS_UDP and RDMA_PS_IPOIB QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// ServiceID is the IB service ID of an IP port in a port space (IBA A11.2:
// 0x0000000001PPpppp, PP the port space's low byte).
func ServiceID(ps PortSpace, port uint16) uint64 {
	return 0x0000000001000000 | uint64(ps&0xFF)<<16 | uint64(port)
}

// EventType is an rdma_cm event (enum rdma_cm_event_type), in librdmacm's order.
type EventType int

const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

var eventNames = [...]string{"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
	"CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED",
	"ESTABLISHED", "DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR",
	"ADDR_CHANGE", "TIMEWAIT_EXIT"}

// String is rdma_event_str's text.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return "RDMA_CM_EVENT_" + eventNames[t]
	}
	return "UNKNOWN EVENT"
}

// ConnParam is struct rdma_conn_param.
type ConnParam struct {
	Private            []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	RetryCount         uint8 // ignored by Accept
	RNRRetryCount      uint8
	SRQ                bool
	QPNum              uint32 // for IDs without a QP (rdma_establish)
}

// UDParam is struct rdma_ud_param: how to reach the peer of a UD ID.
type UDParam struct {
	Private []byte
	AHAttr  hca.AHAttr
	QPNum   uint32
	QKey    uint32
}

// Event is struct rdma_cm_event. Status is 0 or a negative errno, except for
// REJECTED, where it is the IB REJ reason (28 consumer reject, 8 nobody listening).
type Event struct {
	Type     EventType
	Status   int
	ID       *ID // for CONNECT_REQUEST, the new ID
	ListenID *ID // for CONNECT_REQUEST, the listening ID
	Param    ConnParam
	UD       UDParam
	Group    netip.Addr // MULTICAST_JOIN, MULTICAST_ERROR: the group's address

	ch    *EventChannel
	acked bool
}

// Ack acknowledges the event (rdma_ack_cm_event); DestroyID waits for its ID's events
// to be acknowledged.
func (e *Event) Ack() {
	if e.acked || e.ch == nil {
		return
	}
	e.acked = true
	id := e.ID
	if e.Type == EventConnectRequest {
		id = e.ListenID // the request is the listener's until accepted
	}
	if id != nil {
		id.ackOne()
	}
}

// Discard drops an event its program was never given, as the kernel's ucma does with
// the events still queued for an ID being destroyed (ucma_cleanup_events): it is
// acknowledged, and a connection request's new ID is rejected and destroyed (Linux's CM
// rejects a REQ_RCVD ID it destroys, reason 28), so the peer is refused at once instead
// of waiting out its REQ's timeout.
func (e *Event) Discard() {
	e.Ack()
	if e.Type == EventConnectRequest && e.ID != nil {
		e.ID.Reject(nil)
		e.ID.Destroy()
	}
}

// EventChannel delivers the events of its IDs in order (rdma_event_channel).
type EventChannel struct {
	mu     sync.Mutex
	q      []*Event
	notify chan struct{}
	closed bool
}

// CreateEventChannel is rdma_create_event_channel.
func CreateEventChannel() *EventChannel { return &EventChannel{notify: make(chan struct{}, 1)} }

// ErrChannelClosed is returned by GetEvent after Destroy.
var ErrChannelClosed = errors.New("rdmacm: event channel destroyed")

// push queues e; with owner (the emitting ID's channel), only if that is still c —
// false when the ID moved to another channel meanwhile (Migrate), to push there instead.
func (c *EventChannel) push(e *Event, owner *atomic.Pointer[EventChannel]) bool {
	e.ch = c
	c.mu.Lock()
	if owner != nil && owner.Load() != c {
		c.mu.Unlock()
		return false
	}
	if c.closed {
		c.mu.Unlock()
		return true
	}
	c.q = append(c.q, e)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return true
}

// GetEvent waits for the next event (rdma_get_cm_event), or ctx's end.
func (c *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		c.mu.Lock()
		if len(c.q) > 0 {
			e := c.q[0]
			c.q[0] = nil
			c.q = c.q[1:]
			c.mu.Unlock()
			return e, nil
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrChannelClosed
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Destroy is rdma_destroy_event_channel: pending events are dropped.
func (c *EventChannel) Destroy() {
	c.mu.Lock()
	c.closed = true
	c.q = nil
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Device is one HCA port as the host offers it to rdma_cm: the port, the P_Key of the
// IPoIB interface the address belongs to, and the port's CM.
type Device struct {
	Port *hca.Port
	PKey uint16
	CM   *ibcm.CM
}

// Host is what rdma_cm needs of the host it runs on.
type Host interface {
	// LocalDevice returns the device of the IPoIB interface with address a, or an error
	// (EADDRNOTAVAIL) if no interface has it. The unspecified address returns
	// ErrAnyAddress.
	LocalDevice(a netip.Addr) (Device, error)
	// Devices are all the host's devices (a listener on the any address listens on each).
	Devices() []Device
	// Source returns the local address the host would send to dst from.
	Source(dst netip.Addr) (netip.Addr, error)
	// Neighbor resolves dst, on the interface of src, to the GID of its IPoIB hardware
	// address (ARP or ND if needed; RFC 4391 §9.1.1).
	Neighbor(ctx context.Context, src, dst netip.Addr) (wire.GID, error)
	// PathRecord returns the path from dev to dgid (an SA query, or a cached one).
	PathRecord(ctx context.Context, dev Device, dgid wire.GID) (sa.Path, error)
	// JoinMulticast makes dev's port a full member of group mgid (created with qkey if
	// new); LeaveMulticast leaves it.
	JoinMulticast(ctx context.Context, dev Device, mgid wire.GID, qkey uint32) (sa.MCGroup, error)
	LeaveMulticast(ctx context.Context, dev Device, mgid wire.GID) error
}

// ErrAnyAddress is what LocalDevice returns for 0.0.0.0 or ::.
var ErrAnyAddress = errors.New("rdmacm: the unspecified address has no device")

// errno values librdmacm reports in event statuses.
func errno(e syscall.Errno) int { return -int(e) }
