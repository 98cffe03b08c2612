package hca

import "sync/atomic"

// XRC, the extended reliable connection (IBA Annex A14): an XRC domain (XRCD) groups XRC
// SRQs and XRC receive QPs; a sender's XRC send QP (XRC_INI) reaches a receive QP
// (XRC_TGT) of the domain and names, in each request's XRCETH, the XRC SRQ whose receive
// WQEs the message consumes. One send QP thus serves every SRQ of a remote domain, and the
// receive completions go to each SRQ's own CQ.

// XRC QP types (ibv_qp_type).
const (
	QPTypeXRCSend QPType = 9  // IBV_QPT_XRC_SEND (kernel XRC_INI): requester only
	QPTypeXRCRecv QPType = 10 // IBV_QPT_XRC_RECV (kernel XRC_TGT): responder only
)

// MaxXRCD is how many XRC domains a device holds (ibv_device_attr_ex.max_xrcd... pibgw's
// own limit).
const MaxXRCD = 65535

// XRCD is an XRC domain (ibv_xrcd).
type XRCD struct {
	ctx  *Context
	id   uint32
	refs atomic.Int32 // XRC SRQs and receive QPs in the domain
	dead atomic.Bool
	pd   *PD // the receive QPs' place-holder PD: events and ownership, never memory access
}

// OpenXRCD opens a new XRC domain (ibv_open_xrcd).
func (c *Context) OpenXRCD() (*XRCD, error) {
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.xrc.xrcds >= MaxXRCD {
		return nil, errorf("open_xrcd", ENOMEM, "device has %d XRC domains", MaxXRCD)
	}
	d.xrc.xrcds++
	id := d.nextID()
	x := &XRCD{ctx: c, id: id, pd: &PD{ctx: c, id: id}}
	d.register(x)
	return x, nil
}

// ID is the object id pibgw's inspection shows.
func (x *XRCD) ID() uint32 { return x.id }

// Close closes the domain (ibv_close_xrcd); EBUSY while SRQs or QPs use it.
func (x *XRCD) Close() error {
	if n := x.refs.Load(); n > 0 {
		return errorf("close_xrcd", EBUSY, "XRC domain %d still has %d objects", x.id, n)
	}
	if x.dead.Swap(true) {
		return errorf("close_xrcd", EINVAL, "XRC domain %d already closed", x.id)
	}
	d := x.ctx.dev
	d.mu.Lock()
	d.xrc.xrcds--
	d.mu.Unlock()
	d.unregister(x)
	return nil
}

// xrcState is the device's XRC bookkeeping.
type xrcState struct {
	xrcds int
	srqs  numTable[SRQ] // XRC SRQs by number
	next  uint32
}

// CreateXRCSRQ creates an XRC SRQ (ibv_create_srq_ex with IBV_SRQT_XRC) in domain x: its
// receive WQEs hold memory of pd, and the receives it serves complete on cq.
func (pd *PD) CreateXRCSRQ(x *XRCD, cq *CQ, attr SRQInitAttr) (*SRQ, error) {
	const op = "create_srq_ex"
	if x == nil || cq == nil {
		return nil, errorf(op, EINVAL, "an XRC SRQ needs an XRC domain and a CQ")
	}
	d := pd.ctx.dev
	if x.ctx.dev != d || cq.ctx.dev != d {
		return nil, errorf(op, EINVAL, "XRC domain or CQ of another device")
	}
	if x.dead.Load() {
		return nil, errorf(op, EINVAL, "XRC domain %d is closed", x.id)
	}
	s, err := pd.CreateSRQ(attr)
	if err != nil {
		return nil, err
	}
	s.xrcd, s.cq = x, cq
	x.refs.Add(1)
	cq.refs.Add(1)
	d.mu.Lock()
	for {
		d.xrc.next = (d.xrc.next + 1) & 0xFFFFFF
		if d.xrc.next != 0 && d.xrc.srqs.load(d.xrc.next) == nil {
			break
		}
	}
	s.num = d.xrc.next
	d.xrc.srqs.store(s.num, s)
	d.mu.Unlock()
	return s, nil
}

