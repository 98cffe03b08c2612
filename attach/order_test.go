package attach_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// A program that sends its last UD messages and destroys the QP at once (ibv_ud_pingpong
// does, as it exits) still has them delivered: the QPN's release reaches the daemon over
// the socket, the messages through the ring, and the release must not overtake them — the
// policing would drop them as sent from a QPN the process no longer owns.
func TestDestroyAfterSendKeepsOrder(t *testing.T) {
	_, path := startFabric(t)
	sender, receiver := dial(t, path), dial(t, path)
	dst := newUDQP(t, receiver.Device("pib_1"))
	dlid := receiver.Device("pib_1").Port(1).LID()
	for round := range 20 {
		src := newUDQP(t, sender.Device("pib_0"))
		ah, err := src.qp.PD().CreateAH(hca.AHAttr{DLID: dlid, PortNum: 1})
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		for i := range n {
			sge := hca.SGE{Addr: src.mr.Addr(), Length: 64, LKey: src.mr.LKey()}
			if _, err := src.qp.PostSend([]hca.SendWR{{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
				SGL: []hca.SGE{sge}, AH: ah, RemoteQPN: dst.qp.Num(), RemoteQKey: testQKey}}); err != nil {
				t.Fatal(err)
			}
		}
		var wc [n]hca.WC
		for got, deadline := 0, time.Now().Add(5*time.Second); got < n; {
			k := src.cq.Poll(wc[:])
			for _, c := range wc[:k] {
				if c.Status != hca.WCSuccess {
					t.Fatalf("round %d: send %d: %s", round, c.WRID, c.Status)
				}
			}
			if got += k; time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d send completions", round, got, n)
			}
		}
		if err := src.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		var recv []hca.WC
		for deadline := time.Now().Add(5 * time.Second); len(recv) < n && time.Now().Before(deadline); {
			k := dst.cq.Poll(wc[:])
			recv = append(recv, wc[:k]...)
			if k == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		if len(recv) != n {
			t.Fatalf("round %d: the receiver got %d of the %d messages sent before the QP was destroyed", round, len(recv), n)
		}
		for i, c := range recv {
			if c.Status != hca.WCSuccess {
				t.Fatalf("round %d: receive: %s", round, c.Status)
			}
			if _, err := dst.qp.PostRecv([]hca.RecvWR{{WRID: c.WRID, SGL: []hca.SGE{{Addr: dst.mr.Addr() + c.WRID*256, Length: 256, LKey: dst.mr.LKey()}}}}); err != nil {
				t.Fatal(i, err)
			}
		}
	}
}
