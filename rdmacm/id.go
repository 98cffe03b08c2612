package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// idState is the ID's rdma_cm state (Linux's enum rdma_cm_state).
type idState int

const (
	stIdle idState = iota
	stAddrQuery
	stAddrResolved
	stRouteQuery
	stRouteResolved
	stConnect
	stConnected
	stListen
	stDisconnect
	stDestroying
)

// CM timing rdma_cm uses (Linux cma.c): CM response timeout 20 (≈ 4.3 s) with 15
// retries; MRA's is 24.
const (
	cmaResponseTimeout = 20
	cmaMaxCMRetries    = 15
)

// ID is an rdma_cm identifier (struct rdma_cm_id).
type ID struct {
	host    Host
	ch      atomic.Pointer[EventChannel] // rdma_migrate_id moves it (Migrate)
	ps      PortSpace
	qpType  hca.QPType
	Context any

	mu       sync.Mutex
	state    idState
	src, dst netip.AddrPort
	ib       afIB // AF_IB addresses (afib.go); src and dst hold their GIDs then
	dev      Device
	dgid     wire.GID
	route    sa.Path
	routeOK  bool
	qp       *hca.QP
	cmid     *ibcm.ID
	listens  []*ibcm.ID
	listenID *ID
	req      *ibcm.ReqParam // passive: the REQ; active without a QP: the REP's values
	psn      uint32         // the Starting PSN this side sends: its receive queue's first expected PSN
	// ackTimeout, if ackTimeoutSet, is the RC QP's local ACK timeout (rdma_set_option's
	// RDMA_OPTION_ID_ACK_TIMEOUT) in place of the one the path gives.
	ackTimeout    uint8
	ackTimeoutSet bool
	reuseaddr     bool // rdma_set_option's RDMA_OPTION_ID_REUSEADDR
	param         ConnParam
	dreqRcvd      bool
	// disconnected: DISCONNECTED was reported. Linux's rdma_cm reports it once, at the
	// first DREQ, DREP or DREQ timeout (cma_ib_handler's CONNECT → DISCONNECT exchange),
	// whether or not the user had called rdma_disconnect before.
	disconnected bool
	groups       map[netip.Addr]sa.MCGroup // joined multicast groups
	pending      int                       // events not yet acknowledged
	acked        *sync.Cond
	cancel       context.CancelFunc
}

// CreateID is rdma_create_id: an ID in port space ps whose events go to ch. qpType is
// RC for the TCP and IB port spaces, UD for UDP and IPoIB.
func CreateID(host Host, ch *EventChannel, ctx any, ps PortSpace) (*ID, error) {
	if host == nil || ch == nil {
		return nil, fmt.Errorf("rdmacm: CreateID: %w", syscall.EINVAL)
	}
	t := hca.QPTypeRC
	switch ps {
	case PSTCP, PSIB:
	case PSUDP, PSIPoIB:
		t = hca.QPTypeUD
	default:
		return nil, fmt.Errorf("rdmacm: port space %v: %w", ps, syscall.EPROTONOSUPPORT)
	}
	id := &ID{host: host, ps: ps, qpType: t, Context: ctx, psn: newPSN()}
	id.ch.Store(ch)
	id.acked = sync.NewCond(&id.mu)
	return id, nil
}

// newPSN is an ID's PSN, random as Linux's rdma_create_id makes seq_num (24 bits).
func newPSN() uint32 { return rand.Uint32() & 0xFFFFFF }

// Migrate is rdma_migrate_id: the ID's events go to ch from now on, with those still
// queued on its old channel (the kernel's ucma_migrate_id moves them too); requests to a
// listening ID follow it.
func (id *ID) Migrate(ch *EventChannel) error {
	if ch == nil {
		return fmt.Errorf("rdmacm: migrate_id: %w", syscall.EINVAL)
	}
	old := id.ch.Load()
	if old == ch {
		return nil
	}
	// Under the old channel's lock an emit that read the old channel finds it moved and
	// tries again (push's check), so nothing lands there after the move.
	old.mu.Lock()
	id.ch.Store(ch)
	var moved []*Event
	old.q, moved = TakeEvents(old.q, id)
	old.mu.Unlock()
	for _, e := range moved {
		ch.push(e, nil)
	}
	return nil
}

// PortSpace is the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QP is the ID's QP (rdma_cm_id.qp), nil before CreateQP.
func (id *ID) QP() *hca.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

// Device is the device the ID is bound to (rdma_cm_id.verbs and port_num).
func (id *ID) Device() Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dev
}

// LocalAddr and PeerAddr are rdma_get_local_addr and rdma_get_peer_addr.
func (id *ID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.src
}

