package sa_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
)

// saEP is a UD QP with a receive buffer, for multicast tests.
type saEP struct {
	pd       *hca.PD
	scq, rcq *hca.CQ
	qp       *hca.QP
	buf      []byte
	mr       *hca.MR
}

func newSAEP(t testing.TB, d *hca.Device, qkey uint32) *saEP {
	t.Helper()
	ctx := d.Open()
	t.Cleanup(func() { ctx.Close() })
	e := &saEP{}
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
		Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a    hca.QPAttr
		mask hca.QPAttrMask
	}{
		{hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: qkey}, hca.QPAttrState | hca.QPAttrPKeyIndex | hca.QPAttrPort | hca.QPAttrQKey},
		{hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState},
		{hca.QPAttr{QPState: hca.QPStateRTS}, hca.QPAttrState | hca.QPAttrSQPSN},
	} {
		if err := e.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	e.buf = make([]byte, 8192)
	if e.mr, err = e.pd.RegMR(e.buf, hca.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		e.repost()
	}
	return e
}

func (e *saEP) repost() {
	sge := hca.SGE{Addr: e.mr.Addr(), Length: 4096, LKey: e.mr.LKey()}
	_, _ = e.qp.PostRecv([]hca.RecvWR{{WRID: 1, SGL: []hca.SGE{sge}}})
}

