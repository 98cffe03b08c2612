//go:build pibgw_cabi

package main

// The Go side of pibgw's librdmacm.so.1 (cabi/rdmacm/cma.c): rdma_cm IDs and event
// channels of package rdmacm on the attach session's host (Session.RDMA). They live in
// this library so that rdma_cm and the verbs share one Go runtime, one session and the
// same verbs objects (an ID's QP is an ibv_qp of this library).

/*
#include <string.h>
#include <netinet/in.h>
#include "pib.h"
#include "pib_cm.h"
*/
import "C"

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm"
)

type cmChan struct {
	ch   *rdmacm.EventChannel
	fd   int
	mu   sync.Mutex
	q    []*rdmacm.Event
	done chan struct{}
}

type cmID struct {
	id   *rdmacm.ID
	h    uint64
	cptr unsafe.Pointer         // its struct rdma_cm_id (C memory)
	ch   atomic.Pointer[cmChan] // changed by rdma_migrate_id under the old channel's mu
}

var (
	cmChans  table[*cmChan]
	cmIDs    table[*cmID]
	cmEvents table[*rdmacm.Event]

	cmMu     sync.Mutex
	cmHandle = map[*rdmacm.ID]uint64{}
)

func cmErr(err error) C.int {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return C.int(e)
	}
	if errors.Is(err, rdmacm.ErrAnyAddress) {
		return C.int(syscall.EADDRNOTAVAIL)
	}
	return C.int(syscall.EINVAL)
}

//export pibcm_create_channel
func pibcm_create_channel(fd C.int) C.uint64_t {
	if pibgo_init() < 0 {
		return 0
	}
	c := &cmChan{ch: rdmacm.CreateEventChannel(), fd: int(fd), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			e, err := c.ch.GetEvent(context.Background())
			if err != nil {
				return
			}
			// An event the Go channel gave out just before its ID moved (rdma_migrate_id)
			// goes to the ID's channel now: checked under that channel's lock, which the
			// move holds.
			for {
				dst := eventChan(e, c)
				dst.mu.Lock()
				if eventChan(e, c) != dst {
					dst.mu.Unlock()
					continue
				}
				dst.q = append(dst.q, e)
				dst.mu.Unlock()
				signal(dst.fd, 1)
				break
			}
		}
	}()
	return C.uint64_t(cmChans.add(c))
}

// eventChan is the channel e belongs on: its ID's (a connection request's: the listening
// ID's), or c for an ID not registered yet.
func eventChan(e *rdmacm.Event, c *cmChan) *cmChan {
	id := e.ID
	if e.Type == rdmacm.EventConnectRequest {
		id = e.ListenID
	}
	cmMu.Lock()
	h, ok := cmHandle[id]
	cmMu.Unlock()
	if !ok {
		return c
	}
	if o, ok := cmIDs.get(C.uint64_t(h)); ok {
		if ch := o.ch.Load(); ch != nil {
			return ch
		}
	}
	return c
}

// pibcm_migrate is rdma_migrate_id: the ID's events — those queued on its channel too —
// go to channel ch from now on.
//
//export pibcm_migrate
func pibcm_migrate(h, ch C.uint64_t) C.int {
	o, ok := cmIDs.get(h)
	n, ok2 := cmChans.get(ch)
	if !ok || !ok2 {
		return einval
	}
	old := o.ch.Load()
	if old == n {
		return 0
	}
	if err := o.id.Migrate(n.ch); err != nil {
		return cmErr(err)
	}
	var moved []*rdmacm.Event
	old.mu.Lock()
	o.ch.Store(n)
	old.q, moved = rdmacm.TakeEvents(old.q, o.id)
	old.mu.Unlock()
	if len(moved) > 0 {
		n.mu.Lock()
		n.q = append(n.q, moved...)
		n.mu.Unlock()
		for range moved {
			signal(n.fd, 1)
		}
	}
	return 0
}

// drop removes the queued events of id (and the requests to it) and discards them: the
// program destroying id never took them.
func (c *cmChan) drop(id *rdmacm.ID) {
	var gone []*rdmacm.Event
	c.mu.Lock()
	c.q, gone = rdmacm.TakeEvents(c.q, id)
	c.mu.Unlock()
	for _, e := range gone {
		e.Discard()
	}
}

//export pibcm_destroy_channel
func pibcm_destroy_channel(h C.uint64_t) {
	c, ok := cmChans.get(h)
	if !ok {
		return
	}
	c.ch.Destroy()
	<-c.done
	cmChans.del(h)
}

