//go:build pibgw_cabi

// Command ibverbs is the Go side of pibgw's libibverbs.so.1: built with
// -buildmode=c-shared as libpibgw_verbs.so (see scripts/build-libs.sh), it stands, with
// the C library over it, in for rdma-core's library so that unmodified libibverbs
// programs (ibv_devinfo, the pingpongs, perftest, qperf) run their verbs on the HCAs of a
// pibgw daemon through the attach channel, with no kernel module.
//
// The C side (../libibverbs: pib.c, misc.c) has the API with rdma-core's structure layouts
// and symbol versions; it loads this library at its first verb (lazy.c) and calls the
// pibgo_* functions here, which run the verbs on the attach
// session's mirror devices (package hca). C memory holds no Go pointers: every object a
// program sees carries the handle of its Go object from the tables below.
//
// The build tag keeps the package out of ordinary builds, which need neither cgo nor
// rdma-core's headers.
package main

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-parameter -Wno-unused-function
#include "pib.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/umem"
)

func main() {}

// ---- handles --------------------------------------------------------------------------

var nextHandle atomic.Uint64

// pibgo_handle_base makes this copy of the library number its handles from base: a child
// forked from a process that had loaded the library loads a copy of its own
// (../libibverbs/lazy.c), and the parent's objects' handles must name nothing in it.
//
//export pibgo_handle_base
func pibgo_handle_base(base C.uint64_t) { nextHandle.Store(uint64(base)) }

type table[T any] struct {
	mu sync.RWMutex
	m  map[uint64]T
}

func (t *table[T]) add(v T) uint64 {
	h := nextHandle.Add(1)
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[uint64]T)
	}
	t.m[h] = v
	t.mu.Unlock()
	return h
}

func (t *table[T]) get(h C.uint64_t) (T, bool) {
	t.mu.RLock()
	v, ok := t.m[uint64(h)]
	t.mu.RUnlock()
	return v, ok
}

// set replaces the object behind a handle (ibv_rereg_mr's new region).
func (t *table[T]) set(h C.uint64_t, v T) {
	t.mu.Lock()
	t.m[uint64(h)] = v
	t.mu.Unlock()
}

func (t *table[T]) del(h C.uint64_t) {
	t.mu.Lock()
	delete(t.m, uint64(h))
	t.mu.Unlock()
}

type ctxObj struct {
	ctx  *hca.Context
	dev  *hca.Device
	fd   int
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	events []hca.AsyncEvent
}

type chanObj struct {
	ch *hca.CompChannel
	fd int

	mu       sync.Mutex
	queue    []*hca.CQ
	closed   bool
	spinners int // threads in pibgo_spin_cq_event
	owed     int // queued events not signalled on fd (notify)
}

type qpObj struct {
	qp   *hca.QP
	mu   sync.Mutex
	wrs  []hca.SendWR
	rwrs []hca.RecvWR
	// The groups attached, by GID and LID as uverbs lists them (ib_uverbs_attach_mcast): an
	// attachment made twice is one, and destroy_qp is EBUSY until they are all detached.
	mcast map[mcastKey]struct{}
}

type srqObj struct {
	srq  *hca.SRQ
	mu   sync.Mutex
	rwrs []hca.RecvWR
}

var (
	ctxs  table[*ctxObj]
	pds   table[*hca.PD]
	mrs   table[*hca.MR]
	chans table[*chanObj]
	cqs   table[*hca.CQ]
	qps   table[*qpObj]
	srqs  table[*srqObj]
	ahs   table[*hca.AH]

	// The C objects of CQs, QPs and SRQs, for completion and async events.
	ptrMu  sync.Mutex
	cqPtr  = map[*hca.CQ]unsafe.Pointer{}
	qpPtr  = map[*hca.QP]unsafe.Pointer{}
	srqPtr = map[*hca.SRQ]unsafe.Pointer{}
	// cqReported counts the channel events of each CQ that ibv_get_cq_event returned.
	cqReported = map[*hca.CQ]uint32{}
)

// errno is the errno value of a verbs error (EINVAL for any other error).
func errno(err error) C.int {
	var e syscall.Errno
	if errors.As(err, &e) {
		return C.int(e)
	}
	return C.int(syscall.EINVAL)
}

const einval = C.int(syscall.EINVAL)

// signal makes an eventfd readable (one more pending event).
func signal(fd int, n uint64) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], n)
	for {
		_, err := unix.Write(fd, b[:])
		if err != unix.EINTR {
			return
		}
	}
}

// ---- the session ----------------------------------------------------------------------

var (
	sessOnce sync.Once
	sess     *attach.Session
	sessErr  error
)

