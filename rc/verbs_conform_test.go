package rc_test

import (
	"errors"
	"testing"

	"github.com/pibgw/pibgw/hca"
)

// TestSendCompletionByteLen checks the requester's completions as rxe makes them
// (make_send_cqe): byte_len is the WR's length for every opcode, the atomics' 8 bytes
// included, and SEND/WRITE with immediate data carry IBV_WC_WITH_IMM.
func TestSendCompletionByteLen(t *testing.T) {
	_, a, b := connect(t, connOpts{})
	b.postRecv(t, 1, 0, 256)
	va, rkey := b.mr.Addr()+1024, b.mr.RKey()
	for _, c := range []struct {
		op    hca.WROpcode
		n     int
		flags hca.WCFlags
	}{
		{hca.WRSend, 30, 0},
		{hca.WRRDMAWrite, 100, 0},
		{hca.WRRDMAWriteWithImm, 0, hca.WCWithImm},
		{hca.WRRDMARead, 50, 0},
		{hca.WRAtomicCmpAndSwp, 8, 0},
		{hca.WRAtomicFetchAndAdd, 8, 0},
	} {
		if c.op == hca.WRRDMAWriteWithImm {
			b.postRecv(t, 2, 0, 0)
		}
		wc := rdma(t, a, c.op, 0, c.n, va, rkey)
		if wc.Status != hca.WCSuccess || wc.ByteLen != uint32(c.n) || wc.WCFlags != c.flags {
			t.Errorf("%s of %d bytes: %s byte_len %d flags %#x, want byte_len %d flags %#x", c.op, c.n, wc.Status, wc.ByteLen, wc.WCFlags, c.n, c.flags)
		}
	}
}

// TestQPAccessFlagsMRBits: modify_qp takes the MR flags rxe takes in qp_access_flags
// (RXE_ACCESS_SUPPORTED_QP; mlx5 ignores them): IBV_ACCESS_ON_DEMAND, MW_BIND and an
// optional one are kept, returned by a query, and the remote ones still rule READ, WRITE
// and atomics; a bit rxe does not take (HUGETLB) is EINVAL.
func TestQPAccessFlagsMRBits(t *testing.T) {
	acc := hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic | hca.AccessMWBind |
		hca.AccessOnDemand | 1<<20
	_, a, b := connect(t, connOpts{qpAccess: acc})
	if q, _ := b.qp.Query(); q.QPAccessFlags != acc {
		t.Fatalf("qp_access_flags %#x, want %#x", uint32(q.QPAccessFlags), uint32(acc))
	}
	bad := hca.QPAttr{QPState: hca.QPStateRTS, QPAccessFlags: acc | hca.AccessHugeTLB}
	if err := b.qp.Modify(&bad, hca.QPAttrState|hca.QPAttrAccessFlags); !errors.Is(err, hca.EINVAL) {
		t.Fatalf("qp_access_flags with HUGETLB: %v, want EINVAL", err)
	}
	va, rkey := b.mr.Addr(), b.mr.RKey()
	for _, op := range []hca.WROpcode{hca.WRRDMAWrite, hca.WRRDMARead, hca.WRAtomicCmpAndSwp, hca.WRAtomicFetchAndAdd} {
		if wc := rdma(t, a, op, 0, 8, va, rkey); wc.Status != hca.WCSuccess {
			t.Errorf("%s: %s", op, wc.Status)
		}
	}
}

// TestQueryQPCurrent: ibv_query_qp answers cur_qp_state (the QP's state) and the PSNs the
// queues are at, as rxe_qp_to_attr does: after a 3-packet WRITE, sq_psn at the sender and
// rq_psn at the receiver have moved on by 3.
func TestQueryQPCurrent(t *testing.T) {
	f, a, b := connect(t, connOpts{mtu: hca.MTU256})
	qa, _ := a.qp.Query()
	qb, _ := b.qp.Query()
	if qa.CurQPState != hca.QPStateRTS || qb.CurQPState != hca.QPStateRTS {
		t.Fatalf("cur_qp_state %s %s, want RTS", qa.CurQPState, qb.CurQPState)
	}
	if qa.SQPSN != qb.RQPSN {
		t.Fatalf("sq_psn %#x, peer's rq_psn %#x", qa.SQPSN, qb.RQPSN)
	}
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, 700, b.mr.Addr(), b.mr.RKey()); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	f.Sync()
	na, _ := a.qp.Query()
	nb, _ := b.qp.Query()
	if na.SQPSN != (qa.SQPSN+3)&0xFFFFFF || nb.RQPSN != (qb.RQPSN+3)&0xFFFFFF {
		t.Fatalf("after 3 packets: sq_psn %#x (was %#x), peer's rq_psn %#x (was %#x)", na.SQPSN, qa.SQPSN, nb.RQPSN, qb.RQPSN)
	}
}

// TestRdAtomicPow2: max_rd_atomic and max_dest_rd_atomic are kept rounded up to a power
// of two, as rxe_qp_from_attr keeps them (and mlx5 as logarithms): 3 reads back as 4.
func TestRdAtomicPow2(t *testing.T) {
	_, a, b := connect(t, connOpts{rdAtomic: 3})
	q, _ := a.qp.Query()
	if q.MaxRdAtomic != 4 {
		t.Fatalf("max_rd_atomic %d, want 4", q.MaxRdAtomic)
	}
	if err := b.qp.Modify(&hca.QPAttr{QPState: hca.QPStateSQD}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	d := hca.QPAttr{QPState: hca.QPStateSQD, MaxDestRdAtomic: 5}
	if err := b.qp.Modify(&d, hca.QPAttrState|hca.QPAttrMaxDestRdAtomic); err != nil {
		t.Fatal(err)
	}
	if q, _ := b.qp.Query(); q.MaxDestRdAtomic != 8 {
		t.Fatalf("max_dest_rd_atomic %d, want 8", q.MaxDestRdAtomic)
	}
}

// TestRetryCountsAsRXE: retry_cnt and rnr_retry above 7 and min_rnr_timer above 31 are
// taken (rxe_qp_chk_attr checks none of them) and read back as given.
func TestRetryCountsAsRXE(t *testing.T) {
	_, a, _ := connect(t, connOpts{})
	if err := a.qp.Modify(&hca.QPAttr{QPState: hca.QPStateSQD}, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	at := hca.QPAttr{QPState: hca.QPStateSQD, RetryCnt: 8, RNRRetry: 9, MinRNRTimer: 33}
	if err := a.qp.Modify(&at, hca.QPAttrState|hca.QPAttrRetryCnt|hca.QPAttrRNRRetry|hca.QPAttrMinRNRTimer); err != nil {
		t.Fatalf("retry_cnt 8, rnr_retry 9, min_rnr_timer 33: %v", err)
	}
	if q, _ := a.qp.Query(); q.RetryCnt != 8 || q.RNRRetry != 9 || q.MinRNRTimer != 33 {
		t.Fatalf("read back %d %d %d", q.RetryCnt, q.RNRRetry, q.MinRNRTimer)
	}
}
