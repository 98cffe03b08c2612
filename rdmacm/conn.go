package rdmacm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// ports hands out port numbers per host and port space, as the kernel's bind does.
var ports = &portTable{m: map[portKey][]portOwner{}}

type portKey struct {
	host Host
	ps   PortSpace
	port uint16
}

type portOwner struct {
	id    *ID
	addr  netip.Addr
	reuse bool // the ID's REUSEADDR (rdma_set_option)
}

// portTable is the kernel's bind lists (cma_ps_find): a port space's port, with the IDs
// bound to it and their addresses.
type portTable struct {
	mu sync.Mutex
	m  map[portKey][]portOwner
}

// take reserves port on address a for id (its mu held; port 0: an ephemeral one,
// 32768–60999 as Linux's ip_local_port_range, one no ID has). A port in use is shared by
// distinct specific addresses, and by IDs that all set REUSEADDR; else the same address
// again is EADDRINUSE and the any address beside another EADDRNOTAVAIL (the kernel's
// cma_use_port → cma_check_port).
func (t *portTable) take(h Host, ps PortSpace, a netip.Addr, port uint16, id *ID) (uint16, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a = a.Unmap()
	if port != 0 {
		k := portKey{h, ps, port}
		if err := t.check(k, id, a, id.reuseaddr); err != nil {
			return 0, err
		}
		t.m[k] = append(t.m[k], portOwner{id, a, id.reuseaddr})
		return port, nil
	}
	for range 1 << 16 {
		p := uint16(32768 + rand.IntN(60999-32768+1))
		k := portKey{h, ps, p}
		if len(t.m[k]) == 0 {
			t.m[k] = []portOwner{{id, a, id.reuseaddr}}
			return p, nil
		}
	}
	return 0, syscall.EADDRNOTAVAIL // cma_alloc_any_port
}

// check is cma_check_port: whether id may have port k on address a beside its other
// owners; t.mu held.
func (t *portTable) check(k portKey, id *ID, a netip.Addr, reuse bool) error {
	for _, o := range t.m[k] {
		if o.id == id || (reuse && o.reuse) {
			continue
		}
		if a.IsUnspecified() || o.addr.IsUnspecified() {
			return syscall.EADDRNOTAVAIL
		}
		if o.addr == a {
			return syscall.EADDRINUSE
		}
	}
	return nil
}

// listen is rdma_listen's check of a REUSEADDR ID's port: a listener's address and port
// are its alone (cma_check_port without reuse); then the ID's REUSEADDR is off.
func (t *portTable) listen(h Host, ps PortSpace, a netip.AddrPort, id *ID) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := portKey{h, ps, a.Port()}
	if err := t.check(k, id, a.Addr().Unmap(), false); err != nil {
		return err
	}
	t.setReuse(k, id, false)
	return nil
}

// setReuse records id's REUSEADDR with its port; t.mu held.
func (t *portTable) setReuse(k portKey, id *ID, reuse bool) {
	for i := range t.m[k] {
		if t.m[k][i].id == id {
			t.m[k][i].reuse = reuse
		}
	}
}

func (t *portTable) release(h Host, ps PortSpace, port uint16, id *ID) {
	t.mu.Lock()
	k := portKey{h, ps, port}
	l := t.m[k]
	for i, o := range l {
		if o.id == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(t.m, k)
	} else {
		t.m[k] = l
	}
	t.mu.Unlock()
}