func paramToC(p *rdmacm.ConnParam, out *C.struct_pib_cm_param) {
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&out.priv[0])), 256), p.Private)
	out.priv_len = C.int(n)
	out.responder_resources = C.uint8_t(p.ResponderResources)
	out.initiator_depth = C.uint8_t(p.InitiatorDepth)
	out.flow_control = b2c(p.FlowControl)
	out.retry_count = C.uint8_t(p.RetryCount)
	out.rnr_retry_count = C.uint8_t(p.RNRRetryCount)
	out.srq = b2c(p.SRQ)
	out.qp_num = C.uint32_t(p.QPNum)
}

func b2c(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

func paramFromC(p *C.struct_pib_cm_param) rdmacm.ConnParam {
	return rdmacm.ConnParam{
		Private:            C.GoBytes(unsafe.Pointer(&p.priv[0]), p.priv_len),
		ResponderResources: uint8(p.responder_resources),
		InitiatorDepth:     uint8(p.initiator_depth),
		FlowControl:        p.flow_control != 0,
		RetryCount:         uint8(p.retry_count),
		RNRRetryCount:      uint8(p.rnr_retry_count),
		SRQ:                p.srq != 0,
		QPNum:              uint32(p.qp_num),
	}
}

// idHandle is the handle of a Go ID, registering it if new.
func idHandle(id *rdmacm.ID, ch *cmChan) (uint64, bool) {
	if id == nil {
		return 0, false
	}
	cmMu.Lock()
	defer cmMu.Unlock()
	if h, ok := cmHandle[id]; ok {
		return h, false
	}
	o := &cmID{id: id}
	o.ch.Store(ch)
	o.h = cmIDs.add(o)
	cmHandle[id] = o.h
	return o.h, true
}

// pibcm_get_event takes the next event of channel h (the C side has read its eventfd
// count): 0, or EAGAIN if there is none.
//
//export pibcm_get_event
func pibcm_get_event(h C.uint64_t, ev *C.struct_pib_cm_ev) C.int {
	c, ok := cmChans.get(h)
	if !ok {
		return einval
	}
	c.mu.Lock()
	if len(c.q) == 0 {
		c.mu.Unlock()
		return C.int(syscall.EAGAIN)
	}
	e := c.q[0]
	c.q = c.q[1:]
	c.mu.Unlock()
	C.memset(unsafe.Pointer(ev), 0, C.sizeof_struct_pib_cm_ev)
	ev._type = C.int(e.Type)
	ev.status = C.int(e.Status)
	idh, isNew := idHandle(e.ID, c)
	ev.id = C.uint64_t(idh)
	ev.new_id = 0
	if isNew {
		ev.new_id = 1
	}
	lh, _ := idHandle(e.ListenID, c)
	ev.listen_id = C.uint64_t(lh)
	if o, ok := cmIDs.get(ev.id); ok {
		ev.idp = o.cptr
	}
	if o, ok := cmIDs.get(ev.listen_id); ok {
		ev.listenp = o.cptr
	}
	ev.evh = C.uint64_t(cmEvents.add(e))
	if e.Group.IsValid() {
		addrToC(netip.AddrPortFrom(e.Group, 0), &ev.group)
	}
	if e.UD.QPNum != 0 || e.UD.QKey != 0 || len(e.UD.Private) > 0 {
		n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&ev.p.priv[0])), 256), e.UD.Private)
		ev.p.priv_len = C.int(n)
		ev.p.qp_num = C.uint32_t(e.UD.QPNum)
		ev.p.qkey = C.uint32_t(e.UD.QKey)
		ahAttrToC(&e.UD.AHAttr, &ev.p.ah)
	} else {
		paramToC(&e.Param, &ev.p)
	}
	return 0
}

//export pibcm_ack
func pibcm_ack(h C.uint64_t) {
	if e, ok := cmEvents.get(h); ok {
		cmEvents.del(h)
		e.Ack()
	}
}

//export pibcm_create_id
func pibcm_create_id(ch C.uint64_t, ps C.int, cptr unsafe.Pointer, perr *C.int) C.uint64_t {
	c, ok := cmChans.get(ch)
	if !ok {
		*perr = einval
		return 0
	}
	id, err := rdmacm.CreateID(sess.RDMA(), c.ch, nil, rdmacm.PortSpace(ps))
	if err != nil {
		*perr = cmErr(err)
		return 0
	}
	h, _ := idHandle(id, c)
	pibcm_set_cptr(C.uint64_t(h), cptr)
	return C.uint64_t(h)
}

//export pibcm_set_cptr
func pibcm_set_cptr(h C.uint64_t, cptr unsafe.Pointer) C.int {
	o, ok := cmIDs.get(h)
	if !ok {
		return einval
	}
	cmMu.Lock()
	o.cptr = cptr
	cmMu.Unlock()
	return 0
}

