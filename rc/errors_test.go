package rc_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/wire"
)

func TestRCRetryExceededOnUnpluggedLink(t *testing.T) {
	clk := newFakeClock()
	const retry = 3
	f, a, b := connect(t, connOpts{clk: clk, retry: retry, timeout: 10})
	f.Cables[0].SetUp(false)
	f.Settle(t) // an attached port learns from the daemon that its link went down
	for i := 0; i < 3; i++ {
		a.post(t, hca.SendWR{WRID: uint64(i), Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled,
			SGL: []hca.SGE{a.sge(0, 100)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	for i := 0; i < 10; i++ {
		clk.Advance(time.Second)
	}
	wcs := drain(t, f, a.scq, 3)
	if len(wcs) != 3 || wcs[0].Status != hca.WCRetryExcErr || wcs[1].Status != hca.WCWRFlushErr || wcs[2].Status != hca.WCWRFlushErr {
		t.Fatalf("completions %+v; want RETRY_EXC_ERR then two WR_FLUSH_ERR", wcs)
	}
	if s := a.qp.State(); s != hca.QPStateErr {
		t.Fatalf("requester state %s, want ERR", s)
	}
	if s := b.qp.State(); s != hca.QPStateRTS {
		t.Fatalf("responder state %s, want RTS (it never heard anything)", s)
	}
	// The first attempt and retry_cnt retries: the three WRs' packets went out retry+1
	// times each (and were discarded by the port whose cable is out).
	if got := a.port.Counters().Get(hca.CntXmitDiscards); got != 3*(retry+1) {
		t.Fatalf("%d transmissions, want %d (3 packets × (retry_cnt+1))", got, 3*(retry+1))
	}
}

func TestRCRNRRetryExceeded(t *testing.T) {
	clk := newFakeClock()
	f, a, b := connect(t, connOpts{clk: clk, rnrRetry: 3, minRNR: 1})
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 10)}})
	for i := 0; i < 10; i++ {
		clk.Advance(10 * time.Millisecond)
	}
	wcs := drain(t, f, a.scq, 1)
	if len(wcs) != 1 || wcs[0].Status != hca.WCRNRRetryExcErr {
		t.Fatalf("completions %+v; want RNR_RETRY_EXC_ERR", wcs)
	}
	// The QP is in ERR now: a new WR is flushed.
	a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 10)}})
	if wcs := drain(t, f, a.scq, 1); len(wcs) != 1 || wcs[0].Status != hca.WCWRFlushErr {
		t.Fatalf("completions %+v; want WR_FLUSH_ERR", wcs)
	}
	if a.qp.State() != hca.QPStateErr || b.qp.State() != hca.QPStateRTS {
		t.Fatalf("states %s/%s, want ERR/RTS", a.qp.State(), b.qp.State())
	}
	// 1 try + 3 RNR retries reached the responder (drain let the fabric settle).
	if got := b.port.Counters().Get(hca.CntRcvPkts); got != 4 {
		t.Fatalf("responder received %d packets, want 4", got)
	}
}

func TestRCRNRRecoversWhenReceivePosted(t *testing.T) {
	clk := newFakeClock()
	f, a, b := connect(t, connOpts{clk: clk, rnrRetry: 7, minRNR: 1})
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 10)}})
	for i := 0; i < 20; i++ {
		clk.Advance(time.Millisecond)
	}
	noWC(t, f, a.scq) // rnr_retry 7: retries forever
	b.postRecv(t, 5, 0, 64)
	if wc := waitWC(t, a.scq, clk); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	if wc := waitWC(t, b.rcq, clk); wc.Status != hca.WCSuccess || wc.WRID != 5 {
		t.Fatal(wc)
	}
}

func TestRCRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(a, b *side, other *hca.MR) hca.SendWR
	}{
		{"rkey of another PD", func(a, b *side, other *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: hca.WRRDMAWrite, SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: other.Addr(), RKey: other.RKey()}
		}},
		{"out of bounds", func(a, b *side, other *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: hca.WRRDMAWrite, SGL: []hca.SGE{a.sge(0, 64)}, RemoteAddr: b.mr.Addr() + uint64(len(b.buf)) - 32, RKey: b.mr.RKey()}
		}},
		{"READ beyond the region", func(a, b *side, other *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: hca.WRRDMARead, SGL: []hca.SGE{a.sge(0, 64)}, RemoteAddr: b.mr.Addr() - 8, RKey: b.mr.RKey()}
		}},
		{"atomic on a bad rkey", func(a, b *side, other *hca.MR) hca.SendWR {
			return hca.SendWR{Opcode: hca.WRAtomicFetchAndAdd, SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x100}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, a, b := connect(t, connOpts{})
			pd2, _ := b.ctx.AllocPD()
			other, err := pd2.RegMR(make([]byte, 64), hca.AccessLocalWrite|hca.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			b.postRecv(t, 77, 0, 64)
			wr := tc.wr(a, b, other)
			wr.WRID, wr.SendFlags = 1, hca.SendSignaled
			a.post(t, wr)
			a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}})
			wcs := drain(t, f, a.scq, 2)
			if len(wcs) != 2 || wcs[0].Status != hca.WCRemAccessErr || wcs[1].Status != hca.WCWRFlushErr {
				t.Fatalf("requester completions %+v; want REM_ACCESS_ERR, WR_FLUSH_ERR", wcs)
			}
			if a.qp.State() != hca.QPStateErr || b.qp.State() != hca.QPStateErr {
				t.Fatalf("states %s/%s, want ERR on both sides (IBA class C error)", a.qp.State(), b.qp.State())
			}
			// The responder's receive WQE is flushed.
			if r := drain(t, f, b.rcq, 1); len(r) != 1 || r[0].Status != hca.WCWRFlushErr || r[0].WRID != 77 {
				t.Fatalf("responder completions %+v", r)
			}
		})
	}
	t.Run("MR without REMOTE_WRITE", func(t *testing.T) {
		_, a, b := connect(t, connOpts{access: hca.AccessLocalWrite | hca.AccessRemoteRead})
		a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemAccessErr {
			t.Fatalf("WC %s, want REM_ACCESS_ERR", wc.Status)
		}
		// The responder enters ERR once its NAK is out: attached, on b's goroutine.
		if !hcatest.Eventually(func() bool { return b.qp.State() == hca.QPStateErr }) {
			t.Fatalf("responder state %s", b.qp.State())
		}
	})
	t.Run("QP without REMOTE_READ", func(t *testing.T) {
		_, a, b := connect(t, connOpts{qpAccess: hca.AccessRemoteWrite})
		a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMARead, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemAccessErr {
			t.Fatalf("WC %s, want REM_ACCESS_ERR", wc.Status)
		}
	})
}

// TestRCZeroLengthRDMA: a zero-length RDMA WRITE or READ carries no valid R_Key or VA
// and the responder does not check them (IBA C9-88) — UCX's rc_verbs flushes an endpoint
// with a zero-length WRITE to R_Key 0 — while the QP's remote access flags still apply.
func TestRCZeroLengthRDMA(t *testing.T) {
	f, a, b := connect(t, connOpts{})
	b.postRecv(t, 9, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled})
	a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRRDMARead, SendFlags: hca.SendSignaled, RemoteAddr: 0x1000, RKey: 0xdead})
	a.post(t, hca.SendWR{WRID: 3, Opcode: hca.WRRDMAWriteWithImm, SendFlags: hca.SendSignaled, ImmData: 0x12345678})
	wcs := drain(t, f, a.scq, 3)
	if len(wcs) != 3 {
		t.Fatalf("requester completions %+v", wcs)
	}
	for i, wc := range wcs {
		if wc.Status != hca.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("requester completion %d: %+v, want WRID %d SUCCESS", i, wc, i+1)
		}
	}
	r := drain(t, f, b.rcq, 1)
	if len(r) != 1 || r[0].Status != hca.WCSuccess || r[0].Opcode != hca.WCRecvRDMAWithImm || r[0].ByteLen != 0 || r[0].ImmData != 0x12345678 {
		t.Fatalf("responder completions %+v, want RECV_RDMA_WITH_IMM of 0 bytes", r)
	}
	if a.qp.State() != hca.QPStateRTS || b.qp.State() != hca.QPStateRTS {
		t.Fatalf("states %s/%s, want RTS", a.qp.State(), b.qp.State())
	}

	t.Run("QP without REMOTE_WRITE", func(t *testing.T) {
		_, a, _ := connect(t, connOpts{qpAccess: hca.AccessRemoteRead})
		a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled})
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemAccessErr {
			t.Fatalf("WC %s, want REM_ACCESS_ERR", wc.Status)
		}
	})
}

func TestRCLocalProtectionError(t *testing.T) {
	f, a, b := connect(t, connOpts{})
	b.postRecv(t, 1, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey() + 0x100}}})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCLocProtErr {
		t.Fatalf("WC %s, want LOC_PROT_ERR", wc.Status)
	}
	if a.qp.State() != hca.QPStateErr {
		t.Fatalf("state %s", a.qp.State())
	}
	noWC(t, f, b.rcq)
}

func TestRCReceiveBufferTooSmall(t *testing.T) {
	_, a, b := connect(t, connOpts{})
	b.postRecv(t, 1, 0, 16)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 100)}})
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCLocLenErr {
		t.Fatalf("responder WC %s, want LOC_LEN_ERR", wc.Status)
	}
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemInvReqErr {
		t.Fatalf("requester WC %s, want REM_INV_REQ_ERR", wc.Status)
	}
}

