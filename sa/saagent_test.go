package sa_test

import (
	"context"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
)

// saFabric is a swept fabric with the SA running and a client on every HCA port.
type saFabric struct {
	f       *satest.Fabric
	sm      *sa.SM
	agent   *sa.Agent
	clients []*sa.Client
}

func newSAFabric(t testing.TB, f *satest.Fabric, cfg sa.Config, copts sa.ClientOptions) *saFabric {
	t.Helper()
	sm := f.StartSM(t, cfg)
	agent, err := sa.StartSA(sm, sa.AgentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	s := &saFabric{f: f, sm: sm, agent: agent}
	for _, p := range f.Ports() {
		c, err := sa.NewClient(p, copts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s.clients = append(s.clients, c)
	}
	return s
}

func saCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func portGID(p *hca.Port) wire.GID { g, _ := p.GID(0); return g }

// TestSAPathRecordEveryPair asks, from every HCA port, for the path to every port
// (by DGID and by DLID) on the two-level tree of issue 3, and checks each against the
// topology the SM swept: LIDs, GIDs, MTU, rate, P_Key, reversibility.
func TestSAPathRecordEveryPair(t *testing.T) {
	s := newSAFabric(t, satest.SmallTree(t, satest.Options{}), sa.Config{}, sa.ClientOptions{PathTTL: -1})
	ctx := saCtx(t)
	ports := s.f.Ports()
	topo := s.sm.Topology()
	for i, c := range s.clients {
		src := ports[i]
		for j, dst := range ports {
			p, err := c.QueryPath(ctx, sa.PathQuery{DGID: portGID(dst)})
			if err != nil {
				t.Fatalf("path %d→%d: %v", i, j, err)
			}
			if p.DLID != dst.LID() || p.SLID != src.LID() || p.DGID != portGID(dst) || p.SGID != portGID(src) {
				t.Fatalf("path %d→%d: %+v (LIDs %d→%d)", i, j, p, src.LID(), dst.LID())
			}
			mtu, ok := topo.PathMTU(src.LID(), dst.LID())
			if !ok || p.MTU != mtu || p.MTU == 0 {
				t.Fatalf("path %d→%d: MTU %d, topology %d (%v)", i, j, p.MTU, mtu, ok)
			}
			if !p.Reversible || p.PKey != 0xFFFF || p.Rate == 0 || p.PacketLifeTime != 18 || p.NumbPath != 1 {
				t.Fatalf("path %d→%d: %+v", i, j, p)
			}
			if i == 3 {
				byLID, err := c.QueryPath(ctx, sa.PathQuery{DLID: dst.LID()})
				if err != nil || byLID != p {
					t.Fatalf("path by DLID %d→%d: %+v, %v; by GID %+v", i, j, byLID, err, p)
				}
			}
		}
	}
	// GetTable: every path from one port (no destination) through RMPP.
	all, err := s.clients[5].PathRecords(ctx, sa.PathQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(topo.Endports()); len(all) != want {
		t.Fatalf("GetTable from port 5: %d paths, want %d (every end port)", len(all), want)
	}
	for _, p := range all {
		if p.SLID != ports[5].LID() {
			t.Fatalf("GetTable path from the wrong source: %+v", p)
		}
	}
}

// TestSAPathRecordSelectors checks MTU selectors and the P_Key rule.
func TestSAPathRecordSelectors(t *testing.T) {
	s := newSAFabric(t, satest.OneSwitch(t, 3, satest.Options{}), sa.Config{}, sa.ClientOptions{PathTTL: -1})
	ctx := saCtx(t)
	c, dst := s.clients[1], s.f.Ports()[2]
	var rec [wire.PathRecordLen]byte
	r := wire.PathRecord(rec[:])
	r.SetDGID(portGID(dst))
	r.SetSGID(portGID(s.f.Ports()[1]))
	r.SetMTUSelector(wire.SASelectorLess)
	r.SetMTU(uint8(hca.MTU2048))
	base := uint64(wire.PRCompDGID | wire.PRCompSGID)
	out, err := c.Query(ctx, wire.MethodGet, wire.AttrPathRecord, base|wire.PRCompMTU|wire.PRCompMTUSelector, rec[:])
	if err != nil || wire.PathRecord(out).MTU() != uint8(hca.MTU1024) {
		t.Fatalf("MTU < 2048: %v % x", err, out)
	}
	r.SetMTUSelector(wire.SASelectorGreater)
	r.SetMTU(uint8(hca.MTU4096))
	if _, err := c.Query(ctx, wire.MethodGet, wire.AttrPathRecord, base|wire.PRCompMTU|wire.PRCompMTUSelector, rec[:]); !sa.IsStatus(err, wire.SAStatusNoRecords) {
		t.Fatalf("MTU > 4096: %v, want ERR_NO_RECORDS", err)
	}
	if _, err := c.QueryPath(ctx, sa.PathQuery{DGID: portGID(dst), PKey: 0x8123}); !sa.IsStatus(err, wire.SAStatusNoRecords) {
		t.Fatalf("path in a partition neither port has: %v", err)
	}
	if p, err := c.QueryPath(ctx, sa.PathQuery{DGID: portGID(dst), PKey: 0x7FFF, HasSL: true, SL: 3}); err != nil || p.PKey != 0x7FFF || p.SL != 3 {
		t.Fatalf("path with P_Key 0x7FFF, SL 3: %+v %v", p, err)
	}
}

// TestSAErrorStatuses checks the SA's answers to requests it cannot satisfy.
func TestSAErrorStatuses(t *testing.T) {
	s := newSAFabric(t, satest.OneSwitch(t, 2, satest.Options{}), sa.Config{}, sa.ClientOptions{PathTTL: -1})
	ctx := saCtx(t)
	c := s.clients[1]
	unknown := wire.MakeGID(wire.DefaultGIDPrefix, 0xdeadbeef)
	if _, err := c.QueryPath(ctx, sa.PathQuery{DGID: unknown}); !sa.IsStatus(err, wire.SAStatusInvalidGID) {
		t.Errorf("unknown DGID: %v, want ERR_REQ_INVALID_GID", err)
	}
	if _, err := c.QueryPath(ctx, sa.PathQuery{DLID: 0xBEEF}); !sa.IsStatus(err, wire.SAStatusNoRecords) {
		t.Errorf("unknown DLID: %v, want ERR_NO_RECORDS", err)
	}
	var rec [wire.PathRecordLen]byte
	wire.PathRecord(rec[:]).SetSGID(portGID(c.Port()))
	if _, err := c.Query(ctx, wire.MethodGet, wire.AttrPathRecord, wire.PRCompSGID, rec[:]); !sa.IsStatus(err, wire.SAStatusInsufficientComponents) {
		t.Errorf("PathRecord Get without destination: %v, want ERR_REQ_INSUFFICIENT_COMPONENTS", err)
	}
	if _, err := c.Join(ctx, wire.GID{}, wire.JoinFullMember, sa.JoinParams{}); !sa.IsStatus(err, wire.SAStatusInsufficientComponents) {
		t.Errorf("creating join without parameters: %v, want ERR_REQ_INSUFFICIENT_COMPONENTS", err)
	}
	mgid := wire.GID{0xff, 0x12, 0x60, 0x1b, 15: 9}
	if err := c.Leave(ctx, mgid, wire.JoinFullMember); !sa.IsStatus(err, wire.SAStatusReqInvalid) {
		t.Errorf("leave without membership: %v, want ERR_REQ_INVALID", err)
	}
	if _, err := c.Join(ctx, mgid, wire.JoinSendOnlyNonMember, sa.JoinParams{Create: true, QKey: 1}); !sa.IsStatus(err, wire.SAStatusReqInvalid) {
		t.Errorf("send-only join creating a group: %v, want ERR_REQ_INVALID", err)
	}
	if _, err := c.Join(ctx, wire.IPoIBBroadcastMGID(0xFFFF), wire.JoinFullMember, sa.JoinParams{Create: true, QKey: 0x1234}); !sa.IsStatus(err, wire.SAStatusReqInvalid) {
		t.Errorf("join with a Q_Key the group does not have: %v, want ERR_REQ_INVALID", err)
	}
	if _, err := c.Query(ctx, wire.MethodGet, wire.AttrServiceRecord, wire.SRCompID, make([]byte, wire.ServiceRecordLen)); !sa.IsStatus(err, wire.SAStatusNoRecords) {
		t.Errorf("ServiceRecord Get with nothing registered: %v, want ERR_NO_RECORDS", err)
	}
	if _, err := c.Query(ctx, wire.MethodGet, wire.AttrNodeRecord, 0, nil); !sa.IsStatus(err, wire.SAStatusTooManyRecords) {
		t.Errorf("NodeRecord Get matching every node: %v, want ERR_TOO_MANY_RECORDS", err)
	}
	if _, err := c.Query(ctx, wire.MethodGet, wire.AttrTraceRecord, 0, nil); !sa.IsStatus(err, wire.StatusMethodAttrNotSupp) {
		t.Errorf("TraceRecord: %v, want method/attribute not supported", err)
	}
	if _, err := c.GetTable(ctx, wire.AttrTraceRecord, 0, nil); !sa.IsStatus(err, wire.StatusMethodAttrNotSupp) {
		t.Errorf("TraceRecord GetTable: %v, want method/attribute not supported", err)
	}
}

// TestSANodeRecordsRMPP reads every NodeRecord of the 32-HCA tree (38 records, 22 RMPP
// segments) and checks each node appears with its own GUID.
func TestSANodeRecordsRMPP(t *testing.T) {
	s := newSAFabric(t, satest.SmallTree(t, satest.Options{}), sa.Config{}, sa.ClientOptions{})
	ctx := saCtx(t)
	recs, err := s.clients[7].NodeRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	topo := s.sm.Topology()
	if want := len(s.f.HCAs) + len(s.f.Switches); len(recs) != want || len(recs) != len(topo.Endports()) {
		t.Fatalf("%d NodeRecords, want %d", len(recs), want)
	}
	if segs := wire.RMPPSegments(len(recs)*wire.SARecordStride(wire.NodeRecordLen), wire.SADataLen); segs < 20 {
		t.Fatalf("only %d segments: not a multi-segment test", segs)
	}
	seen := map[uint64]bool{}
	for _, r := range recs {
		p := topo.Port(r.PortGUID())
		if p == nil || p.LID != r.LID() || r.NodeGUID() != p.Node.GUID || seen[r.PortGUID()] {
			t.Fatalf("record LID %d port GUID %#x node GUID %#x", r.LID(), r.PortGUID(), r.NodeGUID())
		}
		seen[r.PortGUID()] = true
		if want := p.Node.Description; want != "" && string(r.NodeDescription()[:len(want)]) != want {
			t.Fatalf("NodeDescription %q, want %q", r.NodeDescription(), want)
		}
	}
	// Filtered by component mask: the switches only.
	var rec [wire.NodeRecordLen]byte
	rec[4+2] = 2
	tab, err := s.clients[7].GetTable(ctx, wire.AttrNodeRecord, wire.NRCompNodeType, rec[:])
	if err != nil || tab.Count() != len(s.f.Switches) {
		t.Fatalf("switch NodeRecords: %d, %v", tab.Count(), err)
	}
	// PortInfoRecords of one port.
	pir, err := s.clients[7].PortInfoRecords(ctx, s.f.Ports()[3].LID())
	if err != nil || len(pir) != 1 || pir[0].LID() != s.f.Ports()[3].LID() || pir[0].PortNum() != 1 {
		t.Fatalf("PortInfoRecords: %d %v", len(pir), err)
	}
	// The SM's ports, as saquery -s finds them: any port with IsSM among its capabilities
	// (PIRAnyCapBits); without the modifier the CapabilityMask must equal the query's.
	smPort := s.f.Ports()[0]
	pir, err = s.clients[7].PortInfoRecordsWithCap(ctx, wire.CapIsSM)
	if err != nil || len(pir) != 1 || pir[0].LID() != smPort.LID() || wire.PortInfo(pir[0].PortInfo()).CapabilityMask()&wire.CapIsSM == 0 {
		t.Fatalf("PortInfoRecords with IsSM: %d %v", len(pir), err)
	}
	if pir, err = s.clients[7].PortInfoRecordsWithCap(ctx, wire.CapIsSMDisabled); err != nil || len(pir) != 0 {
		t.Fatalf("PortInfoRecords with IsSMdisabled: %d %v", len(pir), err)
	}
	var q [wire.PortInfoRecordLen]byte
	wire.PortInfo(wire.PortInfoRecord(q[:]).PortInfo()).SetCapabilityMask(wire.CapIsSM)
	if tab, err := s.clients[7].GetTable(ctx, wire.AttrPortInfoRecord, wire.PIRCompCapMask, q[:]); err != nil || tab.Count() != 0 {
		t.Fatalf("PortInfoRecords with CapabilityMask exactly IsSM: %d %v", tab.Count(), err)
	}
}

// TestSAServiceRecords registers, finds, replaces, lets expire and deletes services.
func TestSAServiceRecords(t *testing.T) {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newSAFabric(t, satest.OneSwitch(t, 3, satest.Options{Clock: fake}), sa.Config{SweepInterval: -1}, sa.ClientOptions{})
	ctx := saCtx(t)
	a, b := s.clients[1], s.clients[2]
	svc := sa.Service{ID: 0x1000000000000001, Name: "pibgw.echo", Lease: 60}
	svc.Data32[2] = 7
	got, err := a.RegisterService(ctx, svc)
	if err != nil || got.GID != portGID(a.Port()) || got.PKey != 0xFFFF || got.Name != "pibgw.echo" || got.Data32[2] != 7 {
		t.Fatalf("register: %+v %v", got, err)
	}
	if _, err := b.RegisterService(ctx, sa.Service{ID: 0x1000000000000001, Name: "other"}); err != nil {
		t.Fatal(err)
	}
	found, err := b.QueryService(ctx, sa.Service{ID: 0x1000000000000001}, wire.SRCompID)
	if err != nil || len(found) != 2 {
		t.Fatalf("query by ID: %d %v", len(found), err)
	}
	found, err = b.QueryService(ctx, sa.Service{Name: "pibgw.echo"}, wire.SRCompName)
	if err != nil || len(found) != 1 || found[0].GID != portGID(a.Port()) || found[0].Lease != 60 {
		t.Fatalf("query by name: %+v %v", found, err)
	}
	// Re-registering replaces; the lease runs out on the clock.
	svc.Data32[2] = 8
	if _, err := a.RegisterService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	found, _ = b.QueryService(ctx, sa.Service{ID: svc.ID}, wire.SRCompID)
	if len(found) != 2 {
		t.Fatalf("after re-registration: %d records", len(found))
	}
	fake.Advance(61 * time.Second)
	found, err = b.QueryService(ctx, sa.Service{ID: svc.ID}, wire.SRCompID)
	if err != nil || len(found) != 1 || found[0].Name != "other" {
		t.Fatalf("after the lease: %+v %v", found, err)
	}
	if err := b.DeregisterService(ctx, sa.Service{ID: svc.ID}); err != nil {
		t.Fatal(err)
	}
	if found, err := b.QueryService(ctx, sa.Service{ID: svc.ID}, wire.SRCompID); err != nil || len(found) != 0 {
		t.Fatalf("after delete: %+v %v", found, err)
	}
}

// TestSATableRecords reads the links and the switches' and ports' tables through the SA,
// as saquery -x, SWIR, LFTR, PKTR and GIR do, and checks them against the fabric itself.
func TestSATableRecords(t *testing.T) {
	s := newSAFabric(t, satest.SmallTree(t, satest.Options{}), sa.Config{}, sa.ClientOptions{})
	ctx := saCtx(t)
	c := s.clients[5]
	table := func(attr uint16, mask uint64, rec []byte) sa.Table {
		t.Helper()
		tab, err := c.GetTable(ctx, attr, mask, rec)
		if err != nil {
			t.Fatalf("GetTable %#x: %v", attr, err)
		}
		return tab
	}
	// Links: each direction of every cable, HCA and switch-to-switch alike.
	links := len(s.f.HCACables) + len(s.f.Links)
	tab := table(wire.AttrLinkRecord, 0, make([]byte, wire.LinkRecordLen))
	if tab.Count() != 2*links {
		t.Fatalf("%d LinkRecords, want %d", tab.Count(), 2*links)
	}
	hp := s.f.Ports()[5]
	var q [wire.LFTRecordLen]byte
	wire.LinkRecord(q[:]).SetFromLID(hp.LID())
	tab = table(wire.AttrLinkRecord, wire.LRCompFromLID, q[:wire.LinkRecordLen])
	if tab.Count() != 1 {
		t.Fatalf("%d LinkRecords from LID %d, want 1", tab.Count(), hp.LID())
	}
	lr := wire.LinkRecord(tab.Record(0))
	leaf := s.f.Switches[5/8] // SmallTree: eight HCAs per leaf, on ports 1-8
	if lr.FromPort() != 1 || lr.ToPort() != uint8(5%8+1) || lr.ToLID() != leaf.LID() {
		t.Fatalf("link from HCA 5: port %d → LID %d port %d, want 1 → %d port %d", lr.FromPort(), lr.ToLID(), lr.ToPort(), leaf.LID(), 5%8+1)
	}
	// SwitchInfo of every switch, and each switch's LFT as the switch holds it.
	tab = table(wire.AttrSwitchInfoRecord, 0, make([]byte, wire.SwitchInfoRecordLen))
	if tab.Count() != len(s.f.Switches) {
		t.Fatalf("%d SwitchInfoRecords, want %d", tab.Count(), len(s.f.Switches))
	}
	clear(q[:])
	wire.LFTRecord(q[:]).SetLID(leaf.LID())
	tab = table(wire.AttrLinearFwdTableRecord, wire.LFTRCompLID, q[:])
	top := int(s.sm.Topology().MaxLID())
	if tab.Count() != top/64+1 {
		t.Fatalf("%d LFT blocks of LID %d, want %d", tab.Count(), leaf.LID(), top/64+1)
	}
	for i := 0; i < tab.Count(); i++ {
		r := wire.LFTRecord(tab.Record(i))
		for j, port := range r.LFT() {
			lid := int(r.Block())*64 + j
			if want := leaf.LFT(uint16(lid)); lid <= top && port != want {
				t.Fatalf("LFTRecord LID %d: port %d, the switch has %d", lid, port, want)
			}
		}
	}
	// The P_Key table and the GUIDs of an HCA port.
	clear(q[:])
	wire.PKeyTableRecord(q[:]).SetLID(hp.LID())
	tab = table(wire.AttrPKeyTableRecord, wire.PKTRCompLID, q[:])
	if tab.Count() != 1 || wire.PKeyTableRecord(tab.Record(0)).PKey(0) != 0xFFFF {
		t.Fatalf("PKeyTableRecords of LID %d: %d", hp.LID(), tab.Count())
	}
	clear(q[:])
	wire.GUIDInfoRecord(q[:]).SetLID(hp.LID())
	tab = table(wire.AttrGUIDInfoRecord, wire.GIRCompLID, q[:])
	if tab.Count() != 1 || wire.GUIDInfoRecord(tab.Record(0)).GUID(0) != hp.GUID() {
		t.Fatalf("GUIDInfoRecords of LID %d: %d", hp.LID(), tab.Count())
	}
	// The MFT of the leaf after two of its HCAs joined a group, block by block as the
	// switch holds it (port mask bits 0-15: position 0).
	mgid := wire.GID{0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 15: 0x77}
	var g sa.MCGroup
	for _, i := range []int{5, 6} {
		var err error
		if g, err = s.clients[i].Join(ctx, mgid, wire.JoinFullMember, sa.JoinParams{Create: true, QKey: 0x77}); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	clear(q[:])
	mr := wire.MFTRecord(q[:])
	mr.SetLID(leaf.LID())
	mr.SetPositionBlock(0, (g.MLID-0xC000)/32)
	tab = table(wire.AttrMulticastFwdTblRecord, wire.MFTRCompLID|wire.MFTRCompPosition|wire.MFTRCompBlock, q[:])
	if tab.Count() != 1 {
		t.Fatalf("%d MFT records for LID %d block %d, want 1", tab.Count(), leaf.LID(), (g.MLID-0xC000)/32)
	}
	r := wire.MFTRecord(tab.Record(0))
	for i := 0; i < 32; i++ {
		mlid := 0xC000 + r.Block()*32 + uint16(i)
		if want := uint16(leaf.MFT(mlid)[0]); r.Mask(i) != want {
			t.Fatalf("MFTRecord MLID %#x: ports %#04x, the switch has %#04x", mlid, r.Mask(i), want)
		}
	}
	if m := r.Mask(int(g.MLID-0xC000) % 32); m&(1<<6|1<<7) != 1<<6|1<<7 {
		t.Fatalf("MLID %#x: ports %#04x, want HCA 5's and 6's (ports 6 and 7)", g.MLID, m)
	}
	// The SM itself: one MASTER, at its port.
	smp := s.f.Ports()[0]
	tab = table(wire.AttrSMInfoRecord, 0, make([]byte, wire.SMInfoRecordLen))
	if tab.Count() != 1 {
		t.Fatalf("%d SMInfoRecords, want 1", tab.Count())
	}
	if r := wire.SMInfoRecord(tab.Record(0)); r.LID() != smp.LID() || r.GUID() != smp.GUID() || r.SMState() != sa.SMStateMaster || r.ActCount() == 0 {
		t.Fatalf("SMInfoRecord LID %d GUID %#x state %d act %d; want the SM's port %d %#x, MASTER", r.LID(), r.GUID(), r.SMState(), r.ActCount(), smp.LID(), smp.GUID())
	}
}
