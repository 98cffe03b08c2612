package rc_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/ud"
	"github.com/pibgw/pibgw/wire"
)

// TestAPMLoadedByCMLAP: the alternate path comes through the CM (IBA 12.8): after REQ,
// REP and RTU on port 1, the active side sends a LAP with the port 2 path, the passive side
// loads it into its QP (REARM) and answers APR success, the active side loads it into its
// own; the stream then survives cutting the primary cable, with a PATH_MIG on each side.
func TestAPMLoadedByCMLAP(t *testing.T) {
	f := newAPMFabric(t)
	for _, d := range f.devs {
		ud.Register(d) // QP1 for the CM's MADs
	}
	a, b := f.sides[0], f.sides[1]
	bringAPM(t, a, b, false)
	bringAPM(t, b, a, false)

	const service = 0x1000
	type ev struct {
		id *ibcm.ID
		e  ibcm.Event
	}
	evs := [2]chan ev{make(chan ev, 16), make(chan ev, 16)}
	var cms [2]*ibcm.CM
	for i, d := range f.devs {
		cms[i] = ibcm.New(ibcm.HCAPort(d.Port(1)), ibcm.Options{Clock: f.clk})
		t.Cleanup(cms[i].Close)
	}
	want := func(i int, typ ibcm.EventType) ev {
		t.Helper()
		select {
		case x := <-evs[i]:
			if x.e.Type != typ {
				t.Fatalf("CM %d: event %v, want %v", i, x.e.Type, typ)
			}
			return x
		case <-time.After(5 * time.Second):
			t.Fatalf("CM %d: no %v", i, typ)
		}
		return ev{}
	}
	handler := func(i int) ibcm.Handler {
		return func(id *ibcm.ID, e *ibcm.Event) { evs[i] <- ev{id, *e} }
	}
	l := cms[1].NewID(handler(1), nil)
	if err := l.Listen(service, 0); err != nil {
		t.Fatal(err)
	}
	pathOf := func(from, to, port int) sa.Path {
		src, _ := f.devs[from].Port(port).GID(0)
		dst, _ := f.devs[to].Port(port).GID(0)
		return sa.Path{SGID: src, DGID: dst, SLID: f.devs[from].Port(port).LID(), DLID: f.devs[to].Port(port).LID(),
			PKey: 0xFFFF, MTU: uint8(hca.MTU1024), Rate: 3, PacketLifeTime: 10}
	}
	active := cms[0].NewID(handler(0), nil)
	if err := active.SendReq(ibcm.ReqParam{ServiceID: service, QPN: a.qp.Num(), QPType: hca.QPTypeRC, StartingPSN: 0x10,
		PKey: 0xFFFF, Path: pathOf(0, 1, 1), RemoteCMResponseTimeout: 16, LocalCMResponseTimeout: 16, RetryCount: 2,
		RNRRetryCount: 7, MaxCMRetries: 3}); err != nil {
		t.Fatal(err)
	}
	passive := want(1, ibcm.EventReqReceived).id
	if err := passive.SendRep(ibcm.RepParam{QPN: b.qp.Num(), StartingPSN: 0x10, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	want(0, ibcm.EventRepReceived)
	if err := active.SendRTU(nil); err != nil {
		t.Fatal(err)
	}
	want(1, ibcm.EventRTUReceived)

	// loadAlt loads path p (this side's view) as s's alternate path and re-arms.
	loadAlt := func(s *side, p sa.Path) {
		t.Helper()
		port := 0
		for n := 1; n <= s.qp.Device().NumPorts(); n++ {
			if s.qp.Device().Port(n).LID() == p.SLID {
				port = n
			}
		}
		attr := hca.QPAttr{QPState: hca.QPStateRTS, AltAHAttr: hca.AHAttr{DLID: p.DLID, SL: p.SL, PortNum: uint8(port)},
			AltPortNum: uint8(port), AltTimeout: 10, PathMigState: hca.MigRearm}
		if err := s.qp.Modify(&attr, hca.QPAttrState|hca.QPAttrAltPath|hca.QPAttrPathMigState); err != nil {
			t.Fatal(err)
		}
	}
	alt := pathOf(0, 1, 2)
	if err := active.SendLAP(alt, nil); err != nil {
		t.Fatal(err)
	}
	lap := want(1, ibcm.EventLAPReceived)
	if p := lap.e.AltPath; p.SLID != b.port.Device().Port(2).LID() || p.DLID != a.qp.Device().Port(2).LID() {
		t.Fatalf("LAP path %+v", p)
	}
	loadAlt(b, *lap.e.AltPath)
	if err := passive.SendAPR(wire.APRSuccess, nil, nil); err != nil {
		t.Fatal(err)
	}
	if apr := want(0, ibcm.EventAPRReceived); apr.e.APStatus != wire.APRSuccess {
		t.Fatalf("APR status %d", apr.e.APStatus)
	}
	loadAlt(a, alt)

	// One exchange arms both sides, then the primary cable goes.
	b.postRecv(t, 999, 0, 8)
	a.post(t, hca.SendWR{WRID: 999, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}})
	waitWC(t, a.scq, f.clk)
	waitWC(t, b.rcq, f.clk)
	if a.qp.PathMigState() != hca.MigArmed || b.qp.PathMigState() != hca.MigArmed {
		t.Fatalf("states %d/%d, want ARMED", a.qp.PathMigState(), b.qp.PathMigState())
	}
	const n = 40
	send, recv := f.stream(t, n, 0)
	if len(send) != n || len(recv) != n || send[n-1].Status != hca.WCSuccess || recv[n-1].Status != hca.WCSuccess {
		t.Fatalf("%d sends (last %v), %d receives after the cut", len(send), send[len(send)-1].Status, len(recv))
	}
	for _, s := range f.sides {
		if ev := pathMigEvents(s.ctx, s.qp); ev != 1 || s.qp.Port().Num() != 2 {
			t.Fatalf("QP %#x: %d PATH_MIG events, port %d", s.qp.Num(), ev, s.qp.Port().Num())
		}
	}
}
