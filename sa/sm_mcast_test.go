package sa_test

import (
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
)

func (e *udEP) sendMcast(t testing.TB, mlid uint16, mgid [16]byte, payload string) {
	t.Helper()
	ah, err := e.pd.CreateAH(hca.AHAttr{DLID: mlid, PortNum: 1, IsGlobal: true, GRH: hca.GlobalRoute{DGID: mgid, HopLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	copy(e.buf[4096:], payload)
	sge := hca.SGE{Addr: e.mr.Addr() + 4096, Length: uint32(len(payload)), LKey: e.mr.LKey()}
	wr := hca.SendWR{WRID: 3, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{sge},
		AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: testQKey}
	if _, err := e.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	var wc [4]hca.WC
	if n := e.scq.Poll(wc[:]); n != 1 || wc[0].Status != hca.WCSuccess {
		t.Fatalf("multicast send completion: n=%d %+v", n, wc[0])
	}
}

// received polls the receive CQ and reposts a receive for every completion.
func (e *udEP) received() int {
	var wc [16]hca.WC
	n := e.rcq.Poll(wc[:])
	for i := 0; i < n; i++ {
		sge := hca.SGE{Addr: e.mr.Addr(), Length: 4096, LKey: e.mr.LKey()}
		_, _ = e.qp.PostRecv([]hca.RecvWR{{WRID: 1, SGL: []hca.SGE{sge}}})
	}
	return n
}

func TestSMMulticastForwarding(t *testing.T) {
	f := satest.SmallTree(t, satest.Options{})
	sm := f.StartSM(t, sa.Config{})
	mlid, err := sm.AllocMLID()
	if err != nil || mlid != 0xC000 {
		t.Fatalf("AllocMLID = %#x, %v", mlid, err)
	}
	mgid := [16]byte{0xff, 0x12, 0x40, 0x1b, 0x7f, 0xff, 15: 0x42}
	eps := make([]*udEP, len(f.HCAs))
	for i, d := range f.HCAs {
		eps[i] = newUDEP(t, d, 0)
	}
	full := []int{1, 10, 25}
	const sendOnly = 17
	var members []sa.MCMember
	for _, i := range full {
		if err := eps[i].qp.AttachMcast(mgid, mlid); err != nil {
			t.Fatal(err)
		}
		members = append(members, sa.MCMember{PortGUID: f.HCAs[i].Port(1).GUID(), JoinState: sa.JoinFull})
	}
	members = append(members, sa.MCMember{PortGUID: f.HCAs[sendOnly].Port(1).GUID(), JoinState: sa.JoinSendOnlyNonMember})
	if err := sm.SetMulticastGroup(mlid, members); err != nil {
		t.Fatal(err)
	}
	mcRcv := func() []uint64 {
		out := make([]uint64, len(f.HCAs))
		for i, d := range f.HCAs {
			out[i] = d.Port(1).Counters().Get(hca.CntMulticastRcvPkts)
		}
		return out
	}
	check := func(from int, want []int) {
		t.Helper()
		before := mcRcv()
		eps[from].sendMcast(t, mlid, mgid, "group")
		after := mcRcv()
		wantSet := make(map[int]bool)
		for _, i := range want {
			wantSet[i] = true
		}
		for i := range f.HCAs {
			got := after[i] - before[i]
			switch {
			case wantSet[i] && (got != 1 || eps[i].received() != 1):
				t.Errorf("from HCA %d: member HCA %d got %d packets", from, i, got)
			case !wantSet[i] && i != from && got != 0:
				t.Errorf("from HCA %d: HCA %d outside the group got %d packets", from, i, got)
			}
		}
	}
	check(sendOnly, []int{1, 10, 25})
	check(1, []int{10, 25})
	// Leave: HCA 25 is no longer forwarded to.
	members = append(members[:2], members[3])
	if err := sm.SetMulticastGroup(mlid, members); err != nil {
		t.Fatal(err)
	}
	check(10, []int{1})
	// The trees survive a heavy sweep.
	<-sm.Resweep()
	check(sendOnly, []int{1, 10})
	sm.FreeMLID(mlid)
	check(1, nil)
}