// destroyXRC undoes CreateXRCSRQ's part of an SRQ (d.mu held).
func (s *SRQ) destroyXRC(d *Device) {
	if s.xrcd == nil {
		return
	}
	d.xrc.srqs.store(s.num, nil)
	s.xrcd.refs.Add(-1)
	s.cq.refs.Add(-1)
}

// Num is the SRQ number an XRC sender names in its XRCETH (ibv_get_srq_num); 0 for an
// SRQ that is not an XRC SRQ.
func (s *SRQ) Num() uint32 { return s.num }

// XRCD returns an XRC SRQ's domain (nil for other SRQs).
func (s *SRQ) XRCD() *XRCD { return s.xrcd }

// CreateQP creates an XRC receive QP in the domain (ibv_create_qp_ex with
// IBV_QPT_XRC_RECV and IBV_QP_INIT_ATTR_XRCD): no PD, CQs or queues of its own; what it
// receives goes to the XRC SRQ each request names.
func (x *XRCD) CreateQP(init QPInitAttr) (*QP, error) {
	if init.QPType != QPTypeXRCRecv {
		return nil, errorf("create_qp", EINVAL, "an XRC domain creates XRC_RECV QPs, not %s", init.QPType)
	}
	if x.dead.Load() {
		return nil, errorf("create_qp", EINVAL, "XRC domain %d is closed", x.id)
	}
	init.SendCQ, init.RecvCQ, init.SRQ, init.Cap = nil, nil, nil, QPCap{}
	qp, err := x.pd.createQP(init, x)
	if err != nil {
		return nil, err
	}
	x.refs.Add(1)
	return qp, nil
}

// XRCD returns an XRC receive QP's domain.
func (qp *QP) XRCD() *XRCD { return qp.xrcd }

// xrcSRQ finds the XRC SRQ an XRC receive QP's request names: it must exist and be in
// the QP's domain (Annex A14: an XRCETH naming another domain's SRQ is an invalid request).
func (qp *QP) xrcSRQ(srqn uint32) *SRQ {
	s := qp.dev.xrc.srqs.load(srqn)
	if s == nil || qp.xrcd == nil || s.xrcd != qp.xrcd {
		return nil
	}
	return s
}

// ValidXRCSRQ reports whether an XRC receive QP can deliver to SRQ number srqn.
func (qp *QP) ValidXRCSRQ(srqn uint32) bool { return qp.xrcSRQ(srqn) != nil }

// TakeRecvXRC pops the next receive WQE of the XRC SRQ srqn into w for an XRC receive
// QP: the WQE then scatters with the SRQ's PD and completes on the SRQ's CQ
// (CompleteRecvWQE). False when the SRQ is empty or not the QP's domain's.
func (qp *QP) TakeRecvXRC(srqn uint32, w *RecvWQE) bool {
	s := qp.xrcSRQ(srqn)
	if s == nil || !s.take(w) {
		return false
	}
	w.pd, w.cq = s.pd, s.cq
	return true
}

// RemoteAccessXRC is RemoteAccess for an XRC receive QP: memory is reached through the PD
// of the XRC SRQ the request names.
func (qp *QP) RemoteAccessXRC(srqn, rkey uint32, va, n uint64, acc AccessFlags) (*MR, uint64, bool) {
	s := qp.xrcSRQ(srqn)
	if s == nil {
		return nil, 0, false
	}
	return qp.remoteAccess(s.pd, rkey, va, n, acc)
}

// CompleteRecvWQE reports the completion of receive WQE w: on the CQ of the XRC SRQ it
// came from, else on the QP's receive CQ.
func (qp *QP) CompleteRecvWQE(w *RecvWQE, wc *WC, solicited bool) {
	wc.QPNum = qp.num
	cq := qp.recvCQ
	if w.cq != nil {
		cq = w.cq
	}
	cq.Push(wc, solicited)
}
