package rc_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
)

// waitEvent waits for an async event of type typ on c, skipping others; it fails the test
// if none comes.
func waitEvent(t *testing.T, c *hca.Context, typ hca.EventType) hca.AsyncEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-c.Events():
			if ev.Type == typ {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s", typ)
			return hca.AsyncEvent{}
		}
	}
}

// events returns the async events queued on c once the fabric has settled.
func events(t *testing.T, f *hcatest.Fabric, c *hca.Context) []hca.EventType {
	t.Helper()
	f.Settle(t)
	var out []hca.EventType
	for {
		select {
		case ev := <-c.Events():
			out = append(out, ev.Type)
		default:
			return out
		}
	}
}

// TestResponderAccessErrorEvent: an RDMA WRITE, READ or atomic with an R_Key the responder
// does not accept takes the responder's QP to ERR and raises IBV_EVENT_QP_ACCESS_ERR on
// its context (IBA 9.9.3.1.3, C9-222.1.1: no receive WQE carries the error; rxe's
// RESPST_ERR_RKEY_VIOLATION_EVENT); the requester completes with REM_ACCESS_ERR.
func TestResponderAccessErrorEvent(t *testing.T) {
	for _, op := range []hca.WROpcode{hca.WRRDMAWrite, hca.WRRDMARead, hca.WRAtomicFetchAndAdd} {
		t.Run(op.String(), func(t *testing.T) {
			f, a, b := connect(t, connOpts{})
			a.post(t, hca.SendWR{WRID: 1, Opcode: op, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80})
			if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemAccessErr {
				t.Fatalf("requester %+v, want REM_ACCESS_ERR", wc)
			}
			ev := waitEvent(t, b.ctx, hca.EventQPAccessErr)
			if ev.QP != b.qp {
				t.Fatalf("event's QP %v, want the responder's", ev.QP)
			}
			hcatest.Eventually(func() bool { return b.qp.State() == hca.QPStateErr })
			if s := b.qp.State(); s != hca.QPStateErr {
				t.Fatalf("responder in %s", s)
			}
			if evs := events(t, f, a.ctx); len(evs) != 0 {
				t.Fatalf("requester's context got %v", evs)
			}
		})
	}
}

// TestResponderWriteImmAccessError: an RDMA WRITE with immediate (Only) whose R_Key fails
// has taken its receive WQE, which completes with REM_ACCESS_ERR and carries the error:
// no async event (rxe: get_rkey_violation_state, RXE_IMMDT_MASK).
func TestResponderWriteImmAccessError(t *testing.T) {
	f, a, b := connect(t, connOpts{})
	b.postRecv(t, 7, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWriteWithImm, SendFlags: hca.SendSignaled, ImmData: 9,
		SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemAccessErr {
		t.Fatalf("requester %+v, want REM_ACCESS_ERR", wc)
	}
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCRemAccessErr || wc.WRID != 7 {
		t.Fatalf("responder %+v, want WRID 7 REM_ACCESS_ERR", wc)
	}
	if evs := events(t, f, b.ctx); len(evs) != 0 {
		t.Fatalf("responder's events %v, want none", evs)
	}
}

// TestResponderInvalidRequestEvent: an RDMA WRITE whose packets do not match the
// responder's path MTU is an invalid request no WQE carries: IBV_EVENT_QP_REQ_ERR (IBA
// C9-222.1.1, Invalid Request Local Work Queue Error; mlx5's WQ_INVAL_REQ_ERROR).
func TestResponderInvalidRequestEvent(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{Register: rc.Register})
	o := connOpts{}
	o.defaults()
	a := newSide(t, f.Devs[0], o)
	b := newSide(t, f.Devs[1], o)
	bring(t, a, b, o)
	o.mtu = hca.MTU1024
	bring(t, b, a, o)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8192)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemInvReqErr {
		t.Fatalf("requester %+v, want REM_INV_REQ_ERR", wc)
	}
	if ev := waitEvent(t, b.ctx, hca.EventQPReqErr); ev.QP != b.qp {
		t.Fatalf("event's QP %v", ev.QP)
	}
}

