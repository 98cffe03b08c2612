// Shared between pibgw's librdmacm.so.1 (cabi/rdmacm/cma.c, plain C) and the Go side of
// its rdma_cm calls, which live in libibverbs.so.1 (cabi/ibverbs/cma.go) so that both
// libraries share one Go runtime and one attach session. The pibcm_* functions are in
// libibverbs.so.1's PIBGW_PRIVATE version node.
#ifndef PIB_CM_H
#define PIB_CM_H

#include <stdint.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>

// pib_cm_info is what an rdma_cm_id shows of its Go ID.
struct pib_cm_info {
	int dev;       // index of the device (ibv_get_device_list order), -1 if unbound
	uint8_t port;  // port number
	int route_ok;  // the path (dgid … packet_life) is valid
	struct sockaddr_storage src, dst;
	uint8_t dgid[16], sgid[16]; // the path's, else the address's (ucma_query_gid)
	uint16_t dlid, slid, pkey; // host order
	uint8_t sl, mtu, rate, packet_life;
};

// pib_cm_param is rdma_conn_param / rdma_ud_param without pointers.
struct pib_cm_param {
	uint8_t priv[256];
	int priv_len;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq;
	uint32_t qp_num, qkey;
	struct ibv_ah_attr ah;
};

// pib_cm_ev is one event taken from a channel.
struct pib_cm_ev {
	int type;
	int status;
	uint64_t id, listen_id; // Go handles
	void *idp, *listenp;    // their rdma_cm_ids (idp NULL if new_id)
	int new_id;             // id is a new ID (CONNECT_REQUEST): the C side makes its rdma_cm_id
	uint64_t evh;           // handle of the event, for the ack
	struct pib_cm_param p;
	struct sockaddr_storage group; // MULTICAST_JOIN/ERROR: the group's address
};

uint64_t pibcm_create_channel(int fd);
void pibcm_destroy_channel(uint64_t ch);
int pibcm_get_event(uint64_t ch, struct pib_cm_ev *ev);
void pibcm_ack(uint64_t evh);
uint64_t pibcm_create_id(uint64_t ch, int ps, void *cptr, int *err);
int pibcm_set_cptr(uint64_t id, void *cptr);
int pibcm_destroy_id(uint64_t id);
void pibcm_info(uint64_t id, struct pib_cm_info *info);
int pibcm_bind(uint64_t id, struct sockaddr *a);
int pibcm_resolve_addr(uint64_t id, struct sockaddr *src, struct sockaddr *dst, int ms);
int pibcm_resolve_route(uint64_t id, int ms);
int pibcm_listen(uint64_t id, int backlog);
int pibcm_migrate(uint64_t id, uint64_t ch);
int pibcm_connect(uint64_t id, struct pib_cm_param *p);
int pibcm_accept(uint64_t id, struct pib_cm_param *p);
int pibcm_reject(uint64_t id, void *priv, int len);
int pibcm_disconnect(uint64_t id);
int pibcm_establish(uint64_t id);
int pibcm_notify(uint64_t id, int event);
int pibcm_init_qp_attr(uint64_t id, struct ibv_qp_attr *attr, int *mask);
int pibcm_set_ack_timeout(uint64_t id, uint8_t timeout);
int pibcm_set_reuseaddr(uint64_t id, int reuse);
int pibcm_mcast(uint64_t id, struct sockaddr *a, int join);
void pibcm_destroy_qp(uint64_t id);
// pib_cm_create_qp is ibv_create_qp through the rdma_cm ID id (rdma_create_qp).
struct ibv_qp *pib_cm_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, uint64_t id);

#endif
