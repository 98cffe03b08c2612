// afib_check: rdma_cm with AF_IB addresses (struct sockaddr_ib), as libfabric's verbs
// provider uses them: a listener bound to pib_1's GID with an RDMA_PS_IB service ID and no
// port gets one (rdma_get_src_port), the ID is on pib_1; a client resolving that address
// is on pib_0 (the first active port on the subnet), its peer port is the listener's, and
// a connection with private data comes through with the data alone. Prints "ok NAME".
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/ib.h>
#include <rdma/rdma_cma.h>

#define CHECK(name, cond)                                                                  \
	do {                                                                                   \
		if (!(cond)) {                                                                     \
			printf("FAIL %s (line %d)\n", name, __LINE__);                                 \
			exit(1);                                                                       \
		}                                                                                  \
		printf("ok %s\n", name);                                                           \
	} while (0)

static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e) || e->event != want) {
		printf("FAIL event %s, want %s\n", e ? rdma_event_str(e->event) : "none", rdma_event_str(want));
		exit(1);
	}
	return e;
}

int main(void)
{
	int n;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK("devices", devs && n >= 2);
	union ibv_gid g0, g1;
	CHECK("gids", !ibv_query_gid(devs[0], 1, 0, &g0) && !ibv_query_gid(devs[1], 1, 0, &g1));

	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c;
	CHECK("create_id_ps_ib", !rdma_create_id(sch, &l, NULL, RDMA_PS_IB) && !rdma_create_id(cch, &c, NULL, RDMA_PS_IB));
	struct sockaddr_ib sib = {.sib_family = AF_IB, .sib_pkey = htobe16(0xffff)};
	memcpy(&sib.sib_addr, &g1, 16);
	sib.sib_sid = htobe64(0x13f0000);
	sib.sib_sid_mask = htobe64(~0ULL);
	CHECK("bind_af_ib", !rdma_bind_addr(l, (struct sockaddr *)&sib));
	struct sockaddr_ib *la = (struct sockaddr_ib *)rdma_get_local_addr(l);
	uint16_t port = be16toh(rdma_get_src_port(l));
	CHECK("bind_af_ib_local_addr", la->sib_family == AF_IB && !memcmp(&la->sib_addr, &g1, 16) &&
	                                   be64toh(la->sib_sid) == (0x13f0000ULL | port) && port != 0);
	CHECK("bind_af_ib_device", l->verbs == devs[1] && l->port_num == 1);
	CHECK("listen_af_ib", !rdma_listen(l, 1));

	CHECK("resolve_addr_af_ib", !rdma_resolve_addr(c, NULL, (struct sockaddr *)la, 2000));
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	struct sockaddr_ib *ca = (struct sockaddr_ib *)rdma_get_local_addr(c);
	CHECK("resolve_addr_af_ib_device", c->verbs == devs[0] && ca->sib_family == AF_IB && !memcmp(&ca->sib_addr, &g0, 16));
	CHECK("resolve_addr_af_ib_dst_port", be16toh(rdma_get_dst_port(c)) == port);
	CHECK("resolve_route_af_ib", !rdma_resolve_route(c, 2000));
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	CHECK("create_qp_af_ib", !rdma_create_qp(c, NULL, &qa));
	char priv[56] = "af_ib private data";
	struct rdma_conn_param cp = {.private_data = priv, .private_data_len = sizeof(priv), .responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	CHECK("connect_af_ib", !rdma_connect(c, &cp));
	struct rdma_cm_event *req = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct sockaddr_ib *pa = (struct sockaddr_ib *)rdma_get_peer_addr(req->id);
	CHECK("connect_request_af_ib", req->param.conn.private_data_len >= sizeof(priv) && !memcmp(req->param.conn.private_data, priv, sizeof(priv)) &&
	                                   pa->sib_family == AF_IB && !memcmp(&pa->sib_addr, &g0, 16) && req->id->verbs == devs[1]);
	struct rdma_cm_id *s = req->id;
	rdma_ack_cm_event(req);
	// A fresh attr: rdma_create_qp filled the client's with its CQs (librdmacm's too).
	struct ibv_qp_init_attr sqa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	CHECK("accept_af_ib", !rdma_create_qp(s, NULL, &sqa) && !rdma_accept(s, &cp));
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_ESTABLISHED));
	printf("done\n");
	return 0;
}
