package sa_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
)

const testQKey = 0x22222222

// udEP is a UD QP on port 1 of a device with a receive buffer.
type udEP struct {
	port *hca.Port
	pd   *hca.PD
	scq  *hca.CQ
	rcq  *hca.CQ
	qp   *hca.QP
	mr   *hca.MR
	buf  []byte
}

func newUDEP(t testing.TB, d *hca.Device, pkeyIndex uint16) *udEP {
	t.Helper()
	e := &udEP{port: d.Port(1), buf: make([]byte, 8192)}
	ctx := d.Open()
	var err error
	if e.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = ctx.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = ctx.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(hca.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, QPType: hca.QPTypeUD,
		Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a    hca.QPAttr
		mask hca.QPAttrMask
	}{
		{hca.QPAttr{QPState: hca.QPStateInit, PKeyIndex: pkeyIndex, PortNum: 1, QKey: testQKey}, hca.QPAttrState | hca.QPAttrPKeyIndex | hca.QPAttrPort | hca.QPAttrQKey},
		{hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState},
		{hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 1}, hca.QPAttrState | hca.QPAttrSQPSN},
	} {
		if err := e.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	if e.mr, err = e.pd.RegMR(e.buf, hca.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	sge := hca.SGE{Addr: e.mr.Addr(), Length: uint32(len(e.buf)), LKey: e.mr.LKey()}
	if _, err := e.qp.PostRecv([]hca.RecvWR{{WRID: 1, SGL: []hca.SGE{sge}}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// send posts one UD send of payload to dst and reports whether dst received it.
func (e *udEP) send(t testing.TB, dst *udEP, payload string) bool {
	t.Helper()
	ah, err := e.pd.CreateAH(hca.AHAttr{DLID: dst.port.LID(), PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	copy(e.buf[4096:], payload)
	sge := hca.SGE{Addr: e.mr.Addr() + 4096, Length: uint32(len(payload)), LKey: e.mr.LKey()}
	wr := hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{sge},
		AH: ah, RemoteQPN: dst.qp.Num(), RemoteQKey: testQKey}
	if _, err := e.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	var wc [4]hca.WC
	if n := e.scq.Poll(wc[:]); n != 1 || wc[0].Status != hca.WCSuccess {
		t.Fatalf("send completion: n=%d %+v", n, wc[0])
	}
	n := dst.rcq.Poll(wc[:])
	if n == 0 {
		return false
	}
	if wc[0].Status != hca.WCSuccess {
		t.Fatalf("receive completion %+v", wc[0])
	}
	got := string(dst.buf[40 : 40+len(payload)])
	if got != payload {
		t.Fatalf("received %q, want %q", got, payload)
	}
	sge = hca.SGE{Addr: dst.mr.Addr(), Length: 4096, LKey: dst.mr.LKey()}
	if _, err := dst.qp.PostRecv([]hca.RecvWR{{WRID: 1, SGL: []hca.SGE{sge}}}); err != nil {
		t.Fatal(err)
	}
	return true
}

// checkSubnet checks that every HCA port is Active with a unique LID matching the
// topology, the SM's LID is on every port and every switch routes every LID.
func checkSubnet(t *testing.T, f *satest.Fabric) {
	t.Helper()
	top := f.SM.Topology()
	if top == nil {
		t.Fatal("no topology after the sweep")
	}
	seen := make(map[uint16]uint64)
	for _, p := range f.Ports() {
		if p.Device().Port(1).Query().State != hca.PortActive {
			continue
		}
		a := p.Query()
		if a.State != hca.PortActive {
			t.Errorf("%s: state %v", p.Device().Name(), a.State)
		}
		if a.LID == 0 {
			t.Errorf("%s: no LID", p.Device().Name())
		}
		if g, dup := seen[a.LID]; dup {
			t.Errorf("LID %d on %#x and %#x", a.LID, g, p.GUID())
		}
		seen[a.LID] = p.GUID()
		if lid, _ := top.LIDOf(p.GUID()); lid != a.LID {
			t.Errorf("%s: topology LID %d, port LID %d", p.Device().Name(), lid, a.LID)
		}
		if a.SMLID != top.SMLID {
			t.Errorf("%s: SMLID %d, want %d", p.Device().Name(), a.SMLID, top.SMLID)
		}
	}
	for i, sw := range f.Switches {
		for _, ep := range top.Endports() {
			if out := sw.LFT(ep.LID); out == 0xFF {
				t.Errorf("switch %d: no route to LID %d", i, ep.LID)
			}
		}
	}
}

func allActive(t *testing.T, f *satest.Fabric) {
	t.Helper()
	for _, p := range f.Ports() {
		if s := p.State(); s != hca.PortActive {
			t.Fatalf("%s port 1: %v, want Active", p.Device().Name(), s)
		}
	}
}

func TestSMBackToBack(t *testing.T) {
	f := satest.BackToBack(t, satest.Options{})
	sm := f.StartSM(t, sa.Config{})
	allActive(t, f)
	checkSubnet(t, f)
	if lid := f.HCAs[0].Port(1).LID(); lid != 1 {
		t.Errorf("SM port LID %d, want 1", lid)
	}
	if f.HCAs[0].Port(1).Query().PortCapFlags&hca.CapIsSM == 0 {
		t.Error("IsSM not set on the SM's port")
	}
	a, b := newUDEP(t, f.HCAs[0], 0), newUDEP(t, f.HCAs[1], 0)
	if !a.send(t, b, "hello") || !b.send(t, a, "back") {
		t.Fatal("UD traffic between the two HCAs lost")
	}
	t.Logf("SMPs: %+v", sm.Stats())
}

func TestSMOneSwitch(t *testing.T) {
	f := satest.OneSwitch(t, 4, satest.Options{})
	sm := f.StartSM(t, sa.Config{})
	allActive(t, f)
	checkSubnet(t, f)
	udAllPairs(t, f)
	t.Logf("SMPs: %+v", sm.Stats())
}

func udAllPairs(t *testing.T, f *satest.Fabric) {
	t.Helper()
	eps := make([]*udEP, len(f.HCAs))
	for i, d := range f.HCAs {
		eps[i] = newUDEP(t, d, 0)
	}
	for i, a := range eps {
		for j, b := range eps {
			if i != j && !a.send(t, b, fmt.Sprintf("%d->%d", i, j)) {
				t.Fatalf("UD %d->%d lost", i, j)
			}
		}
	}
}

var _ = time.Second
var _ clock.Clock
