package rc_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rc"
)

// apmFabric is two HCAs with two ports each, joined port 1 to port 1 and port 2 to port 2
// by two cables: two disjoint paths between them. LIDs: a.1 = 1, a.2 = 2, b.1 = 3, b.2 = 4.
type apmFabric struct {
	clk    *fakeClock
	devs   [2]*hca.Device
	cables [2]*fabric.Cable
	sides  [2]*side
}

func newAPMFabric(t *testing.T) *apmFabric {
	t.Helper()
	f := &apmFabric{clk: newFakeClock()}
	for i := range f.devs {
		d, err := hca.NewDevice(hca.Config{Name: "pib_" + string(rune('0'+i)), NodeGUID: 0x0002_c903_0000_0000 | uint64(i+3)<<8,
			NumPorts: 2, Clock: f.clk})
		if err != nil {
			t.Fatal(err)
		}
		rc.Register(d)
		f.devs[i] = d
	}
	for p := 1; p <= 2; p++ {
		f.cables[p-1] = fabric.NewCable(f.devs[0].Port(p), f.devs[1].Port(p))
	}
	for i, d := range f.devs {
		for p := 1; p <= 2; p++ {
			port := d.Port(p)
			port.SetLID(uint16(2*i+p), 0)
			port.SetSM(1, 0)
			port.SetActiveMTU(hca.MTU1024)
			port.SetState(hca.PortActive)
		}
		f.sides[i] = newSide(t, d, connOpts{typ: hca.QPTypeRC, bufLen: 1 << 20, access: mwAccess, depth: 256, cqe: 4096})
	}
	return f
}

// bringAPM connects s to peer on port 1 and, with alt, loads the port 2 path as the
// alternate one and sets REARM (the first packets from the peer arm it).
func bringAPM(t *testing.T, s, peer *side, alt bool) {
	t.Helper()
	a := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite | hca.AccessRemoteRead}
	if err := s.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	peerLID := peer.qp.Device().Port(1).LID()
	a = hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: hca.MTU1024, DestQPNum: peer.qp.Num(), RQPSN: 0x10,
		AHAttr: hca.AHAttr{DLID: peerLID, PortNum: 1}, MaxDestRdAtomic: 4, MinRNRTimer: 1}
	mask := hca.QPAttrState | hca.QPAttrAV | hca.QPAttrPathMTU | hca.QPAttrDestQPN | hca.QPAttrRQPSN | hca.QPAttrMaxDestRdAtomic | hca.QPAttrMinRNRTimer
	if alt {
		a.AltAHAttr = hca.AHAttr{DLID: peerLID + 1, PortNum: 2}
		a.AltPortNum, a.AltTimeout = 2, 10
		mask |= hca.QPAttrAltPath
	}
	if err := s.qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 0x10, Timeout: 10, RetryCnt: 2, RNRRetry: 7, MaxRdAtomic: 4, PathMigState: hca.MigRearm}
	mask = hca.QPAttrState | hca.QPAttrSQPSN | hca.QPAttrTimeout | hca.QPAttrRetryCnt | hca.QPAttrRNRRetry | hca.QPAttrMaxQPRdAtomic
	if alt {
		mask |= hca.QPAttrPathMigState
	}
	if err := s.qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
}

// stream sends n numbered 1 KiB messages from a to b, cutting cable cut (if ≥ 0) after
// the first half, and returns a's and b's completions once a has all of its own (time
// moves on the fake clock until then).
func (f *apmFabric) stream(t *testing.T, n, cut int) (send, recv []hca.WC) {
	t.Helper()
	a, b := f.sides[0], f.sides[1]
	const size = 1024
	for i := 0; i < n; i++ {
		b.postRecv(t, uint64(i), (n+i)*size, size)
	}
	post := func(i int) {
		binary.LittleEndian.PutUint64(a.buf[i*size:], uint64(i)*0x9E3779B97F4A7C15)
		a.post(t, hca.SendWR{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(i*size, size)}})
	}
	var wcs [64]hca.WC
	poll := func() {
		for k := a.scq.Poll(wcs[:]); k > 0; k = a.scq.Poll(wcs[:]) {
			send = append(send, wcs[:k]...)
		}
		for k := b.rcq.Poll(wcs[:]); k > 0; k = b.rcq.Poll(wcs[:]) {
			recv = append(recv, wcs[:k]...)
		}
	}
	for i := 0; i < n/2; i++ {
		post(i)
	}
	poll()
	if cut >= 0 {
		f.cables[cut].SetUp(false)
	}
	for i := n / 2; i < n; i++ {
		post(i)
	}
	for k := 0; k < 1000 && len(send) < n; k++ {
		f.clk.Advance(time.Millisecond)
		poll()
	}
	poll()
	return send, recv
}