//export pibcm_destroy_id
func pibcm_destroy_id(h C.uint64_t) C.int {
	o, ok := cmIDs.get(h)
	if !ok {
		return einval
	}
	// rdmacm.ID.Destroy waits for all the ID's events to be acknowledged; librdmacm's
	// waits only for those the program was given (the kernel drops the others). Events
	// not yet taken by the program are acknowledged here while Destroy waits.
	done := make(chan error, 1)
	go func() { done <- o.id.Destroy() }()
	var err error
	tick := time.NewTicker(5 * time.Millisecond)
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if ch := o.ch.Load(); ch != nil {
				ch.drop(o.id)
			}
		}
	}
	tick.Stop()
	cmIDs.del(h)
	cmMu.Lock()
	delete(cmHandle, o.id)
	cmMu.Unlock()
	return cmErr(err)
}

func addrToC(a netip.AddrPort, out *C.struct_sockaddr_storage) {
	C.memset(unsafe.Pointer(out), 0, C.sizeof_struct_sockaddr_storage)
	if !a.IsValid() {
		return
	}
	port := a.Port()
	if a.Addr().Is4() || a.Addr().Is4In6() {
		sin := (*C.struct_sockaddr_in)(unsafe.Pointer(out))
		sin.sin_family = C.AF_INET
		*(*[2]byte)(unsafe.Pointer(&sin.sin_port)) = [2]byte{byte(port >> 8), byte(port)}
		*(*[4]byte)(unsafe.Pointer(&sin.sin_addr)) = a.Addr().Unmap().As4()
		return
	}
	sin6 := (*C.struct_sockaddr_in6)(unsafe.Pointer(out))
	sin6.sin6_family = C.AF_INET6
	*(*[2]byte)(unsafe.Pointer(&sin6.sin6_port)) = [2]byte{byte(port >> 8), byte(port)}
	*(*[16]byte)(unsafe.Pointer(&sin6.sin6_addr)) = a.Addr().As16()
}

// addrFromC is a sockaddr's address and port; ok is false for another family.
func addrFromC(sa *C.struct_sockaddr) (netip.AddrPort, bool) {
	if sa == nil {
		return netip.AddrPort{}, false
	}
	switch sa.sa_family {
	case C.AF_INET:
		sin := (*C.struct_sockaddr_in)(unsafe.Pointer(sa))
		p := *(*[2]byte)(unsafe.Pointer(&sin.sin_port))
		return netip.AddrPortFrom(netip.AddrFrom4(*(*[4]byte)(unsafe.Pointer(&sin.sin_addr))), uint16(p[0])<<8|uint16(p[1])), true
	case C.AF_INET6:
		sin6 := (*C.struct_sockaddr_in6)(unsafe.Pointer(sa))
		p := *(*[2]byte)(unsafe.Pointer(&sin6.sin6_port))
		return netip.AddrPortFrom(netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&sin6.sin6_addr))), uint16(p[0])<<8|uint16(p[1])), true
	}
	return netip.AddrPort{}, false
}

//export pibcm_info
func pibcm_info(h C.uint64_t, info *C.struct_pib_cm_info) {
	C.memset(unsafe.Pointer(info), 0, C.sizeof_struct_pib_cm_info)
	info.dev = -1
	o, ok := cmIDs.get(h)
	if !ok {
		return
	}
	d := o.id.Device()
	if d.Port != nil {
		for i, x := range sess.Devices() {
			if x == d.Port.Device() {
				info.dev = C.int(i)
			}
		}
		info.port = C.uint8_t(d.Port.Num())
		info.pkey = C.uint16_t(d.PKey)
		// ucma_query_gid: the source GID is the port's (its IPoIB hardware address),
		// the destination's what rdma_resolve_addr found (zero before).
		if g, ok := d.Port.GID(0); ok {
			*(*[16]byte)(unsafe.Pointer(&info.sgid)) = g
		}
		*(*[16]byte)(unsafe.Pointer(&info.dgid)) = o.id.DGID()
	}
	if o.id.IsIB() {
		ibAddrToC(o.id.LocalIB(), &info.src)
		ibAddrToC(o.id.PeerIB(), &info.dst)
	} else {
		addrToC(o.id.LocalAddr(), &info.src)
		addrToC(o.id.PeerAddr(), &info.dst)
	}
	if r, ok := o.id.Route(); ok {
		info.route_ok = 1
		*(*[16]byte)(unsafe.Pointer(&info.dgid)) = r.DGID
		*(*[16]byte)(unsafe.Pointer(&info.sgid)) = r.SGID
		info.dlid, info.slid, info.pkey = C.uint16_t(r.DLID), C.uint16_t(r.SLID), C.uint16_t(r.PKey)
		info.sl, info.mtu, info.rate, info.packet_life = C.uint8_t(r.SL), C.uint8_t(r.MTU), C.uint8_t(r.Rate), C.uint8_t(r.PacketLifeTime)
	}
}

