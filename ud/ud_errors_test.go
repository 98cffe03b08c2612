package ud_test

import (
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
)

func sendWR(a *endpoint, ah *hca.AH, dst *endpoint, n uint32) hca.SendWR {
	return hca.SendWR{WRID: 7, Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: n, LKey: a.mr.LKey()}},
		AH:  ah, RemoteQPN: dst.qp.Num(), RemoteQKey: testQKey}
}

func pair(t *testing.T) (*hcatest.Fabric, *endpoint, *endpoint) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	return f, a, b
}

func TestUDWrongQKeyDroppedAndCounted(t *testing.T) {
	f, a, b := pair(t)
	b.postRecv(t, 1, 0, 8192)
	wr := sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)
	wr.RemoteQKey = 0x2222
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCSuccess {
		t.Fatalf("UD send of a wrong Q_Key still completes successfully at the sender, got %s", wc.Status)
	}
	pollNone(t, f, b.rcq)
	if got := counter(t, f, b.port, hca.CntQKeyViolations, 1); got != 1 {
		t.Fatalf("qkey_violations = %d, want 1", got)
	}
	if got := b.port.Query().QKeyViolCntr; got != 1 {
		t.Fatalf("port attr qkey_viol_cntr = %d, want 1", got)
	}
}

func TestUDPKeyMismatchDroppedAndCounted(t *testing.T) {
	f, a, b := pair(t)
	// P_Key tables are the subnet manager's: it sets them on the ports at the ends of
	// the cables, and attached devices follow their daemon's ports.
	setPKey := func(i int, pkey uint16) {
		t.Helper()
		if err := f.OnSwitch(i).Port(1).SetPKey(1, pkey); err != nil {
			t.Fatal(err)
		}
	}
	// b's QP moves to P_Key index 1 = 0x8001; a sends with index 0 = 0xFFFF.
	setPKey(1, 0x8001)
	f.Settle(t)
	if err := b.qp.Modify(&hca.QPAttr{QPState: hca.QPStateSQD}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Modify(&hca.QPAttr{PKeyIndex: 1}, hca.QPAttrPKeyIndex); err != nil {
		t.Fatal(err)
	}
	b.postRecv(t, 1, 0, 8192)
	if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
		t.Fatal(err)
	}
	poll1(t, a.scq)
	pollNone(t, f, b.rcq)
	if got := counter(t, f, b.port, hca.CntPKeyViolations, 1); got != 1 {
		t.Fatalf("pkey_violations = %d, want 1", got)
	}
	if got := b.port.Query().BadPKeyCntr; got != 1 {
		t.Fatalf("bad_pkey_cntr = %d, want 1", got)
	}

	// Two limited members of one partition (0x0001) cannot talk (IBA 10.9.3); a full
	// member (0x8001) and a limited one can.
	for _, tc := range []struct {
		send, recv uint16
		deliver    bool
	}{
		{0x0001, 0x0001, false},
		{0x8001, 0x0001, true},
		{0x0001, 0x8001, true},
		{0x8002, 0x8001, false},
	} {
		setPKey(0, tc.send)
		setPKey(1, tc.recv)
		f.Settle(t)
		for _, e := range []*endpoint{a} {
			if err := e.qp.Modify(&hca.QPAttr{QPState: hca.QPStateSQD}, hca.QPAttrState); err != nil {
				t.Fatal(err)
			}
			if err := e.qp.Modify(&hca.QPAttr{PKeyIndex: 1}, hca.QPAttrPKeyIndex); err != nil {
				t.Fatal(err)
			}
			if err := e.qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS}, hca.QPAttrState); err != nil {
				t.Fatal(err)
			}
		}
		before := b.port.Counters().Get(hca.CntPKeyViolations)
		if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
			t.Fatal(err)
		}
		poll1(t, a.scq)
		f.Settle(t) // delivered or dropped by now
		var wc [1]hca.WC
		got := b.rcq.Poll(wc[:]) == 1
		if got != tc.deliver {
			t.Errorf("P_Key %#04x → %#04x delivered=%v, want %v", tc.send, tc.recv, got, tc.deliver)
		}
		if got {
			b.postRecv(t, 1, 0, 8192)
		} else if b.port.Counters().Get(hca.CntPKeyViolations) != before+1 {
			t.Errorf("P_Key %#04x → %#04x drop not counted", tc.send, tc.recv)
		}
	}
}

