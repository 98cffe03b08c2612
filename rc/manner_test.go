package rc_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
)

// pair builds a connection whose two ends may use different options (path MTU).
func pair(t *testing.T, oa, ob connOpts) (*hcatest.Fabric, *side, *side) {
	t.Helper()
	oa.defaults()
	ob.defaults()
	f := hcatest.NewFabric(t, 2, hcatest.Options{Register: rc.Register, Clock: oa.clk})
	if c, ok := oa.clk.(*fakeClock); ok {
		c.settle = func() { f.Settle(t) }
	}
	a, b := newSide(t, f.Devs[0], oa), newSide(t, f.Devs[1], ob)
	bring(t, a, b, oa)
	bring(t, b, a, ob)
	return f, a, b
}

func pitfallCount(d *hca.Device, rule string) uint64 { return d.PitfallCounts()[rule] }

// The pitfall checks RC makes on traffic: each fires for a program that falls into it and
// not for one that does the right thing.
func TestRCPitfalls(t *testing.T) {
	t.Run("rnr_retry_forever", func(t *testing.T) {
		for _, post := range []bool{false, true} {
			clk := newFakeClock()
			_, a, r := connect(t, connOpts{bufLen: 4096, rnrRetry: 7, minRNR: 1, clk: clk})
			if post {
				r.postRecv(t, 1, 0, 64)
			}
			a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 64)}})
			for i := 0; i < 40 && pitfallCount(a.qp.Device(), "rnr_retry_forever") == 0; i++ {
				clk.Advance(time.Millisecond)
			}
			if got, want := pitfallCount(a.qp.Device(), "rnr_retry_forever"), map[bool]uint64{false: 1, true: 0}[post]; got != want {
				t.Errorf("receive posted %v: rnr_retry_forever fired %d times, want %d", post, got, want)
			}
		}
	})
	t.Run("psn_mismatch", func(t *testing.T) {
		// The receiver expects PSNs behind what the sender sends (its sequence NAKs name
		// a PSN long acknowledged) or ahead of it (the requests look like duplicates and
		// are ACKed with a PSN the sender never sent): either way the SEND never arrived,
		// and must end in RETRY_EXC_ERR — not in success, and not in a go-back loop.
		for _, skew := range []uint32{0, 0x1000, 0xFFF000} {
			clk := newFakeClock()
			f, a, r := pair(t, connOpts{bufLen: 4096, clk: clk, retry: 3}, connOpts{bufLen: 4096, clk: clk, retry: 3, rqSkew: skew})
			r.postRecv(t, 1, 0, 64)
			a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 64)}})
			wc := waitWC(t, a.scq, clk)
			f.Settle(t)
			want, fired := hca.WCSuccess, uint64(0)
			if skew != 0 {
				want, fired = hca.WCRetryExcErr, 1
			}
			if wc.Status != want {
				t.Errorf("rq_psn off by %#x: the SEND completed with %v, want %v", skew, wc.Status, want)
			}
			if got := pitfallCount(a.qp.Device(), "psn_mismatch"); got != fired {
				t.Errorf("rq_psn off by %#x: psn_mismatch fired %d times, want %d", skew, got, fired)
			}
			if g := rc.ConnStats(a.qp).Ghosts.Load(); (g > 0) != (skew != 0) {
				t.Errorf("rq_psn off by %#x: %d ghost responses counted", skew, g)
			}
		}
	})
	t.Run("path_mtu_mismatch", func(t *testing.T) {
		for _, mtu := range []hca.MTU{hca.MTU1024, hca.MTU4096} {
			clk := newFakeClock()
			f, a, r := pair(t, connOpts{bufLen: 8192, clk: clk, mtu: hca.MTU4096}, connOpts{bufLen: 8192, clk: clk, mtu: mtu})
			r.postRecv(t, 1, 0, 8192)
			a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8192)}})
			waitWC(t, a.scq, clk)
			f.Settle(t)
			want := uint64(0)
			if mtu != hca.MTU4096 {
				want = 1
			}
			if got := pitfallCount(r.qp.Device(), "path_mtu_mismatch"); got != want {
				t.Errorf("path MTUs 4096 and %d: path_mtu_mismatch fired %d times, want %d", mtu.Bytes(), got, want)
			}
		}
	})
	t.Run("rdma_no_remote_access", func(t *testing.T) {
		for _, c := range []struct {
			mr, qp hca.AccessFlags
			want   uint64
		}{
			{hca.AccessLocalWrite, hca.AccessRemoteWrite, 1},                        // the MR lacks REMOTE_WRITE
			{hca.AccessLocalWrite | hca.AccessRemoteWrite, hca.AccessRemoteRead, 1}, // the QP lacks it
			{hca.AccessLocalWrite | hca.AccessRemoteWrite, hca.AccessRemoteWrite, 0},
		} {
			clk := newFakeClock()
			f, a, r := connect(t, connOpts{bufLen: 4096, clk: clk, access: c.mr, qpAccess: c.qp})
			a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 64)},
				RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()})
			waitWC(t, a.scq, clk)
			f.Settle(t)
			if got := pitfallCount(r.qp.Device(), "rdma_no_remote_access"); got != c.want {
				t.Errorf("MR %s, QP %s: rdma_no_remote_access fired %d times, want %d", hca.AccessString(c.mr), hca.AccessString(c.qp), got, c.want)
			}
		}
	})
}
