package rc_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// A QP whose address vector has a static rate below the link's (IBA 9.11) sends no
// faster than it: 16 MiB at 2.5 Gb/s (IBV_RATE_2_5_GBPS) takes at least its 53.7 ms,
// less the 4 ms a pacer may run ahead from idle (its lead and its catch-up), where the
// link's rate (12X QDR) moves it in a fraction of that. RDMA READ responses leave at
// the responder's static rate; UC is paced as RC.
func TestStaticRate(t *testing.T) {
	const n = 16 << 20
	const rate2_5 = 2 // enum ibv_rate IBV_RATE_2_5_GBPS
	ideal := time.Duration(int64(n) * 8 * int64(time.Second) / 2_500_000_000)
	for _, c := range []struct {
		name string
		typ  hca.QPType
		op   hca.WROpcode
		rate uint8
	}{
		{"RC write", hca.QPTypeRC, hca.WRRDMAWrite, rate2_5},
		{"RC read", hca.QPTypeRC, hca.WRRDMARead, rate2_5},
		{"UC write", hca.QPTypeUC, hca.WRRDMAWrite, rate2_5},
		{"RC write at the link's rate", hca.QPTypeRC, hca.WRRDMAWrite, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, a, b := connect(t, connOpts{typ: c.typ, bufLen: n, staticRate: c.rate})
			start := time.Now()
			a.post(t, hca.SendWR{WRID: 1, Opcode: c.op, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, n)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
			took := time.Since(start)
			gbps := float64(n*8) / took.Seconds() / 1e9
			t.Logf("%d bytes in %v: %.2f Gb/s", n, took, gbps)
			if c.rate == 0 {
				return
			}
			if took < ideal-2*hca.PaceLead {
				t.Errorf("%v for %d bytes at a static rate of 2.5 Gb/s (%.2f Gb/s), want at least %v", took, n, gbps, ideal-2*hca.PaceLead)
			}
			if took > 20*ideal {
				t.Errorf("%v for %d bytes at a static rate of 2.5 Gb/s, more than 20 times its %v: the pacer stalls", took, n, ideal)
			}
		})
	}
}
