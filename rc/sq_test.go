package rc_test

import (
	"testing"

	"github.com/pibgw/pibgw/hca"
)

// A send queue of one WR (ibv_rc_pingpong's max_send_wr = 1) sends: a full queue once
// looked empty to the send loop, and the WR never left.
func TestRCSendQueueOfOne(t *testing.T) {
	_, a, b := connect(t, connOpts{depth: 1})
	for i := range 3 {
		b.postRecv(t, uint64(i), 0, 64)
		wr := hca.SendWR{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}}
		a.post(t, wr)
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
			t.Fatalf("send %d: %+v", i, wc)
		}
		if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCSuccess || wc.ByteLen != 8 {
			t.Fatalf("recv %d: %+v", i, wc)
		}
	}
}
