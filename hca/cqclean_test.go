package hca

import "testing"

// TestResetCleansCQ: a QP moved to RESET takes its completions still queued out of its
// CQs, and only its own: the other QP's stay, in order, across the ring's wrap (libmlx5's
// __mlx5_cq_clean from mlx5_modify_qp). Flushed completions carry wr_id, status and
// qp_num, opcode 0 (rxe's flush_recv_wqe). A QP on an SRQ that enters ERR raises
// IBV_EVENT_QP_LAST_WQE_REACHED (IBA 11.6.3.1), one without an SRQ none.
func TestResetCleansCQ(t *testing.T) {
	d := newTestDevice(t, 1)
	c := d.Open()
	pd, _ := c.AllocPD()
	cq, _ := c.CreateCQ(6, nil)
	mr, _ := pd.RegMR(make([]byte, 64), AccessLocalWrite)
	newQP := func(srq *SRQ) *QP {
		t.Helper()
		qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: QPTypeUD, Cap: QPCap{MaxRecvWR: 8}})
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 1}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey); err != nil {
			t.Fatal(err)
		}
		return qp
	}
	recv := func(qp *QP, id uint64) {
		t.Helper()
		if _, err := qp.PostRecv([]RecvWR{{WRID: id, SGL: []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	toErr := func(qp *QP) {
		t.Helper()
		if err := qp.Modify(&QPAttr{QPState: QPStateErr}, QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	q1, q2 := newQP(nil), newQP(nil)
	// Move the ring's head on: 4 completions in, 4 out.
	recv(q2, 90)
	recv(q2, 91)
	recv(q2, 92)
	recv(q2, 93)
	toErr(q2)
	var wcs [8]WC
	if n := cq.Poll(wcs[:]); n != 4 {
		t.Fatalf("polled %d", n)
	}
	if w := wcs[0]; w.WRID != 90 || w.Status != WCWRFlushErr || w.Opcode != 0 || w.QPNum != q2.Num() {
		t.Fatalf("flushed %+v, want wr_id 90 WR_FLUSH_ERR opcode 0", w)
	}
	select {
	case ev := <-c.Events():
		t.Fatalf("event %v from a QP without an SRQ", ev)
	default:
	}
	// q1: 1, 2; q2: 3 (posted in ERR: flushed at once); q1: 4; q2: 5.
	recv(q1, 1)
	recv(q1, 2)
	toErr(q1)
	recv(q2, 3)
	recv(q1, 4)
	recv(q2, 5)
	if err := q1.Modify(&QPAttr{QPState: QPStateReset}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if p := cq.Pending(); p != 2 {
		t.Fatalf("%d completions left, want q2's 2", p)
	}
	n := cq.Poll(wcs[:])
	if n != 2 || wcs[0].WRID != 3 || wcs[1].WRID != 5 {
		t.Fatalf("left %+v, want q2's 3 then 5", wcs[:n])
	}
	// The CQ still takes completions where the cleaning left it.
	recv(q2, 6)
	if n := cq.Poll(wcs[:]); n != 1 || wcs[0].WRID != 6 {
		t.Fatalf("after the cleaning %+v", wcs[:n])
	}

	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	q3 := newQP(srq)
	toErr(q3)
	if ev := nextEvent(t, c); ev.Type != EventQPLastWQEReached || ev.QP != q3 {
		t.Fatalf("event %+v, want QP_LAST_WQE_REACHED of the SRQ's QP", ev)
	}
}