// Connect is rdma_connect: REQ (RC) or SIDR_REQ (UD) to the resolved route, with the
// IP CM header and p.Private after it. ESTABLISHED follows (CONNECT_RESPONSE for an ID
// without a QP), or REJECTED, UNREACHABLE, CONNECT_ERROR.
func (id *ID) Connect(p ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stRouteResolved {
		return fmt.Errorf("rdmacm: connect: %w", syscall.EINVAL)
	}
	max := MaxConnectPrivate
	if id.qpType == hca.QPTypeUD {
		max = MaxSIDRReqPrivate
	}
	hdr := ipcmHeaderLen
	if id.ib.on {
		// AF_IB: the user's data alone, the header's room too (cma_user_data_offset 0).
		hdr, max = 0, max+ipcmHeaderLen
	}
	if len(p.Private) > max {
		return fmt.Errorf("rdmacm: connect: %d bytes of private data, at most %d: %w", len(p.Private), max, syscall.EINVAL)
	}
	priv := make([]byte, hdr+len(p.Private))
	if hdr > 0 {
		putIPCM(priv, ipcmHeader{src: id.src, dst: id.dst})
	}
	copy(priv[hdr:], p.Private)
	id.param = p
	id.cmid = id.dev.CM.NewID(id.onCM, nil)
	sid := ServiceID(id.ps, id.dst.Port())
	if id.ib.on {
		sid = id.ib.dst.SID // rdma_get_service_id: an AF_IB address's own
	}
	if id.qpType == hca.QPTypeUD {
		id.state = stConnect
		err := id.cmid.SendSIDRReq(ibcm.SIDRReqParam{ServiceID: sid, PKey: id.dev.PKey, DLID: id.route.DLID,
			SL: id.route.SL, Timeout: cmaResponseTimeout, MaxRetries: cmaMaxCMRetries, Private: priv})
		if err != nil {
			id.state = stRouteResolved
		}
		return err
	}
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.Num()
	}
	err := id.cmid.SendReq(ibcm.ReqParam{
		ServiceID: sid, QPN: qpn, QPType: hca.QPTypeRC, StartingPSN: id.psn, PKey: id.dev.PKey,
		Path: id.route, ResponderRes: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: cmaResponseTimeout, LocalCMResponseTimeout: cmaResponseTimeout,
		RetryCount: min(p.RetryCount, 7), RNRRetryCount: min(p.RNRRetryCount, 7),
		MaxCMRetries: cmaMaxCMRetries, SRQ: p.SRQ, FlowControl: p.FlowControl, Private: priv,
	})
	if err != nil {
		return err
	}
	id.state = stConnect
	return nil
}

// move changes the ID's state from from to to, and reports whether it was in from.
func (id *ID) move(from, to idState) bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != from {
		return false
	}
	id.state = to
	return true
}

// onCM takes the IB CM's events for a connecting or connected ID.
func (id *ID) onCM(c *ibcm.ID, ev *ibcm.Event) {
	switch ev.Type {
	case ibcm.EventRepReceived:
		id.repReceived(c, ev)
	case ibcm.EventRTUReceived, ibcm.EventUserEstablished:
		if id.move(stConnect, stConnected) {
			id.emit(&Event{Type: EventEstablished})
		}
	case ibcm.EventRejReceived:
		if id.move(stConnect, stRouteResolved) {
			// The QP goes to the error state, its posted receives flushed, as Linux's
			// rdma_cm (cma_modify_qp_err) and librdmacm (ucma_modify_qp_err) do at REJECTED.
			id.qpToError()
			id.emit(&Event{Type: EventRejected, Status: int(ev.Reason), Param: ConnParam{Private: ev.Private}})
		}
	case ibcm.EventReqError, ibcm.EventRepError, ibcm.EventSIDRReqError:
		if id.move(stConnect, stRouteResolved) {
			id.emit(&Event{Type: EventUnreachable, Status: errno(syscall.ETIMEDOUT)})
		}
	case ibcm.EventDReqReceived:
		// The QP stays as it is until the consumer's rdma_disconnect: neither Linux's
		// rdma_cm (cma_ib_handler) nor librdmacm (rdma_get_cm_event) touches it here. A
		// SEND of this side whose ACK is still on its way completes, not flushed.
		id.mu.Lock()
		id.dreqRcvd = true
		ok := id.endConnection()
		id.mu.Unlock()
		if ok {
			// No private data: Linux's cma_ib_handler reports none with DISCONNECTED.
			id.emit(&Event{Type: EventDisconnected})
		}
	case ibcm.EventDRepReceived, ibcm.EventDReqError:
		id.mu.Lock()
		ok := id.endConnection()
		id.mu.Unlock()
		if ok {
			// A DREQ never answered: status -ETIMEDOUT (cma_ib_handler, IB_CM_DREQ_ERROR).
			st := 0
			if ev.Type == ibcm.EventDReqError {
				st = errno(syscall.ETIMEDOUT)
			}
			id.emit(&Event{Type: EventDisconnected, Status: st})
		}
	case ibcm.EventTimeWaitExit:
		id.emit(&Event{Type: EventTimewaitExit})
	case ibcm.EventSIDRRepReceived:
		id.mu.Lock()
		ok := id.state == stConnect
		id.state = stRouteResolved
		route := id.route
		port := id.dev.Port
		id.mu.Unlock()
		if !ok {
			return
		}
		if ev.SIDRStatus != wire.SIDRStatusOK {
			// The SIDR_REP's status as it is, with its private data (cma_sidr_rep_handler).
			id.emit(&Event{Type: EventUnreachable, Status: int(ev.SIDRStatus), UD: UDParam{Private: ev.Private}})
			return
		}
		id.emit(&Event{Type: EventEstablished, UD: UDParam{Private: ev.Private, QPNum: ev.QPN, QKey: ev.QKey,
			AHAttr: hca.AHAttr{DLID: route.DLID, SL: route.SL, PortNum: port.Num()}}})
	}
}