func TestUDLKeyOfAnotherPD(t *testing.T) {
	f, a, b := pair(t)
	otherPD, err := a.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := otherPD.RegMR(make([]byte, 64), hca.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	b.postRecv(t, 1, 0, 8192)
	wr := sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)
	wr.SGL = []hca.SGE{{Addr: foreign.Addr(), Length: 16, LKey: foreign.LKey()}}
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCLocProtErr || wc.WRID != 7 {
		t.Fatalf("WC = %+v, want IBV_WC_LOC_PROT_ERR", wc)
	}
	pollNone(t, f, b.rcq)
	if s := a.qp.State(); s != hca.QPStateSQE {
		t.Fatalf("sender QP state %s, want SQE", s)
	}
	// A WR posted in SQE is flushed.
	if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCWRFlushErr {
		t.Fatalf("WC after SQE = %s, want IBV_WC_WR_FLUSH_ERR", wc.Status)
	}
	// SQE → RTS recovers the send queue.
	if err := a.qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCSuccess {
		t.Fatalf("WC after recovery = %s", wc.Status)
	}
	poll1(t, b.rcq)
}

func TestUDSGEOutOfBounds(t *testing.T) {
	_, a, b := pair(t)
	wr := sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)
	wr.SGL[0].Addr = a.mr.Addr() + uint64(len(a.buf)) - 8 // 8 bytes inside, 8 past the end
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCLocProtErr {
		t.Fatalf("WC = %s, want IBV_WC_LOC_PROT_ERR", wc.Status)
	}
}

func TestUDReceiveIntoMRWithoutLocalWrite(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessRemoteRead) // no LOCAL_WRITE
	b.postRecv(t, 1, 0, 8192)
	b.postRecv(t, 2, 0, 8192)
	if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
		t.Fatal(err)
	}
	poll1(t, a.scq)
	wcs := pollN(t, f, b.rcq, 2)
	if wc := wcs[0]; wc.Status != hca.WCLocProtErr || wc.WRID != 1 {
		t.Fatalf("WC = %+v, want IBV_WC_LOC_PROT_ERR for WR 1", wc)
	}
	if s := b.qp.State(); s != hca.QPStateErr {
		t.Fatalf("receiver state %s, want ERR", s)
	}
	if wc := wcs[1]; wc.Status != hca.WCWRFlushErr || wc.WRID != 2 {
		t.Fatalf("WC = %+v, want WR 2 flushed", wc)
	}
}

func TestUDNoReceiveWQEDroppedAndCounted(t *testing.T) {
	f, a, b := pair(t)
	if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
		t.Fatal(err)
	}
	poll1(t, a.scq)
	if got := counter(t, f, b.port, hca.CntDropNoRecvWQE, 1); got != 1 {
		t.Fatalf("drop_no_recv_wqe = %d, want 1", got)
	}
}

func TestUDRecvBufferTooSmall(t *testing.T) {
	_, a, b := pair(t)
	b.postRecv(t, 1, 0, 40+8) // room for 8 payload bytes
	if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 16)}); err != nil {
		t.Fatal(err)
	}
	poll1(t, a.scq)
	if wc := poll1(t, b.rcq); wc.Status != hca.WCLocLenErr {
		t.Fatalf("WC = %s, want IBV_WC_LOC_LEN_ERR", wc.Status)
	}
}

func TestUDPostInWrongState(t *testing.T) {
	f := hcatest.NewFabric(t, 1, hcatest.Options{})
	ctx := f.Devs[0].Open()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16, nil)
	qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeUD, Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
	ah, _ := pd.CreateAH(hca.AHAttr{DLID: 1, PortNum: 1})
	wr := hca.SendWR{Opcode: hca.WRSend, SGL: []hca.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}, AH: ah, RemoteQPN: 0x99, RemoteQKey: 1}
	rwr := hca.RecvWR{SGL: []hca.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}

	// RESET: neither sends nor receives.
	if n, err := qp.PostSend([]hca.SendWR{wr}); n != 0 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostSend in RESET = %d, %v; want EINVAL", n, err)
	}
	if _, err := qp.PostRecv([]hca.RecvWR{rwr}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostRecv in RESET = %v; want EINVAL", err)
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: 1}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	// INIT: receives yes, sends no.
	if _, err := qp.PostSend([]hca.SendWR{wr}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostSend in INIT = %v; want EINVAL", err)
	}
	if _, err := qp.PostRecv([]hca.RecvWR{rwr}); err != nil {
		t.Fatalf("PostRecv in INIT = %v", err)
	}
	// A full receive queue is ENOMEM, with bad_wr at the first WR that did not fit.
	if n, err := qp.PostRecv([]hca.RecvWR{rwr, rwr, rwr, rwr}); n != 3 || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("PostRecv past max_recv_wr = %d, %v; want 3, ENOMEM", n, err)
	}
	// Too many SGEs.
	wr2 := wr
	wr2.SGL = []hca.SGE{wr.SGL[0], wr.SGL[0]}
	toRTS2(t, qp)
	if _, err := qp.PostSend([]hca.SendWR{wr2}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostSend with 2 SGEs on max_send_sge 1 = %v; want EINVAL", err)
	}
	// RDMA opcodes are not valid on UD.
	wr3 := wr
	wr3.Opcode = hca.WRRDMAWrite
	if _, err := qp.PostSend([]hca.SendWR{wr3}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("RDMA WRITE on UD = %v; want EINVAL", err)
	}
	// No AH.
	wr4 := wr
	wr4.AH = nil
	if _, err := qp.PostSend([]hca.SendWR{wr4}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("UD send without AH = %v; want EINVAL", err)
	}
	// AH of another PD (IBA C10-10: pibgw reports it at post time).
	pd2, _ := ctx.AllocPD()
	ah2, _ := pd2.CreateAH(hca.AHAttr{DLID: 1, PortNum: 1})
	wr5 := wr
	wr5.AH = ah2
	if _, err := qp.PostSend([]hca.SendWR{wr5}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("AH of another PD = %v; want EINVAL", err)
	}
}