func cmGet(h C.uint64_t) *rdmacm.ID {
	if o, ok := cmIDs.get(h); ok {
		return o.id
	}
	return nil
}

//export pibcm_bind
func pibcm_bind(h C.uint64_t, sa *C.struct_sockaddr) C.int {
	id := cmGet(h)
	if ib, ok := ibAddrFromC(sa); ok && id != nil {
		return cmErr(id.BindIB(ib))
	}
	a, ok := addrFromC(sa)
	if id == nil || !ok {
		return C.int(syscall.EAFNOSUPPORT)
	}
	return cmErr(id.BindAddr(a))
}

//export pibcm_resolve_addr
func pibcm_resolve_addr(h C.uint64_t, src, dst *C.struct_sockaddr, ms C.int) C.int {
	id := cmGet(h)
	if ib, ok := ibAddrFromC(dst); ok && id != nil {
		var s *rdmacm.IBAddr
		if a, ok := ibAddrFromC(src); ok {
			s = &a
		}
		return cmErr(id.ResolveIB(s, ib, time.Duration(ms)*time.Millisecond))
	}
	d, ok := addrFromC(dst)
	if id == nil || !ok {
		return C.int(syscall.EINVAL)
	}
	var s netip.Addr
	if a, ok := addrFromC(src); ok {
		s = a.Addr()
	}
	return cmErr(id.ResolveAddr(s, d, time.Duration(ms)*time.Millisecond))
}

//export pibcm_resolve_route
func pibcm_resolve_route(h C.uint64_t, ms C.int) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.ResolveRoute(time.Duration(ms) * time.Millisecond))
}

//export pibcm_listen
func pibcm_listen(h C.uint64_t, backlog C.int) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.Listen(int(backlog)))
}

//export pibcm_connect
func pibcm_connect(h C.uint64_t, p *C.struct_pib_cm_param) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.Connect(paramFromC(p)))
}

//export pibcm_accept
func pibcm_accept(h C.uint64_t, p *C.struct_pib_cm_param) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.Accept(paramFromC(p)))
}

//export pibcm_reject
func pibcm_reject(h C.uint64_t, priv unsafe.Pointer, n C.int) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	var b []byte
	if priv != nil && n > 0 {
		b = C.GoBytes(priv, n)
	}
	return cmErr(id.Reject(b))
}

//export pibcm_disconnect
func pibcm_disconnect(h C.uint64_t) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.Disconnect())
}

//export pibcm_establish
func pibcm_establish(h C.uint64_t) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.Establish())
}

//export pibcm_init_qp_attr
func pibcm_init_qp_attr(h C.uint64_t, a *C.struct_ibv_qp_attr, mask *C.int) C.int {
	id := cmGet(h)
	if id == nil || a == nil || mask == nil {
		return einval
	}
	q, m, err := id.InitQPAttr(hca.QPState(a.qp_state))
	if err != nil {
		return cmErr(err)
	}
	// Every field, zero where the mask has none, as the kernel's ucma copies its answer.
	*a = C.struct_ibv_qp_attr{}
	qpAttrToC(&q, a)
	*mask = C.int(m)
	return 0
}

//export pibcm_set_ack_timeout
func pibcm_set_ack_timeout(h C.uint64_t, t C.uint8_t) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.SetAckTimeout(uint8(t)))
}

//export pibcm_set_reuseaddr
func pibcm_set_reuseaddr(h C.uint64_t, reuse C.int) C.int {
	id := cmGet(h)
	if id == nil {
		return einval
	}
	return cmErr(id.SetReuseAddr(reuse != 0))
}

//export pibcm_mcast
func pibcm_mcast(h C.uint64_t, sa *C.struct_sockaddr, join C.int) C.int {
	id := cmGet(h)
	a, ok := addrFromC(sa)
	if id == nil || !ok {
		return einval
	}
	if join != 0 {
		return cmErr(id.JoinMulticast(a.Addr()))
	}
	return cmErr(id.LeaveMulticast(a.Addr()))
}

//export pibcm_destroy_qp
func pibcm_destroy_qp(h C.uint64_t) {
	if id := cmGet(h); id != nil {
		id.DestroyQP()
	}
}