// pibgo_init attaches to the daemon (once) and returns the number of devices, or a
// negative errno.
//
//export pibgo_init
func pibgo_init() C.int {
	sessOnce.Do(func() {
		level := slog.LevelWarn
		if os.Getenv("PIBGW_DEBUG") != "" {
			level = slog.LevelDebug
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sess, sessErr = attach.Dial(ctx, "", &attach.Options{Logger: log})
		if sessErr != nil {
			fmt.Fprintf(os.Stderr, "libibverbs (pibgw): cannot attach to the pibgw daemon at %s: %v\n", attach.SocketPath(""), sessErr)
		}
	})
	if sessErr != nil {
		return -C.int(syscall.ENODEV)
	}
	return C.int(len(sess.Devices()))
}

//export pibgo_device_info
func pibgo_device_info(i C.int, name *C.char, size C.int, guid *C.uint64_t) {
	d := sess.Devices()[i]
	b := unsafe.Slice((*byte)(unsafe.Pointer(name)), int(size))
	n := copy(b[:len(b)-1], d.Name())
	b[n] = 0
	*guid = C.uint64_t(d.Query().NodeGUID)
}

// ---- contexts -------------------------------------------------------------------------

//export pibgo_open
func pibgo_open(i C.int, fd C.int, perr *C.int) C.uint64_t {
	devs := sess.Devices()
	if int(i) < 0 || int(i) >= len(devs) {
		*perr = C.int(syscall.ENODEV)
		return 0
	}
	o := &ctxObj{dev: devs[i], fd: int(fd), stop: make(chan struct{}), done: make(chan struct{})}
	o.ctx = o.dev.Open()
	go o.forward()
	return C.uint64_t(ctxs.add(o))
}

// forward queues the context's async events and signals each on the async fd.
func (o *ctxObj) forward() {
	defer close(o.done)
	for {
		select {
		case ev := <-o.ctx.Events():
			o.mu.Lock()
			o.events = append(o.events, ev)
			o.mu.Unlock()
			signal(o.fd, 1)
		case <-o.stop:
			return
		}
	}
}

//export pibgo_close
func pibgo_close(h C.uint64_t) {
	o, ok := ctxs.get(h)
	if !ok {
		return
	}
	close(o.stop)
	<-o.done
	destroyContextObjects(h, o.ctx)
	o.ctx.Close()
	ctxs.del(h)
}

//export pibgo_get_async_event
func pibgo_get_async_event(h C.uint64_t, out *C.struct_pib_async) C.int {
	o, ok := ctxs.get(h)
	if !ok {
		return einval
	}
	o.mu.Lock()
	if len(o.events) == 0 {
		o.mu.Unlock()
		return C.int(syscall.EAGAIN)
	}
	ev := o.events[0]
	o.events = o.events[1:]
	o.mu.Unlock()
	out._type = C.uint32_t(ev.Type)
	out.port = C.uint32_t(ev.Port)
	out.element = nil
	ptrMu.Lock()
	defer ptrMu.Unlock()
	var p unsafe.Pointer
	var found bool
	switch {
	case ev.QP != nil:
		p, found = qpPtr[ev.QP]
	case ev.CQ != nil:
		p, found = cqPtr[ev.CQ]
	case ev.SRQ != nil:
		p, found = srqPtr[ev.SRQ]
	default:
		return 0
	}
	if !found {
		return C.int(syscall.ENOENT) // its object is gone
	}
	out.element = p
	return 0
}

func ctxDev(h C.uint64_t) (*ctxObj, bool) { return ctxs.get(h) }

//export pibgo_query_device
func pibgo_query_device(h C.uint64_t, a *C.struct_ibv_device_attr) C.int {
	o, ok := ctxDev(h)
	if !ok {
		return einval
	}
	d := o.dev.Query()
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&a.fw_ver[0])), len(a.fw_ver))
	fw[copy(fw[:len(fw)-1], d.FWVer)] = 0
	a.node_guid = C.__be64(bits.ReverseBytes64(d.NodeGUID))
	a.sys_image_guid = C.__be64(bits.ReverseBytes64(d.SysImageGUID))
	a.max_mr_size = C.uint64_t(d.MaxMRSize)
	a.page_size_cap = C.uint64_t(d.PageSizeCap)
	a.vendor_id = C.uint32_t(d.VendorID)
	a.vendor_part_id = C.uint32_t(d.VendorPartID)
	a.hw_ver = C.uint32_t(d.HWVer)
	a.max_qp = C.int(d.MaxQP)
	a.max_qp_wr = C.int(d.MaxQPWR)
	a.device_cap_flags = C.uint(d.DeviceCapFlags)
	a.max_sge = C.int(d.MaxSGE)
	a.max_sge_rd = C.int(d.MaxSGERd)
	a.max_cq = C.int(d.MaxCQ)
	a.max_cqe = C.int(d.MaxCQE)
	a.max_mr = C.int(d.MaxMR)
	a.max_pd = C.int(d.MaxPD)
	a.max_qp_rd_atom = C.int(d.MaxQPRdAtom)
	a.max_ee_rd_atom = C.int(d.MaxEECRdAtom)
	a.max_res_rd_atom = C.int(d.MaxResRdAtom)
	a.max_qp_init_rd_atom = C.int(d.MaxQPInitRdAtom)
	a.max_ee_init_rd_atom = C.int(d.MaxEEInitRdAtom)
	a.atomic_cap = C.enum_ibv_atomic_cap(d.AtomicCap)
	a.max_ee = C.int(d.MaxEE)
	a.max_rdd = C.int(d.MaxRDD)
	a.max_mw = C.int(d.MaxMW)
	a.max_raw_ipv6_qp = C.int(d.MaxRawIPv6QP)
	a.max_raw_ethy_qp = C.int(d.MaxRawEthyQP)
	a.max_mcast_grp = C.int(d.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(d.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(d.MaxTotalMcastQPAttach)
	a.max_ah = C.int(d.MaxAH)
	a.max_fmr = C.int(d.MaxFMR)
	a.max_map_per_fmr = C.int(d.MaxMapPerFMR)
	a.max_srq = C.int(d.MaxSRQ)
	a.max_srq_wr = C.int(d.MaxSRQWR)
	a.max_srq_sge = C.int(d.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(d.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(d.LocalCAAckDelay)
	a.phys_port_cnt = C.uint8_t(d.PhysPortCnt)
	return 0
}

func port(h C.uint64_t, n C.int) *hca.Port {
	o, ok := ctxDev(h)
	if !ok {
		return nil
	}
	return o.dev.Port(int(n))
}

//export pibgo_query_port
func pibgo_query_port(h C.uint64_t, n C.int, a *C.struct_ibv_port_attr) C.int {
	p := port(h, n)
	if p == nil {
		return einval
	}
	pa := p.Query()
	a.state = C.enum_ibv_port_state(pa.State)
	a.max_mtu = C.enum_ibv_mtu(pa.MaxMTU)
	a.active_mtu = C.enum_ibv_mtu(pa.ActiveMTU)
	a.gid_tbl_len = C.int(pa.GIDTblLen)
	a.port_cap_flags = C.uint32_t(pa.PortCapFlags)
	a.max_msg_sz = C.uint32_t(pa.MaxMsgSz)
	a.bad_pkey_cntr = C.uint32_t(pa.BadPKeyCntr)
	a.qkey_viol_cntr = C.uint32_t(pa.QKeyViolCntr)
	a.pkey_tbl_len = C.uint16_t(pa.PKeyTblLen)
	a.lid = C.uint16_t(pa.LID)
	a.sm_lid = C.uint16_t(pa.SMLID)
	a.lmc = C.uint8_t(pa.LMC)
	a.max_vl_num = C.uint8_t(pa.MaxVLNum)
	a.sm_sl = C.uint8_t(pa.SMSL)
	a.subnet_timeout = C.uint8_t(pa.SubnetTimeout)
	a.init_type_reply = C.uint8_t(pa.InitTypeReply)
	a.active_width = C.uint8_t(pa.ActiveWidth)
	a.active_speed = C.uint8_t(pa.ActiveSpeed)
	a.phys_state = C.uint8_t(pa.PhysState)
	switch pa.LinkLayer {
	case "InfiniBand":
		a.link_layer = C.IBV_LINK_LAYER_INFINIBAND
	case "Ethernet":
		a.link_layer = C.IBV_LINK_LAYER_ETHERNET
	default:
		a.link_layer = C.IBV_LINK_LAYER_UNSPECIFIED
	}
	return 0
}

//export pibgo_query_gid
func pibgo_query_gid(h C.uint64_t, n C.int, index C.int, raw *C.uint8_t) C.int {
	p := port(h, n)
	if p == nil || index < 0 || int(index) >= hca.GIDTableLen {
		return einval
	}
	g, _ := p.GID(int(index)) // an empty entry reads as zeros
	copy(unsafe.Slice((*byte)(unsafe.Pointer(raw)), 16), g[:])
	return 0
}

//export pibgo_query_pkey
func pibgo_query_pkey(h C.uint64_t, n C.int, index C.int, out *C.uint16_t) C.int {
	p := port(h, n)
	if p == nil {
		return einval
	}
	k, ok := p.PKey(int(index))
	if !ok {
		return einval
	}
	*out = C.uint16_t(k)
	return 0
}

// ---- PD, MR ---------------------------------------------------------------------------

//export pibgo_alloc_pd
func pibgo_alloc_pd(h C.uint64_t, perr *C.int) C.uint64_t {
	o, ok := ctxs.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	pd, err := o.ctx.AllocPD()
	if err != nil {
		*perr = errno(err)
		return 0
	}
	return C.uint64_t(pds.add(pd))
}

//export pibgo_dealloc_pd
func pibgo_dealloc_pd(h C.uint64_t) C.int {
	pd, ok := pds.get(h)
	if !ok {
		return einval
	}
	if err := pd.Dealloc(); err != nil {
		return errno(err)
	}
	pds.del(h)
	return 0
}

// Access flags the HCA takes and needs do nothing for (hints; ON_DEMAND: odp.go).
const (
	accessHints = C.IBV_ACCESS_HUGETLB | C.IBV_ACCESS_RELAXED_ORDERING | C.IBV_ACCESS_ON_DEMAND
	// accessWritable are the flags for which the kernel pins a region's pages for writing
	// (ib_access_writable): its memory must be writable.
	accessWritable = C.IBV_ACCESS_LOCAL_WRITE | C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_REMOTE_ATOMIC | C.IBV_ACCESS_MW_BIND
)

//export pibgo_reg_mr
func pibgo_reg_mr(h C.uint64_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint, lkey, rkey *C.uint32_t, perr *C.int) C.uint64_t {
	pd, ok := pds.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	if access&C.IBV_ACCESS_ON_DEMAND != 0 && addr == nil && length == C.SIZE_MAX {
		*perr = C.int(syscall.EOPNOTSUPP) // implicit ODP (odp.go)
		return 0
	}
	if addr == nil || length == 0 {
		*perr = einval
		return 0
	}
	if err := umem.Check(uintptr(addr), uintptr(length), access&accessWritable != 0); err != nil {
		*perr = errno(err) // EFAULT: memory the kernel could not pin (ib_umem_get)
		return 0
	}
	buf := unsafe.Slice((*byte)(addr), int(length))
	// SGEs and RDMA requests name the region by iova (ibv_reg_mr_iova2; ibv_reg_mr passes
	// the buffer's address).
	mr, err := pd.RegMRIOVA(buf, uint64(iova), hca.AccessFlags(access&^accessHints))
	if err != nil {
		*perr = errno(err)
		return 0
	}
	if access&C.IBV_ACCESS_ON_DEMAND != 0 {
		odpAdd(mr)
	}
	*lkey = C.uint32_t(mr.LKey())
	*rkey = C.uint32_t(mr.RKey())
	return C.uint64_t(mrs.add(mr))
}

//export pibgo_dereg_mr
func pibgo_dereg_mr(h C.uint64_t) C.int {
	mr, ok := mrs.get(h)
	if !ok {
		return einval
	}
	if err := mr.Dereg(); err != nil {
		return errno(err)
	}
	odpDel(mr)
	mrs.del(h)
	return 0
}

// ---- completion channels and CQs ------------------------------------------------------

//export pibgo_create_channel
func pibgo_create_channel(h C.uint64_t, fd C.int) C.uint64_t {
	o, ok := ctxs.get(h)
	if !ok {
		return 0
	}
	c := &chanObj{ch: o.ctx.CreateCompChannel(), fd: int(fd)}
	c.ch.SetNotify(c.notify)
	return C.uint64_t(chans.add(c))
}

// notify queues a CQ event and signals it on the channel's fd, on the goroutine that
// raised it (hca.CompChannel.SetNotify) — unless a thread spins for it in
// ibv_get_cq_event (pibgo_spin_cq_event), which takes it without the fd: then it is owed
// to the fd until that thread takes it or stops spinning.
func (c *chanObj) notify(cq *hca.CQ) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.queue = append(c.queue, cq)
	if c.spinners > 0 {
		c.owed++
		return
	}
	signal(c.fd, 1)
}

//export pibgo_destroy_channel
func pibgo_destroy_channel(h C.uint64_t) {
	c, ok := chans.get(h)
	if !ok {
		return
	}
	c.ch.SetNotify(nil)
	c.mu.Lock()
	c.closed = true // a notify under way signals nothing after this: the fd closes next
	c.mu.Unlock()
	chans.del(h)
}

// pibgo_spin_cq_event spins for up to spinEvent, taking in what arrives for the
// channel's device, until the channel has an event: it returns the event's CQ if it took
// one that was not signalled on the fd (ibv_get_cq_event returns it without reading the
// fd), else NULL, and ibv_get_cq_event reads the fd (at once if an event is signalled,
// blocking otherwise). ibv_get_cq_event calls it before it blocks on a blocking channel
// fd: in a request/response exchange the answer usually comes within microseconds, and
// taking it in on the waiting thread spares two wake-ups (the receive goroutine's, then
// the thread's) of tens of microseconds each, and the fd's two system calls.
//
//export pibgo_spin_cq_event
func pibgo_spin_cq_event(h C.uint64_t) unsafe.Pointer {
	c, ok := chans.get(h)
	if !ok {
		return nil
	}
	c.mu.Lock()
	c.spinners++
	c.mu.Unlock()
	start := time.Now()
	for i := 0; ; i++ {
		c.mu.Lock()
		if len(c.queue) > 0 {
			if c.owed == 0 {
				c.spinners--
				c.mu.Unlock()
				return nil // signalled: the read takes it
			}
			cq := c.queue[0]
			c.queue = c.queue[1:]
			c.owed--
			c.spinners--
			c.mu.Unlock()
			if p := reportEvent(cq); p != nil {
				c.ch.Settle()
				return p // the program goes on: its next wait spins again
			}
			c.mu.Lock()
			c.spinners++
		}
		c.mu.Unlock()
		c.ch.Spin()
		if i&63 == 63 && time.Since(start) > spinEvent {
			c.mu.Lock()
			c.spinners--
			if c.spinners == 0 && c.owed > 0 {
				signal(c.fd, uint64(c.owed))
				c.owed = 0
			}
			c.mu.Unlock()
			c.ch.SpinEnd()
			return nil
		}
	}
}

// spinEvent is how long pibgo_spin_cq_event spins before the thread sleeps.
const spinEvent = 50 * time.Microsecond

//export pibgo_get_cq_event
func pibgo_get_cq_event(h C.uint64_t) unsafe.Pointer {
	c, ok := chans.get(h)
	if !ok {
		return nil
	}
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.mu.Unlock()
		return nil
	}
	cq := c.queue[0]
	c.queue = c.queue[1:]
	c.mu.Unlock()
	c.ch.Settle()
	return reportEvent(cq)
}

// reportEvent is the C CQ of an event taken from a channel's queue, counted as reported
// (ibv_ack_cq_events); nil if the CQ is gone.
func reportEvent(cq *hca.CQ) unsafe.Pointer {
	ptrMu.Lock()
	p := cqPtr[cq]
	if p != nil {
		cqReported[cq]++
	}
	ptrMu.Unlock()
	return p
}

//export pibgo_create_cq
func pibgo_create_cq(h C.uint64_t, cqe C.int, ch C.uint64_t, cptr unsafe.Pointer, actual, perr *C.int) C.uint64_t {
	o, ok := ctxs.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	var channel *hca.CompChannel
	if ch != 0 {
		c, ok := chans.get(ch)
		if !ok {
			*perr = einval
			return 0
		}
		channel = c.ch
	}
	cq, err := o.ctx.CreateCQ(int(cqe), channel)
	if err != nil {
		*perr = errno(err)
		return 0
	}
	*actual = C.int(cq.CQE())
	ptrMu.Lock()
	cqPtr[cq] = cptr
	ptrMu.Unlock()
	return C.uint64_t(cqs.add(cq))
}

//export pibgo_destroy_cq
func pibgo_destroy_cq(h C.uint64_t) C.int {
	cq, ok := cqs.get(h)
	if !ok {
		return einval
	}
	if cq.Busy() {
		return errno(cq.Destroy()) // EBUSY, and nothing withdrawn
	}
	// The CQ's events never handed to the program — queued on its channel, or raised and
	// still on their way to the queue — are dropped with it, as the kernel drops them;
	// ibv_destroy_cq waits only for the events ibv_get_cq_event returned (rdma-core's
	// comp_events_reported), so only those need an ibv_ack_cq_events.
	dropQueuedEvents(cq)
	ptrMu.Lock()
	n := cqReported[cq]
	ptrMu.Unlock()
	cq.KeepReported(n)
	if err := cq.Destroy(); err != nil {
		return errno(err)
	}
	cqs.del(h)
	ptrMu.Lock()
	delete(cqPtr, cq)
	delete(cqReported, cq)
	ptrMu.Unlock()
	return 0
}

// dropQueuedEvents removes cq's events from every channel's queue.
func dropQueuedEvents(cq *hca.CQ) {
	chans.mu.RLock()
	defer chans.mu.RUnlock()
	for _, c := range chans.m {
		c.mu.Lock()
		q := c.queue[:0]
		for _, x := range c.queue {
			if x != cq {
				q = append(q, x)
			}
		}
		clear(c.queue[len(q):])
		c.queue = q
		c.mu.Unlock()
	}
}

//export pibgo_resize_cq
func pibgo_resize_cq(h C.uint64_t, cqe C.int, actual *C.int) C.int {
	cq, ok := cqs.get(h)
	if !ok {
		return einval
	}
	if err := cq.Resize(int(cqe)); err != nil {
		return errno(err)
	}
	*actual = C.int(cq.CQE())
	return 0
}

//export pibgo_moderate_cq
func pibgo_moderate_cq(h C.uint64_t, count, periodUS C.uint16_t) C.int {
	cq, ok := cqs.get(h)
	if !ok {
		return einval
	}
	// mlx5 takes any 16-bit count (cq_mod_caps): one above the CQ's size waits for the
	// period, or until the CQ is full.
	if err := cq.Moderate(min(int(count), cq.CQE()), time.Duration(periodUS)*time.Microsecond); err != nil {
		return errno(err)
	}
	return 0
}

//export pibgo_req_notify_cq
func pibgo_req_notify_cq(h C.uint64_t, solicited C.int) C.int {
	cq, ok := cqs.get(h)
	if !ok {
		return einval
	}
	if err := cq.ReqNotify(solicited != 0); err != nil {
		return errno(err)
	}
	return 0
}

//export pibgo_ack_cq_events
func pibgo_ack_cq_events(h C.uint64_t, n C.uint) {
	if cq, ok := cqs.get(h); ok {
		cq.AckEvents(int(n))
	}
}

//export pibgo_poll_cq
func pibgo_poll_cq(h C.uint64_t, n C.int, wc *C.struct_ibv_wc, ts *C.uint64_t) C.int {
	cq, ok := cqs.get(h)
	if !ok {
		return -einval
	}
	out := unsafe.Slice(wc, int(n))
	var stamps []C.uint64_t // ts: each completion's timestamp too (ibv_cq_ex)
	if ts != nil {
		stamps = unsafe.Slice(ts, int(n))
	}
	var buf [16]hca.WC
	total := 0
	for total < len(out) {
		k := min(len(buf), len(out)-total)
		got := cq.Poll(buf[:k])
		for i := 0; i < got; i++ {
			w, c := &buf[i], &out[total+i]
			c.wr_id = C.uint64_t(w.WRID)
			c.status = C.enum_ibv_wc_status(w.Status)
			c.opcode = C.enum_ibv_wc_opcode(w.Opcode)
			c.vendor_err = C.uint32_t(w.VendorErr)
			c.byte_len = C.uint32_t(w.ByteLen)
			imm := w.ImmData
			if w.WCFlags&hca.WCWithImm != 0 {
				imm = bits.ReverseBytes32(imm) // imm_data is big-endian (__be32)
			}
			*(*uint32)(unsafe.Pointer(&c.anon0[0])) = imm
			c.qp_num = C.uint32_t(w.QPNum)
			c.src_qp = C.uint32_t(w.SrcQP)
			c.wc_flags = C.uint(w.WCFlags &^ hca.WCIPCsumPartial)
			c.pkey_index = C.uint16_t(w.PKeyIndex)
			c.slid = C.uint16_t(w.SLID)
			c.sl = C.uint8_t(w.SL)
			c.dlid_path_bits = C.uint8_t(w.DLIDPathBits)
			if stamps != nil {
				stamps[total+i] = C.uint64_t(w.Timestamp)
			}
		}
		total += got
		if got < k {
			break
		}
	}
	return C.int(total)
}

// ---- SRQs -----------------------------------------------------------------------------

//export pibgo_create_srq
func pibgo_create_srq(h C.uint64_t, a *C.struct_ibv_srq_attr, cptr unsafe.Pointer, perr *C.int) C.uint64_t {
	pd, ok := pds.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	// srq_limit is "irrelevant for ibv_create_srq" (ibv_create_srq(3); mlx5 ignores it): the
	// limit is armed by ibv_modify_srq only.
	srq, err := pd.CreateSRQ(hca.SRQInitAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge)})
	return addSRQ(srq, err, a, cptr, perr)
}