func (e *saEP) send(t testing.TB, g sa.MCGroup, payload string) {
	t.Helper()
	ah, err := e.pd.CreateAH(hca.AHAttr{DLID: g.MLID, SL: g.SL, PortNum: 1, IsGlobal: true,
		GRH: hca.GlobalRoute{DGID: g.MGID, HopLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	copy(e.buf[4096:], payload)
	sge := hca.SGE{Addr: e.mr.Addr() + 4096, Length: uint32(len(payload)), LKey: e.mr.LKey()}
	wr := hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{sge},
		AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: g.QKey}
	if _, err := e.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	var wc [2]hca.WC
	if n := e.scq.Poll(wc[:]); n != 1 || wc[0].Status != hca.WCSuccess {
		t.Fatalf("send completion: %d %+v", n, wc[0])
	}
}

// got polls for received messages (reposting) and returns how many arrived.
func (e *saEP) got() int {
	var wc [8]hca.WC
	n := e.rcq.Poll(wc[:])
	for i := 0; i < n; i++ {
		e.repost()
	}
	return n
}

// TestSAMulticastJoinBuildsMFTs is issue 3's acceptance 3 on the two-level tree: joins
// through the SA program the MFTs so that a UD send to the group reaches every full
// member and no one else, a leave removes the port, and a send-only member can send but
// receives nothing.
func TestSAMulticastJoinBuildsMFTs(t *testing.T) {
	s := newSAFabric(t, satest.SmallTree(t, satest.Options{}), sa.Config{}, sa.ClientOptions{})
	ctx := saCtx(t)
	const qkey = 0x1234_5678
	mgid := wire.GID{0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 15: 0x42}
	full := []int{2, 11, 20, 30} // on three different leaves
	const sendOnly, bystander = 17, 5
	eps := map[int]*saEP{}
	var g sa.MCGroup
	for k, i := range full {
		var err error
		g, err = s.clients[i].Join(ctx, mgid, wire.JoinFullMember, sa.JoinParams{Create: true, QKey: qkey})
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		if g.MGID != mgid || g.QKey != qkey || g.MLID < 0xC000 || g.JoinState != wire.JoinFullMember {
			t.Fatalf("join %d: %+v", i, g)
		}
		if k > 0 && g.MLID != s.clients[full[0]].Memberships()[0].MLID {
			t.Fatal("MLID changed between joins")
		}
		eps[i] = newSAEP(t, s.f.HCAs[i], qkey)
		if err := eps[i].qp.AttachMcast(g.MGID, g.MLID); err != nil {
			t.Fatal(err)
		}
	}
	so, err := s.clients[sendOnly].Join(ctx, mgid, wire.JoinSendOnlyNonMember, sa.JoinParams{})
	if err != nil || so.MLID != g.MLID || so.QKey != qkey {
		t.Fatalf("send-only join: %+v %v", so, err)
	}
	// The send-only and the bystander attach too: only the fabric keeps packets away.
	for _, i := range []int{sendOnly, bystander} {
		eps[i] = newSAEP(t, s.f.HCAs[i], qkey)
		if err := eps[i].qp.AttachMcast(g.MGID, g.MLID); err != nil {
			t.Fatal(err)
		}
	}
	check := func(sender int, want map[int]bool) {
		t.Helper()
		eps[sender].send(t, g, "hello group")
		for i, e := range eps {
			n := e.got()
			exp := 0
			if want[i] {
				exp = 1
			}
			if n != exp {
				t.Errorf("sender %d: HCA %d received %d, want %d", sender, i, n, exp)
			}
		}
	}
	check(sendOnly, map[int]bool{2: true, 11: true, 20: true, 30: true})
	check(2, map[int]bool{11: true, 20: true, 30: true})
	// Leave: HCA 20 is no longer reached.
	if err := s.clients[20].Leave(ctx, mgid, wire.JoinFullMember); err != nil {
		t.Fatal(err)
	}
	check(sendOnly, map[int]bool{2: true, 11: true, 30: true})
	check(30, map[int]bool{2: true, 11: true})
	members, err := s.clients[bystander].MCMembers(ctx, mgid)
	if err != nil || len(members) != 4 {
		t.Fatalf("MCMembers: %d %v", len(members), err)
	}
	// Everyone leaves: the group goes away.
	for _, i := range []int{2, 11, 30} {
		if err := s.clients[i].Leave(ctx, mgid, wire.JoinFullMember); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.clients[sendOnly].Leave(ctx, mgid, wire.JoinSendOnlyNonMember); err != nil {
		t.Fatal(err)
	}
	if _, err := s.clients[bystander].MCMembers(ctx, mgid); err != nil {
		t.Fatal(err)
	}
	for _, gid := range s.agent.Groups() {
		if gid == mgid {
			t.Fatal("group still exists after its last member left")
		}
	}
}

// TestSAIPoIBBroadcastGroup: the broadcast group of the default partition exists before
// anyone joins, with Q_Key 0x0B1B and MTU 2048, and a join that names only the MGID gets
// those parameters; an SA-assigned MGID works for a creating join.
func TestSAIPoIBBroadcastGroup(t *testing.T) {
	s := newSAFabric(t, satest.OneSwitch(t, 3, satest.Options{}), sa.Config{}, sa.ClientOptions{})
	ctx := saCtx(t)
	bcast := wire.IPoIBBroadcastMGID(0xFFFF)
	if bcast.String() != "ff12:401b:ffff::ffff:ffff" {
		t.Fatal(bcast)
	}
	pre, err := s.clients[1].MCMembers(ctx, bcast)
	if err != nil || len(pre) != 1 || pre[0].QKey != wire.IPoIBBroadcastQKey || pre[0].PortGID != (wire.GID{}) {
		t.Fatalf("pre-created broadcast group: %+v %v", pre, err)
	}
	for i := 1; i < 3; i++ {
		g, err := s.clients[i].Join(ctx, bcast, wire.JoinFullMember, sa.JoinParams{})
		if err != nil {
			t.Fatal(err)
		}
		if g.QKey != 0x0B1B || g.MTU != uint8(hca.MTU2048) || g.PKey != 0xFFFF || g.MLID < 0xC000 || g.Rate == 0 || g.Scope != 2 {
			t.Fatalf("broadcast group record: %+v", g)
		}
	}
	a, b := newSAEP(t, s.f.HCAs[1], 0x0B1B), newSAEP(t, s.f.HCAs[2], 0x0B1B)
	g := s.clients[1].Memberships()[0]
	if err := b.qp.AttachMcast(g.MGID, g.MLID); err != nil {
		t.Fatal(err)
	}
	a.send(t, g, "arp who-has")
	if b.got() != 1 {
		t.Fatal("broadcast not delivered")
	}
	// The broadcast group outlives its members.
	for i := 1; i < 3; i++ {
		if err := s.clients[i].Leave(ctx, bcast, wire.JoinFullMember); err != nil {
			t.Fatal(err)
		}
	}
	if pre, err := s.clients[1].MCMembers(ctx, bcast); err != nil || len(pre) != 1 {
		t.Fatalf("broadcast group after leaves: %+v %v", pre, err)
	}
	// An SA-assigned MGID.
	g2, err := s.clients[1].Join(ctx, wire.GID{}, wire.JoinFullMember, sa.JoinParams{Create: true, QKey: 9, MTU: uint8(hca.MTU1024)})
	if err != nil || !g2.MGID.IsMulticast() || g2.MTU != uint8(hca.MTU1024) || g2.QKey != 9 || g2.MLID == g.MLID {
		t.Fatalf("SA-assigned group: %+v %v", g2, err)
	}
}

// TestSAClientRejoin: after the SA loses its state (a new agent, as after an SM
// restart) and the port reports an SM change, the client joins its groups again.
func TestSAClientRejoin(t *testing.T) {
	rejoined := make(chan sa.MCGroup, 4)
	s := newSAFabric(t, satest.OneSwitch(t, 2, satest.Options{}), sa.Config{SweepInterval: -1}, sa.ClientOptions{
		OnRejoin: func(g sa.MCGroup, err error) {
			if err != nil {
				t.Errorf("rejoin: %v", err)
			}
			rejoined <- g
		},
	})
	ctx := saCtx(t)
	mgid := wire.GID{0xff, 0x12, 0x60, 0x1b, 15: 7}
	c := s.clients[1]
	if _, err := c.Join(ctx, mgid, wire.JoinFullMember, sa.JoinParams{Create: true, QKey: 77}); err != nil {
		t.Fatal(err)
	}
	s.agent.Close()
	agent, err := sa.StartSA(s.sm, sa.AgentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	if m, err := c.MCMembers(ctx, mgid); err != nil || len(m) != 0 {
		t.Fatalf("new SA knows the group already: %+v %v", m, err)
	}
	p := c.Port()
	attr := p.Query()
	p.SetSM(attr.SMLID, attr.SMSL+1) // what the SMA does when a new SM takes over
	select {
	case g := <-rejoined:
		if g.MGID != mgid || g.QKey != 77 {
			t.Fatalf("rejoined %+v", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no rejoin after the SM change")
	}
	if m, err := c.MCMembers(ctx, mgid); err != nil || len(m) != 1 || m[0].PortGID != portGID(p) {
		t.Fatalf("after rejoin: %+v %v", m, err)
	}
}

// TestSAClientHolders is issue 43 item 4 at the SA client: the port joins a group once
// for all its users; when a second holder (an attached process, rdma_cm) joins the group
// the first holds and leaves it, or leaves what it never held, the port stays a full
// member at the SA and still receives the group's packets; the last holder's leave
// takes it out.
func TestSAClientHolders(t *testing.T) {
	s := newSAFabric(t, satest.OneSwitch(t, 3, satest.Options{}), sa.Config{}, sa.ClientOptions{})
	ctx := saCtx(t)
	const qkey = 0x4321
	mgid := wire.GID{0xff, 0x12, 0x60, 0x1b, 15: 0x43}
	c := s.clients[1]
	g, err := c.Join(ctx, mgid, wire.JoinFullMember, sa.JoinParams{Create: true, QKey: qkey})
	if err != nil {
		t.Fatal(err)
	}
	rx, tx := newSAEP(t, s.f.HCAs[1], qkey), newSAEP(t, s.f.HCAs[2], qkey)
	if err := rx.qp.AttachMcast(g.MGID, g.MLID); err != nil {
		t.Fatal(err)
	}
	member := func() bool {
		t.Helper()
		m, err := s.clients[2].MCMembers(ctx, mgid)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m {
			if r.PortGID == portGID(c.Port()) && r.JoinState&wire.JoinFullMember != 0 {
				return true
			}
		}
		return false
	}
	type proc struct{ pid int }
	other := &proc{42}
	if _, err := c.JoinFor(ctx, other, mgid, wire.JoinFullMember, sa.JoinParams{Create: true, QKey: qkey}); err != nil {
		t.Fatal(err)
	}
	if err := c.LeaveFor(ctx, other, mgid, wire.JoinFullMember); err != nil {
		t.Fatal(err)
	}
	if err := c.LeaveFor(ctx, &proc{7}, mgid, wire.JoinFullMember); err != nil {
		t.Fatal(err)
	}
	if !member() {
		t.Fatal("another holder's leave took the port out of the group")
	}
	tx.send(t, g, "still here")
	if rx.got() != 1 {
		t.Fatal("the group's packet no longer reaches the port")
	}
	if c.Holds(c, mgid) != wire.JoinFullMember || c.Holds(other, mgid) != 0 {
		t.Fatalf("holds: own %#x, other %#x", c.Holds(c, mgid), c.Holds(other, mgid))
	}
	if err := c.Leave(ctx, mgid, wire.JoinFullMember); err != nil {
		t.Fatal(err)
	}
	if member() {
		t.Fatal("the port is still a member after its last holder left")
	}
}