// repReceived moves the active side's QP to RTR and RTS from the REP and sends RTU (as
// rdma_cm does), then reports ESTABLISHED; without a QP it reports CONNECT_RESPONSE and
// waits for Establish.
func (id *ID) repReceived(c *ibcm.ID, ev *ibcm.Event) {
	id.mu.Lock()
	if id.state != stConnect {
		id.mu.Unlock()
		return
	}
	rep := ev.Rep
	qp := id.qp
	// As this side sees them, swapped (Linux's cm_format_rep_event): its responder
	// resources are the peer's initiator depth.
	param := ConnParam{Private: ev.Private, ResponderResources: rep.InitiatorDepth, InitiatorDepth: rep.ResponderRes,
		FlowControl: rep.FlowControl, RNRRetryCount: rep.RNRRetryCount, SRQ: rep.SRQ, QPNum: rep.QPN}
	if qp == nil {
		// The peer's side of the connection, for InitQPAttr (rdma_init_qp_attr).
		id.req = &ibcm.ReqParam{QPN: rep.QPN, StartingPSN: rep.StartingPSN, ResponderRes: rep.ResponderRes,
			InitiatorDepth: rep.InitiatorDepth, RetryCount: min(id.param.RetryCount, 7), RNRRetryCount: rep.RNRRetryCount}
		id.mu.Unlock()
		id.emit(&Event{Type: EventConnectResponse, Param: param})
		return
	}
	err := id.connectQP(qp, rep.QPN, rep.StartingPSN, min(id.param.ResponderResources, rep.InitiatorDepth),
		min(id.param.InitiatorDepth, rep.ResponderRes), min(id.param.RetryCount, 7), rep.RNRRetryCount)
	if err != nil {
		id.state = stRouteResolved
		id.mu.Unlock()
		c.SendRej(wire.RejConsumerReject, nil, nil)
		id.emit(&Event{Type: EventConnectError, Status: errno(syscall.EINVAL)})
		return
	}
	id.state = stConnected
	id.mu.Unlock()
	if err := c.SendRTU(nil); err != nil {
		id.emit(&Event{Type: EventConnectError, Status: errno(syscall.EINVAL)})
		return
	}
	id.emit(&Event{Type: EventEstablished, Param: param})
}

// connectQP takes an INIT QP to RTR and RTS toward the peer on the ID's route; mu held.
// peerPSN is the Starting PSN of the peer's REQ or REP: the PSN this side sends first.
func (id *ID) connectQP(qp *hca.QP, destQPN, peerPSN uint32, maxDestRd, maxRd, retry, rnrRetry uint8) error {
	a, mask := id.rtrAttr(destQPN, maxDestRd)
	if err := qp.Modify(&a, mask); err != nil {
		return err
	}
	a, mask = id.rtsAttr(peerPSN, maxRd, retry, rnrRetry)
	return qp.Modify(&a, mask)
}

