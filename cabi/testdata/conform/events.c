// events: the affiliated asynchronous events an RC/UC QP, an SRQ and a CQ raise (IBA
// 11.6.3; ibv_get_async_event(3)) and completion events (ibv_req_notify_cq(3),
// ibv_get_cq_event(3)), as rxe and the kernel's uverbs deliver them: each event's type and
// element, on the context that owns the object, once.
//
// Not here: QP_FATAL and CQ/SRQ errors by injection (pibgw's inject; unreachable from C),
// port events (the device area), PATH_MIG (needs a peer that migrates).
#include "conform.h"

#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <time.h>
#include <unistd.h>

#define EV_MAX 32

// evlog is what collect saw: the events of a context, in order.
struct evlog {
	int n;
	enum ibv_event_type type[EV_MAX];
	union {
		struct ibv_qp *qp;
		struct ibv_cq *cq;
		struct ibv_srq *srq;
		int port_num;
	} el[EV_MAX];
};

// collect takes every async event ctx gets within ms milliseconds (acknowledging each).
static void collect(struct ibv_context *ctx, int ms, struct evlog *l)
{
	memset(l, 0, sizeof(*l));
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		int left = ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			break;
		struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
		if (poll(&p, 1, left) <= 0)
			continue;
		struct ibv_async_event e;
		if (ibv_get_async_event(ctx, &e))
			continue;
		if (l->n < EV_MAX) {
			l->type[l->n] = e.event_type;
			l->el[l->n].qp = e.element.qp;
			l->n++;
		}
		ibv_ack_async_event(&e);
	}
	fcntl(ctx->async_fd, F_SETFL, fl);
}

// count is how many events of type t the log holds; first the index of the first (-1).
static int count(struct evlog *l, enum ibv_event_type t)
{
	int c = 0;
	for (int i = 0; i < l->n; i++)
		c += l->type[i] == t;
	return c;
}

static int first(struct evlog *l, enum ibv_event_type t)
{
	for (int i = 0; i < l->n; i++)
		if (l->type[i] == t)
			return i;
	return -1;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

// ev_qp creates an RC (or UC) QP on s with cq for both queues.
static struct ibv_qp *ev_qp(struct side *s, struct ibv_cq *cq, struct ibv_srq *srq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = {.max_send_wr = 16, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = t,
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	MUST(qp, "create_qp: %m");
	return qp;
}

static int ev_rtr(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = dqpn,
				.max_dest_rd_atomic = 4, .min_rnr_timer = 1, .ah_attr = {.dlid = dlid, .port_num = 1}};
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	return ibv_modify_qp(qp, &a, mask);
}

static int ev_rts(struct ibv_qp *qp)
{
	if (qp->qp_type == IBV_QPT_UC) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	return qp_rts(qp);
}

#define ACC (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

// ev_pair connects a QP on a (to RTS) with one on b, which it leaves in RTR unless brts.
static void ev_pair(struct side *a, struct side *b, struct ibv_cq *acq, struct ibv_cq *bcq, struct ibv_srq *bsrq,
		    enum ibv_qp_type t, enum ibv_mtu amtu, enum ibv_mtu bmtu, int brts, struct ibv_qp **aq, struct ibv_qp **bq)
{
	*aq = ev_qp(a, acq, NULL, t);
	*bq = ev_qp(b, bcq, bsrq, t);
	MUST(qp_init(*aq, ACC) == 0 && qp_init(*bq, ACC) == 0, "INIT: %m");
	MUST(ev_rtr(*aq, b->lid, (*bq)->qp_num, amtu) == 0 && ev_rtr(*bq, a->lid, (*aq)->qp_num, bmtu) == 0, "RTR: %m");
	MUST(ev_rts(*aq) == 0, "RTS: %m");
	if (brts)
		MUST(ev_rts(*bq) == 0, "RTS: %m");
}

static void drain_cq(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	while (ibv_poll_cq(cq, 16, wc) > 0)
		;
}

static int post_send_flags(struct side *a, struct ibv_qp *qp, uint64_t id, int len, int flags)
{
	struct ibv_sge s = {.addr = (uintptr_t)a->buf, .length = len, .lkey = a->mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = len ? 1 : 0, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED | flags}, *bad;
	return ibv_post_send(qp, &w, &bad);
}

// cq_event waits up to ms for the channel's next event: 1 and its CQ, or 0.
static int cq_event(struct ibv_comp_channel *ch, int ms, struct ibv_cq **cq, void **ctx)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	if (poll(&p, 1, ms) <= 0)
		return 0;
	return ibv_get_cq_event(ch, cq, ctx) == 0;
}