func (id *ID) PeerAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dst
}

// SetReuseAddr is rdma_set_option's RDMA_OPTION_ID_REUSEADDR (the kernel's
// rdma_set_reuseaddr): on any ID but a listening one; off only before the bind.
func (id *ID) SetReuseAddr(reuse bool) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if !(reuse && id.state != stListen) && !(id.state == stIdle && !id.src.IsValid()) {
		return fmt.Errorf("rdmacm: set_reuseaddr: %w", syscall.EINVAL)
	}
	id.reuseaddr = reuse
	if id.src.IsValid() && id.listenID == nil {
		ports.mu.Lock()
		ports.setReuse(portKey{id.host, id.ps, id.src.Port()}, id, reuse)
		ports.mu.Unlock()
	}
	return nil
}

// DGID is the GID the destination address resolved to (the kernel's rdma_addr_get_dgid,
// ucma_query_gid's dst_addr), zero before rdma_resolve_addr's ADDR_RESOLVED.
func (id *ID) DGID() wire.GID {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.dgid
}

// Route is the path the ID resolved (rdma_cm_id.route).
func (id *ID) Route() (sa.Path, bool) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.route, id.routeOK
}

// emit queues an event for the ID on its channel.
func (id *ID) emit(e *Event) {
	if e.ID == nil {
		e.ID = id
	}
	owner := e.ID
	if e.Type == EventConnectRequest {
		owner = e.ListenID
		owner.mu.Lock()
		owner.pending++
		owner.mu.Unlock()
		for !id.ch.Load().push(e, &id.ch) {
		}
		return
	}
	owner.mu.Lock()
	owner.pending++
	owner.mu.Unlock()
	for !id.ch.Load().push(e, &id.ch) {
	}
}

func (id *ID) ackOne() {
	id.mu.Lock()
	if id.pending > 0 {
		id.pending--
	}
	id.acked.Broadcast()
	id.mu.Unlock()
}

// BindAddr is rdma_bind_addr: the ID takes a local address (and its device, unless it
// is the any address) and a port (0: an ephemeral one).
func (id *ID) BindAddr(a netip.AddrPort) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stIdle || id.src.IsValid() {
		return fmt.Errorf("rdmacm: bind: %w", syscall.EINVAL)
	}
	return id.bindLocked(a)
}

func (id *ID) bindLocked(a netip.AddrPort) error {
	// A loopback address takes no device, as the any address (Linux's rdma_bind_addr:
	// cma_any_addr is the zero or the loopback address): a listener listens on every
	// device, rdma_resolve_addr picks the loopback device (cma_resolve_loopback).
	if !a.Addr().IsUnspecified() && !a.Addr().Unmap().IsLoopback() {
		dev, err := id.host.LocalDevice(a.Addr())
		if err != nil {
			return fmt.Errorf("rdmacm: bind %v: %w", a, err)
		}
		id.dev = dev
	}
	port, err := ports.take(id.host, id.ps, a.Addr(), a.Port(), id)
	if err != nil {
		return fmt.Errorf("rdmacm: bind %v: %w", a, err)
	}
	id.src = netip.AddrPortFrom(a.Addr(), port)
	return nil
}

// loopbackDevice is the device a loopback address binds to, as Linux's cma_bind_loopback
// picks it: the first with an active port, else the first.
func loopbackDevice(h Host) (Device, error) {
	devs := h.Devices()
	if len(devs) == 0 {
		return Device{}, syscall.ENODEV
	}
	for _, d := range devs {
		if d.Port != nil && d.Port.State() == hca.PortActive {
			return d, nil
		}
	}
	return devs[0], nil
}

// TakeEvents removes from q (in place) the events of id and the connection requests to it,
// and returns what is left and what it took, both in order.
func TakeEvents(q []*Event, id *ID) (rest, taken []*Event) {
	rest = q[:0]
	for _, e := range q {
		if e.ID == id || e.ListenID == id {
			taken = append(taken, e)
		} else {
			rest = append(rest, e)
		}
	}
	clear(q[len(rest):])
	return rest, taken
}