// rtrAttr is the RTR transition toward the peer's QP destQPN on the ID's route. The
// receive queue expects the PSN this side sent as its Starting PSN (id.psn): in a REQ
// or REP, Starting PSN is what its sender's receive queue expects, and the other side's
// send queue starts there — Linux's ib_cm sets each side's sq_psn from the Starting PSN
// it received (cm_req_handler, cm_rep_handler), rdma_cm the rq_psn from its own
// (rdma_init_qp_attr: rq_psn = seq_num), IPoIB-CM likewise (ipoib_cm_req_handler).
// mu held.
func (id *ID) rtrAttr(destQPN uint32, maxDestRd uint8) (hca.QPAttr, hca.QPAttrMask) {
	r := id.route
	mtu := hca.MTU(r.MTU)
	if pm := id.dev.Port.ActiveMTU(); pm < mtu {
		mtu = pm
	}
	a := hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: mtu, DestQPNum: destQPN, RQPSN: id.psn,
		AHAttr:          hca.AHAttr{DLID: r.DLID, SL: r.SL, PortNum: id.dev.Port.Num(), StaticRate: 0},
		MaxDestRdAtomic: maxDestRd}
	return a, hca.QPAttrState | hca.QPAttrAV | hca.QPAttrPathMTU | hca.QPAttrDestQPN | hca.QPAttrRQPSN |
		hca.QPAttrMaxDestRdAtomic | hca.QPAttrMinRNRTimer
}

// rtsAttr is the RTS transition: the send queue starts at the peer's Starting PSN; mu held.
func (id *ID) rtsAttr(peerPSN uint32, maxRd, retry, rnrRetry uint8) (hca.QPAttr, hca.QPAttrMask) {
	a := hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: peerPSN, Timeout: min(id.route.PacketLifeTime+1, 31),
		RetryCnt: retry, RNRRetry: rnrRetry, MaxRdAtomic: maxRd}
	if id.ackTimeoutSet {
		a.Timeout = id.ackTimeout // as Linux's rdma_init_qp_attr
	}
	return a, hca.QPAttrState | hca.QPAttrSQPSN | hca.QPAttrTimeout | hca.QPAttrRetryCnt |
		hca.QPAttrRNRRetry | hca.QPAttrMaxQPRdAtomic
}

// Establish is rdma_establish: for an ID without a QP that got CONNECT_RESPONSE, it
// sends the RTU.
func (id *ID) Establish() error {
	id.mu.Lock()
	c := id.cmid
	ok := id.state == stConnect && id.qp == nil
	if ok {
		id.state = stConnected
	}
	id.mu.Unlock()
	if !ok || c == nil {
		return fmt.Errorf("rdmacm: establish: %w", syscall.EINVAL)
	}
	return c.SendRTU(nil)
}

