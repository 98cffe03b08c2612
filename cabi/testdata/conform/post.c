// post.c: ibv_post_send(3), ibv_post_recv(3) and ibv_post_srq_recv(3) given work requests
// a provider cannot read: the call fails with EINVAL and *bad_wr at that WR, the WRs before
// it are posted, and the program goes on (no crash inside the library).
#include "conform.h"

void conform_post(struct side *a, struct side *b)
{
	struct ibv_qp *aq, *bq;
	rc_pair(a, b, &aq, &bq);
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = NULL, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
	int r = ibv_post_send(aq, &w, &bad);
	T("post_send_null_sgl_EINVAL", r == EINVAL && bad == &w, "num_sge 1, sg_list NULL: %d, bad %s", r,
	  bad == &w ? "the WR" : "not the WR");
	w.num_sge = -1;
	bad = NULL;
	r = ibv_post_send(aq, &w, &bad);
	T("post_send_negative_num_sge_EINVAL", r == EINVAL && bad == &w, "num_sge -1: %d", r);

	// A good SEND, then the unreadable one: the first is posted and completes.
	struct ibv_sge sg = {.addr = (uintptr_t)a->buf, .length = 8, .lkey = a->mr->lkey};
	struct ibv_send_wr first = {.wr_id = 2, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				    .send_flags = IBV_SEND_SIGNALED, .next = &w};
	w.num_sge = 1;
	MUST(post_recv1(b, bq, 3, 64) == 0, "post_recv: %m");
	bad = NULL;
	r = ibv_post_send(aq, &first, &bad);
	struct ibv_wc wc;
	int done = poll_one(a->cq, &wc) == 0 && wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS;
	T("post_send_list_stops_at_bad", r == EINVAL && bad == &w && done, "%d, bad %s, first completed %d", r,
	  bad == &w ? "the second" : "not the second", done);
	poll_one(b->cq, &wc);

	struct ibv_recv_wr rw = {.wr_id = 4, .sg_list = NULL, .num_sge = 1}, *rbad = NULL;
	r = ibv_post_recv(bq, &rw, &rbad);
	T("post_recv_null_sgl_EINVAL", r == EINVAL && rbad == &rw, "num_sge 1, sg_list NULL: %d", r);
	struct ibv_sge rsg = {.addr = (uintptr_t)b->buf, .length = 64, .lkey = b->mr->lkey};
	struct ibv_recv_wr rfirst = {.wr_id = 5, .sg_list = &rsg, .num_sge = 1, .next = &rw};
	rbad = NULL;
	r = ibv_post_recv(bq, &rfirst, &rbad);
	strcpy(a->buf, "after");
	int got = post_rdma(a, aq, IBV_WR_SEND, 6, 0, 0, 6) == 0 && poll_one(a->cq, &wc) == 0 &&
		  wc.status == IBV_WC_SUCCESS && poll_one(b->cq, &wc) == 0 && wc.wr_id == 5 && wc.status == IBV_WC_SUCCESS;
	T("post_recv_list_stops_at_bad", r == EINVAL && rbad == &rw && got, "%d, bad %s, first received %d", r,
	  rbad == &rw ? "the second" : "not the second", got);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);

	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(b->pd, &sa);
	MUST(srq, "create_srq: %m");
	rbad = NULL;
	r = ibv_post_srq_recv(srq, &rw, &rbad);
	T("post_srq_recv_null_sgl_EINVAL", r == EINVAL && rbad == &rw, "num_sge 1, sg_list NULL: %d", r);
	ibv_destroy_srq(srq);
}