func pathMigEvents(c *hca.Context, qp *hca.QP) int {
	n := 0
	for {
		select {
		case ev := <-c.Events():
			if ev.Type == hca.EventPathMig && ev.QP == qp {
				n++
			}
		default:
			return n
		}
	}
}

// TestAPMSurvivesCableCut: an RC stream whose QPs have an armed alternate path survives
// cutting its primary cable mid-stream: the requester runs out of retries on the primary
// path, migrates (IBA 17.2.8), resends on the alternate one, the responder migrates on the
// first packet that arrives there with MigReq set, and every message arrives once, in
// order, intact; both QPs report IBV_EVENT_PATH_MIG and end MIGRATED on port 2.
func TestAPMSurvivesCableCut(t *testing.T) {
	f := newAPMFabric(t)
	a, b := f.sides[0], f.sides[1]
	bringAPM(t, a, b, true)
	bringAPM(t, b, a, true)
	if a.qp.PathMigState() != hca.MigRearm || b.qp.PathMigState() != hca.MigRearm {
		t.Fatalf("states %d/%d after loading the alternate paths, want REARM", a.qp.PathMigState(), b.qp.PathMigState())
	}
	// One exchange on the primary path arms both sides (MigReq = 0 from a REARMed peer).
	b.postRecv(t, 999, 0, 8)
	a.post(t, hca.SendWR{WRID: 999, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}})
	if wc := waitWC(t, a.scq, f.clk); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	waitWC(t, b.rcq, f.clk)
	if a.qp.PathMigState() != hca.MigArmed || b.qp.PathMigState() != hca.MigArmed {
		t.Fatalf("states %d/%d after an exchange, want ARMED", a.qp.PathMigState(), b.qp.PathMigState())
	}

	const n = 200
	send, recv := f.stream(t, n, 0)
	if len(send) != n || len(recv) != n {
		t.Fatalf("%d send and %d receive completions, want %d each", len(send), len(recv), n)
	}
	for i := range n {
		if send[i].Status != hca.WCSuccess || send[i].WRID != uint64(i) {
			t.Fatalf("send completion %d: %+v", i, send[i])
		}
		r := recv[i]
		got := binary.LittleEndian.Uint64(b.buf[(n+i)*1024:])
		if r.Status != hca.WCSuccess || r.WRID != uint64(i) || r.ByteLen != 1024 || got != uint64(i)*0x9E3779B97F4A7C15 {
			t.Fatalf("receive %d: %+v, data %#x", i, r, got)
		}
	}
	for _, s := range f.sides {
		attr := s.qp.Attr()
		if s.qp.State() != hca.QPStateRTS || attr.PathMigState != hca.MigMigrated || attr.PortNum != 2 || s.qp.Port().Num() != 2 {
			t.Fatalf("QP %#x: state %s, mig %d, port %d after the cut; want RTS, MIGRATED, port 2", s.qp.Num(), s.qp.State(), attr.PathMigState, attr.PortNum)
		}
		if ev := pathMigEvents(s.ctx, s.qp); ev != 1 {
			t.Fatalf("QP %#x: %d PATH_MIG events, want 1", s.qp.Num(), ev)
		}
		if m := rc.ConnStats(s.qp).Migrations.Load(); m != 1 {
			t.Fatalf("QP %#x: %d migrations", s.qp.Num(), m)
		}
	}
	// Without an alternate path any more, cutting the second cable ends the stream.
	send, _ = f.stream(t, 4, 1)
	if len(send) == 0 || send[len(send)-1].Status != hca.WCWRFlushErr || send[2].Status != hca.WCRetryExcErr {
		t.Fatalf("after the second cut: %+v; want RETRY_EXC_ERR on the first unsent message", send)
	}
}