func toRTS2(t *testing.T, qp *hca.QP) {
	t.Helper()
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS}, hca.QPAttrState|hca.QPAttrSQPSN); err != nil {
		t.Fatal(err)
	}
}

func TestUDOversizeMessage(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{MTU: hca.MTU2048})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	n, err := a.qp.PostSend([]hca.SendWR{sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 2049)})
	if n != 0 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("2049-byte UD send at MTU 2048 = %d, %v; want EINVAL", n, err)
	}
	// Inline above max_inline_data.
	wr := sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 0)
	big := make([]byte, hca.MaxInline+1)
	wr.SGL = []hca.SGE{{Addr: hca.BufAddr(big), Length: uint32(len(big))}}
	wr.SendFlags |= hca.SendInline
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("inline of %d bytes = %v; want EINVAL", len(big), err)
	}
}

func TestCQOverflowRaisesAsyncEvent(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	small, err := a.ctx.CreateCQ(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.pd.CreateQP(hca.QPInitAttr{SendCQ: small, RecvCQ: a.rcq, QPType: hca.QPTypeUD, Cap: hca.QPCap{MaxSendWR: 8, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	toRTS(t, qp, testQKey)
	ah := a.ah(t, 2, false, [16]byte{})
	wr := hca.SendWR{Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}, AH: ah, RemoteQPN: 0x1234, RemoteQKey: 1}
	for i := 0; i < 3; i++ {
		if _, err := qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case ev := <-a.ctx.Events():
		if ev.Type != hca.EventCQErr || ev.CQ != small {
			t.Fatalf("event %s for CQ %v, want IBV_EVENT_CQ_ERR for the small CQ", ev.Type, ev.CQ)
		}
	case <-time.After(time.Second):
		t.Fatal("no async event after CQ overrun")
	}
	if small.Lost() != 1 {
		t.Fatalf("lost = %d, want 1", small.Lost())
	}
	// CQ destroy while a QP uses it is EBUSY.
	if err := small.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Destroy of a CQ in use = %v; want EBUSY", err)
	}
}

func TestModifyQPStateMachine(t *testing.T) {
	f := hcatest.NewFabric(t, 1, hcatest.Options{})
	ctx := f.Devs[0].Open()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16, nil)
	newQP := func(typ hca.QPType) *hca.QP {
		qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: typ, Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qp := newQP(hca.QPTypeUD)
	// Illegal transition: RESET → RTS.
	err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 1}, hca.QPAttrState|hca.QPAttrSQPSN)
	if !errors.Is(err, syscall.EINVAL) || qp.State() != hca.QPStateReset {
		t.Fatalf("RESET→RTS = %v (state %s); want EINVAL and RESET", err, qp.State())
	}
	// Missing required attribute: RESET → INIT without Q_Key.
	err = qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort)
	if !errors.Is(err, syscall.EINVAL) || qp.State() != hca.QPStateReset {
		t.Fatalf("RESET→INIT without QKEY = %v; want EINVAL", err)
	}
	// An attribute the transition does not take: PATH_MTU on UD RESET → INIT.
	err = qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: 1, PathMTU: hca.MTU1024}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey|hca.QPAttrPathMTU)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("UD RESET→INIT with PATH_MTU = %v; want EINVAL", err)
	}
	// Bad values: port 2 on a 1-port HCA, P_Key index past the table.
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 2, QKey: 1}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("port 2 = %v; want EINVAL", err)
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, PKeyIndex: 32, QKey: 1}, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("pkey_index 32 = %v; want EINVAL", err)
	}
	toRTS(t, qp, 5)
	a, _ := qp.Query()
	if a.QPState != hca.QPStateRTS || a.QKey != 5 || a.SQPSN != 0x123 || a.PortNum != 1 {
		t.Fatalf("query = %+v", a)
	}
	// cur_qp_state must match.
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS, CurQPState: hca.QPStateRTR}, hca.QPAttrState|hca.QPAttrCurState); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("wrong cur_qp_state = %v; want EINVAL", err)
	}
	// Any state → ERR → RESET.
	for _, s := range []hca.QPState{hca.QPStateErr, hca.QPStateReset} {
		if err := qp.Modify(&hca.QPAttr{QPState: s}, hca.QPAttrState); err != nil || qp.State() != s {
			t.Fatalf("→%s = %v", s, err)
		}
	}
}