// ResolveAddr is rdma_resolve_addr: it picks the local address (src, or the one the
// host would use) and resolves dst to its GID, then reports ADDR_RESOLVED or
// ADDR_ERROR on the channel. timeout bounds the neighbour resolution.
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	id.mu.Lock()
	if id.state != stIdle {
		id.mu.Unlock()
		return fmt.Errorf("rdmacm: resolve_addr: %w", syscall.EINVAL)
	}
	loop := dst.Addr().Unmap().IsLoopback()
	if !id.src.IsValid() {
		if loop && (!src.IsValid() || src.IsUnspecified()) {
			src = dst.Addr() // cma_resolve_loopback: the loopback device, from the loopback address
		} else if !src.IsValid() || src.IsUnspecified() {
			s, err := id.host.Source(dst.Addr())
			if err != nil {
				id.mu.Unlock()
				return fmt.Errorf("rdmacm: resolve_addr %v: %w", dst, err)
			}
			src = s
		}
		if err := id.bindLocked(netip.AddrPortFrom(src, 0)); err != nil {
			id.mu.Unlock()
			return err
		}
		if loop {
			// cma_bind_loopback: a loopback source took no device at the bind.
			dev, err := loopbackDevice(id.host)
			if err != nil {
				id.mu.Unlock()
				return fmt.Errorf("rdmacm: resolve_addr %v: %w", dst, err)
			}
			id.dev = dev
		} else if src.Unmap().IsLoopback() {
			id.mu.Unlock()
			return fmt.Errorf("rdmacm: resolve_addr %v from %v: %w", dst, src, syscall.EINVAL)
		}
	} else if id.ib.on {
		id.mu.Unlock()
		return fmt.Errorf("rdmacm: resolve_addr: an IP destination for an AF_IB ID: %w", syscall.EINVAL)
	} else if id.dev.Port == nil && loop {
		// cma_resolve_loopback → cma_bind_loopback: bound to the any or a loopback address.
		dev, err := loopbackDevice(id.host)
		if err != nil {
			id.mu.Unlock()
			return fmt.Errorf("rdmacm: resolve_addr %v: %w", dst, err)
		}
		if id.src.Addr().IsUnspecified() {
			id.src = netip.AddrPortFrom(dst.Addr(), id.src.Port())
		}
		id.dev = dev
	} else if id.src.Addr().Unmap().IsLoopback() {
		// The route from a loopback source to another host's address is refused
		// (__mkroute_output: EINVAL).
		id.mu.Unlock()
		return fmt.Errorf("rdmacm: resolve_addr %v from %v: %w", dst, id.src.Addr(), syscall.EINVAL)
	} else if id.src.Addr().IsUnspecified() {
		s, err := id.host.Source(dst.Addr())
		if err != nil {
			id.mu.Unlock()
			return fmt.Errorf("rdmacm: resolve_addr %v: %w", dst, err)
		}
		dev, err := id.host.LocalDevice(s)
		if err != nil {
			id.mu.Unlock()
			return err
		}
		id.src, id.dev = netip.AddrPortFrom(s, id.src.Port()), dev
	}
	id.dst = dst
	if dst.Addr().IsMulticast() {
		// A group: no neighbour to ask. Its address maps to its MGID (RFC 4391 §4), as
		// Linux's IPoIB neighbour for a multicast address needs no ARP (NUD_NOARP), and
		// rdma_join_multicast follows (mckey).
		mgid, err := mcMGID(dst.Addr(), id.dev.PKey, id.ps)
		if err != nil {
			id.mu.Unlock()
			return fmt.Errorf("rdmacm: resolve_addr %v: %w", dst, err)
		}
		id.dgid = mgid
		id.state = stAddrResolved
		id.mu.Unlock()
		go id.emit(&Event{Type: EventAddrResolved})
		return nil
	}
	if loop {
		// Linux's cma_resolve_loopback: the destination is the ID's own port (its GID),
		// reached through the HCA, as rping -a 127.0.0.1 does on a host with RDMA.
		gid, ok := id.dev.Port.GID(0)
		if !ok {
			id.mu.Unlock()
			return fmt.Errorf("rdmacm: resolve_addr %v: %w", dst, syscall.EADDRNOTAVAIL)
		}
		id.dgid = gid
		id.state = stAddrResolved
		id.mu.Unlock()
		go id.emit(&Event{Type: EventAddrResolved})
		return nil
	}
	id.state = stAddrQuery
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Millisecond))
	id.cancel = cancel
	srcAddr := id.src.Addr()
	id.mu.Unlock()
	go func() {
		defer cancel()
		gid, err := id.host.Neighbor(ctx, srcAddr, dst.Addr())
		id.mu.Lock()
		if id.state != stAddrQuery {
			id.mu.Unlock()
			return
		}
		if err != nil {
			id.state = stIdle
			id.mu.Unlock()
			// Linux retries an unresolved neighbour until the timeout and reports
			// ETIMEDOUT (addr.c); a failure the host reported as the time ran out is that.
			st := errno(syscall.EHOSTUNREACH)
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) || ctx.Err() != nil {
				st = errno(syscall.ETIMEDOUT)
			}
			id.emit(&Event{Type: EventAddrError, Status: st})
			return
		}
		id.dgid = gid
		id.state = stAddrResolved
		id.mu.Unlock()
		id.emit(&Event{Type: EventAddrResolved})
	}()
	return nil
}