// addSRQ hands a new SRQ to C: its actual sizes in a, its handle, its C object for events.
func addSRQ(srq *hca.SRQ, err error, a *C.struct_ibv_srq_attr, cptr unsafe.Pointer, perr *C.int) C.uint64_t {
	if err != nil {
		*perr = errno(err)
		return 0
	}
	q := srq.Query()
	a.max_wr, a.max_sge = C.uint32_t(q.MaxWR), C.uint32_t(q.MaxSGE)
	ptrMu.Lock()
	srqPtr[srq] = cptr
	ptrMu.Unlock()
	return C.uint64_t(srqs.add(&srqObj{srq: srq}))
}

//export pibgo_modify_srq
func pibgo_modify_srq(h C.uint64_t, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	o, ok := srqs.get(h)
	if !ok {
		return einval
	}
	if err := o.srq.Modify(uint32(a.max_wr), uint32(a.srq_limit), hca.SRQAttrMask(mask)); err != nil {
		return errno(err)
	}
	return 0
}

//export pibgo_query_srq
func pibgo_query_srq(h C.uint64_t, a *C.struct_ibv_srq_attr) C.int {
	o, ok := srqs.get(h)
	if !ok {
		return einval
	}
	q := o.srq.Query()
	a.max_wr, a.max_sge, a.srq_limit = C.uint32_t(q.MaxWR), C.uint32_t(q.MaxSGE), C.uint32_t(q.SRQLimit)
	return 0
}

