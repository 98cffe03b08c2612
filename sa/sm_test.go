package sa_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
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

// TestSMDuplicateGUID: HCAs that share a node GUID with one found before them (hosts
// left at one node_guid_base) are left out of the subnet — no LID, not Active — and the
// sweep reports each once (opensm's ERR 0D01), naming the GUID and where it was found;
// the other ports come up and talk. A second heavy sweep finds them again but logs
// nothing new.
func TestSMDuplicateGUID(t *testing.T) {
	sm0, sm1 := uint64(satest.HCAGUIDBase|1<<8), uint64(satest.HCAGUIDBase|2<<8)
	f := satest.OneSwitch(t, 4, satest.Options{NodeGUIDs: []uint64{0, 0, sm0, sm1}})
	var logBuf syncBuffer
	sm := f.StartSM(t, sa.Config{Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	<-sm.Resweep()
	if st := sm.Stats(); st.DuplicateGUIDs != 2 {
		t.Fatalf("DuplicateGUIDs %d, want 2", st.DuplicateGUIDs)
	}
	if s := f.HCAs[0].Port(1).State(); s != hca.PortActive {
		t.Fatalf("the SM's port: %v", s)
	}
	if s := f.HCAs[2].Port(1).State(); s == hca.PortActive || f.HCAs[2].Port(1).LID() != 0 {
		t.Fatalf("the port with the SM port's GUID: %v, LID %d", s, f.HCAs[2].Port(1).LID())
	}
	// Of the two HCAs sharing sm1, the one found first is in the subnet, the other not.
	a1, a3 := f.HCAs[1].Port(1).State() == hca.PortActive, f.HCAs[3].Port(1).State() == hca.PortActive
	if a1 == a3 {
		t.Fatalf("HCAs 1 and 3 (one GUID): active %v and %v, want exactly one", a1, a3)
	}
	peer := f.HCAs[1]
	if a3 {
		peer = f.HCAs[3]
	}
	a, b := newUDEP(t, f.HCAs[0], 0), newUDEP(t, peer, 0)
	if !a.send(t, b, "hello") {
		t.Fatal("UD between the SM's HCA and the other HCA in the subnet lost")
	}
	logs := logBuf.String()
	if n := strings.Count(logs, "duplicate GUID"); n != 2 {
		t.Fatalf("%d duplicate-GUID reports after two sweeps, want 2 (one each):\n%s", n, logs)
	}
	if !strings.Contains(logs, fmt.Sprintf("node_guid=%#016x", sm0)) || !strings.Contains(logs, "node_guid_base") ||
		!strings.Contains(logs, `again_behind="\"pibgw switch-1\" port 3"`) {
		t.Fatalf("report does not name the GUID, the port it was found behind again, or the fix:\n%s", logs)
	}
}

// TestSMTrap128: with no periodic sweep at all, the switch's trap 128 alone makes the SM
// act on a cable pulled and plugged back: it answers each trap with a TrapRepress (which
// the switch's agent takes, not counting a drop), sweeps (heavy, as opensm), drops the
// port from the subnet and brings it back Active.
func TestSMTrap128(t *testing.T) {
	f := satest.OneSwitch(t, 3, satest.Options{Clock: clock.Real{}})
	sm := f.StartSM(t, sa.Config{SweepInterval: -1})
	allActive(t, f)
	heavy, ends := sm.Stats().HeavySweeps, len(sm.Topology().Endports())
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: SM %+v", what, sm.Stats())
			}
		}
	}
	f.HCACables[2].SetUp(false)
	eventually("HCA 2 out of the subnet after its cable was pulled", func() bool {
		return sm.Stats().HeavySweeps > heavy && len(sm.Topology().Endports()) == ends-1
	})
	f.HCACables[2].SetUp(true)
	eventually("HCA 2 Active again after its cable was plugged back", func() bool {
		return f.HCAs[2].Port(1).State() == hca.PortActive && len(sm.Topology().Endports()) == ends
	})
	if st := sm.Stats(); st.Traps != 2 || st.HeavySweeps < heavy+2 || st.LightSweeps != 0 {
		t.Fatalf("traps %d, heavy sweeps %d (%d before), light %d: want 2 traps, each starting a heavy sweep", st.Traps, st.HeavySweeps, heavy, st.LightSweeps)
	}
	if d := f.Switches[0].Counters(0).Dropped(fabric.DropManagement); d != 0 {
		t.Fatalf("the switch counted %d management drops (its TrapRepresses?)", d)
	}
	udAllPairs(t, f)
}

// syncBuffer is a bytes.Buffer that a logger may write from another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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