static void comm_est(struct side *a, struct side *b)
{
	struct evlog la, lb;
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	collect(a->ctx, 10, &la);
	collect(b->ctx, 10, &lb);

	struct ibv_qp *aq, *bq;
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 0, &aq, &bq);
	collect(b->ctx, 50, &lb);
	T("ev_comm_est_none_before_packet", lb.n == 0, "%d events on b before any packet", lb.n);
	struct ibv_wc wc;
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 1, (uintptr_t)b->buf, b->mr->rkey, 16) == 0, "post: %m");
	T("ev_comm_est_write_in_rtr_completes", poll_one(acq, &wc) == 0 && wc.status == IBV_WC_SUCCESS,
	  "WRITE to a QP in RTR: %s", ibv_wc_status_str(wc.status));
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 2, (uintptr_t)b->buf, b->mr->rkey, 16) == 0, "post: %m");
	poll_one(acq, &wc);
	collect(b->ctx, 200, &lb);
	T("ev_comm_est_rc", count(&lb, IBV_EVENT_COMM_EST) == 1, "%d COMM_EST on the RTR side (%d events)",
	  count(&lb, IBV_EVENT_COMM_EST), lb.n);
	int i = first(&lb, IBV_EVENT_COMM_EST);
	T("ev_comm_est_element_qp", i >= 0 && lb.el[i].qp == bq, "element %p, want the QP %p", i >= 0 ? (void *)lb.el[i].qp : NULL,
	  (void *)bq);
	T("ev_comm_est_element_qp_num", i >= 0 && lb.el[i].qp == bq && lb.el[i].qp->qp_num == bq->qp_num, "qp_num");
	collect(a->ctx, 50, &la);
	T("ev_comm_est_not_in_rts", count(&la, IBV_EVENT_COMM_EST) == 0, "the RTS side got %d COMM_EST",
	  count(&la, IBV_EVENT_COMM_EST));
	MUST(ev_rts(bq) == 0, "RTS: %m");
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 3, (uintptr_t)b->buf, b->mr->rkey, 16) == 0, "post: %m");
	poll_one(acq, &wc);
	collect(b->ctx, 50, &lb);
	T("ev_comm_est_once", lb.n == 0, "%d more events after RTS", lb.n);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);

	// UC too.
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_UC, IBV_MTU_1024, IBV_MTU_1024, 0, &aq, &bq);
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 4, (uintptr_t)b->buf, b->mr->rkey, 16) == 0, "post: %m");
	poll_one(acq, &wc);
	collect(b->ctx, 200, &lb);
	i = first(&lb, IBV_EVENT_COMM_EST);
	T("ev_comm_est_uc", count(&lb, IBV_EVENT_COMM_EST) == 1 && lb.el[i].qp == bq, "%d COMM_EST on the UC QP in RTR",
	  count(&lb, IBV_EVENT_COMM_EST));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	drain_cq(acq);
	drain_cq(bcq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

// responder_errors: an R_Key violation is QP_ACCESS_ERR, an invalid request QP_REQ_ERR, at
// the responder, whose QP goes to ERR (IBA 9.9.3.1.3; rxe's RESPST_ERR_RKEY_VIOLATION_EVENT).
static void responder_errors(struct side *a, struct side *b)
{
	struct evlog la, lb;
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_qp *aq, *bq;
	struct ibv_wc wc;
	static const struct {
		const char *name;
		enum ibv_wr_opcode op;
	} ops[] = {
		{"ev_access_err_write", IBV_WR_RDMA_WRITE},
		{"ev_access_err_read", IBV_WR_RDMA_READ},
		{"ev_access_err_atomic", IBV_WR_ATOMIC_FETCH_AND_ADD},
	};
	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		ev_pair(a, b, acq, bcq, NULL, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
		collect(b->ctx, 10, &lb);
		int len = ops[k].op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : 16;
		MUST(post_rdma(a, aq, ops[k].op, 10 + k, (uintptr_t)b->buf, b->mr->rkey ^ 0x80, len) == 0, "post: %m");
		int got = poll_one(acq, &wc) == 0;
		collect(b->ctx, 200, &lb);
		int i = first(&lb, IBV_EVENT_QP_ACCESS_ERR);
		T(ops[k].name, got && wc.status == IBV_WC_REM_ACCESS_ERR && i >= 0 && lb.el[i].qp == bq,
		  "requester %s; responder %d QP_ACCESS_ERR (%d events)", got ? ibv_wc_status_str(wc.status) : "nothing",
		  count(&lb, IBV_EVENT_QP_ACCESS_ERR), lb.n);
		if (k == 0) {
			T("ev_access_err_once", count(&lb, IBV_EVENT_QP_ACCESS_ERR) == 1, "%d", count(&lb, IBV_EVENT_QP_ACCESS_ERR));
			T("ev_access_err_qp_err", qp_state(bq) == IBV_QPS_ERR, "responder state %d", qp_state(bq));
			T("ev_access_err_no_last_wqe_without_srq", count(&lb, IBV_EVENT_QP_LAST_WQE_REACHED) == 0,
			  "QP_LAST_WQE_REACHED from a QP without an SRQ");
			collect(a->ctx, 50, &la);
			T("ev_access_err_not_at_requester", la.n == 0, "the requester's context got %d events (first %s)", la.n,
			  la.n ? ibv_event_type_str(la.type[0]) : "");
		}
		ibv_destroy_qp(aq);
		ibv_destroy_qp(bq);
		drain_cq(acq);
		drain_cq(bcq);
	}

	// A WRITE with immediate takes its receive WQE: the error completes it, no event.
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	MUST(post_recv1(b, bq, 77, 64) == 0, "post_recv: %m");
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE_WITH_IMM, 20, (uintptr_t)b->buf, b->mr->rkey ^ 0x80, 16) == 0, "post: %m");
	poll_one(acq, &wc);
	T("ev_write_imm_access_err_requester", wc.wr_id == 20 && wc.status == IBV_WC_REM_ACCESS_ERR, "%s",
	  ibv_wc_status_str(wc.status));
	int got = poll_one(bcq, &wc) == 0;
	T("ev_write_imm_access_err_recv_wc", got && wc.wr_id == 77 && wc.status == IBV_WC_REM_ACCESS_ERR,
	  "responder's receive: %s wr_id %llu", got ? ibv_wc_status_str(wc.status) : "none", (unsigned long long)wc.wr_id);
	collect(b->ctx, 100, &lb);
	T("ev_write_imm_access_err_no_event", count(&lb, IBV_EVENT_QP_ACCESS_ERR) == 0, "%d QP_ACCESS_ERR",
	  count(&lb, IBV_EVENT_QP_ACCESS_ERR));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	drain_cq(acq);
	drain_cq(bcq);

	// Packets that do not match the responder's path MTU: an invalid request.
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_RC, IBV_MTU_2048, IBV_MTU_1024, 1, &aq, &bq);
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 21, (uintptr_t)b->buf, b->mr->rkey, 4096) == 0, "post: %m");
	got = poll_one(acq, &wc) == 0;
	T("ev_req_err_requester", got && wc.status == IBV_WC_REM_INV_REQ_ERR, "%s", got ? ibv_wc_status_str(wc.status) : "none");
	collect(b->ctx, 200, &lb);
	int i = first(&lb, IBV_EVENT_QP_REQ_ERR);
	T("ev_req_err", i >= 0 && lb.el[i].qp == bq && count(&lb, IBV_EVENT_QP_REQ_ERR) == 1, "%d QP_REQ_ERR (%d events)",
	  count(&lb, IBV_EVENT_QP_REQ_ERR), lb.n);
	T("ev_req_err_qp_err", qp_state(bq) == IBV_QPS_ERR, "state %d", qp_state(bq));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	drain_cq(acq);
	drain_cq(bcq);

	// A UC WRITE with a bad R_Key is dropped: no event, the QP stays in RTS (rxe).
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_UC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 22, (uintptr_t)b->buf, b->mr->rkey ^ 0x80, 16) == 0, "post: %m");
	poll_one(acq, &wc);
	collect(b->ctx, 100, &lb);
	T("ev_uc_bad_rkey_no_event", lb.n == 0 && qp_state(bq) == IBV_QPS_RTS, "%d events, state %d", lb.n, qp_state(bq));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	drain_cq(acq);
	drain_cq(bcq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

static void srq_events(struct side *a, struct side *b)
{
	struct evlog lb;
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(b->pd, &sa);
	MUST(srq, "create_srq: %m");
	struct ibv_qp *aq, *bq;
	struct ibv_wc wc;
	collect(b->ctx, 10, &lb);

	// By modify.
	ev_pair(a, b, acq, bcq, srq, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	MUST(ibv_modify_qp(bq, &at, IBV_QP_STATE) == 0, "to ERR: %m");
	collect(b->ctx, 200, &lb);
	int i = first(&lb, IBV_EVENT_QP_LAST_WQE_REACHED);
	T("ev_last_wqe_modify", count(&lb, IBV_EVENT_QP_LAST_WQE_REACHED) == 1, "%d QP_LAST_WQE_REACHED (%d events)",
	  count(&lb, IBV_EVENT_QP_LAST_WQE_REACHED), lb.n);
	T("ev_last_wqe_element", i >= 0 && lb.el[i].qp == bq, "element");
	MUST(ibv_modify_qp(bq, &at, IBV_QP_STATE) == 0, "ERR to ERR: %m");
	collect(b->ctx, 50, &lb);
	T("ev_last_wqe_not_again_err_to_err", count(&lb, IBV_EVENT_QP_LAST_WQE_REACHED) == 0, "%d more",
	  count(&lb, IBV_EVENT_QP_LAST_WQE_REACHED));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);

	// By an error: the error's event first.
	ev_pair(a, b, acq, bcq, srq, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 30, (uintptr_t)b->buf, b->mr->rkey ^ 0x80, 16) == 0, "post: %m");
	poll_one(acq, &wc);
	collect(b->ctx, 200, &lb);
	int e = first(&lb, IBV_EVENT_QP_ACCESS_ERR);
	i = first(&lb, IBV_EVENT_QP_LAST_WQE_REACHED);
	T("ev_last_wqe_after_error", e >= 0 && i > e && lb.el[i].qp == bq, "QP_ACCESS_ERR at %d, QP_LAST_WQE_REACHED at %d", e, i);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	drain_cq(acq);
	drain_cq(bcq);

	// SRQ_LIMIT_REACHED: armed by ibv_modify_srq, raised once when fewer than the limit
	// are left, which disarms it (srq_limit reads 0; rxe's get_srq_wqe).
	for (int k = 0; k < 4; k++) {
		struct ibv_sge sg = {.addr = (uintptr_t)b->buf + SIDE_BUF / 2, .length = 64, .lkey = b->mr->lkey};
		struct ibv_recv_wr w = {.wr_id = 40 + k, .sg_list = &sg, .num_sge = 1}, *bad;
		MUST(ibv_post_srq_recv(srq, &w, &bad) == 0, "post_srq_recv: %m");
	}
	struct ibv_srq_attr lim = {.srq_limit = 3};
	T("ev_srq_limit_arm", ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "modify_srq: %m");
	struct ibv_srq_attr big = {.srq_limit = 1000};
	errno = 0;
	T("ev_srq_limit_above_max_wr_EINVAL", ibv_modify_srq(srq, &big, IBV_SRQ_LIMIT) == EINVAL, "modify_srq limit 1000: %m");
	ev_pair(a, b, acq, bcq, srq, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	collect(b->ctx, 10, &lb);
	MUST(post_send_flags(a, aq, 50, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	poll_one(bcq, &wc);
	collect(b->ctx, 100, &lb);
	T("ev_srq_limit_not_yet", count(&lb, IBV_EVENT_SRQ_LIMIT_REACHED) == 0, "raised with 3 WQEs left (limit 3)");
	MUST(post_send_flags(a, aq, 51, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	poll_one(bcq, &wc);
	collect(b->ctx, 200, &lb);
	i = first(&lb, IBV_EVENT_SRQ_LIMIT_REACHED);
	T("ev_srq_limit_reached", count(&lb, IBV_EVENT_SRQ_LIMIT_REACHED) == 1, "%d SRQ_LIMIT_REACHED",
	  count(&lb, IBV_EVENT_SRQ_LIMIT_REACHED));
	T("ev_srq_limit_element", i >= 0 && lb.el[i].srq == srq, "element %p want %p", i >= 0 ? (void *)lb.el[i].srq : NULL, (void *)srq);
	struct ibv_srq_attr q;
	T("ev_srq_limit_disarmed", ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0, "srq_limit %u after the event", q.srq_limit);
	MUST(post_send_flags(a, aq, 52, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	poll_one(bcq, &wc);
	collect(b->ctx, 100, &lb);
	T("ev_srq_limit_once", count(&lb, IBV_EVENT_SRQ_LIMIT_REACHED) == 0, "raised again while disarmed");
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	collect(b->ctx, 50, &lb);
	MUST(ibv_destroy_srq(srq) == 0, "destroy_srq: %m");
	drain_cq(acq);
	drain_cq(bcq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

static void sq_drained(struct side *a, struct side *b)
{
	struct evlog la;
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0), *bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_qp *aq, *bq;
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	collect(a->ctx, 10, &la);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1};
	T("ev_sqd_modify", ibv_modify_qp(aq, &at, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0, "RTS→SQD: %m");
	collect(a->ctx, 200, &la);
	int i = first(&la, IBV_EVENT_SQ_DRAINED);
	T("ev_sq_drained", count(&la, IBV_EVENT_SQ_DRAINED) == 1 && la.el[i].qp == aq, "%d SQ_DRAINED (%d events)",
	  count(&la, IBV_EVENT_SQ_DRAINED), la.n);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	ibv_destroy_cq(acq);
	ibv_destroy_cq(bcq);
}

// cq_events: ibv_req_notify_cq arms a CQ for its next completion (or the next solicited
// one, or error); one event per arming; ibv_get_cq_event names the CQ and its context;
// ibv_destroy_cq returns once every event is acknowledged. An overrun raises CQ_ERR.
static void cq_events(struct side *a, struct side *b)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(b->ctx);
	MUST(ch, "create_comp_channel: %m");
	int tag = 0;
	struct ibv_cq *bcq = ibv_create_cq(b->ctx, 64, &tag, ch, 0);
	struct ibv_cq *acq = ibv_create_cq(a->ctx, 64, NULL, NULL, 0);
	MUST(acq && bcq, "create_cq: %m");
	struct ibv_qp *aq, *bq;
	ev_pair(a, b, acq, bcq, NULL, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	struct ibv_cq *got;
	void *gctx;
	struct ibv_wc wc;
	int events = 0;
	for (int k = 0; k < 8; k++)
		MUST(post_recv1(b, bq, 100 + k, 64) == 0, "post_recv: %m");

	MUST(post_send_flags(a, aq, 1, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	T("ev_cq_unarmed_no_event", !cq_event(ch, 100, &got, &gctx), "event from a CQ never armed");
	drain_cq(bcq);

	T("ev_cq_notify_all", ibv_req_notify_cq(bcq, 0) == 0, "req_notify_cq: %m");
	T("ev_cq_notify_twice", ibv_req_notify_cq(bcq, 0) == 0, "req_notify_cq again: %m");
	MUST(post_send_flags(a, aq, 2, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	int e = cq_event(ch, 2000, &got, &gctx);
	events += e;
	T("ev_cq_event", e && got == bcq, "no event for an armed CQ's completion");
	T("ev_cq_event_context", e && gctx == &tag, "cq_context %p, want %p", gctx, (void *)&tag);
	T("ev_cq_event_once_per_arm", !cq_event(ch, 100, &got, &gctx), "a second event for one arming");
	drain_cq(bcq);
	MUST(post_send_flags(a, aq, 3, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	events += cq_event(ch, 100, &got, &gctx);
	T("ev_cq_not_rearmed_no_event", events == 1, "an event without re-arming");
	drain_cq(bcq);

	// Solicited only: an unsolicited SEND raises none, a solicited one does.
	T("ev_cq_notify_solicited", ibv_req_notify_cq(bcq, 1) == 0, "req_notify_cq(solicited): %m");
	MUST(post_send_flags(a, aq, 4, 8, 0) == 0, "post: %m");
	poll_one(acq, &wc);
	e = cq_event(ch, 100, &got, &gctx);
	events += e;
	T("ev_cq_solicited_skips_unsolicited", !e, "an unsolicited SEND woke a solicited-only CQ");
	MUST(post_send_flags(a, aq, 5, 8, IBV_SEND_SOLICITED) == 0, "post: %m");
	poll_one(acq, &wc);
	e = cq_event(ch, 2000, &got, &gctx);
	events += e;
	T("ev_cq_solicited_event", e && got == bcq, "no event for a solicited SEND");
	int n = 0;
	while (ibv_poll_cq(bcq, 1, &wc) == 1)
		n++;
	T("ev_cq_solicited_both_queued", n == 2, "%d completions, want the unsolicited and the solicited", n);

	// Solicited only: a flushed receive (an error) raises it too (IBA 11.4.2.2; rxe posts
	// a flushed receive as solicited).
	T("ev_cq_notify_solicited_again", ibv_req_notify_cq(bcq, 1) == 0, "req_notify_cq: %m");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	MUST(ibv_modify_qp(bq, &at, IBV_QP_STATE) == 0, "to ERR: %m");
	e = cq_event(ch, 2000, &got, &gctx);
	events += e;
	T("ev_cq_solicited_error_event", e && got == bcq, "no event for a flushed receive on a solicited-only CQ");
	drain_cq(bcq);

	ibv_ack_cq_events(bcq, events);
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	T("ev_cq_destroy_after_ack", ibv_destroy_cq(bcq) == 0, "destroy_cq after acknowledging %d events: %m", events);
	T("ev_comp_channel_destroy", ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel: %m");

	// An overrun: CQ_ERR on the CQ's context, element the CQ.
	struct evlog la;
	struct ibv_cq *small = ibv_create_cq(a->ctx, 1, NULL, NULL, 0);
	MUST(small, "create_cq 1: %m");
	bcq = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
	ev_pair(a, b, small, bcq, NULL, IBV_QPT_RC, IBV_MTU_1024, IBV_MTU_1024, 1, &aq, &bq);
	collect(a->ctx, 10, &la);
	int cap = small->cqe;
	for (int k = 0; k <= cap + 1; k++)
		MUST(post_rdma(a, aq, IBV_WR_RDMA_WRITE, 200 + k, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post: %m");
	collect(a->ctx, 300, &la);
	int i = first(&la, IBV_EVENT_CQ_ERR);
	T("ev_cq_err_overrun", i >= 0 && la.el[i].cq == small, "%d CQ_ERR (%d events) after %d completions into %d entries",
	  count(&la, IBV_EVENT_CQ_ERR), la.n, cap + 2, cap);
	T("ev_cq_err_once", count(&la, IBV_EVENT_CQ_ERR) == 1, "%d", count(&la, IBV_EVENT_CQ_ERR));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
	ibv_destroy_cq(small);
	ibv_destroy_cq(bcq);
}

// cm_notify: rdma_notify(COMM_EST) is how a consumer tells the CM its QP received data
// before the RTU (the kernel's rdma_notify → ib_cm_notify); an ID with no connection
// gets EINVAL, as does an event other than COMM_EST and LID_CHANGE.
static void cm_notify(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	MUST(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %m");
	errno = 0;
	int r = rdma_notify(id, IBV_EVENT_COMM_EST);
	T("ev_rdma_notify_unconnected_EINVAL", r == -1 && errno == EINVAL, "rdma_notify: %d errno %d", r, errno);
	errno = 0;
	r = rdma_notify(id, IBV_EVENT_PATH_MIG);
	T("ev_rdma_notify_other_event_EINVAL", r == -1 && errno == EINVAL, "rdma_notify(PATH_MIG): %d errno %d", r, errno);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

void conform_events(struct side *a, struct side *b)
{
	cm_notify();
	comm_est(a, b);
	responder_errors(a, b);
	srq_events(a, b);
	sq_drained(a, b);
	cq_events(a, b);
}