// TestCommEst: the first request a QP in RTR receives raises IBV_EVENT_COMM_EST once
// (IBA 11.6.3.1); later ones, and a QP that reached RTS first, raise none.
func TestCommEst(t *testing.T) {
	for _, typ := range []hca.QPType{hca.QPTypeRC, hca.QPTypeUC} {
		t.Run(typ.String(), func(t *testing.T) {
			f := hcatest.NewFabric(t, 2, hcatest.Options{Register: rc.Register})
			o := connOpts{typ: typ}
			o.defaults()
			a := newSide(t, f.Devs[0], o)
			b := newSide(t, f.Devs[1], o)
			bring(t, a, b, o)
			// b to RTR only.
			at := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: o.qpAccess}
			if err := b.qp.Modify(&at, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			at = hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: o.mtu, DestQPNum: a.qp.Num(), RQPSN: (0x100 + a.qp.Num()) & 0xFFFFFF,
				AHAttr: hca.AHAttr{DLID: a.port.LID(), PortNum: 1}, MaxDestRdAtomic: 16}
			mask := hca.QPAttrState | hca.QPAttrAV | hca.QPAttrPathMTU | hca.QPAttrDestQPN | hca.QPAttrRQPSN
			if typ == hca.QPTypeRC {
				mask |= hca.QPAttrMaxDestRdAtomic | hca.QPAttrMinRNRTimer
			}
			if err := b.qp.Modify(&at, mask); err != nil {
				t.Fatal(err)
			}
			if evs := events(t, f, b.ctx); len(evs) != 0 {
				t.Fatalf("events before any packet: %v", evs)
			}
			for i := 0; i < 3; i++ {
				a.post(t, hca.SendWR{WRID: uint64(i), Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
				if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
					t.Fatalf("write %d: %+v", i, wc)
				}
			}
			evs := events(t, f, b.ctx)
			if len(evs) != 1 || evs[0] != hca.EventCommEst {
				t.Fatalf("responder's events %v, want one COMM_EST", evs)
			}
			if evs := events(t, f, a.ctx); len(evs) != 0 {
				t.Fatalf("requester's events %v, want none (it was in RTS)", evs)
			}
		})
	}
}

// TestSRQLastWQEReached: a QP on an SRQ that enters ERR raises IBV_EVENT_QP_LAST_WQE_REACHED
// (IBA 11.6.3.1), when an error takes it there (after the error's own event) as when
// ibv_modify_qp does; a QP without an SRQ raises none.
func TestSRQLastWQEReached(t *testing.T) {
	f, _, b := connect(t, connOpts{})
	// A second RC QP on b with an SRQ, connected to a second QP on a.
	srq, err := b.pd.CreateSRQ(hca.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := connOpts{}
	o.defaults()
	a2 := newSide(t, f.Devs[0], o)
	b2 := &side{ctx: b.ctx, pd: b.pd, scq: b.scq, rcq: b.rcq, buf: b.buf, mr: b.mr, port: b.port}
	if b2.qp, err = b.pd.CreateQP(hca.QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq, QPType: hca.QPTypeRC,
		Cap: hca.QPCap{MaxSendWR: 16, MaxSendSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	bring(t, a2, b2, o)
	bring(t, b2, a2, o)
	a2.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a2.sge(0, 8)},
		RemoteAddr: b.mr.Addr(), RKey: 0x12345})
	waitWC(t, a2.scq, nil)
	f.Settle(t)
	var got []hca.AsyncEvent
	for len(got) < 2 {
		select {
		case ev := <-b.ctx.Events():
			got = append(got, ev)
		case <-time.After(5 * time.Second):
			t.Fatalf("events %v, want QP_ACCESS_ERR then QP_LAST_WQE_REACHED", got)
		}
	}
	if got[0].Type != hca.EventQPAccessErr || got[1].Type != hca.EventQPLastWQEReached || got[1].QP != b2.qp {
		t.Fatalf("events %+v, want QP_ACCESS_ERR then QP_LAST_WQE_REACHED of the SRQ's QP", got)
	}
	// By modify: the SRQ QP again (RESET, back up, to ERR) raises it; b's own QP does not.
	if err := b2.qp.Modify(&hca.QPAttr{QPState: hca.QPStateReset}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	bring(t, b2, a2, o)
	if err := b2.qp.Modify(&hca.QPAttr{QPState: hca.QPStateErr}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, b.ctx, hca.EventQPLastWQEReached); ev.QP != b2.qp {
		t.Fatalf("event's QP %v", ev.QP)
	}
	if err := b.qp.Modify(&hca.QPAttr{QPState: hca.QPStateErr}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if evs := events(t, f, b.ctx); len(evs) != 0 {
		t.Fatalf("events %v after a QP without an SRQ went to ERR, want none", evs)
	}
}

// TestUCWriteBadRKeyDropped: a UC responder drops an RDMA WRITE whose R_Key fails and
// stays in RTS (rxe: RESPST_ERR_RKEY_VIOLATION for UC, drop_msg; no NAK, no event); the
// next message arrives.
func TestUCWriteBadRKeyDropped(t *testing.T) {
	f, a, b := connect(t, connOpts{typ: hca.QPTypeUC, mtu: hca.MTU1024})
	b.postRecv(t, 3, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 4000)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80})
	a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRRDMAWriteWithImm, SendFlags: hca.SendSignaled, ImmData: 5,
		SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCSuccess || wc.WRID != 3 || wc.Opcode != hca.WCRecvRDMAWithImm {
		t.Fatalf("responder %+v, want the second WRITE's immediate", wc)
	}
	if s := b.qp.State(); s != hca.QPStateRTS {
		t.Fatalf("responder in %s", s)
	}
	if evs := events(t, f, b.ctx); len(evs) != 0 {
		t.Fatalf("responder's events %v", evs)
	}
}