//export pibgo_destroy_srq
func pibgo_destroy_srq(h C.uint64_t) C.int {
	o, ok := srqs.get(h)
	if !ok {
		return einval
	}
	if err := o.srq.Destroy(); err != nil {
		return errno(err)
	}
	srqs.del(h)
	ptrMu.Lock()
	delete(srqPtr, o.srq)
	ptrMu.Unlock()
	return 0
}

// postRecv posts the C list of receive WRs wr with post, setting *bad on failure. Each
// SGL points at the program's SGEs (struct ibv_sge and hca.SGE have one layout), which
// the receive queue copies at post.
func postRecv(scratch *[]hca.RecvWR, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr, post func([]hca.RecvWR) (int, error)) C.int {
	r := (*scratch)[:0]
	// A WR whose scatter/gather list is not there ends the list: those before it are
	// posted, it is *bad_wr, EINVAL (a provider reads the list; the program gets no crash).
	refused := false
	for w := wr; w != nil; w = w.next {
		rw := hca.RecvWR{WRID: uint64(w.wr_id)}
		if w.num_sge < 0 || w.num_sge > 0 && w.sg_list == nil {
			refused = true
			break
		}
		if w.num_sge > 0 {
			rw.SGL = unsafe.Slice((*hca.SGE)(unsafe.Pointer(w.sg_list)), int(w.num_sge))
		}
		r = append(r, rw)
	}
	n, err := post(r)
	clear(r) // no C pointers kept past the call
	*scratch = r[:0]
	if err != nil || refused {
		for ; n > 0; n-- {
			wr = wr.next
		}
		*bad = wr
		if err != nil {
			return errno(err)
		}
		return einval
	}
	return 0
}

