// wc: the fields of struct ibv_wc for each opcode, as rxe fills them for a user CQ
// (make_send_cqe, do_complete, flush_send_wqe/flush_recv_wqe) and as ibv_poll_cq(3)
// documents them: wr_id, status, opcode, byte_len, wc_flags, imm_data/invalidated_rkey,
// qp_num at both ends; UD receives' src_qp, slid, sl, GRH flag and pkey_index; flushed
// completions (wr_id, status, qp_num; opcode 0, byte_len 0); a QP moved to RESET takes its
// completions out of its CQ (libmlx5's mlx5_cq_clean).
//
// Where rxe and mlx5 differ, rxe's is checked: a send completion carries byte_len for
// every opcode and WITH_IMM for the opcodes with immediate data (mlx5 sets byte_len only
// for READ and atomics). src_qp, slid and sl of an RC receive are "valid only for UD QPs"
// (ibv_poll_cq(3)) and not checked; the GRH flag is IB's (set only when the packet had a
// GRH), not RoCE rxe's (always set).
#include "conform.h"

#include <arpa/inet.h>
#include <unistd.h>

#define WC_ACC (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_qp *wc_qp(struct side *s, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64},
		.qp_type = t,
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	MUST(qp, "create_qp: %m");
	return qp;
}

static void wc_pair(struct side *a, struct side *b, struct ibv_cq *acq, struct ibv_cq *bcq, struct ibv_qp **aq,
		    struct ibv_qp **bq)
{
	*aq = wc_qp(a, acq, IBV_QPT_RC);
	*bq = wc_qp(b, bcq, IBV_QPT_RC);
	MUST(qp_init(*aq, WC_ACC) == 0 && qp_init(*bq, WC_ACC) == 0, "INIT: %m");
	MUST(qp_rtr(*aq, b->lid, (*bq)->qp_num) == 0 && qp_rtr(*bq, a->lid, (*aq)->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(*aq) == 0 && qp_rts(*bq) == 0, "RTS: %m");
}

static void wc_drain(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	while (ibv_poll_cq(cq, 16, wc) > 0)
		;
}

static int wc_post(struct ibv_qp *qp, struct ibv_send_wr *w)
{
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, w, &bad);
}

