package rc_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rc"
)

// TestRCLargeWritesUnderLoss streams 64 KiB WRITEs (16 packets each, 32 in flight: more
// than the PSN window) over 1 % loss in both directions.
func TestRCLargeWritesUnderLoss(t *testing.T) {
	clk := newFakeClock()
	var faults []*fabric.FaultLink
	wrap := func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		f := fabric.NewFaultLink(l, fabric.FaultConfig{Seed: uint64(7 + 2*i + int(d)), Loss: 0.01, Clock: clk})
		faults = append(faults, f)
		return f
	}
	const size = 64 << 10
	f, a, r := connect(t, connOpts{bufLen: size, timeout: 6, retry: 7, wrap: wrap, depth: 64, clk: clk})
	n := 2000
	posted, done := 0, 0
	var wcs [16]hca.WC
	stalls := 0
	for done < n {
		for posted < n && posted-done < 32 {
			if _, err := a.qp.PostSend([]hca.SendWR{{WRID: uint64(posted), Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled,
				SGL: []hca.SGE{a.sge(0, size)}, RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()}}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		k := a.scq.Poll(wcs[:])
		for _, wc := range wcs[:k] {
			if wc.Status != hca.WCSuccess {
				t.Fatalf("WR %d: %s\n%s", wc.WRID, wc.Status, rc.DebugState(a.qp))
			}
			done++
		}
		if k == 0 && !f.Settled() {
			// Attached devices still have packets on their way: no timer may fire yet.
			runtime.Gosched()
			continue
		}
		if k == 0 {
			if os.Getenv("RC_STALLS") != "" && stalls < 8 {
				t.Logf("stall %d:\na: %s\nb: %s", stalls, rc.DebugState(a.qp), rc.DebugState(r.qp))
			}
			clk.Advance(300 * time.Microsecond)
			if stalls++; stalls > 100000 {
				t.Fatalf("stuck at %d\n%s", done, rc.DebugState(a.qp))
			}
		}
	}
	t.Logf("%d writes, %d timer advances", n, stalls)
}

// TestRCCorruptionIsCaughtByICRC corrupts 2 % of packets: receivers must drop them on the
// ICRC (counted) and RC must recover, delivering every byte intact.
func TestRCCorruptionIsCaughtByICRC(t *testing.T) {
	clk := newFakeClock()
	wrap := func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		return fabric.NewFaultLink(l, fabric.FaultConfig{Seed: uint64(11 + 2*i + int(d)), Corrupt: 0.02, Clock: clk})
	}
	const size = 8192
	f, a, r := connect(t, connOpts{bufLen: 2 * size, timeout: 6, retry: 7, wrap: wrap, clk: clk, mtu: hca.MTU1024})
	for i := 0; i < 500; i++ {
		fill(a.buf[:size], uint64(i))
		r.postRecv(t, uint64(i), size, size)
		if _, err := a.qp.PostSend([]hca.SendWR{{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, size)}}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.scq, clk); wc.Status != hca.WCSuccess {
			t.Fatal(wc.Status)
		}
		if wc := waitWC(t, r.rcq, clk); wc.Status != hca.WCSuccess || wc.ByteLen != size {
			t.Fatal(wc)
		}
		if string(a.buf[:size]) != string(r.buf[size:]) {
			t.Fatalf("message %d corrupted in delivery", i)
		}
	}
	// The ports at the ends of the cables check the ICRC: attached, the daemon's.
	drops := f.OnSwitch(0).Port(1).Counters().Get(hca.CntDropICRC) + f.OnSwitch(1).Port(1).Counters().Get(hca.CntDropICRC)
	if drops == 0 {
		t.Fatal("no packet was dropped for its ICRC: corruption went unnoticed or never happened")
	}
	t.Logf("%d packets dropped on ICRC", drops)
}