// TestRCReceiveErrorNAKFirst: the NAK of a receive that failed leaves before the receive
// completes in error. A program that exits as soon as it polls LOC_LEN_ERR (as
// ibv_rc_pingpong does) took the NAK with it when the completion came first, and its
// peer ended in RETRY_EXC_ERR instead of REM_INV_REQ_ERR.
func TestRCReceiveErrorNAKFirst(t *testing.T) {
	var (
		rcq       atomic.Pointer[hca.CQ]
		naks      atomic.Int32
		cqesAtNAK atomic.Int32
	)
	f, a, b := connect(t, connOpts{wrap: func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if i != 1 || d != fabric.AtoB { // b's packets toward the switch
			return l
		}
		return fabric.LinkFunc(func(pkts [][]byte) {
			for _, p := range pkts {
				var pk wire.Packet
				if pk.Parse(p) == nil && pk.AETH != nil && pk.AETH.IsNAK() {
					naks.Add(1)
					if cq := rcq.Load(); cq != nil {
						cqesAtNAK.Store(int32(cq.Pending()))
					}
				}
			}
			l.Send(pkts)
		})
	}})
	if f.Attached() {
		t.Skip("skipping: attached, the NAK reaches the daemon's link after the process wrote it")
	}
	rcq.Store(b.rcq)
	b.postRecv(t, 1, 0, 16)
	b.postRecv(t, 2, 0, 16)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 100)}})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemInvReqErr {
		t.Fatalf("requester WC %s, want REM_INV_REQ_ERR", wc.Status)
	}
	if naks.Load() != 1 || cqesAtNAK.Load() != 0 {
		t.Fatalf("%d NAKs sent, with %d completions already queued at the responder: want 1 NAK before any", naks.Load(), cqesAtNAK.Load())
	}
	// The failed receive completes first, the one behind it is flushed.
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCLocLenErr || wc.WRID != 1 {
		t.Fatalf("responder WC %s (WRID %d), want LOC_LEN_ERR (1)", wc.Status, wc.WRID)
	}
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCWRFlushErr || wc.WRID != 2 {
		t.Fatalf("responder WC %s (WRID %d), want WR_FLUSH_ERR (2)", wc.Status, wc.WRID)
	}
}

func TestRCSQDrainEvent(t *testing.T) {
	f, a, b := connect(t, connOpts{})
	b.postRecv(t, 1, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}})
	if err := a.qp.Modify(&hca.QPAttr{QPState: hca.QPStateSQD, EnSQDAsyncNotify: true}, hca.QPAttrState|hca.QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-a.ctx.Events():
		if ev.Type != hca.EventSQDrained || ev.QP != a.qp {
			t.Fatalf("event %s", ev.Type)
		}
	case <-time.After(time.Second):
		t.Fatal("no SQ_DRAINED event")
	}
	// A WR posted in SQD waits; back in RTS it goes.
	b.postRecv(t, 2, 0, 64)
	a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}})
	waitWC(t, a.scq, nil)
	noWC(t, f, a.scq)
	if err := a.qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.scq, nil); wc.WRID != 2 || wc.Status != hca.WCSuccess {
		t.Fatal(wc)
	}
}

func TestRCMaxRdAtomicLimitsOutstandingReads(t *testing.T) {
	clk := newFakeClock()
	f, a, b := connect(t, connOpts{clk: clk, rdAtomic: 2})
	f.Cables[1].SetUp(false) // responses never come back
	for i := 0; i < 5; i++ {
		a.post(t, hca.SendWR{WRID: uint64(i), Opcode: hca.WRRDMARead, SGL: []hca.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	// Only max_rd_atomic = 2 READ requests may be outstanding.
	if got := a.port.Counters().Get(hca.CntXmitPkts); got != 2 {
		t.Fatalf("%d READ requests sent, want 2 (max_rd_atomic)", got)
	}
}

// TestRCAckOwedWhenResponderEntersError: the consumer sees a receive completion and
// takes its QP to ERR before the responder has sent the ACK (rping's client disconnects
// on its last message that way); the ACK still goes out, so the requester's SEND
// completes with success instead of retrying into a dead QP until RETRY_EXC_ERR.
func TestRCAckOwedWhenResponderEntersError(t *testing.T) {
	clk := newFakeClock()
	_, a, b := connect(t, connOpts{clk: clk, retry: 1, timeout: 10})
	b.postRecv(t, 7, 0, 64)
	release := rc.StallDrainer(b.qp)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 64)}})
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCSuccess || wc.WRID != 7 {
		t.Fatalf("receive completion %+v", wc)
	}
	if err := b.qp.Modify(&hca.QPAttr{QPState: hca.QPStateErr}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	release()
	if wc := waitWC(t, a.scq, clk); wc.Status != hca.WCSuccess || wc.WRID != 1 {
		t.Fatalf("send completion %v (WRID %d), want success: the responder's owed ACK was lost", wc.Status, wc.WRID)
	}
}
