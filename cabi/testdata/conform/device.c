// device.c: the device, port, PD, CQ, SRQ and AH verbs — what ibv_query_device(_ex) and
// ibv_query_port report against what the other verbs then accept, and the errors the
// kernel's uverbs (uverbs_cmd.c, ib_core) and rxe/mlx5 give for bad input.
#include "conform.h"

#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

static struct ibv_qp *dev_qp(struct side *s, uint32_t wr, uint32_t sge, int *err)
{
	struct ibv_qp_init_attr a = {
		.send_cq = s->cq, .recv_cq = s->cq,
		.cap = {.max_send_wr = wr, .max_recv_wr = 1, .max_send_sge = sge, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	*err = qp ? 0 : errno;
	return qp;
}

static int cq_err(struct ibv_context *c, int cqe, int vec)
{
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(c, cqe, NULL, NULL, vec);
	if (cq) {
		ibv_destroy_cq(cq);
		return 0;
	}
	return errno;
}

static int srq_err(struct side *s, uint32_t wr, uint32_t sge, uint32_t limit, struct ibv_srq_attr *out)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = wr, .max_sge = sge, .srq_limit = limit}};
	errno = 0;
	struct ibv_srq *srq = ibv_create_srq(s->pd, &a);
	if (!srq)
		return errno;
	if (out && ibv_query_srq(srq, out))
		memset(out, 0xff, sizeof(*out));
	ibv_destroy_srq(srq);
	return 0;
}

static int ah_err(struct side *s, struct ibv_ah_attr *a)
{
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(s->pd, a);
	if (!ah)
		return errno;
	ibv_destroy_ah(ah);
	return 0;
}

// rts_rnr moves qp to RTS with rnr_retry 0 (no retries of an RNR NAK).
static int rts_rnr0(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 0, .max_rd_atomic = 1};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC);
}

static void devices(struct side *a, struct side *b)
{
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);
	T("dev_list", l && n >= 2 && l[n] == NULL, "list %p, %d devices", (void *)l, n);
	if (!l)
		return;
	int i0 = -1, i1 = -1;
	struct ibv_device *d0 = NULL;
	for (int i = 0; i < n; i++) {
		if (!strcmp(ibv_get_device_name(l[i]), "pib_0"))
			i0 = i, d0 = l[i];
		if (!strcmp(ibv_get_device_name(l[i]), "pib_1"))
			i1 = i;
	}
	T("dev_names", i0 >= 0 && i1 >= 0, "pib_0 at %d, pib_1 at %d", i0, i1);
	if (d0) {
		struct ibv_device_attr da;
		MUST(ibv_query_device(a->ctx, &da) == 0, "query_device: %m");
		T("dev_guid", ibv_get_device_guid(d0) == da.node_guid && da.node_guid != 0,
		  "ibv_get_device_guid %#llx, node_guid %#llx", (unsigned long long)be64toh(ibv_get_device_guid(d0)),
		  (unsigned long long)be64toh(da.node_guid));
		T("dev_node_type", d0->node_type == IBV_NODE_CA && d0->transport_type == IBV_TRANSPORT_IB,
		  "node_type %d transport %d", d0->node_type, d0->transport_type);
		int x0 = ibv_get_device_index(d0), x1 = i1 >= 0 ? ibv_get_device_index(l[i1]) : -1;
		T("dev_index", x0 >= 0 && x1 >= 0 && x0 != x1, "indexes %d and %d", x0, x1);
		struct ibv_context *c = ibv_open_device(d0);
		T("dev_open_close", c && c->device == d0 && c->num_comp_vectors >= 1 && c->async_fd >= 0 &&
					    ibv_close_device(c) == 0,
		  "open_device: %p", (void *)c);
	}
	ibv_free_device_list(l);
}