// ResolveRoute is rdma_resolve_route: a PathRecord from the ID's port to the resolved
// GID, then ROUTE_RESOLVED or ROUTE_ERROR.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	id.mu.Lock()
	if id.state != stAddrResolved {
		id.mu.Unlock()
		return fmt.Errorf("rdmacm: resolve_route: %w", syscall.EINVAL)
	}
	id.state = stRouteQuery
	dev, dgid := id.dev, id.dgid
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Millisecond))
	id.cancel = cancel
	id.mu.Unlock()
	go func() {
		defer cancel()
		p, err := id.host.PathRecord(ctx, dev, dgid)
		id.mu.Lock()
		if id.state != stRouteQuery {
			id.mu.Unlock()
			return
		}
		if err != nil {
			id.state = stAddrResolved
			id.mu.Unlock()
			st := errno(syscall.EHOSTUNREACH)
			if errors.Is(err, context.DeadlineExceeded) {
				st = errno(syscall.ETIMEDOUT)
			}
			id.emit(&Event{Type: EventRouteError, Status: st})
			return
		}
		id.route, id.routeOK = p, true
		id.state = stRouteResolved
		id.mu.Unlock()
		id.emit(&Event{Type: EventRouteResolved})
	}()
	return nil
}

// CreateQP is rdma_create_qp: a QP of the ID's type on its device, in pd, moved to INIT
// (RTS for UD, with the port space's Q_Key), as rdma_cm does.
func (id *ID) CreateQP(pd *hca.PD, attr hca.QPInitAttr) (*hca.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp != nil || id.dev.Port == nil {
		return nil, fmt.Errorf("rdmacm: create_qp: %w", syscall.EINVAL)
	}
	if pd.Context().Device() != id.dev.Port.Device() {
		return nil, fmt.Errorf("rdmacm: create_qp: the PD is on %s, the ID on %s: %w",
			pd.Context().Device().Name(), id.dev.Port.Device().Name(), syscall.EINVAL)
	}
	attr.QPType = id.qpType
	qp, err := pd.CreateQP(attr)
	if err != nil {
		return nil, err
	}
	if err := id.initQP(qp); err != nil {
		qp.Destroy()
		return nil, err
	}
	id.qp = qp
	return qp, nil
}

// initQP moves a new QP to INIT (UD: through RTR to RTS) on the ID's port and P_Key.
func (id *ID) initQP(qp *hca.QP) error {
	a, mask, err := id.portAttr(hca.QPStateInit)
	if err != nil {
		return err
	}
	if id.qpType != hca.QPTypeUD {
		a.QPAccessFlags = hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
		mask |= hca.QPAttrAccessFlags
	}
	if err := qp.Modify(&a, mask); err != nil {
		return err
	}
	if id.qpType != hca.QPTypeUD {
		return nil
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState); err != nil {
		return err
	}
	return qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: rand.Uint32() & 0xFFFFFF}, hca.QPAttrState|hca.QPAttrSQPSN)
}

// portAttr is a transition to state on the ID's port and P_Key — the port, the P_Key's
// index and, for UD, the port space's Q_Key (Linux's cma_ib_init_qp_attr); mu held.
func (id *ID) portAttr(state hca.QPState) (hca.QPAttr, hca.QPAttrMask, error) {
	idx := id.dev.Port.FindPKey(id.dev.PKey)
	if idx < 0 {
		return hca.QPAttr{}, 0, fmt.Errorf("rdmacm: P_Key %#04x not in the port's table: %w", id.dev.PKey, syscall.EINVAL)
	}
	a := hca.QPAttr{QPState: state, PKeyIndex: uint16(idx), PortNum: id.dev.Port.Num()}
	mask := hca.QPAttrState | hca.QPAttrPKeyIndex | hca.QPAttrPort
	if id.qpType == hca.QPTypeUD {
		a.QKey = UDPQKey
		mask |= hca.QPAttrQKey
	}
	return a, mask, nil
}