// rc_opcodes: each send opcode's completion at the requester and, for those that consume
// a receive, at the responder.
static void rc_opcodes(struct side *a, struct side *b)
{
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_qp *aq, *bq;
	wc_pair(a, b, acq, bcq, &aq, &bq);
	struct ibv_wc s, r;
	struct ibv_sge sg = {.addr = (uintptr_t)a->buf, .length = 100, .lkey = a->mr->lkey};
	uint64_t rva = (uintptr_t)b->buf;

	// SEND
	MUST(post_recv1(b, bq, 11, 512) == 0, "post_recv: %m");
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	MUST(wc_post(aq, &w) == 0, "post: %m");
	int gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
	T("wc_send_status", gs && s.status == IBV_WC_SUCCESS && s.wr_id == 1, "%s wr_id %llu", ibv_wc_status_str(s.status),
	  (unsigned long long)s.wr_id);
	T("wc_send_opcode", gs && s.opcode == IBV_WC_SEND, "opcode %d", s.opcode);
	T("wc_send_byte_len", gs && s.byte_len == 100, "byte_len %u (rxe: the WR's length)", s.byte_len);
	T("wc_send_flags", gs && s.wc_flags == 0, "wc_flags %#x", s.wc_flags);
	T("wc_send_qp_num", gs && s.qp_num == aq->qp_num, "qp_num %#x, want %#x", s.qp_num, aq->qp_num);
	T("wc_recv_status", gr && r.status == IBV_WC_SUCCESS && r.wr_id == 11, "%s wr_id %llu", ibv_wc_status_str(r.status),
	  (unsigned long long)r.wr_id);
	T("wc_recv_opcode", gr && r.opcode == IBV_WC_RECV, "opcode %d", r.opcode);
	T("wc_recv_byte_len", gr && r.byte_len == 100, "byte_len %u", r.byte_len);
	T("wc_recv_flags", gr && r.wc_flags == 0, "wc_flags %#x (no GRH, no immediate)", r.wc_flags);
	T("wc_recv_qp_num", gr && r.qp_num == bq->qp_num, "qp_num %#x, want %#x", r.qp_num, bq->qp_num);

	// SEND of 0 bytes
	MUST(post_recv1(b, bq, 12, 512) == 0, "post_recv: %m");
	w.wr_id = 2;
	w.num_sge = 0;
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
	T("wc_send_zero_byte_len", gs && gr && s.byte_len == 0 && r.byte_len == 0 && r.status == IBV_WC_SUCCESS,
	  "byte_len %u / %u", s.byte_len, r.byte_len);
	w.num_sge = 1;

	// SEND_WITH_IMM
	MUST(post_recv1(b, bq, 13, 512) == 0, "post_recv: %m");
	w.wr_id = 3;
	w.opcode = IBV_WR_SEND_WITH_IMM;
	w.imm_data = htonl(0x12345678);
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
	T("wc_send_imm_opcode", gs && s.opcode == IBV_WC_SEND && s.byte_len == 100, "opcode %d byte_len %u", s.opcode, s.byte_len);
	T("wc_send_imm_sender_flags", gs && s.wc_flags == IBV_WC_WITH_IMM, "wc_flags %#x (rxe: WITH_IMM)", s.wc_flags);
	T("wc_recv_imm_opcode", gr && r.opcode == IBV_WC_RECV && r.byte_len == 100, "opcode %d byte_len %u", r.opcode, r.byte_len);
	T("wc_recv_imm_flags", gr && r.wc_flags == IBV_WC_WITH_IMM, "wc_flags %#x", r.wc_flags);
	T("wc_recv_imm_data", gr && r.imm_data == htonl(0x12345678), "imm_data %#x (network order)", r.imm_data);

	// RDMA_WRITE: nothing at the responder.
	w.wr_id = 4;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.wr.rdma.remote_addr = rva;
	w.wr.rdma.rkey = b->mr->rkey;
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0;
	T("wc_write_opcode", gs && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_RDMA_WRITE, "opcode %d", s.opcode);
	T("wc_write_byte_len", gs && s.byte_len == 100 && s.wc_flags == 0, "byte_len %u wc_flags %#x", s.byte_len, s.wc_flags);
	T("wc_write_no_recv_wc", poll_none(bcq, 50), "RDMA WRITE completed at the responder");

	// RDMA_WRITE_WITH_IMM: the receive's byte_len is the WRITE's length (rxe: resp.length).
	MUST(post_recv1(b, bq, 15, 16) == 0, "post_recv: %m");
	w.wr_id = 5;
	w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w.imm_data = htonl(0xabcdef01);
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
	T("wc_write_imm_sender", gs && s.opcode == IBV_WC_RDMA_WRITE && s.wc_flags == IBV_WC_WITH_IMM && s.byte_len == 100,
	  "opcode %d wc_flags %#x byte_len %u", s.opcode, s.wc_flags, s.byte_len);
	T("wc_write_imm_recv_opcode", gr && r.status == IBV_WC_SUCCESS && r.opcode == IBV_WC_RECV_RDMA_WITH_IMM && r.wr_id == 15,
	  "%s opcode %d", ibv_wc_status_str(r.status), r.opcode);
	T("wc_write_imm_recv_byte_len", gr && r.byte_len == 100, "byte_len %u, want the WRITE's 100", r.byte_len);
	T("wc_write_imm_recv_flags", gr && r.wc_flags == IBV_WC_WITH_IMM && r.imm_data == htonl(0xabcdef01),
	  "wc_flags %#x imm %#x", r.wc_flags, r.imm_data);

	// RDMA_READ
	w.wr_id = 6;
	w.opcode = IBV_WR_RDMA_READ;
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0;
	T("wc_read", gs && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_RDMA_READ && s.byte_len == 100 && s.wc_flags == 0,
	  "%s opcode %d byte_len %u", ibv_wc_status_str(s.status), s.opcode, s.byte_len);

	// Atomics: byte_len 8.
	*(uint64_t *)(b->buf + 256) = 5;
	struct ibv_sge as = {.addr = (uintptr_t)a->buf + 512, .length = 8, .lkey = a->mr->lkey};
	struct ibv_send_wr aw = {.wr_id = 7, .sg_list = &as, .num_sge = 1, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.atomic = {.remote_addr = rva + 256, .compare_add = 5, .swap = 9, .rkey = b->mr->rkey}};
	MUST(wc_post(aq, &aw) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0;
	T("wc_cmp_swp", gs && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_COMP_SWAP && s.byte_len == 8,
	  "%s opcode %d byte_len %u", ibv_wc_status_str(s.status), s.opcode, s.byte_len);
	aw.wr_id = 8;
	aw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	aw.wr.atomic.compare_add = 1;
	MUST(wc_post(aq, &aw) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0;
	T("wc_fetch_add", gs && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_FETCH_ADD && s.byte_len == 8 &&
				  *(uint64_t *)(a->buf + 512) == 9,
	  "%s opcode %d byte_len %u old %llu", ibv_wc_status_str(s.status), s.opcode, s.byte_len,
	  (unsigned long long)*(uint64_t *)(a->buf + 512));

	// Unsignaled: no completion.
	w.wr_id = 9;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.send_flags = 0;
	MUST(wc_post(aq, &w) == 0, "post: %m");
	T("wc_unsignaled_none", poll_none(acq, 50), "an unsignaled WR completed");
	w.send_flags = IBV_SEND_SIGNALED;

	// BIND_MW and LOCAL_INV (a type 2 window at b, bound through bq).
	// A window is bound to a region registered with MW_BIND.
	struct ibv_mr *bmr = ibv_reg_mr(b->pd, b->buf, SIDE_BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	MUST(bmr, "reg_mr MW_BIND: %m");
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	if (mw) {
		uint32_t k = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr bw = {.wr_id = 21, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
					 .bind_mw = {.mw = mw, .rkey = k, .bind_info = {.mr = bmr, .addr = rva + 1024, .length = 256,
										.mw_access_flags = IBV_ACCESS_REMOTE_WRITE}}};
		MUST(wc_post(bq, &bw) == 0, "post bind: %m");
		gr = poll_one(bcq, &r) == 0;
		T("wc_bind_mw", gr && r.status == IBV_WC_SUCCESS && r.opcode == IBV_WC_BIND_MW && r.wr_id == 21 && r.byte_len == 0 &&
					r.qp_num == bq->qp_num,
		  "%s opcode %d byte_len %u", ibv_wc_status_str(r.status), r.opcode, r.byte_len);
		struct ibv_send_wr iw = {.wr_id = 22, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = k};
		MUST(wc_post(bq, &iw) == 0, "post local_inv: %m");
		gr = poll_one(bcq, &r) == 0;
		T("wc_local_inv", gr && r.status == IBV_WC_SUCCESS && r.opcode == IBV_WC_LOCAL_INV && r.wr_id == 22 && r.byte_len == 0,
		  "%s opcode %d byte_len %u", ibv_wc_status_str(r.status), r.opcode, r.byte_len);

		// SEND_WITH_INV: the receive carries WITH_INV and the R_Key.
		bw.wr_id = 23;
		bw.bind_mw.rkey = k = ibv_inc_rkey(k);
		MUST(wc_post(bq, &bw) == 0, "post bind: %m");
		poll_one(bcq, &r);
		MUST(post_recv1(b, bq, 24, 512) == 0, "post_recv: %m");
		w.wr_id = 25;
		w.opcode = IBV_WR_SEND_WITH_INV;
		w.invalidate_rkey = k;
		MUST(wc_post(aq, &w) == 0, "post: %m");
		gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
		T("wc_send_inv_sender", gs && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_SEND && s.wc_flags == 0,
		  "%s opcode %d wc_flags %#x", ibv_wc_status_str(s.status), s.opcode, s.wc_flags);
		T("wc_recv_inv", gr && r.status == IBV_WC_SUCCESS && r.opcode == IBV_WC_RECV && r.wc_flags == IBV_WC_WITH_INV &&
					 r.invalidated_rkey == k,
		  "%s opcode %d wc_flags %#x rkey %#x want %#x", ibv_wc_status_str(r.status), r.opcode, r.wc_flags,
		  r.invalidated_rkey, k);
		ibv_destroy_qp(aq);
		ibv_destroy_qp(bq);
		ibv_dealloc_mw(mw);
	} else {
		T("wc_bind_mw", 0, "alloc_mw: %m");
		ibv_destroy_qp(aq);
		ibv_destroy_qp(bq);
	}
	MUST(ibv_dereg_mr(bmr) == 0, "dereg_mr: %m");

	// An error completion: status, wr_id, qp_num.
	wc_pair(a, b, acq, bcq, &aq, &bq);
	w.wr_id = 31;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.wr.rdma.rkey = b->mr->rkey ^ 0x80;
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0;
	T("wc_error_fields", gs && s.status == IBV_WC_REM_ACCESS_ERR && s.wr_id == 31 && s.qp_num == aq->qp_num,
	  "%s wr_id %llu qp_num %#x", ibv_wc_status_str(s.status), (unsigned long long)s.wr_id, s.qp_num);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	wc_drain(acq);
	wc_drain(bcq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

// flushes: a QP in ERR completes its WQEs with WR_FLUSH_ERR, in order, carrying wr_id,
// status and qp_num; opcode and byte_len are 0 (rxe's flush_*_wqe).
static void flushes(struct side *a, struct side *b)
{
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_qp *aq, *bq;
	wc_pair(a, b, acq, bcq, &aq, &bq);
	MUST(post_recv1(a, aq, 41, 64) == 0 && post_recv1(a, aq, 42, 64) == 0, "post_recv: %m");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	MUST(ibv_modify_qp(aq, &at, IBV_QP_STATE) == 0, "to ERR: %m");
	struct ibv_wc wc[4];
	int n = 0;
	for (int k = 0; k < 2 && poll_one(acq, &wc[n]) == 0; k++)
		n++;
	T("wc_flush_recv_count", n == 2, "%d flushed receives, want 2", n);
	T("wc_flush_recv_status", n == 2 && wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[1].status == IBV_WC_WR_FLUSH_ERR,
	  "%s", ibv_wc_status_str(wc[0].status));
	T("wc_flush_recv_order", n == 2 && wc[0].wr_id == 41 && wc[1].wr_id == 42, "wr_ids %llu %llu",
	  (unsigned long long)wc[0].wr_id, (unsigned long long)wc[1].wr_id);
	T("wc_flush_recv_qp_num", n == 2 && wc[0].qp_num == aq->qp_num, "qp_num %#x", wc[0].qp_num);
	T("wc_flush_recv_opcode_0", n == 2 && wc[0].opcode == 0 && wc[0].byte_len == 0 && wc[0].wc_flags == 0,
	  "opcode %d byte_len %u wc_flags %#x (rxe: 0)", wc[0].opcode, wc[0].byte_len, wc[0].wc_flags);
	// A send posted in ERR is flushed.
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 43, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post in ERR: %m");
	int g = poll_one(acq, &wc[0]) == 0;
	T("wc_flush_send", g && wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[0].wr_id == 43 && wc[0].qp_num == aq->qp_num,
	  "%s wr_id %llu", g ? ibv_wc_status_str(wc[0].status) : "none", (unsigned long long)wc[0].wr_id);
	T("wc_flush_send_opcode_0", g && wc[0].opcode == 0 && wc[0].byte_len == 0, "opcode %d byte_len %u (rxe: 0)",
	  wc[0].opcode, wc[0].byte_len);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	wc_drain(acq);
	wc_drain(bcq);

	// RESET takes the QP's completions out of the CQ; another QP's stay, in order; the QP
	// re-armed by RESET→INIT→RTR→RTS polls no stale flush error (libmlx5 mlx5_cq_clean).
	struct ibv_qp *aq2, *bq2;
	wc_pair(a, b, acq, bcq, &aq, &bq);
	wc_pair(a, b, acq, bcq, &aq2, &bq2);
	MUST(post_recv1(a, aq, 51, 64) == 0 && post_recv1(a, aq, 52, 64) == 0, "post_recv: %m");
	MUST(post_rdma(a, aq2, IBV_WR_RDMA_WRITE, 61, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post: %m");
	usleep(20000); // the WRITE's completion is queued
	MUST(ibv_modify_qp(aq, &at, IBV_QP_STATE) == 0, "to ERR: %m");
	MUST(post_rdma(a, aq2, IBV_WR_RDMA_WRITE, 62, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post: %m");
	usleep(20000);
	struct ibv_qp_attr rs = {.qp_state = IBV_QPS_RESET};
	T("wc_reset_modify", ibv_modify_qp(aq, &rs, IBV_QP_STATE) == 0, "to RESET: %m");
	n = 0;
	for (int k = 0; k < 200 && n < 4; k++) {
		int got = ibv_poll_cq(acq, 4 - n, wc + n);
		if (got > 0)
			n += got;
		else
			usleep(1000);
	}
	int stale = 0;
	for (int k = 0; k < n; k++)
		stale += wc[k].qp_num == aq->qp_num;
	T("wc_reset_removes_completions", stale == 0, "%d completions of the QP moved to RESET still polled", stale);
	T("wc_reset_keeps_others_in_order", n == 2 && wc[0].wr_id == 61 && wc[1].wr_id == 62 && wc[0].qp_num == aq2->qp_num,
	  "%d left, wr_ids %llu %llu", n, n > 0 ? (unsigned long long)wc[0].wr_id : 0ULL,
	  n > 1 ? (unsigned long long)wc[1].wr_id : 0ULL);
	// Re-arm the QP: RESET→INIT→RTR→RTS to a fresh peer; its first completion is fresh.
	struct ibv_qp *bq3 = wc_qp(b, bcq, IBV_QPT_RC);
	MUST(qp_init(aq, WC_ACC) == 0 && qp_init(bq3, WC_ACC) == 0, "INIT: %m");
	MUST(qp_rtr(aq, b->lid, bq3->qp_num) == 0 && qp_rtr(bq3, a->lid, aq->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(aq) == 0 && qp_rts(bq3) == 0, "RTS: %m");
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 71, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post: %m");
	g = poll_one(acq, &wc[0]) == 0;
	T("wc_reset_rearmed_no_stale", g && wc[0].wr_id == 71 && wc[0].status == IBV_WC_SUCCESS, "first completion %s wr_id %llu",
	  g ? ibv_wc_status_str(wc[0].status) : "none", (unsigned long long)wc[0].wr_id);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	ibv_destroy_qp(aq2);
	ibv_destroy_qp(bq2);
	ibv_destroy_qp(bq3);
	wc_drain(acq);
	wc_drain(bcq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

static struct ibv_qp *ud_qp(struct side *s, struct ibv_cq *cq)
{
	struct ibv_qp *qp = wc_qp(s, cq, IBV_QPT_UD);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x1234};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0, "UD INIT: %m");
	a.qp_state = IBV_QPS_RTR;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "UD RTR: %m");
	a.qp_state = IBV_QPS_RTS;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS: %m");
	return qp;
}

// ud_recv: a UD receive's byte_len counts the 40 bytes of the GRH area; src_qp, slid, sl,
// the GRH flag (and the GRH itself when the packet had one), pkey_index.
static void ud_recv(struct side *a, struct side *b)
{
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_qp *aq = ud_qp(a, acq), *bq = ud_qp(b, bcq);
	struct ibv_ah_attr ah = {.dlid = b->lid, .sl = 3, .port_num = 1};
	struct ibv_ah *h = ibv_create_ah(a->pd, &ah);
	MUST(h, "create_ah: %m");
	MUST(post_recv1(b, bq, 81, 40 + 64) == 0, "post_recv: %m");
	struct ibv_sge sg = {.addr = (uintptr_t)a->buf, .length = 32, .lkey = a->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 82, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(7),
				.send_flags = IBV_SEND_SIGNALED, .wr.ud = {.ah = h, .remote_qpn = bq->qp_num, .remote_qkey = 0x1234}};
	MUST(wc_post(aq, &w) == 0, "post: %m");
	struct ibv_wc s, r;
	int gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
	T("wc_ud_send", gs && s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_SEND && s.byte_len == 32 && s.qp_num == aq->qp_num,
	  "%s opcode %d byte_len %u", ibv_wc_status_str(s.status), s.opcode, s.byte_len);
	T("wc_ud_recv", gr && r.status == IBV_WC_SUCCESS && r.opcode == IBV_WC_RECV && r.wr_id == 81 && r.qp_num == bq->qp_num,
	  "%s opcode %d", ibv_wc_status_str(r.status), r.opcode);
	T("wc_ud_recv_byte_len", gr && r.byte_len == 40 + 32, "byte_len %u, want 40 + 32", r.byte_len);
	T("wc_ud_src_qp", gr && r.src_qp == aq->qp_num, "src_qp %#x, want %#x", r.src_qp, aq->qp_num);
	T("wc_ud_slid", gr && r.slid == a->lid, "slid %#x, want %#x", r.slid, a->lid);
	T("wc_ud_sl", gr && r.sl == 3, "sl %u", r.sl);
	T("wc_ud_no_grh", gr && r.wc_flags == IBV_WC_WITH_IMM && r.imm_data == htonl(7), "wc_flags %#x imm %#x", r.wc_flags,
	  r.imm_data);
	T("wc_ud_pkey_index", gr && r.pkey_index == 0, "pkey_index %u", r.pkey_index);
	T("wc_ud_dlid_path_bits", gr && r.dlid_path_bits == 0, "dlid_path_bits %u", r.dlid_path_bits);

	// With a GRH.
	union ibv_gid ag, bg;
	MUST(ibv_query_gid(a->ctx, 1, 0, &ag) == 0 && ibv_query_gid(b->ctx, 1, 0, &bg) == 0, "query_gid: %m");
	struct ibv_ah_attr gah = {.dlid = b->lid, .sl = 0, .port_num = 1, .is_global = 1,
				  .grh = {.dgid = bg, .sgid_index = 0, .hop_limit = 1}};
	struct ibv_ah *gh = ibv_create_ah(a->pd, &gah);
	MUST(gh, "create_ah global: %m");
	memset(b->buf + SIDE_BUF / 2, 0, 40);
	MUST(post_recv1(b, bq, 83, 40 + 64) == 0, "post_recv: %m");
	w.wr_id = 84;
	w.opcode = IBV_WR_SEND;
	w.wr.ud.ah = gh;
	MUST(wc_post(aq, &w) == 0, "post: %m");
	gs = poll_one(acq, &s) == 0, gr = poll_one(bcq, &r) == 0;
	T("wc_ud_grh_flag", gr && r.status == IBV_WC_SUCCESS && r.wc_flags == IBV_WC_GRH && r.byte_len == 40 + 32,
	  "%s wc_flags %#x byte_len %u", ibv_wc_status_str(r.status), r.wc_flags, r.byte_len);
	T("wc_ud_grh_sgid", gr && !memcmp(b->buf + SIDE_BUF / 2 + 8, ag.raw, 16), "the GRH's SGID is not the sender's GID");
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	ibv_destroy_ah(h);
	ibv_destroy_ah(gh);
	wc_drain(acq);
	wc_drain(bcq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

void conform_wc(struct side *a, struct side *b)
{
	rc_opcodes(a, b);
	flushes(a, b);
	ud_recv(a, b);
}
