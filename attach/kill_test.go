package attach_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// writeStream keeps depth 64 KiB RDMA WRITEs in flight toward the peer until stop says
// so or a completion fails; it returns the failed completion (or a zero WC) and how many
// writes completed.
func writeStream(t *testing.T, e *end, info map[string]string, depth int, stop func(done int) bool) (hca.WC, int) {
	t.Helper()
	const n = 64 << 10
	addr, rkey := num(info, "addr"), uint32(num(info, "rkey"))
	post := func(id uint64) {
		wr := hca.SendWR{WRID: id, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: e.sge(0, n),
			RemoteAddr: addr + (id%8)*n, RKey: rkey}
		if _, err := e.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	next := uint64(0)
	for range depth {
		post(next)
		next++
	}
	done := 0
	var wcs [16]hca.WC
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && done < int(next) {
		k := e.cq.Poll(wcs[:])
		for _, wc := range wcs[:k] {
			if wc.Status != hca.WCSuccess {
				return wc, done
			}
			done++
			if !stop(done) {
				post(next)
				next++
			}
		}
		if k == 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	if done == int(next) {
		return hca.WC{}, done
	}
	t.Fatalf("stream: no end after %d writes", done)
	return hca.WC{}, done
}

// kill -9 of an attached process in the middle of an RDMA WRITE stream (on the direct
// ring between the two processes): the peer's QP
// completes with RETRY_EXC_ERR (nobody ACKs any more, as when a host dies), the daemon
// frees the dead process's QP number and keeps serving: a new process attaches and the
// peer streams to it.
func TestKilledProcess(t *testing.T) {
	f, path := startFabric(t)
	peer := dial(t, path)
	e, err := newEnd(peer.Device("pib_1"), hca.QPTypeRC, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p, info := startPeer(t, path, "pib_0", "rc", "target", e)
	deadQPN := uint32(num(info, "qpn"))
	if f.Device("pib_0").LookupQP(deadQPN) == nil {
		t.Fatalf("the daemon holds no QP %#x for the helper", deadQPN)
	}
	killed := false
	wc, done := writeStream(t, e, info, 16, func(done int) bool {
		if done >= 200 && !killed {
			killed = true
			// The stream runs on the direct ring between the two processes (direct.go).
			for _, si := range f.Attached() {
				if si.PID == p.cmd.Process.Pid && si.Counters["direct_rx_packets"] == 0 {
					t.Errorf("before the kill, the target's row counts no direct packets: %v", si.Counters)
				}
			}
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
		return false
	})
	if wc.Status != hca.WCRetryExcErr {
		t.Fatalf("after %d writes the stream ended with %+v, want IBV_WC_RETRY_EXC_ERR", done, wc)
	}
	t.Logf("%d writes, then %s", done, wc.Status)
	// The daemon notices the closed socket and frees the process's QP number.
	deadline := time.Now().Add(5 * time.Second)
	for len(f.Attached()) != 1 || f.Device("pib_0").LookupQP(deadQPN) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("after the kill: %d sessions, QP %#x held: %v", len(f.Attached()), deadQPN, f.Device("pib_0").LookupQP(deadQPN) != nil)
		}
		time.Sleep(time.Millisecond)
	}
	// The daemon carries on: a new process attaches, the peer (a new QP) streams to it.
	e2, err := newEnd(peer.Device("pib_1"), hca.QPTypeRC, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, info2 := startPeer(t, path, "pib_0", "rc", "target", e2)
	wc, done = writeStream(t, e2, info2, 16, func(done int) bool { return done >= 100 })
	if wc.Status != hca.WCSuccess || done < 100 {
		t.Fatalf("new process: %d writes, %+v", done, wc)
	}
}