// onListenCM takes REQs and SIDR_REQs for a listening ID: each becomes a new ID and a
// CONNECT_REQUEST event.
func (id *ID) onListenCM(c *ibcm.ID, ev *ibcm.Event) {
	if ev.Type != ibcm.EventReqReceived && ev.Type != ibcm.EventSIDRReqReceived {
		return
	}
	dev := c.Context.(Device)
	id.mu.Lock()
	listening := id.state == stListen
	port := id.src.Port()
	lib := id.ib
	id.mu.Unlock()
	if !listening {
		c.SendRej(wire.RejConsumerReject, nil, nil)
		return
	}
	// An AF_IB listener takes the REQ as it is (Linux's cma_save_net_info → cma_save_ib_info):
	// no IP CM header, the addresses from the path.
	var h ipcmHeader
	var nib afIB
	hdr := ipcmHeaderLen
	var err error
	if lib.on {
		nib, hdr = passiveIB(lib, ev, dev), 0
		h = ipcmHeader{src: nib.dst.ipForm(), dst: nib.src.ipForm()}
	} else {
		h, err = parseIPCM(ev.Private, port)
	}
	if err != nil {
		if ev.Type == ibcm.EventSIDRReqReceived {
			c.SendSIDRRep(ibcm.SIDRRepParam{Status: wire.SIDRStatusRejected})
		} else {
			c.SendRej(wire.RejConsumerReject, nil, nil)
		}
		return
	}
	n := &ID{host: id.host, ps: id.ps, qpType: id.qpType, Context: id.Context,
		state: stConnect, src: h.dst, dst: h.src, ib: nib, dev: dev, cmid: c, listenID: id, psn: newPSN()}
	n.ch.Store(id.ch.Load())
	n.acked = sync.NewCond(&n.mu)
	n.dev.PKey = ev.Req.PKey
	if n.dev.PKey == 0 {
		n.dev.PKey = dev.PKey
	}
	e := &Event{Type: EventConnectRequest, ID: n, ListenID: id}
	priv := ev.Private[hdr:]
	if ev.Type == ibcm.EventReqReceived {
		req := *ev.Req
		n.req = &req
		n.route, n.routeOK = req.Path, true
		// Responder resources and initiator depth as this side sees them, swapped
		// (Linux's cm_format_req_event).
		e.Param = ConnParam{Private: priv, ResponderResources: req.InitiatorDepth, InitiatorDepth: req.ResponderRes,
			FlowControl: req.FlowControl, RetryCount: req.RetryCount, RNRRetryCount: req.RNRRetryCount,
			SRQ: req.SRQ, QPNum: req.QPN}
	} else {
		n.route.DLID, n.route.SL = ev.From.SLID, ev.From.SL
		n.routeOK = true
		e.UD = UDParam{Private: priv}
	}
	c.SetHandler(n.onCM)
	id.emit(e)
}

// Accept is rdma_accept: the passive side's QP goes to RTR and RTS from the REQ and the
// REP is sent (ESTABLISHED follows on the RTU); for UD, the SIDR_REP with the QP's
// number and Q_Key.
func (id *ID) Accept(p ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stConnect || id.listenID == nil || id.cmid == nil {
		return fmt.Errorf("rdmacm: accept: %w", syscall.EINVAL)
	}
	if id.qpType == hca.QPTypeUD {
		if len(p.Private) > MaxAcceptUDPrivate {
			return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d: %w", len(p.Private), MaxAcceptUDPrivate, syscall.EINVAL)
		}
		qpn := p.QPNum
		if id.qp != nil {
			qpn = id.qp.Num()
		}
		id.state = stConnected
		return id.cmid.SendSIDRRep(ibcm.SIDRRepParam{Status: wire.SIDRStatusOK, QPN: qpn, QKey: UDPQKey, Private: p.Private})
	}
	if len(p.Private) > MaxAcceptPrivate {
		return fmt.Errorf("rdmacm: accept: %d bytes of private data, at most %d: %w", len(p.Private), MaxAcceptPrivate, syscall.EINVAL)
	}
	req := id.req
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.Num()
		if err := id.connectQP(id.qp, req.QPN, req.StartingPSN, min(p.ResponderResources, req.InitiatorDepth),
			min(p.InitiatorDepth, req.ResponderRes), req.RetryCount, req.RNRRetryCount); err != nil {
			id.cmid.SendRej(wire.RejConsumerReject, nil, nil)
			return err
		}
	}
	return id.cmid.SendRep(ibcm.RepParam{QPN: qpn, StartingPSN: id.psn,
		ResponderRes: min(p.ResponderResources, req.InitiatorDepth), InitiatorDepth: min(p.InitiatorDepth, req.ResponderRes),
		FlowControl: p.FlowControl, RNRRetryCount: min(p.RNRRetryCount, 7), SRQ: p.SRQ, Private: p.Private})
}