// InitQPAttr is rdma_init_qp_attr: the attributes, and their mask, that take a QP the
// program made itself (not with CreateQP) to state on this ID's port and connection, as
// Linux's rdma_init_qp_attr gives them:
//   - before a connection exists, and always for UD (cma_ib_init_qp_attr): the ID's port,
//     its P_Key's index, and the port space's Q_Key (UD) or no remote access (RC);
//   - INIT on a connection (ib_cm_init_qp_attr): remote writes, and reads and atomics
//     when the side takes any (responder resources);
//   - RTR and RTS once the peer's REQ (passive) or REP (active, CONNECT_RESPONSE) is in:
//     the path, the peer's QP, the PSNs and the RDMA READ depths both sides agreed.
//
// On a connection, RTR/RTS before the peer's message and other states are EINVAL.
func (id *ID) InitQPAttr(state hca.QPState) (hca.QPAttr, hca.QPAttrMask, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	fail := func() (hca.QPAttr, hca.QPAttrMask, error) {
		return hca.QPAttr{}, 0, fmt.Errorf("rdmacm: init_qp_attr %v: %w", state, syscall.EINVAL)
	}
	if id.dev.Port == nil {
		return fail()
	}
	base, baseMask, err := id.portAttr(state)
	if err != nil {
		return hca.QPAttr{}, 0, err
	}
	if id.qpType == hca.QPTypeUD || id.cmid == nil {
		if id.qpType != hca.QPTypeUD {
			baseMask |= hca.QPAttrAccessFlags // none
		}
		return base, baseMask, nil
	}
	peer := id.req
	switch state {
	case hca.QPStateInit:
		resp := id.param.ResponderResources
		if peer != nil {
			resp = peer.InitiatorDepth
		}
		base.QPAccessFlags = hca.AccessRemoteWrite
		if resp > 0 {
			base.QPAccessFlags |= hca.AccessRemoteRead | hca.AccessRemoteAtomic
		}
		return base, baseMask | hca.QPAttrAccessFlags, nil
	case hca.QPStateRTR:
		if peer == nil {
			return fail()
		}
		a, mask := id.rtrAttr(peer.QPN, peer.InitiatorDepth)
		return a, mask, nil
	case hca.QPStateRTS:
		if peer == nil {
			return fail()
		}
		a, mask := id.rtsAttr(peer.StartingPSN, peer.ResponderRes, peer.RetryCount, peer.RNRRetryCount)
		return a, mask, nil
	}
	return fail()
}

// SetAckTimeout is rdma_set_option's RDMA_OPTION_ID_ACK_TIMEOUT (Linux's
// rdma_set_ack_timeout): the local ACK timeout (4.096 µs × 2^t, IBA 9.7.6.1.3) that RTS
// gives the ID's RC QP from now on, in place of the one derived from the path's packet
// lifetime; EINVAL for another QP type or t above 31.
func (id *ID) SetAckTimeout(t uint8) error {
	if id.qpType != hca.QPTypeRC || t > 31 {
		return fmt.Errorf("rdmacm: set ack timeout %d: %w", t, syscall.EINVAL)
	}
	id.mu.Lock()
	id.ackTimeout, id.ackTimeoutSet = t, true
	id.mu.Unlock()
	return nil
}

// DestroyQP is rdma_destroy_qp.
func (id *ID) DestroyQP() {
	id.mu.Lock()
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	if qp != nil {
		qp.Destroy()
	}
}

// Listen is rdma_listen: CONNECT_REQUEST events for connections to the bound address
// and port arrive on new IDs. backlog is accepted for librdmacm's signature; as on
// Linux's IB transport it does not limit anything.
func (id *ID) Listen(backlog int) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stIdle {
		return fmt.Errorf("rdmacm: listen: %w", syscall.EINVAL)
	}
	if !id.src.IsValid() {
		if err := id.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
	}
	if id.reuseaddr {
		// rdma_listen: a listener's address and port are its alone.
		if err := ports.listen(id.host, id.ps, id.src, id); err != nil {
			return fmt.Errorf("rdmacm: listen on %v: %w", id.src, err)
		}
		id.reuseaddr = false
	}
	devs := []Device{id.dev}
	if id.dev.CM == nil {
		devs = id.host.Devices()
	}
	sid := ServiceID(id.ps, id.src.Port())
	if id.ib.on {
		sid = id.ib.src.SID // cma_ib_listen: an AF_IB address's own service ID
	}
	seen := map[*ibcm.CM]bool{}
	for _, d := range devs {
		if seen[d.CM] {
			continue
		}
		seen[d.CM] = true
		l := d.CM.NewID(id.onListenCM, d)
		if err := l.Listen(sid, 0); err != nil {
			for _, x := range id.listens {
				x.Destroy()
			}
			id.listens = nil
			if errors.Is(err, ibcm.ErrBusy) {
				return fmt.Errorf("rdmacm: listen on %v: %w", id.src, syscall.EADDRINUSE)
			}
			return err
		}
		id.listens = append(id.listens, l)
	}
	id.state = stListen
	return nil
}