static void query_device(struct side *a, struct side *b)
{
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dx;
	struct ibv_port_attr pa;
	memset(&da, 0x5a, sizeof(da));
	T("dev_query", ibv_query_device(a->ctx, &da) == 0, "%m");
	MUST(ibv_query_port(a->ctx, 1, &pa) == 0, "query_port: %m");
	T("dev_fw_ver", da.fw_ver[0] != 0 && memchr(da.fw_ver, 0, sizeof(da.fw_ver)), "fw_ver %.64s", da.fw_ver);
	T("dev_sys_image_guid", da.sys_image_guid != 0 && (da.device_cap_flags & IBV_DEVICE_SYS_IMAGE_GUID),
	  "sys_image_guid %#llx, flags %#x", (unsigned long long)da.sys_image_guid, da.device_cap_flags);
	T("dev_page_size_cap", (da.page_size_cap & 4096) && (da.page_size_cap & 4095) == 0, "page_size_cap %#llx",
	  (unsigned long long)da.page_size_cap);
	T("dev_max_mr_size", da.max_mr_size >= SIDE_BUF, "max_mr_size %llu", (unsigned long long)da.max_mr_size);
	T("dev_phys_port_cnt", da.phys_port_cnt == 1, "phys_port_cnt %d", da.phys_port_cnt);
	T("dev_max_pkeys", da.max_pkeys == pa.pkey_tbl_len, "max_pkeys %d, port pkey_tbl_len %d", da.max_pkeys,
	  pa.pkey_tbl_len);
	T("dev_rd_atom_limits", da.max_qp_rd_atom > 0 && da.max_qp_init_rd_atom > 0 &&
					da.max_res_rd_atom >= da.max_qp_rd_atom && da.max_ee_rd_atom == 0 && da.max_ee == 0,
	  "max_qp_rd_atom %d, max_qp_init_rd_atom %d, max_res_rd_atom %d", da.max_qp_rd_atom, da.max_qp_init_rd_atom,
	  da.max_res_rd_atom);
	T("dev_ack_delay", da.local_ca_ack_delay <= 31, "local_ca_ack_delay %d", da.local_ca_ack_delay);
	T("dev_limits_nonzero", da.max_qp > 0 && da.max_cq > 0 && da.max_mr > 0 && da.max_pd > 0 && da.max_ah > 0 &&
					da.max_srq > 0 && da.max_sge_rd > 0 && da.max_sge_rd <= da.max_sge,
	  "max_qp %d max_cq %d max_mr %d max_pd %d max_ah %d max_srq %d max_sge_rd %d", da.max_qp, da.max_cq, da.max_mr,
	  da.max_pd, da.max_ah, da.max_srq, da.max_sge_rd);

	// max_qp_wr and max_sge are what create_qp accepts, and one more is EINVAL.
	int err;
	struct ibv_qp *qp = dev_qp(a, da.max_qp_wr, 1, &err);
	T("dev_max_qp_wr", qp != NULL, "create_qp with max_send_wr = max_qp_wr %d: %s", da.max_qp_wr, strerror(err));
	if (qp)
		ibv_destroy_qp(qp);
	qp = dev_qp(a, da.max_qp_wr + 1, 1, &err);
	T("dev_max_qp_wr_above", !qp && err == EINVAL, "create_qp with max_qp_wr + 1: %p %s", (void *)qp, strerror(err));
	if (qp)
		ibv_destroy_qp(qp);
	qp = dev_qp(a, 4, da.max_sge, &err);
	T("dev_max_sge", qp != NULL, "create_qp with max_send_sge = max_sge %d: %s", da.max_sge, strerror(err));
	if (qp)
		ibv_destroy_qp(qp);
	qp = dev_qp(a, 4, da.max_sge + 1, &err);
	T("dev_max_sge_above", !qp && err == EINVAL, "create_qp with max_sge + 1: %p %s", (void *)qp, strerror(err));
	if (qp)
		ibv_destroy_qp(qp);
	T("dev_max_cqe_above", cq_err(a->ctx, da.max_cqe + 1, 0) == EINVAL, "create_cq(max_cqe + 1 = %d)",
	  da.max_cqe + 1);

	// max_qp_init_rd_atom bounds the requester's max_rd_atomic, max_qp_rd_atom the
	// responder's max_dest_rd_atomic (ib_modify_qp's checks in the drivers).
	qp = rc_qp(a, NULL);
	struct ibv_qp *peer = rc_qp(b, NULL);
	MUST(qp_init(qp, IBV_ACCESS_REMOTE_WRITE) == 0 && qp_init(peer, 0) == 0, "INIT: %m");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = peer->qp_num,
				 .max_dest_rd_atomic = da.max_qp_rd_atom + 1, .min_rnr_timer = 1,
				 .ah_attr = {.dlid = b->lid, .port_num = 1}};
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	int rc = da.max_qp_rd_atom < 255 ? ibv_modify_qp(qp, &at, rtr) : EINVAL;
	T("dev_max_qp_rd_atom_above", rc == EINVAL, "RTR with max_dest_rd_atomic %d: %s", da.max_qp_rd_atom + 1,
	  strerror(rc));
	at.max_dest_rd_atomic = da.max_qp_rd_atom;
	rc = ibv_modify_qp(qp, &at, rtr);
	T("dev_max_qp_rd_atom", rc == 0, "RTR with max_dest_rd_atomic = max_qp_rd_atom %d: %s", da.max_qp_rd_atom,
	  strerror(rc));
	struct ibv_qp_attr rt = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				 .max_rd_atomic = da.max_qp_init_rd_atom + 1};
	int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
		  IBV_QP_MAX_QP_RD_ATOMIC;
	rc = da.max_qp_init_rd_atom < 255 ? ibv_modify_qp(qp, &rt, rts) : EINVAL;
	T("dev_max_qp_init_rd_atom_above", rc == EINVAL, "RTS with max_rd_atomic %d: %s", da.max_qp_init_rd_atom + 1,
	  strerror(rc));
	rt.max_rd_atomic = da.max_qp_init_rd_atom;
	rc = ibv_modify_qp(qp, &rt, rts);
	T("dev_max_qp_init_rd_atom", rc == 0, "RTS with max_rd_atomic = max_qp_init_rd_atom %d: %s",
	  da.max_qp_init_rd_atom, strerror(rc));
	// Enhanced connection establishment: not on this HCA, nor on rxe (EOPNOTSUPP).
	struct ibv_ece ece;
	rc = ibv_query_ece(qp, &ece);
	T("dev_query_ece", rc == EOPNOTSUPP, "query_ece: %d", rc);
	ibv_destroy_qp(qp);
	ibv_destroy_qp(peer);

	// The capability flags pibgw claims work.
	if (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) {
		struct ibv_mw *mw = ibv_alloc_mw(a->pd, IBV_MW_TYPE_1);
		T("dev_cap_mem_window", mw != NULL, "alloc_mw type 1: %m");
		if (mw)
			ibv_dealloc_mw(mw);
	}
	if (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) {
		struct ibv_mw *mw = ibv_alloc_mw(a->pd, IBV_MW_TYPE_2);
		T("dev_cap_mem_window_type2", mw != NULL, "alloc_mw type 2: %m");
		if (mw)
			ibv_dealloc_mw(mw);
	}
	if (da.device_cap_flags & IBV_DEVICE_XRC) {
		struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
						.fd = -1, .oflags = O_CREAT};
		struct ibv_xrcd *x = ibv_open_xrcd(a->ctx, &xa);
		T("dev_cap_xrc", x != NULL, "open_xrcd: %m");
		if (x)
			ibv_close_xrcd(x);
	}
	if (da.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN) {
		// A SEND with no receive posted is RNR NAKed; with rnr_retry 0 the sender's WR
		// completes with IBV_WC_RNR_RETRY_EXC_ERR.
		struct ibv_qp *s = rc_qp(a, NULL), *r = rc_qp(b, NULL);
		MUST(qp_init(s, 0) == 0 && qp_init(r, 0) == 0, "INIT: %m");
		MUST(qp_rtr(s, b->lid, r->qp_num) == 0 && qp_rtr(r, a->lid, s->qp_num) == 0, "RTR: %m");
		MUST(rts_rnr0(s) == 0 && qp_rts(r) == 0, "RTS: %m");
		struct ibv_wc wc = {0};
		int got = post_rdma(a, s, IBV_WR_SEND, 71, 0, 0, 8) == 0 ? poll_one(a->cq, &wc) : -1;
		T("dev_cap_rnr_nak_gen", got == 0 && wc.wr_id == 71 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
		  "completion %d: wr_id %llu status %s", got, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		ibv_destroy_qp(s);
		ibv_destroy_qp(r);
		while (ibv_poll_cq(a->cq, 1, &wc) > 0 || ibv_poll_cq(b->cq, 1, &wc) > 0)
			;
	}
	if (da.atomic_cap != IBV_ATOMIC_NONE) {
		struct ibv_qp *s, *r;
		rc_pair(a, b, &s, &r);
		uint64_t *target = (uint64_t *)(b->buf + 64);
		*target = 40;
		struct ibv_sge sg = {.addr = (uintptr_t)a->buf + 64, .length = 8, .lkey = a->mr->lkey};
		struct ibv_send_wr w = {.wr_id = 72, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					.send_flags = IBV_SEND_SIGNALED,
					.wr.atomic = {.remote_addr = (uintptr_t)target, .rkey = b->mr->rkey, .compare_add = 2}},
				   *bad;
		struct ibv_wc wc = {0};
		int got = ibv_post_send(s, &w, &bad) == 0 ? poll_one(a->cq, &wc) : -1;
		T("dev_atomic_cap", got == 0 && wc.status == IBV_WC_SUCCESS && *target == 42 &&
					    *(uint64_t *)(a->buf + 64) == 40,
		  "atomic_cap %d: fetch-and-add %d %s, target %llu", da.atomic_cap, got, ibv_wc_status_str(wc.status),
		  (unsigned long long)*target);
		ibv_destroy_qp(s);
		ibv_destroy_qp(r);
	}

	// ibv_query_device_ex: orig_attr is ibv_query_device's; the extended fields match
	// what the other verbs do.
	memset(&dx, 0x5a, sizeof(dx));
	rc = ibv_query_device_ex(a->ctx, NULL, &dx);
	T("dev_query_ex", rc == 0 && !memcmp(&dx.orig_attr, &da, sizeof(da)), "rc %d, orig_attr %s", rc,
	  memcmp(&dx.orig_attr, &da, sizeof(da)) ? "differs" : "same");
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	struct ibv_device_attr_ex dx2;
	rc = ibv_query_device_ex(a->ctx, &in, &dx2);
	T("dev_query_ex_comp_mask", rc == EINVAL, "input comp_mask 1: %d", rc);
	T("dev_ex_cap_flags_ex", (uint32_t)dx.device_cap_flags_ex == da.device_cap_flags,
	  "device_cap_flags_ex %#llx, device_cap_flags %#x", (unsigned long long)dx.device_cap_flags_ex,
	  da.device_cap_flags);
	T("dev_ex_phys_port_cnt", dx.phys_port_cnt_ex == da.phys_port_cnt, "phys_port_cnt_ex %u", dx.phys_port_cnt_ex);
	T("dev_ex_timestamp", (dx.completion_timestamp_mask == 0) == (dx.hca_core_clock == 0),
	  "completion_timestamp_mask %#llx, hca_core_clock %llu", (unsigned long long)dx.completion_timestamp_mask,
	  (unsigned long long)dx.hca_core_clock);
	if (dx.completion_timestamp_mask) {
		struct ibv_cq_init_attr_ex ca = {.cqe = 4, .wc_flags = IBV_WC_STANDARD_FLAGS |
									IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
		struct ibv_cq_ex *cq = ibv_create_cq_ex(a->ctx, &ca);
		T("dev_ex_timestamp_cq", cq != NULL, "create_cq_ex with completion timestamps: %m");
		if (cq)
			ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
		struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK}, v2 = v;
		rc = ibv_query_rt_values_ex(a->ctx, &v);
		int rc2 = ibv_query_rt_values_ex(a->ctx, &v2);
		T("dev_rt_values", rc == 0 && rc2 == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK &&
					   (v2.raw_clock.tv_sec > v.raw_clock.tv_sec ||
					    (v2.raw_clock.tv_sec == v.raw_clock.tv_sec &&
					     v2.raw_clock.tv_nsec >= v.raw_clock.tv_nsec)),
		  "rc %d %d comp_mask %#x", rc, rc2, v.comp_mask);
	}
	struct ibv_values_ex vb = {.comp_mask = 1u << 5};
	rc = ibv_query_rt_values_ex(a->ctx, &vb);
	T("dev_rt_values_bad_mask", rc == EINVAL || rc == EOPNOTSUPP, "comp_mask 1<<5: %d", rc);
	if (dx.odp_caps.general_caps & IBV_ODP_SUPPORT) {
		struct ibv_mr *mr = ibv_reg_mr(a->pd, a->buf, SIDE_BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
		T("dev_ex_odp", mr != NULL, "reg_mr ON_DEMAND: %m");
		if (mr)
			ibv_dereg_mr(mr);
	}
	if (!(dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT)) {
		errno = 0;
		struct ibv_mr *mr = ibv_reg_mr(a->pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
		T("dev_ex_odp_implicit", !mr && errno == EOPNOTSUPP, "implicit ODP not claimed: %p %m", (void *)mr);
		if (mr)
			ibv_dereg_mr(mr);
	}
	T("dev_ex_unclaimed", dx.max_dm_size == 0 && dx.raw_packet_caps == 0 && dx.tso_caps.max_tso == 0 &&
				      dx.rss_caps.max_rwq_indirection_tables == 0 &&
				      dx.packet_pacing_caps.qp_rate_limit_max == 0 && dx.tm_caps.max_num_tags == 0 &&
				      dx.max_wq_type_rq == 0,
	  "dm %llu raw %#x tso %u rss %u pacing %u tm %u wq %u", (unsigned long long)dx.max_dm_size,
	  dx.raw_packet_caps, dx.tso_caps.max_tso, dx.rss_caps.max_rwq_indirection_tables,
	  dx.packet_pacing_caps.qp_rate_limit_max, dx.tm_caps.max_num_tags, dx.max_wq_type_rq);
	if (dx.max_dm_size == 0) {
		struct ibv_alloc_dm_attr dma = {.length = 64};
		errno = 0;
		struct ibv_dm *dm = ibv_alloc_dm(a->ctx, &dma);
		T("dev_ex_no_dm", !dm && errno == EOPNOTSUPP, "alloc_dm: %p %m", (void *)dm);
	}
	{
		// cq_mod_caps says what ibv_modify_cq's moderation takes (mlx5: count and period).
		struct ibv_modify_cq_attr m = {.attr_mask = IBV_CQ_ATTR_MODERATE, .moderate = {.cq_count = 4, .cq_period = 10}};
		rc = ibv_modify_cq(a->cq, &m);
		int claimed = dx.cq_mod_caps.max_cq_count >= 4 && dx.cq_mod_caps.max_cq_period >= 10;
		T("dev_ex_cq_mod_caps", (rc == 0) == claimed, "modify_cq moderation %d, cq_mod_caps count %u period %u", rc,
		  dx.cq_mod_caps.max_cq_count, dx.cq_mod_caps.max_cq_period);
		// A count above the CQ's size is taken (mlx5 checks the period only).
		m.moderate.cq_count = a->cq->cqe + 1;
		rc = ibv_modify_cq(a->cq, &m);
		T("cq_moderate_above_cqe", rc == 0, "modify_cq count cqe + 1: %d", rc);
		m.moderate.cq_count = 0;
		m.moderate.cq_period = 0;
		ibv_modify_cq(a->cq, &m);
		// An empty mask is EINVAL (ib_uverbs_ex_modify_cq).
		m.attr_mask = 0;
		rc = ibv_modify_cq(a->cq, &m);
		T("cq_modify_mask_zero", rc == EINVAL, "modify_cq attr_mask 0: %d", rc);
	}
	T("dev_ex_pci_atomic", dx.pci_atomic_caps.fetch_add == 0 && dx.pci_atomic_caps.compare_swap == 0 &&
				       dx.pci_atomic_caps.swap == 0,
	  "pci_atomic_caps %#x %#x %#x", dx.pci_atomic_caps.fetch_add, dx.pci_atomic_caps.swap,
	  dx.pci_atomic_caps.compare_swap);
}

static void query_port(struct side *a, struct side *b)
{
	struct ibv_port_attr pa, pb;
	memset(&pa, 0x5a, sizeof(pa));
	T("port_query", ibv_query_port(a->ctx, 1, &pa) == 0 && ibv_query_port(b->ctx, 1, &pb) == 0, "%m");
	T("port_state", pa.state == IBV_PORT_ACTIVE && pb.state == IBV_PORT_ACTIVE, "states %s, %s",
	  ibv_port_state_str(pa.state), ibv_port_state_str(pb.state));
	T("port_phys_state", pa.phys_state == 5, "phys_state %d (5 is LinkUp)", pa.phys_state);
	T("port_link_layer", pa.link_layer == IBV_LINK_LAYER_INFINIBAND && pa.flags == 0,
	  "link_layer %d flags %#x", pa.link_layer, pa.flags);
	T("port_mtu", pa.max_mtu >= IBV_MTU_256 && pa.max_mtu <= IBV_MTU_4096 && pa.active_mtu >= IBV_MTU_256 &&
			      pa.active_mtu <= pa.max_mtu,
	  "max_mtu %d active_mtu %d", pa.max_mtu, pa.active_mtu);
	T("port_lid", pa.lid != 0 && pa.lid < 0xC000 && pb.lid != 0 && pb.lid != pa.lid && pa.lmc <= 7,
	  "lids %#x %#x lmc %d", pa.lid, pb.lid, pa.lmc);
	T("port_sm", pa.sm_lid == pa.lid && pb.sm_lid == pa.lid && (pa.port_cap_flags & IBV_PORT_SM) &&
			     !(pb.port_cap_flags & IBV_PORT_SM),
	  "sm_lid %#x/%#x, lid %#x, IsSM %d/%d", pa.sm_lid, pb.sm_lid, pa.lid, !!(pa.port_cap_flags & IBV_PORT_SM),
	  !!(pb.port_cap_flags & IBV_PORT_SM));
	T("port_cap_flags", (pa.port_cap_flags & IBV_PORT_CM_SUP) && (pb.port_cap_flags & IBV_PORT_CM_SUP) &&
				    (pa.port_cap_flags & IBV_PORT_SYS_IMAGE_GUID_SUP),
	  "port_cap_flags %#x / %#x", pa.port_cap_flags, pb.port_cap_flags);
	T("port_cap_flags2", pa.port_cap_flags2 == 0 || pa.port_cap_flags2 != 0x5a5a, "port_cap_flags2 %#x",
	  pa.port_cap_flags2);
	T("port_max_msg_sz", pa.max_msg_sz >= (1u << 30), "max_msg_sz %u", pa.max_msg_sz);
	T("port_tbl_lens", pa.gid_tbl_len >= 1 && pa.pkey_tbl_len >= 1, "gid_tbl_len %d pkey_tbl_len %d",
	  pa.gid_tbl_len, pa.pkey_tbl_len);
	T("port_counters", pa.bad_pkey_cntr != 0x5a5a5a5a && pa.qkey_viol_cntr != 0x5a5a5a5a, "bad_pkey %u qkey %u",
	  pa.bad_pkey_cntr, pa.qkey_viol_cntr);
	T("port_vl", pa.max_vl_num >= 1 && pa.max_vl_num <= 5 && pa.sm_sl <= 15 && pa.subnet_timeout <= 31,
	  "max_vl_num %d sm_sl %d subnet_timeout %d", pa.max_vl_num, pa.sm_sl, pa.subnet_timeout);
	// active_width (1 1x, 2 4x, 4 8x, 8 12x, 16 2x) times the lane rate of active_speed.
	int lanes = pa.active_width == 1 ? 1 : pa.active_width == 2 ? 4 : pa.active_width == 4 ? 8 :
		    pa.active_width == 8 ? 12 : pa.active_width == 16 ? 2 : 0;
	int lane = pa.active_speed == 1 ? 2500 : pa.active_speed == 2 ? 5000 : pa.active_speed == 4 ? 10000 : 0;
	enum ibv_rate r = mbps_to_ibv_rate(lanes * lane);
	T("port_width_speed", lanes && lane && r != IBV_RATE_MAX && ibv_rate_to_mbps(r) == lanes * lane,
	  "active_width %d active_speed %d: %d Mb/s, rate %d", pa.active_width, pa.active_speed, lanes * lane, r);
	struct ibv_port_attr px;
	int rc0 = ibv_query_port(a->ctx, 0, &px), rc2 = ibv_query_port(a->ctx, 2, &px);
	T("port_invalid", rc0 == EINVAL && rc2 == EINVAL, "port 0: %d, port 2: %d", rc0, rc2);

	// GIDs: entry 0 is fe80::/64 and the port GUID (IBA 4.1.1).
	union ibv_gid g, z;
	memset(&g, 0x5a, sizeof(g));
	int rc = ibv_query_gid(a->ctx, 1, 0, &g);
	T("port_gid0", rc == 0 && be64toh(g.global.subnet_prefix) == 0xfe80000000000000ull &&
			       g.global.interface_id != 0,
	  "rc %d prefix %#llx id %#llx", rc, (unsigned long long)be64toh(g.global.subnet_prefix),
	  (unsigned long long)be64toh(g.global.interface_id));
	errno = 0;
	rc = ibv_query_gid(a->ctx, 1, pa.gid_tbl_len, &z);
	T("port_gid_beyond", rc == -1, "index gid_tbl_len %d: rc %d %m", pa.gid_tbl_len, rc);
	rc = ibv_query_gid(a->ctx, 2, 0, &z);
	T("port_gid_bad_port", rc == -1, "port 2: rc %d", rc);
	struct ibv_gid_entry ge;
	memset(&ge, 0x5a, sizeof(ge));
	rc = ibv_query_gid_ex(a->ctx, 1, 0, &ge, 0);
	T("port_gid_ex", rc == 0 && !memcmp(ge.gid.raw, g.raw, 16) && ge.gid_index == 0 && ge.port_num == 1 &&
				 ge.gid_type == IBV_GID_TYPE_IB && ge.ndev_ifindex == 0,
	  "rc %d index %u port %u type %u ifindex %u", rc, ge.gid_index, ge.port_num, ge.gid_type, ge.ndev_ifindex);
	rc = ibv_query_gid_ex(a->ctx, 1, pa.gid_tbl_len, &ge, 0);
	int rcp = ibv_query_gid_ex(a->ctx, 2, 0, &ge, 0);
	T("port_gid_ex_beyond", rc == EINVAL && rcp == EINVAL, "index gid_tbl_len: %d, port 2: %d", rc, rcp);
	rc = ibv_query_gid_ex(a->ctx, 1, 0, &ge, 1);
	T("port_gid_ex_flags", rc == EINVAL, "flags 1: %d", rc);
	if (pa.gid_tbl_len > 1) {
		rc = ibv_query_gid_ex(a->ctx, 1, 1, &ge, 0);
		T("port_gid_ex_empty", rc == ENODATA, "empty entry 1: %d", rc);
		memset(&z, 0x5a, sizeof(z));
		rc = ibv_query_gid(a->ctx, 1, 1, &z);
		T("port_gid_empty", rc == 0 && !z.global.subnet_prefix && !z.global.interface_id,
		  "ibv_query_gid of an empty entry: rc %d", rc);
	}
	struct ibv_gid_entry tab[64];
	ssize_t nt = ibv_query_gid_table(a->ctx, tab, 64, 0);
	T("port_gid_table", nt == 1 && !memcmp(tab[0].gid.raw, g.raw, 16) && tab[0].gid_type == IBV_GID_TYPE_IB &&
				    tab[0].port_num == 1,
	  "query_gid_table: %zd", nt);
	nt = ibv_query_gid_table(a->ctx, tab, 0, 0);
	T("port_gid_table_small", nt == -EINVAL, "max_entries 0: %zd", nt);

	// P_Keys: entry 0 is the default partition 0xFFFF.
	__be16 k = 0;
	rc = ibv_query_pkey(a->ctx, 1, 0, &k);
	T("port_pkey0", rc == 0 && be16toh(k) == 0xffff, "rc %d pkey %#x", rc, be16toh(k));
	rc = ibv_query_pkey(a->ctx, 1, pa.pkey_tbl_len, &k);
	T("port_pkey_beyond", rc != 0, "index pkey_tbl_len %d: %d", pa.pkey_tbl_len, rc);
	rc = ibv_query_pkey(a->ctx, 2, 0, &k);
	T("port_pkey_bad_port", rc != 0, "port 2: %d", rc);
	T("port_pkey_index", ibv_get_pkey_index(a->ctx, 1, htobe16(0xffff)) == 0 &&
				     ibv_get_pkey_index(a->ctx, 1, htobe16(0x1234)) < 0,
	  "get_pkey_index(0xffff) %d, (0x1234) %d", ibv_get_pkey_index(a->ctx, 1, htobe16(0xffff)),
	  ibv_get_pkey_index(a->ctx, 1, htobe16(0x1234)));
}

static void pd_cq(struct side *a, struct side *b)
{
	struct ibv_device_attr da;
	MUST(ibv_query_device(a->ctx, &da) == 0, "query_device: %m");

	// PDs: several per context; a PD still holding an MR is EBUSY (ib_destroy_usecnt).
	struct ibv_pd *p1 = ibv_alloc_pd(a->ctx), *p2 = ibv_alloc_pd(a->ctx);
	T("pd_alloc_two", p1 && p2 && p1 != p2 && p1->context == a->ctx, "alloc_pd: %p %p", (void *)p1, (void *)p2);
	if (p1 && p2) {
		struct ibv_mr *mr = ibv_reg_mr(p1, a->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
		MUST(mr, "reg_mr: %m");
		int rc = ibv_dealloc_pd(p1);
		T("pd_busy", rc == EBUSY, "dealloc_pd with an MR: %d", rc);
		ibv_dereg_mr(mr);
		// Every object of a PD holds it: an AH, a QP, an SRQ, a memory window.
		struct ibv_ah_attr aa = {.dlid = b->lid, .port_num = 1};
		struct ibv_ah *ah = ibv_create_ah(p2, &aa);
		int busy_ah = ah ? ibv_dealloc_pd(p2) : -1;
		if (ah)
			ibv_destroy_ah(ah);
		struct ibv_qp_init_attr qi = {.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_UD,
					      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *qp = ibv_create_qp(p2, &qi);
		int busy_qp = qp ? ibv_dealloc_pd(p2) : -1;
		if (qp)
			ibv_destroy_qp(qp);
		struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
		struct ibv_srq *srq = ibv_create_srq(p2, &si);
		int busy_srq = srq ? ibv_dealloc_pd(p2) : -1;
		if (srq)
			ibv_destroy_srq(srq);
		struct ibv_mw *mw = ibv_alloc_mw(p2, IBV_MW_TYPE_1);
		int busy_mw = mw ? ibv_dealloc_pd(p2) : -1;
		if (mw)
			ibv_dealloc_mw(mw);
		T("pd_busy_objects", busy_ah == EBUSY && busy_qp == EBUSY && busy_srq == EBUSY && busy_mw == EBUSY,
		  "dealloc_pd with an AH %d, a QP %d, an SRQ %d, an MW %d", busy_ah, busy_qp, busy_srq, busy_mw);
		rc = ibv_dealloc_pd(p1);
		int rc2 = ibv_dealloc_pd(p2);
		T("pd_dealloc", rc == 0 && rc2 == 0, "dealloc_pd: %d %d", rc, rc2);
	}

	// CQs: cqe 1..max_cqe, comp_vector < num_comp_vectors (uverbs create_cq, rxe_cq_chk_attr).
	T("cq_cqe_zero", cq_err(a->ctx, 0, 0) == EINVAL, "create_cq(0)");
	T("cq_cqe_negative", cq_err(a->ctx, -1, 0) == EINVAL, "create_cq(-1)");
	T("cq_comp_vector", cq_err(a->ctx, 4, a->ctx->num_comp_vectors) == EINVAL &&
				    cq_err(a->ctx, 4, -1) == EINVAL,
	  "comp_vector num_comp_vectors %d", a->ctx->num_comp_vectors);
	struct ibv_cq *cq = ibv_create_cq(a->ctx, 3, (void *)0x1234, NULL, 0);
	T("cq_actual_cqe", cq && cq->cqe >= 3 && cq->cq_context == (void *)0x1234 && cq->context == a->ctx,
	  "cqe %d", cq ? cq->cqe : -1);
	int rc = cq ? ibv_req_notify_cq(cq, 0) : -1;
	T("cq_notify_no_channel", rc == 0, "req_notify_cq on a CQ without a channel: %d", rc);
	if (cq)
		ibv_destroy_cq(cq);
	struct ibv_cq_init_attr_ex ce = {.cqe = 0, .wc_flags = IBV_WC_STANDARD_FLAGS};
	errno = 0;
	struct ibv_cq_ex *cx = ibv_create_cq_ex(a->ctx, &ce);
	T("cq_ex_cqe_zero", !cx && errno == EINVAL, "create_cq_ex(cqe 0): %p %m", (void *)cx);
	ce.cqe = 4;
	ce.comp_mask = 1u << 7;
	errno = 0;
	cx = ibv_create_cq_ex(a->ctx, &ce);
	T("cq_ex_comp_mask", !cx && errno == EOPNOTSUPP, "create_cq_ex(comp_mask 1<<7): %p %m", (void *)cx);
	ce.comp_mask = 0;
	ce.wc_flags |= IBV_WC_EX_WITH_FLOW_TAG;
	errno = 0;
	cx = ibv_create_cq_ex(a->ctx, &ce);
	T("cq_ex_wc_flags", !cx && errno == EOPNOTSUPP, "create_cq_ex(FLOW_TAG): %p %m", (void *)cx);
	ce.wc_flags = IBV_WC_STANDARD_FLAGS;
	cx = ibv_create_cq_ex(a->ctx, &ce);
	T("cq_ex", cx && ibv_cq_ex_to_cq(cx)->cqe >= 4, "create_cq_ex: %m");
	if (cx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cx));

	// Resize: not below the completions queued, not above max_cqe (rxe_cq_chk_attr).
	cq = ibv_create_cq(a->ctx, 8, NULL, NULL, 0);
	MUST(cq, "create_cq: %m");
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *s = ibv_create_qp(a->pd, &qa), *r = rc_qp(b, NULL);
	MUST(s, "create_qp: %m");
	MUST(qp_init(s, 0) == 0 && qp_init(r, IBV_ACCESS_REMOTE_WRITE) == 0, "INIT: %m");
	MUST(qp_rtr(s, b->lid, r->qp_num) == 0 && qp_rtr(r, a->lid, s->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(s) == 0 && qp_rts(r) == 0, "RTS: %m");
	for (int i = 0; i < 4; i++)
		MUST(post_rdma(a, s, IBV_WR_RDMA_WRITE, 100 + i, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post: %m");
	usleep(200000); // the four completions queue (not polled: they stay in the CQ)
	rc = ibv_resize_cq(cq, 2);
	T("cq_resize_below_queued", rc == EINVAL, "resize to 2 with 4 queued: %d", rc);
	rc = ibv_resize_cq(cq, 0);
	T("cq_resize_zero", rc == EINVAL, "resize to 0: %d", rc);
	rc = ibv_resize_cq(cq, da.max_cqe + 1);
	T("cq_resize_above", rc == EINVAL, "resize to max_cqe + 1: %d", rc);
	rc = ibv_resize_cq(cq, 16);
	struct ibv_wc wc[8];
	int n = rc == 0 ? ibv_poll_cq(cq, 8, wc) : -1;
	T("cq_resize", rc == 0 && cq->cqe >= 16 && n == 4 && wc[0].wr_id == 100 && wc[3].wr_id == 103,
	  "resize to 16: rc %d cqe %d, then %d completions", rc, cq->cqe, n);
	rc = ibv_destroy_cq(cq);
	T("cq_destroy_busy", rc == EBUSY, "destroy_cq used by a QP: %d", rc);
	ibv_destroy_qp(s);
	ibv_destroy_qp(r);
	ibv_destroy_cq(cq);

	// A completion channel: the armed CQ's next completion is one event; the channel is
	// EBUSY while a CQ uses it.
	struct ibv_comp_channel *ch = ibv_create_comp_channel(a->ctx);
	int chfl = ch ? fcntl(ch->fd, F_GETFD) : -1, chst = ch ? fcntl(ch->fd, F_GETFL) : -1;
	// The kernel's comp channel is an fd object opened O_CLOEXEC, blocking.
	T("cq_channel", ch && ch->fd >= 0 && ch->context == a->ctx && (chfl & FD_CLOEXEC) && !(chst & O_NONBLOCK),
	  "create_comp_channel: %m (fd flags %#x, status flags %#x)", chfl, chst);
	if (ch) {
		cq = ibv_create_cq(a->ctx, 8, (void *)0x77, ch, 0);
		MUST(cq, "create_cq with a channel: %m");
		rc = ibv_destroy_comp_channel(ch);
		T("cq_channel_busy", rc == EBUSY, "destroy_comp_channel with a CQ: %d", rc);
		qa.send_cq = qa.recv_cq = cq;
		s = ibv_create_qp(a->pd, &qa);
		r = rc_qp(b, NULL);
		MUST(s, "create_qp: %m");
		MUST(qp_init(s, 0) == 0 && qp_init(r, IBV_ACCESS_REMOTE_WRITE) == 0, "INIT: %m");
		MUST(qp_rtr(s, b->lid, r->qp_num) == 0 && qp_rtr(r, a->lid, s->qp_num) == 0, "RTR: %m");
		MUST(qp_rts(s) == 0 && qp_rts(r) == 0, "RTS: %m");
		rc = ibv_req_notify_cq(cq, 0);
		MUST(post_rdma(a, s, IBV_WR_RDMA_WRITE, 200, (uintptr_t)b->buf, b->mr->rkey, 8) == 0, "post: %m");
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		struct ibv_cq *ecq = NULL;
		void *ectx = NULL;
		int ready = poll(&p, 1, 5000);
		int got = ready == 1 ? ibv_get_cq_event(ch, &ecq, &ectx) : -1;
		T("cq_channel_event", rc == 0 && got == 0 && ecq == cq && ectx == (void *)0x77,
		  "req_notify %d, poll %d, get_cq_event %d", rc, ready, got);
		if (got == 0)
			ibv_ack_cq_events(cq, 1);
		while (ibv_poll_cq(cq, 8, wc) > 0)
			;
		ibv_destroy_qp(s);
		ibv_destroy_qp(r);
		ibv_destroy_cq(cq);
		rc = ibv_destroy_comp_channel(ch);
		T("cq_channel_destroy", rc == 0, "destroy_comp_channel: %d", rc);
	}
	// Another context's channel is not this one's fd object: EBADF (lookup_get_fd_uobject).
	ch = ibv_create_comp_channel(b->ctx);
	MUST(ch, "create_comp_channel: %m");
	errno = 0;
	cq = ibv_create_cq(a->ctx, 4, NULL, ch, 0);
	T("cq_channel_other_context", !cq && errno == EBADF, "create_cq with pib_1's channel: %p %m", (void *)cq);
	if (cq)
		ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);

	// Thread domains and parent domains: not on this HCA (as rxe): EOPNOTSUPP.
	struct ibv_td_init_attr ta = {0};
	errno = 0;
	struct ibv_td *td = ibv_alloc_td(a->ctx, &ta);
	T("pd_td", td || errno == EOPNOTSUPP, "alloc_td: %m");
	if (td)
		ibv_dealloc_td(td);
	struct ibv_parent_domain_init_attr pda = {.pd = a->pd};
	errno = 0;
	struct ibv_pd *ppd = ibv_alloc_parent_domain(a->ctx, &pda);
	T("pd_parent_domain", ppd || errno == EOPNOTSUPP, "alloc_parent_domain: %m");
	if (ppd)
		ibv_dealloc_pd(ppd);
}

static void srq_ah(struct side *a, struct side *b)
{
	struct ibv_device_attr da;
	struct ibv_srq_attr sa;
	MUST(ibv_query_device(a->ctx, &da) == 0, "query_device: %m");
	T("srq_max_wr_zero", srq_err(a, 0, 1, 0, NULL) == EINVAL, "create_srq(max_wr 0)");
	T("srq_max_wr_above", srq_err(a, da.max_srq_wr + 1, 1, 0, NULL) == EINVAL, "max_wr max_srq_wr + 1");
	T("srq_max_sge_above", srq_err(a, 4, da.max_srq_sge + 1, 0, NULL) == EINVAL, "max_sge max_srq_sge + 1");
	int rc = srq_err(a, da.max_srq_wr, da.max_srq_sge, 0, &sa);
	T("srq_max", rc == 0 && sa.max_wr >= (uint32_t)da.max_srq_wr && sa.max_sge >= (uint32_t)da.max_srq_sge,
	  "max_wr %d max_sge %d: %s, got %u %u", da.max_srq_wr, da.max_srq_sge, strerror(rc), sa.max_wr, sa.max_sge);
	// srq_limit is "irrelevant for ibv_create_srq" (ibv_create_srq(3)); mlx5 ignores it.
	rc = srq_err(a, 4, 1, 100, &sa);
	T("srq_create_limit_ignored", rc == 0 && sa.srq_limit == 0, "create_srq(max_wr 4, srq_limit 100): %s, limit %u",
	  strerror(rc), sa.srq_limit);

	{
		// A full SRQ is ENOMEM, too many SGEs EINVAL, *bad_wr the first not posted (rxe,
		// mlx5 post_srq_recv).
		struct ibv_srq_init_attr si = {.attr = {.max_wr = 2, .max_sge = 1}};
		struct ibv_srq *srq = ibv_create_srq(b->pd, &si);
		MUST(srq, "create_srq: %m");
		struct ibv_sge sg[2] = {{.addr = (uintptr_t)b->buf, .length = 8, .lkey = b->mr->lkey},
					{.addr = (uintptr_t)b->buf + 8, .length = 8, .lkey = b->mr->lkey}};
		struct ibv_recv_wr w[8], *bad = NULL;
		int n = si.attr.max_wr + 1;
		for (int i = 0; i < n && i < 8; i++)
			w[i] = (struct ibv_recv_wr){.wr_id = i, .sg_list = sg, .num_sge = 1, .next = i + 1 < n ? &w[i + 1] : NULL};
		int rc = n <= 8 ? ibv_post_srq_recv(srq, w, &bad) : -1;
		T("srq_post_full", rc == ENOMEM && bad == &w[n - 1], "posting max_wr %u + 1: %d, bad_wr %ld", si.attr.max_wr, rc,
		  bad ? (long)(bad - w) : -1L);
		ibv_destroy_srq(srq);
		si.attr.max_wr = 4;
		srq = ibv_create_srq(b->pd, &si);
		MUST(srq, "create_srq: %m");
		w[0] = (struct ibv_recv_wr){.wr_id = 1, .sg_list = sg, .num_sge = si.attr.max_sge + 1};
		bad = NULL;
		rc = si.attr.max_sge < 2 ? ibv_post_srq_recv(srq, w, &bad) : EINVAL;
		T("srq_post_sge", rc == EINVAL && (si.attr.max_sge >= 2 || bad == &w[0]), "max_sge %u + 1 SGEs: %d",
		  si.attr.max_sge, rc);
		ibv_destroy_srq(srq);
	}

	{
		// The same for an XRC SRQ (ibv_create_srq_ex).
		struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
						.fd = -1, .oflags = O_CREAT};
		struct ibv_xrcd *x = ibv_open_xrcd(a->ctx, &xa);
		MUST(x, "open_xrcd: %m");
		struct ibv_srq_init_attr_ex sx = {
			.attr = {.max_wr = 4, .max_sge = 1, .srq_limit = 100},
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
				     IBV_SRQ_INIT_ATTR_CQ,
			.srq_type = IBV_SRQT_XRC, .pd = a->pd, .xrcd = x, .cq = a->cq};
		errno = 0;
		struct ibv_srq *xs = ibv_create_srq_ex(a->ctx, &sx);
		memset(&sa, 0xff, sizeof(sa));
		if (xs)
			ibv_query_srq(xs, &sa);
		T("srq_xrc_create_limit_ignored", xs && sa.srq_limit == 0, "create_srq_ex XRC with srq_limit 100: %p %m, limit %u",
		  (void *)xs, sa.srq_limit);
		if (xs)
			ibv_destroy_srq(xs);
		ibv_close_xrcd(x);
	}

	struct ibv_srq_init_attr si = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(b->pd, &si);
	MUST(srq, "create_srq: %m");
	T("srq_actual", si.attr.max_wr >= 16 && si.attr.max_sge >= 1, "max_wr %u max_sge %u", si.attr.max_wr,
	  si.attr.max_sge);
	struct ibv_srq_attr ma = {.srq_limit = si.attr.max_wr + 1};
	rc = ibv_modify_srq(srq, &ma, IBV_SRQ_LIMIT);
	T("srq_limit_above", rc == EINVAL, "srq_limit above max_wr: %d", rc);
	ma.max_wr = 32;
	rc = ibv_modify_srq(srq, &ma, IBV_SRQ_MAX_WR);
	T("srq_resize", (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) ? rc == 0 : rc == EINVAL,
	  "modify_srq MAX_WR with SRQ_RESIZE %s: %d", (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) ? "set" : "clear", rc);
	ma.srq_limit = 8;
	rc = ibv_modify_srq(srq, &ma, IBV_SRQ_LIMIT);
	memset(&sa, 0, sizeof(sa));
	int qrc = ibv_query_srq(srq, &sa);
	T("srq_arm", rc == 0 && qrc == 0 && sa.srq_limit == 8, "modify %d query %d limit %u", rc, qrc, sa.srq_limit);
	// Eight receives posted, one consumed: fewer than the limit, so the event, once.
	struct ibv_qp *s = rc_qp(a, NULL), *r = rc_qp(b, srq);
	MUST(qp_init(s, 0) == 0 && qp_init(r, 0) == 0, "INIT: %m");
	MUST(qp_rtr(s, b->lid, r->qp_num) == 0 && qp_rtr(r, a->lid, s->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(s) == 0 && qp_rts(r) == 0, "RTS: %m");
	for (int i = 0; i < 8; i++) {
		struct ibv_sge sg = {.addr = (uintptr_t)b->buf + 4096 + 64 * i, .length = 64, .lkey = b->mr->lkey};
		struct ibv_recv_wr w = {.wr_id = 300 + i, .sg_list = &sg, .num_sge = 1}, *bad;
		MUST(ibv_post_srq_recv(srq, &w, &bad) == 0, "post_srq_recv: %m");
	}
	struct ibv_wc wc;
	MUST(post_rdma(a, s, IBV_WR_SEND, 301, 0, 0, 8) == 0, "post send: %m");
	int got = poll_one(a->cq, &wc);
	int got2 = poll_one(b->cq, &wc);
	struct ibv_async_event ev;
	int e = wait_async(b->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &ev);
	T("srq_limit_event", got == 0 && got2 == 0 && e == 0 && ev.element.srq == srq, "send %d recv %d event %d", got,
	  got2, e);
	memset(&sa, 0xff, sizeof(sa));
	ibv_query_srq(srq, &sa);
	T("srq_disarmed", sa.srq_limit == 0, "srq_limit after the event %u", sa.srq_limit);
	rc = ibv_destroy_srq(srq);
	T("srq_destroy_busy", rc == EBUSY, "destroy_srq used by a QP: %d", rc);
	ibv_destroy_qp(s);
	ibv_destroy_qp(r);
	rc = ibv_destroy_srq(srq);
	T("srq_destroy", rc == 0, "destroy_srq: %d", rc);

	// AHs: rdma_check_ah_attr: the port must exist; the SGID index must be in the table.
	struct ibv_ah_attr ah = {.dlid = b->lid, .port_num = 1};
	T("ah_create", ah_err(a, &ah) == 0, "create_ah to %#x: %m", b->lid);
	ah.port_num = 2;
	T("ah_bad_port", ah_err(a, &ah) == EINVAL, "port 2");
	ah.port_num = 0;
	T("ah_port_zero", ah_err(a, &ah) == EINVAL, "port 0");
	ah.port_num = 1;
	ah.is_global = 1;
	ah.grh.sgid_index = 0;
	ah.grh.hop_limit = 1;
	ibv_query_gid(b->ctx, 1, 0, &ah.grh.dgid);
	T("ah_global", ah_err(a, &ah) == 0, "is_global sgid_index 0: %m");
	struct ibv_port_attr pa;
	MUST(ibv_query_port(a->ctx, 1, &pa) == 0, "query_port: %m");
	if (pa.gid_tbl_len > 1) {
		ah.grh.sgid_index = 1;
		rc = ah_err(a, &ah);
		T("ah_sgid_empty", rc == ENODATA, "empty sgid_index 1: %s", strerror(rc));
	}
	ah.grh.sgid_index = pa.gid_tbl_len < 256 ? pa.gid_tbl_len : 255;
	rc = ah_err(a, &ah);
	T("ah_sgid_beyond", rc == EINVAL, "sgid_index gid_tbl_len: %s", strerror(rc));
	// The kernel checks no DLID of an InfiniBand AH (rdma_check_ah_attr; mlx5 builds it as
	// given): DLID 0 is created, its packets go nowhere.
	ah.is_global = 0;
	ah.dlid = 0;
	rc = ah_err(a, &ah);
	T("ah_dlid_zero", rc == 0, "dlid 0: %s", strerror(rc));
}

// ud_qp makes a UD QP on s, in RTS with Q_Key 0x11111111.
static struct ibv_qp *ud_qp(struct side *s)
{
	struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);
	MUST(qp, "create_qp UD: %m");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x11111111};
	MUST(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0, "UD INIT: %m");
	at.qp_state = IBV_QPS_RTR;
	MUST(ibv_modify_qp(qp, &at, IBV_QP_STATE) == 0, "UD RTR: %m");
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = 0;
	MUST(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS: %m");
	return qp;
}

// ud_send sends 16 bytes from s's buffer to qpn through ah and waits for both completions
// (the receiver's in *wc).
static int ud_send(struct side *s, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, struct side *r,
		   struct ibv_qp *rqp, struct ibv_wc *wc)
{
	struct ibv_sge rs = {.addr = (uintptr_t)r->buf + 6144, .length = 40 + 64, .lkey = r->mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 500, .sg_list = &rs, .num_sge = 1}, *rbad;
	if (ibv_post_recv(rqp, &rw, &rbad))
		return -1;
	struct ibv_sge ss = {.addr = (uintptr_t)s->buf, .length = 16, .lkey = s->mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 501, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.ud = {.ah = ah, .remote_qpn = qpn, .remote_qkey = 0x11111111}},
			   *sbad;
	struct ibv_wc swc;
	if (ibv_post_send(qp, &sw, &sbad) || poll_one(s->cq, &swc) || swc.status != IBV_WC_SUCCESS)
		return -2;
	if (poll_one(r->cq, wc))
		return -3;
	return wc->status == IBV_WC_SUCCESS ? 0 : -4;
}

// ah_from_wc: the address back to a UD sender, from its completion and GRH (rdma-core's
// ibv_init_ah_from_wc): its LID and SL, and with a GRH the sender's GID, the SGID index
// of the GID the packet was sent to, hop limit 0xFF.
static void ah_from_wc(struct side *a, struct side *b)
{
	struct ibv_qp *qa = ud_qp(a), *qb = ud_qp(b);
	union ibv_gid ga, gb;
	MUST(ibv_query_gid(a->ctx, 1, 0, &ga) == 0 && ibv_query_gid(b->ctx, 1, 0, &gb) == 0, "query_gid: %m");
	struct ibv_ah_attr at = {.dlid = b->lid, .sl = 0, .port_num = 1, .is_global = 1,
				 .grh = {.dgid = gb, .sgid_index = 0, .hop_limit = 1, .flow_label = 0x12345, .traffic_class = 0x20}};
	struct ibv_ah *ah = ibv_create_ah(a->pd, &at);
	MUST(ah, "create_ah: %m");
	struct ibv_wc wc;
	int rc = ud_send(a, qa, ah, qb->qp_num, b, qb, &wc);
	struct ibv_grh *grh = (struct ibv_grh *)(b->buf + 6144);
	T("ah_ud_grh", rc == 0 && (wc.wc_flags & IBV_WC_GRH) && wc.slid == a->lid && wc.src_qp == qa->qp_num &&
			       wc.byte_len == 40 + 16 && !memcmp(grh->sgid.raw, ga.raw, 16) && !memcmp(grh->dgid.raw, gb.raw, 16),
	  "send %d flags %#x slid %#x src_qp %#x byte_len %u", rc, wc.wc_flags, wc.slid, wc.src_qp, wc.byte_len);
	struct ibv_ah_attr back;
	memset(&back, 0x5a, sizeof(back));
	int ir = rc == 0 ? ibv_init_ah_from_wc(b->ctx, 1, &wc, grh, &back) : -1;
	T("ah_init_from_wc", ir == 0 && back.dlid == a->lid && back.port_num == 1 && back.is_global == 1 &&
				     !memcmp(back.grh.dgid.raw, ga.raw, 16) && back.grh.sgid_index == 0 &&
				     back.grh.hop_limit == 0xFF && back.grh.flow_label == 0x12345 &&
				     back.grh.traffic_class == 0x20 && back.static_rate == 0,
	  "rc %d dlid %#x global %d sgid_index %d hop %d flow %#x tclass %#x rate %d", ir, back.dlid, back.is_global,
	  back.grh.sgid_index, back.grh.hop_limit, back.grh.flow_label, back.grh.traffic_class, back.static_rate);
	struct ibv_ah *bah = rc == 0 ? ibv_create_ah_from_wc(b->pd, &wc, grh, 1) : NULL;
	struct ibv_wc wc2;
	int rc2 = bah ? ud_send(b, qb, bah, wc.src_qp, a, qa, &wc2) : -9;
	T("ah_create_from_wc", bah && rc2 == 0 && wc2.src_qp == qb->qp_num, "create_ah_from_wc %p, reply %d",
	  (void *)bah, rc2);
	if (bah)
		ibv_destroy_ah(bah);
	ibv_destroy_ah(ah);
	// Without a GRH: no global route.
	at.is_global = 0;
	ah = ibv_create_ah(a->pd, &at);
	MUST(ah, "create_ah: %m");
	rc = ud_send(a, qa, ah, qb->qp_num, b, qb, &wc);
	ir = rc == 0 ? ibv_init_ah_from_wc(b->ctx, 1, &wc, grh, &back) : -1;
	T("ah_init_from_wc_no_grh", rc == 0 && !(wc.wc_flags & IBV_WC_GRH) && ir == 0 && back.is_global == 0 &&
					    back.dlid == a->lid,
	  "send %d flags %#x init %d global %d", rc, wc.wc_flags, ir, back.is_global);
	// The kernel checks no SL of an AH; the HCA keeps its low 4 bits (mlx5, mlx4): SL 17
	// sends on SL 1.
	struct ibv_ah_attr sl17 = {.dlid = b->lid, .sl = 17, .port_num = 1};
	errno = 0;
	struct ibv_ah *sah = ibv_create_ah(a->pd, &sl17);
	rc = sah ? ud_send(a, qa, sah, qb->qp_num, b, qb, &wc) : -9;
	T("ah_sl_masked", sah && rc == 0 && wc.sl == 1, "create_ah(sl 17): %p %m; send %d, received on SL %d", (void *)sah,
	  rc, wc.sl);
	if (sah)
		ibv_destroy_ah(sah);
	// IBV_DEVICE_BAD_QKEY_CNTR: a datagram with the wrong Q_Key is dropped and counted in
	// the receiving port's qkey_viol_cntr (PortInfo:Q_KeyViolations).
	struct ibv_device_attr da;
	struct ibv_port_attr p0, p1;
	MUST(ibv_query_device(b->ctx, &da) == 0 && ibv_query_port(b->ctx, 1, &p0) == 0, "query: %m");
	if (da.device_cap_flags & IBV_DEVICE_BAD_QKEY_CNTR) {
		struct ibv_sge rs = {.addr = (uintptr_t)b->buf + 6144, .length = 40 + 64, .lkey = b->mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 510, .sg_list = &rs, .num_sge = 1}, *rbad;
		MUST(ibv_post_recv(qb, &rw, &rbad) == 0, "post_recv: %m");
		struct ibv_sge ss = {.addr = (uintptr_t)a->buf, .length = 16, .lkey = a->mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 511, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.ud = {.ah = ah, .remote_qpn = qb->qp_num, .remote_qkey = 0x22222222}},
				   *sbad;
		struct ibv_wc swc;
		MUST(ibv_post_send(qa, &sw, &sbad) == 0 && poll_one(a->cq, &swc) == 0, "send: %m");
		int none = poll_none(b->cq, 100);
		MUST(ibv_query_port(b->ctx, 1, &p1) == 0, "query_port: %m");
		T("port_qkey_viol_cntr", none && p1.qkey_viol_cntr == p0.qkey_viol_cntr + 1,
		  "dropped %d, qkey_viol_cntr %u -> %u", none, p0.qkey_viol_cntr, p1.qkey_viol_cntr);
	}
	// IBV_DEVICE_BAD_PKEY_CNTR: a receiving QP whose P_Key index names another partition
	// (here the empty entry 1) drops the datagram and counts it in bad_pkey_cntr.
	if ((da.device_cap_flags & IBV_DEVICE_BAD_PKEY_CNTR) && p0.pkey_tbl_len > 1) {
		struct ibv_qp_init_attr ia = {.send_cq = b->cq, .recv_cq = b->cq, .qp_type = IBV_QPT_UD,
					      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *q = ibv_create_qp(b->pd, &ia);
		MUST(q, "create_qp: %m");
		struct ibv_qp_attr qa2 = {.qp_state = IBV_QPS_INIT, .pkey_index = 1, .port_num = 1, .qkey = 0x11111111};
		MUST(ibv_modify_qp(q, &qa2, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0, "INIT: %m");
		qa2.qp_state = IBV_QPS_RTR;
		MUST(ibv_modify_qp(q, &qa2, IBV_QP_STATE) == 0, "RTR: %m");
		struct ibv_sge rs = {.addr = (uintptr_t)b->buf + 6144, .length = 40 + 64, .lkey = b->mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 520, .sg_list = &rs, .num_sge = 1}, *rbad;
		MUST(ibv_post_recv(q, &rw, &rbad) == 0, "post_recv: %m");
		MUST(ibv_query_port(b->ctx, 1, &p0) == 0, "query_port: %m");
		struct ibv_sge ss = {.addr = (uintptr_t)a->buf, .length = 16, .lkey = a->mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 521, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.ud = {.ah = ah, .remote_qpn = q->qp_num, .remote_qkey = 0x11111111}},
				   *sbad;
		struct ibv_wc swc;
		MUST(ibv_post_send(qa, &sw, &sbad) == 0 && poll_one(a->cq, &swc) == 0, "send: %m");
		int none = poll_none(b->cq, 100);
		MUST(ibv_query_port(b->ctx, 1, &p1) == 0, "query_port: %m");
		T("port_bad_pkey_cntr", none && p1.bad_pkey_cntr == p0.bad_pkey_cntr + 1,
		  "dropped %d, bad_pkey_cntr %u -> %u", none, p0.bad_pkey_cntr, p1.bad_pkey_cntr);
		ibv_destroy_qp(q);
	}
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
}

// close_with_objects: ibv_close_device with objects still open destroys them, as closing
// the uverbs file does (uverbs_destroy_ufile_hw): the QP is gone, so a peer's RDMA WRITE
// to its region is not executed (no responder: the requester retries, then
// IBV_WC_RETRY_EXC_ERR), and the memory is left alone.
static void close_with_objects(struct side *b)
{
	struct side c;
	side_open(&c, "pib_0");
	struct ibv_qp *cq = rc_qp(&c, NULL), *bq = rc_qp(b, NULL);
	MUST(qp_init(cq, IBV_ACCESS_REMOTE_WRITE) == 0 && qp_init(bq, 0) == 0, "INIT: %m");
	MUST(qp_rtr(cq, b->lid, bq->qp_num) == 0 && qp_rtr(bq, c.lid, cq->qp_num) == 0, "RTR: %m");
	// qp_rts's local ACK timeout (67 ms, 7 retries): a shorter one failed the first WRITE
	// on a loaded machine; the retries after the close take about half a second.
	MUST(qp_rts(cq) == 0 && qp_rts(bq) == 0, "RTS: %m");
	// The write reaches the region while the context is open.
	struct ibv_wc wc;
	memset(b->buf, 0x11, 64);
	int rc = post_rdma(b, bq, IBV_WR_RDMA_WRITE, 601, (uintptr_t)c.buf, c.mr->rkey, 64);
	int got = rc == 0 ? poll_one(b->cq, &wc) : -1;
	MUST(got == 0 && wc.status == IBV_WC_SUCCESS && c.buf[0] == 0x11, "RDMA WRITE to the open context: %d %s", got,
	     ibv_wc_status_str(wc.status));
	// Closed with its PD, region, CQ and QP still there.
	char *keep = c.buf;
	int cl = ibv_close_device(c.ctx);
	memset(b->buf, 0x22, 64);
	rc = post_rdma(b, bq, IBV_WR_RDMA_WRITE, 602, (uintptr_t)keep, c.mr->rkey, 64);
	got = rc == 0 ? poll_one(b->cq, &wc) : -1;
	T("dev_close_destroys_objects", cl == 0 && got == 0 && wc.wr_id == 602 && wc.status == IBV_WC_RETRY_EXC_ERR &&
						keep[0] == 0x11,
	  "close_device %d; RDMA WRITE to its closed QP: %d %s, region byte %#x", cl, got, ibv_wc_status_str(wc.status),
	  (unsigned char)keep[0]);
	ibv_destroy_qp(bq);
	free(keep); // the program's objects (c.pd, c.mr, c.cq, cq) are not to be touched again
}

void conform_device(struct side *a, struct side *b)
{
	devices(a, b);
	query_device(a, b);
	query_port(a, b);
	pd_cq(a, b);
	srq_ah(a, b);
	ah_from_wc(a, b);
	close_with_objects(b);
}
