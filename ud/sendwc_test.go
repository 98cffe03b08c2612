package ud_test

import (
	"testing"

	"github.com/pibgw/pibgw/hca"
)

// TestUDSendImmCompletion: the sender's completion of a SEND_WITH_IMM carries
// IBV_WC_WITH_IMM and the message's length, as rxe's make_send_cqe (and mlx5's
// handle_good_req) give them; a plain SEND no flag.
func TestUDSendImmCompletion(t *testing.T) {
	_, a, b := pair(t)
	ah := a.ah(t, 2, false, [16]byte{})
	for _, c := range []struct {
		op    hca.WROpcode
		flags hca.WCFlags
	}{{hca.WRSend, 0}, {hca.WRSendWithImm, hca.WCWithImm}} {
		b.postRecv(t, 1, 0, 8192)
		wr := sendWR(a, ah, b, 24)
		wr.Opcode, wr.ImmData = c.op, 5
		if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := poll1(t, a.scq); wc.Status != hca.WCSuccess || wc.ByteLen != 24 || wc.WCFlags != c.flags {
			t.Errorf("%s: %s byte_len %d flags %#x, want flags %#x", c.op, wc.Status, wc.ByteLen, wc.WCFlags, c.flags)
		}
		poll1(t, b.rcq)
	}
}

// TestUDQueryPSN: ibv_query_qp's sq_psn of a UD QP moves with each datagram, as rxe's
// req.psn does.
func TestUDQueryPSN(t *testing.T) {
	_, a, b := pair(t)
	ah := a.ah(t, 2, false, [16]byte{})
	q0, _ := a.qp.Query()
	for i := 0; i < 3; i++ {
		b.postRecv(t, 1, 0, 8192)
		if _, err := a.qp.PostSend([]hca.SendWR{sendWR(a, ah, b, 8)}); err != nil {
			t.Fatal(err)
		}
		poll1(t, a.scq)
	}
	if q, _ := a.qp.Query(); q.SQPSN != (q0.SQPSN+3)&0xFFFFFF {
		t.Fatalf("sq_psn %#x after 3 datagrams from %#x", q.SQPSN, q0.SQPSN)
	}
}