// TestAPMWithoutAlternatePath: the same cut without an alternate path fails the stream
// with RETRY_EXC_ERR and no migration.
func TestAPMWithoutAlternatePath(t *testing.T) {
	f := newAPMFabric(t)
	a, b := f.sides[0], f.sides[1]
	bringAPM(t, a, b, false)
	bringAPM(t, b, a, false)
	send, recv := f.stream(t, 20, 0)
	if len(recv) != 10 || len(send) != 20 {
		t.Fatalf("%d receives (want the 10 before the cut), %d send completions", len(recv), len(send))
	}
	if send[10].Status != hca.WCRetryExcErr || send[19].Status != hca.WCWRFlushErr || a.qp.State() != hca.QPStateErr {
		t.Fatalf("completion 10 %s, 19 %s, state %s; want RETRY_EXC_ERR, WR_FLUSH_ERR, ERR", send[10].Status, send[19].Status, a.qp.State())
	}
	if ev := pathMigEvents(a.ctx, a.qp); ev != 0 || a.qp.PathMigState() != hca.MigMigrated {
		t.Fatalf("%d PATH_MIG events, state %d", ev, a.qp.PathMigState())
	}
}

// TestAPMModifyRules: the migration state a consumer may set (IBA 11.2.4.2, 17.2.8).
func TestAPMModifyRules(t *testing.T) {
	f := newAPMFabric(t)
	a, b := f.sides[0], f.sides[1]
	bringAPM(t, a, b, false)
	bringAPM(t, b, a, false)
	rts := func(attr hca.QPAttr, mask hca.QPAttrMask) error {
		attr.QPState = hca.QPStateRTS
		return a.qp.Modify(&attr, hca.QPAttrState|mask)
	}
	if err := rts(hca.QPAttr{PathMigState: hca.MigArmed}, hca.QPAttrPathMigState); err == nil {
		t.Fatal("ARMED without an alternate path accepted")
	}
	if err := rts(hca.QPAttr{AltAHAttr: hca.AHAttr{DLID: 4, PortNum: 2}, AltPortNum: 3}, hca.QPAttrAltPath); err == nil {
		t.Fatal("alternate path on port 3 of a 2-port HCA accepted")
	}
	alt := hca.QPAttr{AltAHAttr: hca.AHAttr{DLID: 4, PortNum: 2}, AltPortNum: 2, AltTimeout: 10, PathMigState: hca.MigRearm}
	if err := rts(alt, hca.QPAttrAltPath|hca.QPAttrPathMigState); err != nil {
		t.Fatal(err)
	}
	if err := rts(hca.QPAttr{PathMigState: hca.MigMigrated}, hca.QPAttrPathMigState); err == nil {
		t.Fatal("MIGRATED from REARM accepted")
	}
	if err := rts(hca.QPAttr{PathMigState: hca.MigArmed}, hca.QPAttrPathMigState); err != nil {
		t.Fatal(err)
	}
	// Manual migration: MIGRATED from ARMED moves to the alternate path with the event.
	if err := rts(hca.QPAttr{PathMigState: hca.MigMigrated}, hca.QPAttrPathMigState); err != nil {
		t.Fatal(err)
	}
	if at := a.qp.Attr(); at.PortNum != 2 || at.AHAttr.DLID != 4 || at.PathMigState != hca.MigMigrated {
		t.Fatalf("after manual migration: port %d dlid %d mig %d", at.PortNum, at.AHAttr.DLID, at.PathMigState)
	}
	if ev := pathMigEvents(a.ctx, a.qp); ev != 1 {
		t.Fatalf("%d PATH_MIG events after manual migration", ev)
	}
	if err := rts(hca.QPAttr{PathMigState: hca.MigRearm}, hca.QPAttrPathMigState); err == nil {
		t.Fatal("REARM after migration without a new alternate path accepted")
	}
}
