package hca

import (
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/trace"
)

func TestInspectListsObjectsUntilDestroyed(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	d, err := NewDevice(Config{Name: "pib_0", NodeGUID: 0x0002c90300000300, Clock: clk,
		Transports: map[QPType]Transport{QPTypeUD: nopTransport{}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := d.Open()
	pd, _ := ctx.AllocPD()
	ch := ctx.CreateCompChannel()
	cq, err := ctx.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 8, SRQLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeUD, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 0x1234}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}

	all, err := d.Inspect("")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range all {
		kinds = append(kinds, o.Kind)
		if o.Device != "pib_0" {
			t.Errorf("%s %d: device %q", o.Kind, o.ID, o.Device)
		}
	}
	if got, want := len(kinds), 6; got != want {
		t.Fatalf("objects %v, want context pd mr cq qp srq", kinds)
	}
	for i, k := range []string{KindContext, KindPD, KindMR, KindCQ, KindQP, KindSRQ} {
		if kinds[i] != k {
			t.Fatalf("objects %v, want context pd mr cq qp srq in that order", kinds)
		}
	}
	byKind := map[string]ObjectInfo{}
	for _, o := range all {
		byKind[o.Kind] = o
	}
	if m := byKind[KindMR]; m.MR == nil || m.MR.Addr != BufAddr(buf) || m.MR.Length != 4096 ||
		m.MR.LKey != mr.LKey() || m.MR.Access != "LOCAL_WRITE|REMOTE_READ" || m.PD != pd.ID() {
		t.Errorf("mr %+v %+v", m, m.MR)
	}
	if c := byKind[KindCQ]; c.CQ == nil || c.CQ.CQE != 16 || !c.CQ.Armed || !c.CQ.Channel || c.CQ.Refs != 2 || c.ID != cq.ID() {
		t.Errorf("cq %+v %+v", c, c.CQ)
	}
	q := byKind[KindQP]
	if q.ID != qp.Num() || q.QP == nil || q.QP.Type != "UD" || q.QP.State != "INIT" || q.QP.QKey != 0x1234 ||
		q.QP.RecvPosted != 1 || q.QP.MaxSendWR != 4 || q.QP.SendCQ != cq.ID() || q.PD != pd.ID() {
		t.Errorf("qp %+v %+v", q, q.QP)
	}
	if !q.Created.Equal(clk.Now()) || !byKind[KindPD].Created.Equal(clk.Now().Add(-time.Second)) {
		t.Errorf("creation times qp %v pd %v, clock %v", q.Created, byKind[KindPD].Created, clk.Now())
	}
	if s := byKind[KindSRQ]; s.SRQ == nil || s.SRQ.MaxWR != 8 || s.SRQ.Limit != 2 || s.ID != srq.ID() {
		t.Errorf("srq %+v", s.SRQ)
	}

	qps, err := d.Inspect(KindQP)
	if err != nil || len(qps) != 1 || qps[0].Kind != KindQP {
		t.Fatalf("Inspect(qp) = %v, %v", qps, err)
	}
	if _, err := d.Inspect("qps"); err == nil {
		t.Error("Inspect of an unknown kind succeeded")
	}
	if d.LookupCQ(cq.ID()) != cq || d.LookupSRQ(srq.ID()) != srq || d.LookupLocalQP(qp.Num()) != qp || d.LookupCQ(9999) != nil {
		t.Error("lookups by id failed")
	}

	for _, f := range []func() error{qp.Destroy, srq.Destroy, mr.Dereg, cq.Destroy, pd.Dealloc, ctx.Close} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := d.Inspect(""); len(left) != 0 {
		t.Fatalf("after destroying everything: %+v", left)
	}
}

func TestAccessString(t *testing.T) {
	for a, want := range map[AccessFlags]string{
		0: "-", AccessLocalWrite | AccessRemoteWrite: "LOCAL_WRITE|REMOTE_WRITE", 1 << 9: "0x200",
	} {
		if got := AccessString(a); got != want {
			t.Errorf("AccessString(%#x) = %q, want %q", uint32(a), got, want)
		}
	}
}

// The trace records the verbs calls that create and destroy objects.
func TestTraceObjectCalls(t *testing.T) {
	disable := trace.Enable()
	defer disable()
	from := trace.Next()
	d := newTestDevice(t, 1)
	ctx := d.Open()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(4, nil)
	qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeUD, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qp.Destroy()
	cq.Destroy()
	pd.Dealloc()
	ctx.Close()
	evs := make([]trace.Event, 32)
	n, _, _ := trace.Read(from, evs)
	var calls []string
	for _, ev := range evs[:n] {
		if ev.Kind == trace.KindAPI && ev.Dev == "pib_0" {
			calls = append(calls, ev.What)
			if ev.What == "create_qp" && (ev.QPN != qp.Num() || ev.A != uint64(qp.Num())) {
				t.Errorf("create_qp event %+v", ev)
			}
		}
	}
	want := "open_device alloc_pd create_cq create_qp destroy_qp destroy_cq dealloc_pd close_device"
	if got := strings.Join(calls, " "); got != want {
		t.Fatalf("api events %q, want %q", got, want)
	}
	if txt := evs[0].ToRecord("daemon", 1).Text; txt != "api pib_0 open_device id 0x1" {
		t.Errorf("text %q", txt)
	}
}
