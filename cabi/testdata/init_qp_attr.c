// init_qp_attr: an rdma_cm connection whose QPs the program makes itself (ibv_create_qp,
// not rdma_create_qp) and takes through INIT, RTR and RTS with rdma_init_qp_attr — the
// passive side at CONNECT_REQUEST before rdma_accept, the active side at CONNECT_RESPONSE
// before rdma_establish — then a SEND each way. The client sets its ACK timeout with
// rdma_set_option first.
//
//   init_qp_attr -s ADDR PORT     server
//   init_qp_attr ADDR PORT        client
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		die("rdma_get_cm_event");
	if (e->event != want) {
		fprintf(stderr, "event %s (status %d), want %s\n", rdma_event_str(e->event), e->status, rdma_event_str(want));
		exit(1);
	}
	return e;
}

struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
};

static void make_qp(struct rdma_cm_id *id, struct side *s)
{
	s->pd = ibv_alloc_pd(id->verbs);
	s->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	s->mr = s->pd ? ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) : NULL;
	if (!s->pd || !s->cq || !s->mr)
		die("pd/cq/mr");
	struct ibv_qp_init_attr a = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	s->qp = ibv_create_qp(s->pd, &a);
	if (!s->qp)
		die("ibv_create_qp");
}

// move takes the QP to state with what rdma_init_qp_attr gives, and prints the mask.
static void move(struct rdma_cm_id *id, struct side *s, enum ibv_qp_state state, const char *name)
{
	struct ibv_qp_attr attr;
	int mask;
	memset(&attr, 0xA5, sizeof attr); // the library must set what it returns
	attr.qp_state = state;
	if (rdma_init_qp_attr(id, &attr, &mask))
		die("rdma_init_qp_attr");
	int err = ibv_modify_qp(s->qp, &attr, mask);
	if (err) {
		fprintf(stderr, "ibv_modify_qp to %s (mask %#x): %s\n", name, mask, strerror(err));
		exit(1);
	}
	printf("%s mask %#x\n", name, mask);
	if (state == IBV_QPS_RTS)
		printf("%s timeout %u\n", name, attr.timeout);
}

static void post_recv(struct side *s)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf, .length = 64, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(s->qp, &wr, &bad))
		die("ibv_post_recv");
}

static struct ibv_wc poll1(struct side *s)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "completion: %s\n", n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
		exit(1);
	}
	return wc;
}

static void send_msg(struct side *s, const char *msg)
{
	strcpy(s->buf + 1024, msg);
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + 1024, .length = strlen(msg) + 1, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send");
	poll1(s);
}

static void recv_msg(struct side *s, const char *want)
{
	struct ibv_wc wc = poll1(s);
	if (wc.opcode != IBV_WC_RECV || strcmp(s->buf, want) != 0) {
		fprintf(stderr, "received %u bytes %.64s, want %s\n", wc.byte_len, s->buf, want);
		exit(1);
	}
	printf("received %s\n", s->buf);
}

int main(int argc, char **argv)
{
	int server = argc == 4 && strcmp(argv[1], "-s") == 0;
	if (argc != 3 && !server) {
		fprintf(stderr, "usage: init_qp_attr [-s] ADDR PORT\n");
		return 2;
	}
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *ai;
	if (server)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(argv[argc - 2], argv[argc - 1], &hints, &ai))
		die("rdma_getaddrinfo");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	struct side s;
	struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	if (server) {
		if (rdma_bind_addr(id, ai->ai_src_addr) || rdma_listen(id, 1))
			die("rdma_listen");
		struct rdma_cm_event *e = wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		struct rdma_cm_id *conn = e->id;
		rdma_ack_cm_event(e);
		make_qp(conn, &s);
		move(conn, &s, IBV_QPS_INIT, "INIT");
		move(conn, &s, IBV_QPS_RTR, "RTR");
		move(conn, &s, IBV_QPS_RTS, "RTS");
		post_recv(&s);
		p.qp_num = s.qp->qp_num;
		if (rdma_accept(conn, &p))
			die("rdma_accept");
		rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ESTABLISHED));
		recv_msg(&s, "hello server");
		send_msg(&s, "hello client");
		rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_DISCONNECTED));
		printf("server done\n");
		return 0;
	}
	// The client's QP gets ACK timeout 12 (rdma_set_option, as Linux's rdma_set_ack_timeout);
	// a wrong size is EINVAL, an unknown option ENOSYS.
	uint8_t timeout = 12;
	int wide = 12;
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout))
		die("rdma_set_option ACK_TIMEOUT");
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &wide, sizeof wide) == 0 || errno != EINVAL ||
	    rdma_set_option(id, RDMA_OPTION_ID, 99, &timeout, sizeof timeout) == 0 || errno != ENOSYS) {
		fprintf(stderr, "rdma_set_option: a wrong size or an unknown option was not refused\n");
		return 1;
	}
	if (rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 2000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	make_qp(id, &s);
	move(id, &s, IBV_QPS_INIT, "INIT (before the connection)");
	post_recv(&s);
	p.qp_num = s.qp->qp_num;
	if (rdma_connect(id, &p))
		die("rdma_connect");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE));
	move(id, &s, IBV_QPS_INIT, "INIT");
	move(id, &s, IBV_QPS_RTR, "RTR");
	move(id, &s, IBV_QPS_RTS, "RTS");
	if (rdma_establish(id))
		die("rdma_establish");
	send_msg(&s, "hello server");
	recv_msg(&s, "hello client");
	if (rdma_disconnect(id))
		die("rdma_disconnect");
	printf("client done\n");
	return 0;
}