func TestSMTwoLevelTree(t *testing.T) {
	f := satest.SmallTree(t, satest.Options{})
	sm := f.StartSM(t, sa.Config{})
	allActive(t, f)
	checkSubnet(t, f)
	top := sm.Topology()
	if n := len(top.Switches()); n != 6 {
		t.Fatalf("%d switches discovered, want 6", n)
	}
	if n := len(top.Nodes); n != 6+32 {
		t.Fatalf("%d nodes discovered, want 38", n)
	}
	udAllPairs(t, f)
	lids := make(map[uint64]uint16)
	for _, p := range f.Ports() {
		lids[p.GUID()] = p.LID()
	}
	sent := sm.Stats().SMPsSent

	// A light sweep of a quiet subnet only reads SwitchInfo.
	clk := f.Clock.(*clock.Fake)
	clk.Advance(10 * time.Second)
	st := sm.Stats()
	if st.LightSweeps != 1 || st.HeavySweeps != 1 || st.SMPsSent-sent != 6 {
		t.Fatalf("after a quiet light sweep: %+v (sent %d before)", st, sent)
	}

	// Pull leaf 0's cable to spine 0: the next light sweep sees PortStateChange,
	// re-sweeps and routes around it through spine 1.
	var dead satest.Link
	for _, l := range f.Links {
		if l.A == 0 && l.B == 4 {
			dead = l
		}
	}
	dead.Cable.SetUp(false)
	// The light sweep's SMPs through the dead link time out (4 × 200 ms) before the
	// heavy sweep starts.
	clk.Advance(10 * time.Second)
	clk.Advance(2 * time.Second)
	if st := sm.Stats(); st.HeavySweeps != 2 {
		t.Fatalf("no heavy sweep after the link went down: %+v", st)
	}
	checkSubnet(t, f)
	for _, p := range f.Ports() {
		if p.LID() != lids[p.GUID()] {
			t.Errorf("%s: LID changed %d -> %d", p.Device().Name(), lids[p.GUID()], p.LID())
		}
	}
	top = sm.Topology()
	for _, a := range top.Endports() {
		for _, b := range top.Endports() {
			hops, ok := top.Route(a.LID, b.LID)
			if !ok {
				t.Fatalf("no route %d -> %d after the re-sweep", a.LID, b.LID)
			}
			for _, h := range hops {
				if h.Switch.GUID == top.Switches()[0].GUID && h.OutPort == uint8(dead.PortA) {
					t.Fatalf("route %d -> %d still uses the dead link", a.LID, b.LID)
				}
			}
		}
	}
	udAllPairs(t, f)

	// Plug it back: the ports come up in Init and the SM makes them Active again.
	dead.Cable.SetUp(true)
	clk.Advance(10 * time.Second)
	clk.Advance(2 * time.Second)
	if st := sm.Stats(); st.HeavySweeps != 3 {
		t.Fatalf("no heavy sweep after the link came back: %+v", st)
	}
	p := sm.Topology().Switches()[0].Ports[dead.PortA]
	if p.State != sa.PortStateActive {
		t.Errorf("re-plugged port state %d, want Active", p.State)
	}
	udAllPairs(t, f)
}

func TestSMPartitions(t *testing.T) {
	f := satest.OneSwitch(t, 4, satest.Options{})
	g := func(i int) uint64 { return f.HCAs[i].Port(1).GUID() }
	sm := f.StartSM(t, sa.Config{Partitions: []sa.Partition{
		sa.DefaultPartition(),
		{Name: "p2", PKey: 0x0002, Members: []sa.Member{{GUID: g(1), Full: true}, {GUID: g(2)}, {GUID: g(3)}}},
	}})
	allActive(t, f)
	want := map[int][]uint16{
		0: {0xFFFF},
		1: {0xFFFF, 0x8002},
		2: {0xFFFF, 0x0002},
		3: {0xFFFF, 0x0002},
	}
	for i, w := range want {
		got := f.HCAs[i].Port(1).PKeys()
		var exp [hca.PKeyTableLen]uint16
		copy(exp[:], w)
		if got != exp {
			t.Errorf("HCA %d P_Keys %x, want %x", i, got[:4], w)
		}
		if tk := sm.Topology().PKeys(g(i)); len(tk) == 0 || tk[0] != 0xFFFF {
			t.Errorf("HCA %d: topology P_Keys %x", i, tk)
		}
	}
	// P_Key index 1 is 0x8002 on HCA 1 and 0x0002 on HCAs 2 and 3.
	full, lim2, lim3 := newUDEP(t, f.HCAs[1], 1), newUDEP(t, f.HCAs[2], 1), newUDEP(t, f.HCAs[3], 1)
	if !full.send(t, lim2, "full->limited") || !lim3.send(t, full, "limited->full") {
		t.Fatal("traffic between a full and a limited member lost")
	}
	before := f.HCAs[3].Port(1).Counters().Get(hca.CntPKeyViolations)
	if lim2.send(t, lim3, "limited->limited") {
		t.Fatal("two limited members talked")
	}
	if after := f.HCAs[3].Port(1).Counters().Get(hca.CntPKeyViolations); after != before+1 {
		t.Errorf("P_Key violations %d -> %d, want one more", before, after)
	}
}

