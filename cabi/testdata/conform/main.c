// main.c: runs each area of the conformance test that is linked in (see conform.h) on two
// devices, pib_0 and pib_1, of one daemon, and the helpers the areas share.
#include "conform.h"

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

int conform_checks, conform_failed;

#pragma weak conform_context
#pragma weak conform_device
#pragma weak conform_mr
#pragma weak conform_qp
#pragma weak conform_wc
#pragma weak conform_post
#pragma weak conform_events
#pragma weak conform_mcast
#pragma weak conform_cm
#pragma weak conform_fork

struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	MUST(l && n >= 2, "ibv_get_device_list: %d devices", n);
	struct ibv_context *c = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			c = ibv_open_device(l[i]);
	ibv_free_device_list(l);
	MUST(c, "ibv_open_device(%s): %m", name);
	return c;
}

void side_open(struct side *s, const char *dev)
{
	struct ibv_port_attr pa;
	memset(s, 0, sizeof(*s));
	s->ctx = open_dev(dev);
	MUST(ibv_query_port(s->ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "%s port 1 not active", dev);
	s->lid = pa.lid;
	s->pd = ibv_alloc_pd(s->ctx);
	MUST(s->pd, "alloc_pd: %m");
	s->buf = aligned_alloc(4096, SIDE_BUF);
	memset(s->buf, 0, SIDE_BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, SIDE_BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	MUST(s->mr, "reg_mr: %m");
	s->cq = ibv_create_cq(s->ctx, 256, NULL, NULL, 0);
	MUST(s->cq, "create_cq: %m");
}

void side_close(struct side *s)
{
	MUST(ibv_destroy_cq(s->cq) == 0, "destroy_cq: %m");
	MUST(ibv_dereg_mr(s->mr) == 0, "dereg_mr: %m");
	MUST(ibv_dealloc_pd(s->pd) == 0, "dealloc_pd: %m");
	MUST(ibv_close_device(s->ctx) == 0, "close_device: %m");
	free(s->buf);
}

struct ibv_qp *rc_qp(struct side *s, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = s->cq, .recv_cq = s->cq, .srq = srq,
		.cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	MUST(qp, "create_qp: %m");
	return qp;
}

int qp_init(struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = access};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int qp_rtr(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dqpn,
				.max_dest_rd_atomic = 4, .min_rnr_timer = 1,
				.ah_attr = {.dlid = dlid, .port_num = 1}};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int qp_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 4};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC);
}

void rc_pair(struct side *a, struct side *b, struct ibv_qp **aq, struct ibv_qp **bq)
{
	int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	*aq = rc_qp(a, NULL);
	*bq = rc_qp(b, NULL);
	MUST(qp_init(*aq, acc) == 0 && qp_init(*bq, acc) == 0, "INIT: %m");
	MUST(qp_rtr(*aq, b->lid, (*bq)->qp_num) == 0 && qp_rtr(*bq, a->lid, (*aq)->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(*aq) == 0 && qp_rts(*bq) == 0, "RTS: %m");
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	double end = now() + 5;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 0;
		if (n < 0 || now() > end)
			return -1;
	}
}

int poll_none(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	double end = now() + ms / 1000.0;
	while (now() < end) {
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			return 0;
		usleep(1000);
	}
	return 1;
}

int wait_async(struct ibv_context *ctx, enum ibv_event_type t, struct ibv_async_event *ev)
{
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	double end = now() + 5;
	int got = -1;
	while (now() < end) {
		struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		struct ibv_async_event e;
		if (ibv_get_async_event(ctx, &e))
			continue;
		ibv_ack_async_event(&e);
		if (e.event_type == t) {
			if (ev)
				*ev = e;
			got = 0;
			break;
		}
	}
	fcntl(ctx->async_fd, F_SETFL, fl);
	return got;
}

int post_rdma(struct side *a, struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, uint64_t va, uint32_t rkey, int len)
{
	struct ibv_sge s = {.addr = (uintptr_t)a->buf, .length = len, .lkey = a->mr->lkey};
	struct ibv_send_wr w = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = va, .rkey = rkey}}, *bad;
	return ibv_post_send(qp, &w, &bad);
}

int post_recv1(struct side *s, struct ibv_qp *qp, uint64_t wr_id, int len)
{
	struct ibv_sge sg = {.addr = (uintptr_t)s->buf + SIDE_BUF / 2, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &w, &bad);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct side a, b;
	side_open(&a, "pib_0");
	side_open(&b, "pib_1");
	void (*areas[])(struct side *, struct side *) = {conform_context, conform_device, conform_mr, conform_qp, conform_wc, conform_post,
							   conform_events, conform_mcast, conform_cm, conform_fork};
	for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++)
		if (areas[i])
			areas[i](&a, &b);
	side_close(&a);
	side_close(&b);
	printf("conform: %d checks, %d failed\n", conform_checks, conform_failed);
	return conform_failed ? 1 : 0;
}