// endConnection moves a connected ID to stDisconnect at the CM event that ends its
// connection and reports whether DISCONNECTED is due: once per connection, also when the
// user's rdma_disconnect came first — DREQs that crossed, or a peer's DREQ that arrived as
// the user disconnected — as in Linux, where rdma_disconnect leaves the state to the CM
// event; mu held.
func (id *ID) endConnection() bool {
	if (id.state != stConnected && id.state != stDisconnect) || id.disconnected {
		return false
	}
	id.state = stDisconnect
	id.disconnected = true
	return true
}

// Reject is rdma_reject: REJ with reason 28 (consumer reject) and private data, or a
// SIDR_REP "rejected".
func (id *ID) Reject(private []byte) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != stConnect || id.listenID == nil || id.cmid == nil {
		return fmt.Errorf("rdmacm: reject: %w", syscall.EINVAL)
	}
	// Too much private data is EINVAL and changes nothing (ib_send_cm_rej,
	// ib_send_cm_sidr_rep check it first).
	max := MaxRejectPrivate
	if id.qpType == hca.QPTypeUD {
		max = MaxAcceptUDPrivate
	}
	if len(private) > max {
		return fmt.Errorf("rdmacm: reject: %d bytes of private data, at most %d: %w", len(private), max, syscall.EINVAL)
	}
	id.state = stIdle
	if id.qpType == hca.QPTypeUD {
		return id.cmid.SendSIDRRep(ibcm.SIDRRepParam{Status: wire.SIDRStatusRejected, Private: private})
	}
	return id.cmid.SendRej(wire.RejConsumerReject, nil, private)
}

// Disconnect is rdma_disconnect: the QP goes to the error state (its WRs flush) and a
// DREQ is sent, or the DREP if the peer disconnected first.
func (id *ID) Disconnect() error {
	id.mu.Lock()
	c := id.cmid
	st := id.state
	dreq := id.dreqRcvd
	if st == stConnected || st == stConnect {
		id.state = stDisconnect
	}
	id.mu.Unlock()
	if c == nil || (st != stConnected && st != stDisconnect && st != stConnect) {
		return fmt.Errorf("rdmacm: disconnect: %w", syscall.EINVAL)
	}
	id.qpToError()
	if dreq {
		return c.SendDRep(nil)
	}
	if st == stConnect {
		return c.SendRej(wire.RejConsumerReject, nil, nil)
	}
	if err := c.SendDReq(nil); err != nil {
		// The peer's DREQ reached the CM before its event reached this ID: answer it,
		// as rdma_disconnect does when ib_send_cm_dreq fails (the event, on its way,
		// reports DISCONNECTED).
		if errors.Is(err, ibcm.ErrState) && c.SendDRep(nil) == nil {
			return nil
		}
		if st == stConnected {
			return err
		}
	}
	return nil
}

func (id *ID) qpToError() {
	id.mu.Lock()
	qp := id.qp
	id.mu.Unlock()
	if qp != nil && qp.Type() != hca.QPTypeUD {
		qp.Modify(&hca.QPAttr{QPState: hca.QPStateErr}, hca.QPAttrState)
	}
}

// Destroy is rdma_destroy_id: it waits for the ID's events to be acknowledged, ends
// what the ID has under way (a connection is disconnected, a request rejected) and
// releases its port.
func (id *ID) Destroy() error {
	id.mu.Lock()
	for id.pending > 0 && !id.chClosed() {
		id.acked.Wait()
	}
	id.state = stDestroying
	if id.cancel != nil {
		id.cancel()
	}
	c, ls := id.cmid, id.listens
	id.cmid, id.listens = nil, nil
	src := id.src
	id.mu.Unlock()
	for _, l := range ls {
		l.Destroy()
	}
	if c != nil {
		c.Destroy()
	}
	id.leaveAll()
	if src.IsValid() && id.listenID == nil {
		ports.release(id.host, id.ps, src.Port(), id)
	}
	return nil
}

func (id *ID) chClosed() bool {
	ch := id.ch.Load()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.closed
}