func TestSRQLimitEvent(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	srq, err := b.pd.CreateSRQ(hca.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := b.pd.CreateQP(hca.QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq, QPType: hca.QPTypeUD, Cap: hca.QPCap{MaxSendWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	toRTS(t, qp, testQKey)
	for i := 0; i < 4; i++ {
		if _, err := srq.PostRecv([]hca.RecvWR{{WRID: uint64(i), SGL: []hca.SGE{{Addr: b.mr.Addr(), Length: 4096, LKey: b.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(0, 3, hca.SRQLimit); err != nil {
		t.Fatal(err)
	}
	wr := sendWR(a, a.ah(t, 2, false, [16]byte{}), b, 8)
	wr.RemoteQPN = qp.Num()
	for i := 0; i < 2; i++ {
		if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	if wcs := pollN(t, f, b.rcq, 2); wcs[0].WRID != 0 || wcs[1].WRID != 1 || wcs[0].QPNum != qp.Num() {
		t.Fatalf("SRQ WCs %+v", wcs)
	}
	select {
	case ev := <-b.ctx.Events():
		if ev.Type != hca.EventSRQLimitReached || ev.SRQ != srq {
			t.Fatalf("event %s, want IBV_EVENT_SRQ_LIMIT_REACHED", ev.Type)
		}
	case <-time.After(time.Second):
		t.Fatal("no SRQ limit event")
	}
	if got := srq.Query().SRQLimit; got != 0 {
		t.Fatalf("limit after the event = %d, want 0 (disarmed)", got)
	}
}

// TestUDReceiveBudget: a batch of packets four times the receive queue, handed to the
// port in one call (as a UDP link hands over a recvmmsg batch), all arrive at a consumer
// that re-posts its buffers from its completion handler: the port runs the handler every
// hca.RxBudget packets, not only at the batch's end, so the queue never runs dry.
func TestUDReceiveBudget(t *testing.T) {
	if hcatest.AttachedFromEnv() {
		t.Skip("hands packets to the daemon's port directly")
	}
	var (
		mu   sync.Mutex
		held [][]byte
	)
	f := hcatest.NewFabric(t, 2, hcatest.Options{Wrap: func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if i != 0 || d != fabric.AtoB {
			return l
		}
		return linkFunc(func(pkts [][]byte) { // what HCA 0 sends, kept
			mu.Lock()
			for _, p := range pkts {
				held = append(held, append([]byte(nil), p...))
			}
			mu.Unlock()
		})
	}})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	const depth, slot = 64, 128 // newEndpoint's MaxRecvWR; room for GRH + 16 bytes
	for k := range depth {
		b.postRecv(t, uint64(k), k*slot, slot)
	}
	received := 0
	b.rcq.SetCompHandler(func(cq *hca.CQ) {
		var wcs [16]hca.WC
		for n := cq.Poll(wcs[:]); n > 0; n = cq.Poll(wcs[:]) {
			for _, wc := range wcs[:n] {
				if wc.Status != hca.WCSuccess {
					t.Errorf("receive %d: %v", wc.WRID, wc.Status)
				}
				received++
				b.postRecv(t, wc.WRID, int(wc.WRID)*slot, slot)
			}
		}
	})
	const n = 4 * depth
	ah := a.ah(t, 2, false, [16]byte{})
	for sent := 0; sent < n; sent += depth {
		wrs := make([]hca.SendWR, depth)
		for k := range wrs {
			wrs[k] = sendWR(a, ah, b, 16)
		}
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		pollN(t, f, a.scq, depth)
	}
	mu.Lock()
	batch := held
	mu.Unlock()
	if len(batch) != n {
		t.Fatalf("%d packets sent, want %d", len(batch), n)
	}
	b.port.Receive(batch)
	if received != n || b.port.Counters().Get(hca.CntDropNoRecvWQE) != 0 {
		t.Fatalf("%d of %d received in one batch, %d dropped for want of a receive WQE (the port's budget: %d)",
			received, n, b.port.Counters().Get(hca.CntDropNoRecvWQE), hca.RxBudget)
	}
}