var _ [unsafe.Sizeof(hca.SGE{}) - unsafe.Sizeof(C.struct_ibv_sge{})]byte // same size
var _ [unsafe.Sizeof(C.struct_ibv_sge{}) - unsafe.Sizeof(hca.SGE{})]byte

//export pibgo_post_srq_recv
func pibgo_post_srq_recv(h C.uint64_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	o, ok := srqs.get(h)
	if !ok {
		*bad = wr
		return einval
	}
	if wr == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return postRecv(&o.rwrs, wr, bad, o.srq.PostRecv)
}

// ---- QPs ------------------------------------------------------------------------------

//export pibgo_create_qp
func pibgo_create_qp(a *C.struct_pib_qp_create, cptr unsafe.Pointer, perr *C.int) C.uint64_t {
	var pd *hca.PD
	var xrcd *hca.XRCD
	ok := true
	if a.qp_type == C.IBV_QPT_XRC_RECV {
		xrcd, ok = xrcdOf(a.xrcd)
	} else {
		pd, ok = pds.get(a.pd)
	}
	if !ok {
		*perr = einval
		return 0
	}
	var send, recv *hca.CQ
	ok1, ok2 := true, true
	if a.send_cq != 0 {
		send, ok1 = cqs.get(a.send_cq)
	}
	if a.recv_cq != 0 {
		recv, ok2 = cqs.get(a.recv_cq)
	}
	if !ok1 || !ok2 {
		*perr = einval
		return 0
	}
	init := hca.QPInitAttr{
		SendCQ: send, RecvCQ: recv, QPType: hca.QPType(a.qp_type), SQSigAll: a.sq_sig_all != 0,
		Cap: hca.QPCap{
			MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
	}
	switch init.QPType {
	case hca.QPTypeRC, hca.QPTypeUC, hca.QPTypeUD, hca.QPTypeXRCSend, hca.QPTypeXRCRecv:
	case C.IBV_QPT_RAW_PACKET, C.IBV_QPT_DRIVER:
		*perr = C.int(syscall.EOPNOTSUPP)
		return 0
	default:
		*perr = einval
		return 0
	}
	if a.srq != 0 {
		s, ok := srqs.get(a.srq)
		if !ok {
			*perr = einval
			return 0
		}
		init.SRQ = s.srq
	}
	var qp *hca.QP
	var err error
	if a.cmid != 0 {
		o, ok := cmIDs.get(a.cmid)
		if !ok {
			*perr = einval
			return 0
		}
		qp, err = o.id.CreateQP(pd, init)
	} else if xrcd != nil {
		qp, err = xrcd.CreateQP(init)
	} else {
		qp, err = pd.CreateQP(init)
	}
	if err != nil {
		*perr = errno(err)
		return 0
	}
	c := qp.Cap()
	a.cap.max_send_wr, a.cap.max_recv_wr = C.uint32_t(c.MaxSendWR), C.uint32_t(c.MaxRecvWR)
	a.cap.max_send_sge, a.cap.max_recv_sge = C.uint32_t(c.MaxSendSGE), C.uint32_t(c.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(c.MaxInlineData)
	a.qp_num = C.uint32_t(qp.Num())
	ptrMu.Lock()
	qpPtr[qp] = cptr
	ptrMu.Unlock()
	return C.uint64_t(qps.add(&qpObj{qp: qp}))
}

func ahAttrFromC(a *C.struct_ibv_ah_attr) hca.AHAttr {
	r := hca.AHAttr{
		DLID: uint16(a.dlid), SL: uint8(a.sl), SrcPathBits: uint8(a.src_path_bits),
		StaticRate: uint8(a.static_rate), IsGlobal: a.is_global != 0, PortNum: uint8(a.port_num),
	}
	r.GRH.DGID = *(*[16]byte)(unsafe.Pointer(&a.grh.dgid))
	r.GRH.FlowLabel = uint32(a.grh.flow_label)
	r.GRH.SGIDIndex = uint8(a.grh.sgid_index)
	r.GRH.HopLimit = uint8(a.grh.hop_limit)
	r.GRH.TrafficClass = uint8(a.grh.traffic_class)
	return r
}

func ahAttrToC(r *hca.AHAttr, a *C.struct_ibv_ah_attr) {
	a.dlid, a.sl, a.src_path_bits = C.uint16_t(r.DLID), C.uint8_t(r.SL), C.uint8_t(r.SrcPathBits)
	a.static_rate, a.port_num = C.uint8_t(r.StaticRate), C.uint8_t(r.PortNum)
	a.is_global = 0
	if r.IsGlobal {
		a.is_global = 1
	}
	*(*[16]byte)(unsafe.Pointer(&a.grh.dgid)) = r.GRH.DGID
	a.grh.flow_label = C.uint32_t(r.GRH.FlowLabel)
	a.grh.sgid_index = C.uint8_t(r.GRH.SGIDIndex)
	a.grh.hop_limit = C.uint8_t(r.GRH.HopLimit)
	a.grh.traffic_class = C.uint8_t(r.GRH.TrafficClass)
}

//export pibgo_modify_qp
func pibgo_modify_qp(h C.uint64_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	o, ok := qps.get(h)
	if !ok {
		return einval
	}
	if mask&^C.int(hca.QPAttrDestQPN<<1-1) != 0 {
		return C.int(syscall.EOPNOTSUPP) // IBV_QP_RATE_LIMIT: no packet pacing here
	}
	attr := hca.QPAttr{
		QPState: hca.QPState(a.qp_state), CurQPState: hca.QPState(a.cur_qp_state),
		PathMTU: hca.MTU(a.path_mtu), PathMigState: uint8(a.path_mig_state), QKey: uint32(a.qkey),
		RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPNum: uint32(a.dest_qp_num),
		QPAccessFlags: hca.AccessFlags(a.qp_access_flags),
		Cap: hca.QPCap{
			MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
		AHAttr: ahAttrFromC(&a.ah_attr), AltAHAttr: ahAttrFromC(&a.alt_ah_attr),
		PKeyIndex: uint16(a.pkey_index), AltPKeyIndex: uint16(a.alt_pkey_index),
		EnSQDAsyncNotify: a.en_sqd_async_notify != 0, SQDraining: a.sq_draining != 0,
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
		MinRNRTimer: uint8(a.min_rnr_timer), PortNum: uint8(a.port_num), Timeout: uint8(a.timeout),
		RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry), AltPortNum: uint8(a.alt_port_num),
		AltTimeout: uint8(a.alt_timeout),
	}
	m, ok := uverbsPorts(o.qp, &attr, hca.QPAttrMask(mask))
	if !ok {
		return einval
	}
	if err := o.qp.Modify(&attr, uverbsModifyMask(o.qp.Type(), m)); err != nil {
		return errno(err)
	}
	return 0
}

// uverbsPorts checks the ports of a modify_qp as the kernel's uverbs does before the
// provider sees them (modify_qp in uverbs_cmd.c): port_num, the address vector's and the
// alternate path's ports must exist; INIT→RTR's address vector must be on the QP's port;
// elsewhere an address vector without IBV_QP_PORT brings its port along. false: EINVAL.
func uverbsPorts(qp *hca.QP, a *hca.QPAttr, mask hca.QPAttrMask) (hca.QPAttrMask, bool) {
	d := qp.Device()
	valid := func(n uint8) bool { return d.Port(int(n)) != nil }
	if mask&hca.QPAttrPort != 0 && !valid(a.PortNum) {
		return mask, false
	}
	if mask&hca.QPAttrAV != 0 {
		if !valid(a.AHAttr.PortNum) {
			return mask, false
		}
		if mask&hca.QPAttrState != 0 && a.QPState == hca.QPStateRTR {
			if p := qp.Port(); p == nil || p.Num() != a.AHAttr.PortNum {
				return mask, false
			}
		} else {
			switch mask & (hca.QPAttrAV | hca.QPAttrPort) {
			case hca.QPAttrAV | hca.QPAttrPort:
				if a.PortNum != a.AHAttr.PortNum {
					return mask, false
				}
			case hca.QPAttrAV:
				mask |= hca.QPAttrPort
				a.PortNum = a.AHAttr.PortNum
			}
		}
	}
	if mask&hca.QPAttrAltPath != 0 && (!valid(a.AltPortNum) || !valid(a.AltAHAttr.PortNum) || a.AltPortNum != a.AltAHAttr.PortNum) {
		return mask, false
	}
	return mask, true
}

// uverbsModifyMask removes the attributes an XRC QP ignores from a modify_qp mask, as
// the kernel's uverbs does before ib_modify_qp checks it (modify_qp_mask in
// uverbs_cmd.c): an XRC send QP (XRC_INI) has no responder, so MAX_DEST_RD_ATOMIC and
// MIN_RNR_TIMER go; an XRC receive QP (XRC_TGT) no requester, so MAX_QP_RD_ATOMIC,
// RETRY_CNT and RNR_RETRY go. Programs written for RC pass them (perftest's -c XRC).
func uverbsModifyMask(t hca.QPType, mask hca.QPAttrMask) hca.QPAttrMask {
	switch t {
	case hca.QPTypeXRCSend:
		return mask &^ (hca.QPAttrMaxDestRdAtomic | hca.QPAttrMinRNRTimer)
	case hca.QPTypeXRCRecv:
		return mask &^ (hca.QPAttrMaxQPRdAtomic | hca.QPAttrRetryCnt | hca.QPAttrRNRRetry)
	}
	return mask
}

//export pibgo_query_qp
func pibgo_query_qp(h C.uint64_t, a *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) C.int {
	o, ok := qps.get(h)
	if !ok {
		return einval
	}
	q, ia := o.qp.Query()
	q.Cap = ia.Cap
	qpAttrToC(&q, a)
	a.cur_qp_state = a.qp_state
	init.cap = a.cap
	init.sq_sig_all = 0
	if ia.SQSigAll {
		init.sq_sig_all = 1
	}
	return 0
}

// qpAttrToC fills the fields of a that q has (ibv_query_qp, rdma_init_qp_attr).
func qpAttrToC(q *hca.QPAttr, a *C.struct_ibv_qp_attr) {
	a.qp_state, a.cur_qp_state = C.enum_ibv_qp_state(q.QPState), C.enum_ibv_qp_state(q.CurQPState)
	a.path_mtu, a.path_mig_state = C.enum_ibv_mtu(q.PathMTU), C.enum_ibv_mig_state(q.PathMigState)
	a.qkey, a.rq_psn, a.sq_psn, a.dest_qp_num = C.uint32_t(q.QKey), C.uint32_t(q.RQPSN), C.uint32_t(q.SQPSN), C.uint32_t(q.DestQPNum)
	a.qp_access_flags = C.uint(q.QPAccessFlags)
	c := q.Cap
	a.cap.max_send_wr, a.cap.max_recv_wr = C.uint32_t(c.MaxSendWR), C.uint32_t(c.MaxRecvWR)
	a.cap.max_send_sge, a.cap.max_recv_sge = C.uint32_t(c.MaxSendSGE), C.uint32_t(c.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(c.MaxInlineData)
	ahAttrToC(&q.AHAttr, &a.ah_attr)
	ahAttrToC(&q.AltAHAttr, &a.alt_ah_attr)
	a.pkey_index, a.alt_pkey_index = C.uint16_t(q.PKeyIndex), C.uint16_t(q.AltPKeyIndex)
	a.en_sqd_async_notify, a.sq_draining = b2c(q.EnSQDAsyncNotify), b2c(q.SQDraining)
	a.max_rd_atomic, a.max_dest_rd_atomic = C.uint8_t(q.MaxRdAtomic), C.uint8_t(q.MaxDestRdAtomic)
	a.min_rnr_timer, a.port_num, a.timeout = C.uint8_t(q.MinRNRTimer), C.uint8_t(q.PortNum), C.uint8_t(q.Timeout)
	a.retry_cnt, a.rnr_retry = C.uint8_t(q.RetryCnt), C.uint8_t(q.RNRRetry)
	a.alt_port_num, a.alt_timeout = C.uint8_t(q.AltPortNum), C.uint8_t(q.AltTimeout)
}

//export pibgo_destroy_qp
func pibgo_destroy_qp(h C.uint64_t) C.int {
	o, ok := qps.get(h)
	if !ok {
		return einval
	}
	o.mu.Lock()
	busy := len(o.mcast) > 0
	o.mu.Unlock()
	if busy {
		return C.int(syscall.EBUSY) // as the kernel's uverbs: detach the groups first
	}
	if err := o.qp.Destroy(); err != nil {
		return errno(err)
	}
	qps.del(h)
	ptrMu.Lock()
	delete(qpPtr, o.qp)
	ptrMu.Unlock()
	return 0
}

//export pibgo_mcast
func pibgo_mcast(h C.uint64_t, gid *C.uint8_t, lid C.uint16_t, attach C.int) C.int {
	o, ok := qps.get(h)
	if !ok {
		return einval
	}
	k := mcastKey{gid: *(*[16]byte)(unsafe.Pointer(gid)), lid: uint16(lid)}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, attached := o.mcast[k]
	if attach == 0 {
		// uverbs looks the attachment up in its list first: one never made is EINVAL.
		if !attached {
			return einval
		}
		if err := o.qp.DetachMcast(k.gid, k.lid); err != nil {
			return errno(err)
		}
		delete(o.mcast, k)
		return 0
	}
	if attached {
		return 0
	}
	// The kernel's ib_attach_mcast takes only a multicast LID on an InfiniBand port
	// (is_valid_mcast_lid: 0xC000–0xFFFE).
	if k.lid < 0xC000 || k.lid == 0xFFFF {
		return einval
	}
	if err := o.qp.AttachMcast(k.gid, k.lid); err != nil {
		return errno(err)
	}
	if o.mcast == nil {
		o.mcast = map[mcastKey]struct{}{}
	}
	o.mcast[k] = struct{}{}
	return 0
}

// mcastKey is an attachment as ibv_attach_mcast names it.
type mcastKey struct {
	gid [16]byte
	lid uint16
}

//export pibgo_post_send
func pibgo_post_send(h C.uint64_t, s *C.struct_pib_swr, n C.int, posted *C.int) C.int {
	*posted = 0
	o, ok := qps.get(h)
	if !ok {
		return einval
	}
	in := unsafe.Slice(s, int(n))
	o.mu.Lock()
	defer o.mu.Unlock()
	wrs := o.wrs[:0]
	// A WR the library refuses before the HCA sees it (a scatter/gather list that is not
	// there, a window or AH that is not one) ends the list: those before it are posted and
	// it is *bad_wr, EINVAL, as a provider's post_send.
	refused := false
	for i := range in {
		w := &in[i]
		wr := hca.SendWR{
			WRID: uint64(w.wr_id), Opcode: hca.WROpcode(w.opcode), SendFlags: hca.SendFlags(w.flags),
			RemoteAddr: uint64(w.remote_addr), RKey: uint32(w.rkey),
			CompareAdd: uint64(w.compare_add), Swap: uint64(w.swap),
			RemoteQPN: uint32(w.remote_qpn), RemoteQKey: uint32(w.remote_qkey), RemoteSRQN: uint32(w.remote_srqn),
		}
		switch wr.Opcode {
		case hca.WRSendWithInv, hca.WRLocalInv:
			wr.InvalidateRKey = uint32(w.imm)
		case hca.WRBindMW:
			if !bindWR(w, &wr) {
				refused = true
			}
		default:
			wr.ImmData = uint32(w.imm)
		}
		if w.num_sge < 0 || w.num_sge > 0 && w.sg == nil {
			refused = true
		} else if w.num_sge > 0 {
			wr.SGL = unsafe.Slice((*hca.SGE)(unsafe.Pointer(w.sg)), int(w.num_sge))
		}
		if w.ah != 0 {
			ah, ok := ahs.get(w.ah)
			if !ok {
				refused = true
			}
			wr.AH = ah
		}
		if refused {
			break
		}
		wrs = append(wrs, wr)
	}
	k, err := o.qp.PostSend(wrs)
	clear(wrs) // no C pointers kept past the call
	o.wrs = wrs[:0]
	*posted = C.int(k)
	if err != nil {
		return errno(err)
	}
	if refused {
		return einval
	}
	return 0
}

//export pibgo_post_recv
func pibgo_post_recv(h C.uint64_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	o, ok := qps.get(h)
	if !ok {
		*bad = wr
		return einval
	}
	if wr == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return postRecv(&o.rwrs, wr, bad, o.qp.PostRecv)
}

// ---- AHs ------------------------------------------------------------------------------

//export pibgo_create_ah
func pibgo_create_ah(h C.uint64_t, a *C.struct_ibv_ah_attr, perr *C.int) C.uint64_t {
	pd, ok := pds.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	ah, err := pd.CreateAH(ahAttrFromC(a))
	if err != nil {
		*perr = errno(err)
		return 0
	}
	return C.uint64_t(ahs.add(ah))
}

//export pibgo_destroy_ah
func pibgo_destroy_ah(h C.uint64_t) C.int {
	ah, ok := ahs.get(h)
	if !ok {
		return einval
	}
	if err := ah.Destroy(); err != nil {
		return errno(err)
	}
	ahs.del(h)
	return 0
}