func TestSMInfoAnswered(t *testing.T) {
	f := satest.OneSwitch(t, 2, satest.Options{})
	sm := f.StartSM(t, sa.Config{Priority: 5})
	if sm.Topology().SMLID != 1 {
		t.Fatalf("SMLID %d", sm.Topology().SMLID)
	}
	if p := f.HCAs[1].Port(1).Query(); p.SMLID != 1 {
		t.Errorf("HCA 1 SMLID %d", p.SMLID)
	}
	// SubnGet(SMInfo) from HCA 1 to the SM's port by directed route: out of HCA 1's
	// port 1, out of the switch's port 1.
	p := f.HCAs[1].Port(1)
	var got []byte
	p.RegisterMADHandler(wire.MgmtClassSubnDirected, true, hca.MADHandlerFunc(func(m *hca.MAD) {
		got = append([]byte(nil), m.Data...)
	}))
	req := make([]byte, wire.MADLen)
	m := wire.MAD(req)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassSubnDirected)
	m.SetClassVersion(wire.ClassVersionSM)
	m.SetMethod(wire.MethodGet)
	m.SetTID(0x77)
	m.SetAttrID(wire.AttrSMInfo)
	smp := wire.SMP(req)
	smp.SetHopCount(2)
	smp.SetDrSLID(0xFFFF)
	smp.SetDrDLID(0xFFFF)
	copy(smp.InitialPath()[1:], []byte{1, 1})
	if err := p.SendSMP(hca.MADAddr{DLID: 0xFFFF}, req); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("no SMInfo response")
	}
	r := wire.SMP(got)
	if r.DRStatus() != 0 {
		t.Fatalf("SMInfo status %#x", r.DRStatus())
	}
	si := wire.SMInfo(r.SMPData())
	if si.GUID() != f.HCAs[0].Port(1).GUID() || si.Priority() != 5 || si.SMState() != sa.SMStateMaster {
		t.Errorf("SMInfo GUID %#x priority %d state %d", si.GUID(), si.Priority(), si.SMState())
	}
}

func TestSMPartitionEnforcement(t *testing.T) {
	f := satest.OneSwitch(t, 3, satest.Options{})
	g := func(i int) uint64 { return f.HCAs[i].Port(1).GUID() }
	sm := f.StartSM(t, sa.Config{PartitionEnforcement: true, Partitions: []sa.Partition{
		{Name: "p3", PKey: 0x0003, Members: []sa.Member{{GUID: g(1), Full: true}, {GUID: g(2)}}},
	}})
	allActive(t, f)
	if st := sm.Stats(); st.SMPsFailed != 0 {
		t.Fatalf("%d SMPs failed", st.SMPsFailed)
	}
	sw := sm.Topology().Switches()[0]
	if k := sw.Ports[3].PKeys; len(k) < 2 || k[0] != 0xFFFF || k[1] != 0x8003 {
		t.Errorf("switch port 3 P_Keys %x", k)
	}
	// (Whether the switch honours PortInfo:PartitionEnforcementInbound/Outbound is the
	// switch SMA's business; the SM sets both on ports it gave a P_Key table.)
	full, lim := newUDEP(t, f.HCAs[1], 1), newUDEP(t, f.HCAs[2], 1)
	if !full.send(t, lim, "x") {
		t.Error("partition traffic lost with enforcement on")
	}
}

// TestSMResweepKeepsRoutes: a heavy sweep that finds the subnet it routed last keeps its
// forwarding tables instead of routing again (the same LFTs, every pair still
// reachable); one that finds a link gone routes again, around it.
func TestSMResweepKeepsRoutes(t *testing.T) {
	f := satest.SmallTree(t, satest.Options{})
	sm := f.StartSM(t, sa.Config{SweepInterval: -1})
	allActive(t, f)
	if st := sm.Stats(); st.HeavySweeps != 1 || st.Routings != 1 {
		t.Fatalf("after Start: %+v, want one heavy sweep that routed", sm.Stats())
	}
	before := sm.Topology()
	if err := sm.WaitSweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := sm.Stats()
	if st.HeavySweeps != 2 || st.Routings != 1 {
		t.Fatalf("after a heavy sweep of the same subnet: %+v, want 2 heavy sweeps, 1 routing", st)
	}
	after := sm.Topology()
	for i, n := range after.Switches() {
		if !slices.Equal(n.LFT, before.Switches()[i].LFT) {
			t.Fatalf("switch %q: LFT changed on a heavy sweep of the same subnet", n.Description)
		}
	}
	checkSubnet(t, f)
	udAllPairs(t, f)

	// Pull leaf 0's cable to spine 0: the next heavy sweep routes again, around it.
	var dead satest.Link
	for _, l := range f.Links {
		if l.A == 0 && l.B == 4 {
			dead = l
		}
	}
	dead.Cable.SetUp(false)
	if err := sm.WaitSweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := sm.Stats(); st.Routings != 2 {
		t.Fatalf("after a link went down and a heavy sweep: %+v, want 2 routings", st)
	}
	top := sm.Topology()
	for _, a := range top.Endports() {
		for _, b := range top.Endports() {
			hops, ok := top.Route(a.LID, b.LID)
			if !ok {
				t.Fatalf("no route %d -> %d after the link went down", a.LID, b.LID)
			}
			for _, h := range hops {
				if h.Switch.GUID == top.Switches()[0].GUID && h.OutPort == uint8(dead.PortA) {
					t.Fatalf("route %d -> %d still uses the dead link", a.LID, b.LID)
				}
			}
		}
	}
	udAllPairs(t, f)
}
