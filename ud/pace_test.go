package ud_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/ud"
)

// pacedSender is a UD QP with a deep send queue, its CQ as big, and an AH to dlid at a
// static rate (enum ibv_rate).
func pacedSender(t *testing.T, d *hca.Device, dlid uint16, rate uint8) (*endpoint, *hca.AH) {
	t.Helper()
	e := &endpoint{ctx: d.Open(), port: d.Port(1)}
	var err error
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = e.ctx.CreateCQ(4096, nil); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(hca.QPInitAttr{SendCQ: e.scq, RecvCQ: e.scq, QPType: hca.QPTypeUD,
		Cap: hca.QPCap{MaxSendWR: 2048, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	toRTS(t, e.qp, testQKey)
	e.buf = make([]byte, 4096)
	if e.mr, err = e.pd.RegMR(e.buf, hca.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	ah, err := e.pd.CreateAH(hca.AHAttr{DLID: dlid, PortNum: 1, StaticRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	return e, ah
}

func (e *endpoint) sendTo(ah *hca.AH, qpn uint32, wrid uint64) error {
	_, err := e.qp.PostSend([]hca.SendWR{{WRID: wrid, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, AH: ah,
		RemoteQPN: qpn, RemoteQKey: testQKey, SGL: []hca.SGE{{Addr: e.mr.Addr(), Length: 4096, LKey: e.mr.LKey()}}}})
	return err
}

// Sends through an AH whose static rate is below the port's (IBA 9.11) leave no faster
// than it: 2,048 sends of 4 KiB (8 MiB) at 2.5 Gb/s take at least their 26.8 ms, less
// the 4 ms a pacer may run ahead from idle, and complete in order; at the port's rate
// they take a fraction of that.
func TestStaticRateUD(t *testing.T) {
	for _, rate := range []uint8{2, 0} { // IBV_RATE_2_5_GBPS, the port's
		f := hcatest.NewFabric(t, 2, hcatest.Options{Register: ud.Register})
		s, ah := pacedSender(t, f.Devs[0], f.Devs[1].Port(1).LID(), rate)
		const n = 2048
		start := time.Now()
		for i := range n {
			if err := s.sendTo(ah, 0x4321, uint64(i)); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		wcs := pollN(t, f, s.scq, n)
		took := time.Since(start)
		for i, wc := range wcs {
			if wc.Status != hca.WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != 4096 {
				t.Fatalf("completion %d: %+v", i, wc)
			}
		}
		bytes := n * (4096 + 28 + 4) // LRH, BTH, DETH, ICRC
		ideal := time.Duration(int64(bytes) * 8 * int64(time.Second) / 2_500_000_000)
		t.Logf("static rate %d: %d sends in %v, %.2f Gb/s", rate, n, took, float64(bytes*8)/took.Seconds()/1e9)
		if rate == 0 {
			continue
		}
		if took < ideal-4*time.Millisecond {
			t.Errorf("%v for %d bytes at 2.5 Gb/s, want at least %v", took, bytes, ideal-4*time.Millisecond)
		}
		if took > 20*ideal {
			t.Errorf("%v for %d bytes at 2.5 Gb/s, more than 20 times its %v: the pacer stalls", took, bytes, ideal)
		}
	}
}

// A paced send queue flushes as any: the QP moved to ERR with sends waiting for their
// rate completes them with IBV_WC_WR_FLUSH_ERR, after those that left, in order; a send
// posted behind waiting ones at the port's rate waits its turn. (A fake clock: what
// leaves at once is the pacer's 4 ms from idle, about 300 sends; the rest wait.)
func TestStaticRateUDFlush(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	f := hcatest.NewFabric(t, 2, hcatest.Options{Register: ud.Register, Clock: clk})
	s, ah := pacedSender(t, f.Devs[0], f.Devs[1].Port(1).LID(), 2)
	fast, err := s.pd.CreateAH(hca.AHAttr{DLID: f.Devs[1].Port(1).LID(), PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500
	for i := range n {
		a := ah
		if i == n-1 {
			a = fast
		}
		if err := s.sendTo(a, 0x4321, uint64(i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := s.qp.Modify(&hca.QPAttr{QPState: hca.QPStateErr}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wcs := pollN(t, f, s.scq, n)
	flushed := 0
	for i, wc := range wcs {
		if wc.WRID != uint64(i) {
			t.Fatalf("completion %d is WR %d: out of order", i, wc.WRID)
		}
		switch {
		case wc.Status == hca.WCWRFlushErr:
			flushed++
		case flushed > 0 || wc.Status != hca.WCSuccess:
			t.Fatalf("completion %d: %v after %d flushed", i, wc.Status, flushed)
		}
	}
	if sent := n - flushed; sent < 250 || sent > 350 || wcs[n-1].Status != hca.WCWRFlushErr {
		t.Errorf("%d of %d sends left, the last %v: want about 300 (4 ms at 2.5 Gb/s), the rest flushed, the last behind them", sent, n, wcs[n-1].Status)
	}
	t.Logf("%d sent, %d flushed", n-flushed, flushed)
}
