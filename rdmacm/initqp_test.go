package rdmacm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
)

// exchange sends a message each way over two connected RC QPs and checks both arrive:
// each send succeeds only if the sender's first PSN is what the receiver expects.
func exchange(t *testing.T, a, b *endpoint, aqp, bqp *hca.QP) {
	t.Helper()
	for _, d := range []struct {
		from, to       *endpoint
		fromQP, toQP   *hca.QP
		msg, direction string
	}{{a, b, aqp, bqp, "from a", "a → b"}, {b, a, bqp, aqp, "from b", "b → a"}} {
		if _, err := d.toQP.PostRecv([]hca.RecvWR{{WRID: 1, SGL: d.to.sge(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		copy(d.from.buf[512:], d.msg)
		if _, err := d.fromQP.PostSend([]hca.SendWR{{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: d.from.sge(512, len(d.msg))}}); err != nil {
			t.Fatal(err)
		}
		if wc := d.from.poll(t); wc.Status != hca.WCSuccess {
			t.Fatalf("%s: send %v", d.direction, wc.Status)
		}
		if wc := d.to.poll(t); wc.Status != hca.WCSuccess || string(d.to.buf[:wc.ByteLen]) != d.msg {
			t.Fatalf("%s: receive %v %q", d.direction, wc.Status, d.to.buf[:wc.ByteLen])
		}
	}
}

// rcAttr is an RC QP's attributes for a QP made without rdma_cm.
func rcAttr(e *endpoint) hca.QPInitAttr {
	a := e.initAttr()
	a.QPType = hca.QPTypeRC
	return a
}

// TestStartingPSNAsLinux: the passive side here is a bare IB CM that sets its QP up as
// Linux's ib_cm and IPoIB-CM do — its receive queue expects the Starting PSN of its own
// REP, its send queue starts at the REQ's — and an rdma_cm client connects to it: a
// message goes each way. (rdma_cm used to take the two PSNs the other way round: a
// pibgw host and a Linux host would each have sent at a PSN the other did not expect.)
func TestStartingPSNAsLinux(t *testing.T) {
	h := newTestHost(t, 2)
	type reqEvent struct {
		id *ibcm.ID
		ev *ibcm.Event
	}
	reqs := make(chan reqEvent, 4)
	l := h.devs[1].CM.NewID(func(id *ibcm.ID, ev *ibcm.Event) {
		if ev.Type == ibcm.EventReqReceived {
			reqs <- reqEvent{id, ev}
		}
	}, nil)
	if err := l.Listen(rdmacm.ServiceID(rdmacm.PSTCP, 7481), 0); err != nil {
		t.Fatal(err)
	}
	cid, cch := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7481))
	ce := newEndpoint(t, cid.Device())
	cqp, err := cid.CreateQP(ce.pd, ce.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	var r reqEvent
	select {
	case r = <-reqs:
	case <-time.After(10 * time.Second):
		t.Fatal("no REQ")
	}
	req := r.ev.Req
	se := newEndpoint(t, h.devs[1])
	sqp, err := se.pd.CreateQP(rcAttr(se))
	if err != nil {
		t.Fatal(err)
	}
	const myPSN = 0x3579B // this side's receive queue's first PSN, sent in the REP
	steps := []struct {
		a    hca.QPAttr
		mask hca.QPAttrMask
	}{
		{hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite | hca.AccessRemoteRead},
			hca.QPAttrState | hca.QPAttrPKeyIndex | hca.QPAttrPort | hca.QPAttrAccessFlags},
		{hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: hca.MTU(req.Path.MTU), DestQPNum: req.QPN, RQPSN: myPSN,
			AHAttr: hca.AHAttr{DLID: req.Path.DLID, SL: req.Path.SL, PortNum: 1}, MaxDestRdAtomic: 1},
			hca.QPAttrState | hca.QPAttrAV | hca.QPAttrPathMTU | hca.QPAttrDestQPN | hca.QPAttrRQPSN | hca.QPAttrMaxDestRdAtomic | hca.QPAttrMinRNRTimer},
		{hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: req.StartingPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			hca.QPAttrState | hca.QPAttrSQPSN | hca.QPAttrTimeout | hca.QPAttrRetryCnt | hca.QPAttrRNRRetry | hca.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := sqp.Modify(&s.a, s.mask); err != nil {
			t.Fatalf("%v: %v", s.a.QPState, err)
		}
	}
	if err := r.id.SendRep(ibcm.RepParam{QPN: sqp.Num(), StartingPSN: myPSN, ResponderRes: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventEstablished).Ack()
	if a, _ := cqp.Query(); a.RQPSN != req.StartingPSN || a.SQPSN != myPSN {
		t.Errorf("client QP: rq_psn %#x sq_psn %#x, want the REQ's Starting PSN %#x and the REP's %#x", a.RQPSN, a.SQPSN, req.StartingPSN, myPSN)
	}
	exchange(t, ce, se, cqp, sqp)
}

// TestInitQPAttr: both sides make their own QPs and take them through INIT, RTR and RTS
// with InitQPAttr (rdma_init_qp_attr) — the passive side at CONNECT_REQUEST before it
// accepts with its QP number, the active side at CONNECT_RESPONSE before Establish, with
// its ACK timeout set (rdma_set_option) — and messages and an RDMA READ cross.
func TestInitQPAttr(t *testing.T) {
	h := newTestHost(t, 2)
	sch := rdmacm.CreateEventChannel()
	listen, err := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := listen.BindAddr(netip.AddrPortFrom(h.addr(1), 7482)); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(4); err != nil {
		t.Fatal(err)
	}
	cid, cch := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7482))
	move := func(id *rdmacm.ID, qp *hca.QP, states ...hca.QPState) {
		t.Helper()
		for _, s := range states {
			a, mask, err := id.InitQPAttr(s)
			if err != nil {
				t.Fatalf("InitQPAttr(%v): %v", s, err)
			}
			if err := qp.Modify(&a, mask); err != nil {
				t.Fatalf("modify to %v with InitQPAttr's %+v (mask %#x): %v", s, a, mask, err)
			}
		}
	}
	ce := newEndpoint(t, cid.Device())
	cqp, err := ce.pd.CreateQP(rcAttr(ce))
	if err != nil {
		t.Fatal(err)
	}
	move(cid, cqp, hca.QPStateInit) // before the connection: port, P_Key index, no remote access
	if err := cid.Connect(rdmacm.ConnParam{QPNum: cqp.Num(), ResponderResources: 2, InitiatorDepth: 2, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}

	creq := getEvent(t, sch, rdmacm.EventConnectRequest)
	sid := creq.ID
	creq.Ack()
	se := newEndpoint(t, sid.Device())
	sqp, err := se.pd.CreateQP(rcAttr(se))
	if err != nil {
		t.Fatal(err)
	}
	move(sid, sqp, hca.QPStateInit, hca.QPStateRTR, hca.QPStateRTS)
	if err := sid.Accept(rdmacm.ConnParam{QPNum: sqp.Num(), ResponderResources: 2, InitiatorDepth: 2, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}

	if err := cid.SetAckTimeout(12); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventConnectResponse).Ack()
	move(cid, cqp, hca.QPStateInit, hca.QPStateRTR, hca.QPStateRTS) // INIT → INIT: the connection's access
	if err := cid.Establish(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, sch, rdmacm.EventEstablished).Ack()
	if a, _ := cqp.Query(); a.QPAccessFlags&hca.AccessRemoteRead == 0 || a.MaxRdAtomic != 2 || a.MaxDestRdAtomic != 2 || a.Timeout != 12 {
		t.Errorf("client QP: access %v, max_rd_atomic %d, max_dest_rd_atomic %d, timeout %d; want remote read, 2, 2, 12 (SetAckTimeout)",
			a.QPAccessFlags, a.MaxRdAtomic, a.MaxDestRdAtomic, a.Timeout)
	}
	exchange(t, ce, se, cqp, sqp)

	copy(se.buf[1024:], "read me")
	if _, err := cqp.PostSend([]hca.SendWR{{WRID: 9, Opcode: hca.WRRDMARead, SendFlags: hca.SendSignaled, SGL: ce.sge(2048, 7),
		RemoteAddr: se.mr.Addr() + 1024, RKey: se.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := ce.poll(t); wc.Status != hca.WCSuccess || string(ce.buf[2048:2055]) != "read me" {
		t.Fatalf("RDMA READ: %v %q", wc.Status, ce.buf[2048:2055])
	}

	// UD: port, P_Key index and the UDP port space's Q_Key, as Linux.
	uid, err := rdmacm.CreateID(h, rdmacm.CreateEventChannel(), nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := uid.BindAddr(netip.AddrPortFrom(h.addr(0), 0)); err != nil {
		t.Fatal(err)
	}
	if err := uid.SetAckTimeout(12); err == nil {
		t.Error("SetAckTimeout on a UD ID: no error")
	}
	a, mask, err := uid.InitQPAttr(hca.QPStateInit)
	if err != nil || a.QKey != rdmacm.UDPQKey || a.PortNum != 1 || mask&hca.QPAttrQKey == 0 {
		t.Errorf("UD InitQPAttr(INIT): %+v mask %#x, %v", a, mask, err)
	}
}
