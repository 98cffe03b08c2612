// qp.c: queue pairs, call by call against the man pages ibv_create_qp(3),
// ibv_create_qp_ex(3), ibv_modify_qp(3), ibv_query_qp(3), ibv_destroy_qp(3) and what
// rdma-core (libibverbs, providers/rxe) and the kernel (uverbs_cmd.c, ib_modify_qp_is_ok,
// sw/rxe/rxe_qp.c) do. Where rxe and mlx5 differ, rxe is followed unless a comment says
// otherwise.
#include "conform.h"

#include <arpa/inet.h>

static void drain(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
}

// create_errno creates a QP on s with attributes a and returns 0 if it worked (the QP
// destroyed again), else errno.
static int create_errno(struct side *s, struct ibv_qp_init_attr *a)
{
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(s->pd, a);
	if (!qp)
		return errno ? errno : -1;
	ibv_destroy_qp(qp);
	return 0;
}

static int create_ex_errno(struct side *s, struct ibv_qp_init_attr_ex *a)
{
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp_ex(s->ctx, a);
	if (!qp)
		return errno ? errno : -1;
	ibv_destroy_qp(qp);
	return 0;
}

static struct ibv_qp_init_attr rc_attr(struct side *s)
{
	struct ibv_qp_init_attr a = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
	};
	return a;
}

static void create_checks(struct side *a, struct side *b)
{
	struct ibv_device_attr da;
	MUST(ibv_query_device(a->ctx, &da) == 0, "query_device: %m");

	int tag;
	struct ibv_qp_init_attr ia = rc_attr(a);
	ia.qp_context = &tag;
	ia.cap.max_inline_data = 32;
	struct ibv_qp *qp = ibv_create_qp(a->pd, &ia);
	T("qp_create_fields",
	  qp && qp->context == a->ctx && qp->pd == a->pd && qp->send_cq == a->cq && qp->recv_cq == a->cq && !qp->srq &&
		  qp->qp_type == IBV_QPT_RC && qp->qp_context == &tag && qp->state == IBV_QPS_RESET && qp->qp_num > 1,
	  "qp %p: %m", (void *)qp);
	MUST(qp, "create_qp: %m");
	// The caps returned are at least those asked for (ibv_create_qp(3)).
	T("qp_create_cap_out", ia.cap.max_send_wr >= 16 && ia.cap.max_recv_wr >= 16 && ia.cap.max_send_sge >= 1 &&
				       ia.cap.max_recv_sge >= 1 && ia.cap.max_inline_data >= 32,
	  "cap %u %u %u %u %u", ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge,
	  ia.cap.max_inline_data);

	// ibv_query_qp on a fresh QP: RESET, and the creation attributes.
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	memset(&qa, 0xff, sizeof(qa));
	int r = ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_CAP, &qi);
	T("qp_query_reset", r == 0 && qa.qp_state == IBV_QPS_RESET && qa.cur_qp_state == IBV_QPS_RESET, "%d: state %d cur %d", r,
	  qa.qp_state, qa.cur_qp_state);
	T("qp_query_init_attr", r == 0 && qi.send_cq == a->cq && qi.recv_cq == a->cq && !qi.srq && qi.qp_type == IBV_QPT_RC &&
					qi.qp_context == &tag && qi.sq_sig_all == 0,
	  "init_attr: send_cq %p recv_cq %p srq %p type %d context %p sq_sig_all %d", (void *)qi.send_cq, (void *)qi.recv_cq,
	  (void *)qi.srq, qi.qp_type, qi.qp_context, qi.sq_sig_all);
	// uverbs' query_qp answers the caps once, in both (ib_uverbs_query_qp_resp).
	T("qp_query_cap", r == 0 && !memcmp(&qa.cap, &ia.cap, sizeof(ia.cap)) && !memcmp(&qi.cap, &ia.cap, sizeof(ia.cap)),
	  "attr cap %u/%u/%u/%u/%u init cap %u/%u/%u/%u/%u", qa.cap.max_send_wr, qa.cap.max_recv_wr, qa.cap.max_send_sge,
	  qa.cap.max_recv_sge, qa.cap.max_inline_data, qi.cap.max_send_wr, qi.cap.max_recv_wr, qi.cap.max_send_sge,
	  qi.cap.max_recv_sge, qi.cap.max_inline_data);
	T("qp_destroy", ibv_destroy_qp(qp) == 0, "destroy_qp: %m");

	ia = rc_attr(a);
	ia.sq_sig_all = 1;
	qp = ibv_create_qp(a->pd, &ia);
	r = qp ? ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) : -1;
	T("qp_query_sq_sig_all", r == 0 && qi.sq_sig_all == 1, "%d: sq_sig_all %d", r, qi.sq_sig_all);
	if (qp)
		ibv_destroy_qp(qp);

	// A QP on an SRQ reports no receive capabilities (rxe_qp_to_init; ib_query_qp zeroed
	// them).
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(a->pd, &sa);
	MUST(srq, "create_srq: %m");
	ia = rc_attr(a);
	ia.srq = srq;
	qp = ibv_create_qp(a->pd, &ia);
	r = qp ? ibv_query_qp(qp, &qa, IBV_QP_CAP, &qi) : -1;
	T("qp_query_srq_cap", r == 0 && qi.srq == srq && qi.cap.max_recv_wr == 0 && qi.cap.max_recv_sge == 0 &&
				      qa.cap.max_recv_wr == 0 && qi.cap.max_send_wr >= 16,
	  "%d: srq %p recv cap %u/%u send %u", r, (void *)qi.srq, qi.cap.max_recv_wr, qi.cap.max_recv_sge, qi.cap.max_send_wr);
	if (qp)
		ibv_destroy_qp(qp);
	ibv_destroy_srq(srq);

	// Caps above the device's limits: EINVAL (rxe_qp_chk_cap).
	ia = rc_attr(a);
	ia.cap.max_send_wr = da.max_qp_wr + 1;
	int e = create_errno(a, &ia);
	T("qp_create_max_send_wr_over", e == EINVAL, "errno %d", e);
	ia = rc_attr(a);
	ia.cap.max_recv_wr = da.max_qp_wr + 1;
	e = create_errno(a, &ia);
	T("qp_create_max_recv_wr_over", e == EINVAL, "errno %d", e);
	ia = rc_attr(a);
	ia.cap.max_send_sge = da.max_sge + 1;
	e = create_errno(a, &ia);
	T("qp_create_max_send_sge_over", e == EINVAL, "errno %d", e);
	ia = rc_attr(a);
	ia.cap.max_recv_sge = da.max_sge + 1;
	e = create_errno(a, &ia);
	T("qp_create_max_recv_sge_over", e == EINVAL, "errno %d", e);
	ia = rc_attr(a);
	ia.cap.max_inline_data = 1 << 20;
	e = create_errno(a, &ia);
	T("qp_create_max_inline_over", e == EINVAL, "errno %d", e);
	ia = rc_attr(a);
	ia.cap.max_send_wr = da.max_qp_wr;
	e = create_errno(a, &ia);
	T("qp_create_max_send_wr_at_limit", e == 0, "errno %d", e);
	ia = rc_attr(a);
	ia.send_cq = NULL;
	e = create_errno(a, &ia);
	T("qp_create_no_send_cq", e == EINVAL, "errno %d", e);
	// A CQ of another context is no handle of this one's (uverbs: EINVAL).
	ia = rc_attr(a);
	ia.recv_cq = b->cq;
	e = create_errno(a, &ia);
	T("qp_create_cq_of_other_context", e == EINVAL, "errno %d", e);

	// ibv_create_qp_ex (issue 41 item 5): CREATE_FLAGS with no flag set is a plain create;
	// a flag the device lacks is EOPNOTSUPP (rxe: RXE_QP_CREATE_FLAGS_SUP is 0).
	struct ibv_qp_init_attr_ex ax = {
		.send_cq = a->cq, .recv_cq = a->cq, .qp_type = IBV_QPT_RC, .pd = a->pd,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
	};
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_create_flags_zero", e == 0, "errno %d", e);
	ax.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_create_flags_unsupported", e == EOPNOTSUPP, "errno %d", e);
	ax.create_flags = 0;
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_unknown_comp_mask", e == EOPNOTSUPP, "errno %d", e);
	ax.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND;
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_no_pd", e == EINVAL, "errno %d", e);
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	errno = 0;
	qp = ibv_create_qp_ex(a->ctx, &ax);
	struct ibv_qp_ex *x = qp ? ibv_qp_to_qp_ex(qp) : NULL;
	T("qp_create_ex_send_ops", x && x->wr_send && x->wr_rdma_write && x->wr_rdma_read && x->wr_atomic_cmp_swp,
	  "create_qp_ex: %m");
	if (qp)
		ibv_destroy_qp(qp);
	// Send ops per transport (rxe's check_qp_init_attr): UD sends only.
	ax.qp_type = IBV_QPT_UD;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_ud_rdma_ops", e == EOPNOTSUPP, "errno %d", e);
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_ud_send_ops", e == 0, "errno %d", e);
	ax.qp_type = IBV_QPT_UC;
	ax.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
	e = create_ex_errno(a, &ax);
	T("qp_create_ex_uc_read_op", e == EOPNOTSUPP, "errno %d", e);
}

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	errno = 0;
	int r = ibv_modify_qp(qp, a, mask);
	return r;
}

// modify_checks walks the state machine (IBA 10.3.1, ib_modify_qp_is_ok's table): the
// transitions and the attributes each requires and allows; values out of range.
static void modify_checks(struct side *a, struct side *b)
{
	struct ibv_device_attr da;
	MUST(ibv_query_device(a->ctx, &da) == 0, "query_device: %m");
	struct ibv_qp *qp = rc_qp(a, NULL);
	int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR};
	int r = modify(qp, &at, IBV_QP_STATE);
	T("qp_modify_reset_to_rtr", r == EINVAL, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .pkey_index = 0, .qp_access_flags = acc};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_init_needs_port", r == EINVAL, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = acc, .sq_psn = 5};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN);
	T("qp_modify_init_attr_not_allowed", r == EINVAL, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 9, .qp_access_flags = acc};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_bad_port", r == EINVAL, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 4000, .qp_access_flags = acc};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_bad_pkey_index", r == EINVAL, "%d", r);
	// uverbs' modify_qp: a state beyond IBV_QPS_ERR is EINVAL.
	at = (struct ibv_qp_attr){.qp_state = (enum ibv_qp_state)9};
	r = modify(qp, &at, IBV_QP_STATE);
	T("qp_modify_bad_state", r == EINVAL, "%d", r);
	r = qp_init(qp, acc);
	T("qp_modify_reset_to_init", r == 0 && qp->state == IBV_QPS_INIT, "%d, state %d", r, qp->state);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				    IBV_QP_MAX_QP_RD_ATOMIC);
	T("qp_modify_init_to_rts", r == EINVAL, "%d", r);
	// qp_access_flags: the bits of RXE_ACCESS_SUPPORTED_QP (rxe_qp_chk_attr), MR flags
	// among them; any other is EINVAL (mlx5 would ignore it).
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .qp_access_flags = acc | IBV_ACCESS_HUGETLB};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_access_unsupported_bit", r == EINVAL, "%d", r);
	at.qp_access_flags = acc | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_RELAXED_ORDERING;
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_access_mr_bits", r == 0, "%d", r);
	// INIT→INIT may change the access flags.
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .qp_access_flags = IBV_ACCESS_REMOTE_READ};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_init_to_init", r == 0, "%d", r);
	// INIT→RTR needs the address vector, MTU, destination QPN, RQ PSN, and for RC the
	// responder resources and the RNR timer.
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .ah_attr = {.dlid = b->lid, .port_num = 1},
				  .max_dest_rd_atomic = 1, .min_rnr_timer = 1};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_rtr_needs_dest_qpn", r == EINVAL, "%d", r);
	at.dest_qp_num = 0x123;
	// uverbs' modify_qp: the address vector's port must exist and, INIT→RTR, be the QP's.
	at.ah_attr.port_num = 0;
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_rtr_ah_port_zero", r == EINVAL, "%d", r);
	at.ah_attr.port_num = 2;
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_rtr_ah_port_missing", r == EINVAL, "%d", r);
	at.ah_attr.port_num = 1;
	at.path_mtu = (enum ibv_mtu)7;
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_bad_path_mtu", r == EINVAL, "%d", r);
	at.path_mtu = IBV_MTU_1024;
	at.max_dest_rd_atomic = da.max_qp_rd_atom + 1;
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_max_dest_rd_atomic_over", r == EINVAL, "%d (max_qp_rd_atom %d)", r, da.max_qp_rd_atom);
	T("qp_modify_failed_keeps_state", qp->state == IBV_QPS_INIT, "state %d", qp->state);
	// An address vector with a GRH, and every field of it, as ibv_query_qp gives it back
	// (rxe_av_to_attr).
	union ibv_gid sgid;
	MUST(ibv_query_gid(a->ctx, 1, 0, &sgid) == 0, "query_gid: %m");
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_2048, .dest_qp_num = 0x123, .rq_psn = 0x777,
				  .max_dest_rd_atomic = 2, .min_rnr_timer = 12,
				  .ah_attr = {.dlid = b->lid, .sl = 3, .src_path_bits = 0, .static_rate = IBV_RATE_10_GBPS,
					      .is_global = 1, .port_num = 1,
					      .grh = {.dgid = sgid, .flow_label = 0x12345, .sgid_index = 0, .hop_limit = 9,
						      .traffic_class = 0x20}}};
	r = modify(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_rtr_grh", r == 0, "%d", r);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	memset(&qa, 0, sizeof(qa));
	r = ibv_query_qp(qp, &qa, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER,
			 &qi);
	struct ibv_ah_attr *h = &qa.ah_attr;
	T("qp_query_ah_grh", r == 0 && h->dlid == b->lid && h->sl == 3 && h->static_rate == IBV_RATE_10_GBPS && h->is_global &&
				     h->port_num == 1 && !memcmp(&h->grh.dgid, &sgid, 16) && h->grh.flow_label == 0x12345 &&
				     h->grh.hop_limit == 9 && h->grh.traffic_class == 0x20 && h->grh.sgid_index == 0,
	  "dlid %#x sl %d rate %d global %d port %d flow %#x hop %d tclass %#x", h->dlid, h->sl, h->static_rate, h->is_global,
	  h->port_num, h->grh.flow_label, h->grh.hop_limit, h->grh.traffic_class);
	T("qp_query_rtr_fields", r == 0 && qa.qp_state == IBV_QPS_RTR && qa.path_mtu == IBV_MTU_2048 && qa.dest_qp_num == 0x123 &&
					 qa.rq_psn == 0x777 && qa.max_dest_rd_atomic == 2 && qa.min_rnr_timer == 12,
	  "state %d mtu %d dqpn %#x rq_psn %#x dest_rd %d rnr %d", qa.qp_state, qa.path_mtu, qa.dest_qp_num, qa.rq_psn,
	  qa.max_dest_rd_atomic, qa.min_rnr_timer);
	ibv_destroy_qp(qp);

	// A connected pair; RTR→RTS needs timeout, retry counts, SQ PSN, initiator depth.
	struct ibv_qp *aq = rc_qp(a, NULL), *bq = rc_qp(b, NULL);
	MUST(qp_init(aq, acc) == 0 && qp_init(bq, acc) == 0, "INIT: %m");
	MUST(qp_rtr(aq, b->lid, bq->qp_num) == 0 && qp_rtr(bq, a->lid, aq->qp_num) == 0, "RTR: %m");
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	T("qp_modify_rts_needs_timeout", r == EINVAL, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				  .max_rd_atomic = da.max_qp_init_rd_atom + 1};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				    IBV_QP_MAX_QP_RD_ATOMIC);
	T("qp_modify_max_rd_atomic_over", r == EINVAL, "%d (max_qp_init_rd_atom %d)", r, da.max_qp_init_rd_atom);
	// uverbs' modify_qp: an alternate path's two ports must exist and agree.
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1,
				  .alt_port_num = 1, .alt_timeout = 14, .alt_ah_attr = {.dlid = b->lid, .port_num = 0}};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				    IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH);
	T("qp_modify_alt_path_port", r == EINVAL, "%d", r);
	MUST(qp_rts(aq) == 0 && qp_rts(bq) == 0, "RTS: %m");
	// RTS→RTS may change the RNR timer, not the timeout (IBA table 92).
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .min_rnr_timer = 3};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_rts_to_rts", r == 0, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 10};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_TIMEOUT);
	T("qp_modify_rts_to_rts_timeout", r == EINVAL, "%d", r);

	// ibv_query_qp of an RTS QP (issue 41 item 8): every attribute as set, cur_qp_state the
	// current state (rxe_qp_to_attr; uverbs' query_qp copies it).
	memset(&qa, 0, sizeof(qa));
	r = ibv_query_qp(aq, &qa, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN, &qi);
	T("qp_query_state", r == 0 && qa.qp_state == IBV_QPS_RTS, "%d: state %d", r, qa.qp_state);
	T("qp_query_cur_state", r == 0 && qa.cur_qp_state == IBV_QPS_RTS, "%d: cur_qp_state %d", r, qa.cur_qp_state);
	T("qp_query_path", r == 0 && qa.path_mtu == IBV_MTU_1024 && qa.dest_qp_num == bq->qp_num && qa.port_num == 1 &&
				   qa.pkey_index == 0,
	  "mtu %d dest_qp_num %#x port %d pkey_index %d", qa.path_mtu, qa.dest_qp_num, qa.port_num, qa.pkey_index);
	T("qp_query_ah_attr", r == 0 && qa.ah_attr.dlid == b->lid && qa.ah_attr.port_num == 1 && !qa.ah_attr.is_global,
	  "dlid %#x port %d global %d", qa.ah_attr.dlid, qa.ah_attr.port_num, qa.ah_attr.is_global);
	T("qp_query_timers", r == 0 && qa.timeout == 14 && qa.retry_cnt == 7 && qa.rnr_retry == 7 && qa.min_rnr_timer == 3,
	  "timeout %d retry %d rnr_retry %d min_rnr_timer %d", qa.timeout, qa.retry_cnt, qa.rnr_retry, qa.min_rnr_timer);
	T("qp_query_rd_atomic", r == 0 && qa.max_rd_atomic == 4 && qa.max_dest_rd_atomic == 4, "max_rd_atomic %d dest %d",
	  qa.max_rd_atomic, qa.max_dest_rd_atomic);
	T("qp_query_access_psn", r == 0 && qa.qp_access_flags == (unsigned)acc && qa.sq_psn == 0 && qa.rq_psn == 0,
	  "access %#x sq_psn %#x rq_psn %#x", qa.qp_access_flags, qa.sq_psn, qa.rq_psn);
	T("qp_query_sq_draining", r == 0 && qa.sq_draining == 0, "sq_draining %d", qa.sq_draining);

	// Completions' byte_len (issue 41 item 7; rxe's make_send_cqe: the WR's length).
	struct ibv_wc wc;
	memcpy(a->buf, "byte-len", 8);
	MUST(post_recv1(b, bq, 41, 64) == 0, "post_recv: %m");
	int ok = post_rdma(a, aq, IBV_WR_SEND, 42, 0, 0, 8) == 0 && poll_one(a->cq, &wc) == 0;
	T("qp_send_byte_len", ok && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.byte_len == 8,
	  "status %d opcode %d byte_len %u", ok ? (int)wc.status : -1, wc.opcode, wc.byte_len);
	ok = poll_one(b->cq, &wc) == 0;
	T("qp_recv_byte_len", ok && wc.opcode == IBV_WC_RECV && wc.byte_len == 8, "opcode %d byte_len %u", wc.opcode, wc.byte_len);
	ok = post_rdma(a, aq, IBV_WR_RDMA_WRITE, 43, (uintptr_t)b->buf + 128, b->mr->rkey, 100) == 0 && poll_one(a->cq, &wc) == 0;
	T("qp_write_byte_len", ok && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.byte_len == 100,
	  "status %d opcode %d byte_len %u", ok ? (int)wc.status : -1, wc.opcode, wc.byte_len);
	ok = post_rdma(a, aq, IBV_WR_RDMA_READ, 44, (uintptr_t)b->buf + 128, b->mr->rkey, 50) == 0 && poll_one(a->cq, &wc) == 0;
	T("qp_read_byte_len", ok && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 50,
	  "status %d opcode %d byte_len %u", ok ? (int)wc.status : -1, wc.opcode, wc.byte_len);
	// The PSNs are where the queues are (rxe_qp_to_attr: req.psn, resp.psn): three
	// one-packet messages later, 3 on both sides.
	struct ibv_qp_attr qb;
	r = ibv_query_qp(aq, &qa, IBV_QP_SQ_PSN, &qi) | ibv_query_qp(bq, &qb, IBV_QP_RQ_PSN, &qi);
	T("qp_query_psn_moves", r == 0 && qa.sq_psn == 3 && qb.rq_psn == 3, "sq_psn %#x, peer's rq_psn %#x", qa.sq_psn, qb.rq_psn);

	// RTS→SQD→RTS, then any state→ERR→RESET→INIT.
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_SQD};
	r = modify(aq, &at, IBV_QP_STATE);
	T("qp_modify_rts_to_sqd", r == 0, "%d", r);
	// SQD→SQD may change the initiator depth; it is kept rounded up to a power of two
	// (rxe_qp_from_attr; mlx5 keeps its log).
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_SQD, .max_rd_atomic = 3};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_MAX_QP_RD_ATOMIC);
	int r2 = ibv_query_qp(aq, &qa, IBV_QP_MAX_QP_RD_ATOMIC, &qi);
	T("qp_modify_rd_atomic_pow2", r == 0 && r2 == 0 && qa.max_rd_atomic == 4, "%d %d: max_rd_atomic %d", r, r2,
	  qa.max_rd_atomic);
	// rxe_qp_chk_attr checks no retry count and no RNR timer, the timeout (5 bits) only.
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_SQD, .retry_cnt = 8, .min_rnr_timer = 33};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_RETRY_CNT | IBV_QP_MIN_RNR_TIMER);
	T("qp_modify_retry_cnt_unchecked", r == 0, "retry_cnt 8, min_rnr_timer 33: %d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_SQD, .timeout = 32};
	r = modify(aq, &at, IBV_QP_STATE | IBV_QP_TIMEOUT);
	T("qp_modify_timeout_over", r == EINVAL, "timeout 32: %d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_SQD, .retry_cnt = 7, .min_rnr_timer = 3};
	MUST(modify(aq, &at, IBV_QP_STATE | IBV_QP_RETRY_CNT | IBV_QP_MIN_RNR_TIMER) == 0, "SQD→SQD: %m");
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	r = modify(aq, &at, IBV_QP_STATE);
	T("qp_modify_sqd_to_rts", r == 0, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_ERR};
	r = modify(aq, &at, IBV_QP_STATE);
	T("qp_modify_to_err", r == 0 && aq->state == IBV_QPS_ERR, "%d", r);
	r = ibv_query_qp(aq, &qa, IBV_QP_STATE, &qi);
	T("qp_query_err", r == 0 && qa.qp_state == IBV_QPS_ERR && qa.cur_qp_state == IBV_QPS_ERR, "state %d cur %d",
	  qa.qp_state, qa.cur_qp_state);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	r = modify(aq, &at, IBV_QP_STATE);
	T("qp_modify_err_to_rts", r == EINVAL, "%d", r);
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
	r = modify(aq, &at, IBV_QP_STATE);
	T("qp_modify_err_to_reset", r == 0 && aq->state == IBV_QPS_RESET, "%d", r);
	T("qp_modify_reset_to_init_again", qp_init(aq, acc) == 0, "%m");
	T("qp_destroy_pair", ibv_destroy_qp(aq) == 0 && ibv_destroy_qp(bq) == 0, "%m");
	drain(a->cq);
	drain(b->cq);

	// UD: RESET→INIT needs the Q_Key too, and none of the RC attributes.
	struct ibv_qp_init_attr ua = rc_attr(a);
	ua.qp_type = IBV_QPT_UD;
	struct ibv_qp *uq = ibv_create_qp(a->pd, &ua);
	MUST(uq, "create UD QP: %m");
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1};
	r = modify(uq, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	T("qp_modify_ud_init_needs_qkey", r == EINVAL, "%d", r);
	at.qkey = 0x11111111;
	r = modify(uq, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS);
	T("qp_modify_ud_init_rc_attr", r == EINVAL, "%d", r);
	r = modify(uq, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	T("qp_modify_ud_init", r == 0, "%d", r);
	r = ibv_query_qp(uq, &qa, IBV_QP_QKEY, &qi);
	T("qp_query_ud_qkey", r == 0 && qa.qkey == 0x11111111 && qi.qp_type == IBV_QPT_UD, "%d: qkey %#x", r, qa.qkey);
	// A UD SEND_WITH_IMM's completion at the sender: byte_len and IBV_WC_WITH_IMM, as rxe's
	// make_send_cqe gives them.
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	MUST(modify(uq, &at, IBV_QP_STATE) == 0, "UD RTR: %m");
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
	MUST(modify(uq, &at, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS: %m");
	struct ibv_ah_attr aha = {.dlid = b->lid, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(a->pd, &aha);
	MUST(ah, "create_ah: %m");
	struct ibv_sge sg = {.addr = (uintptr_t)a->buf, .length = 24, .lkey = a->mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 51, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(5),
				 .wr.ud = {.ah = ah, .remote_qpn = 0xfffff0, .remote_qkey = 0x11111111}},
			   *sbad;
	struct ibv_wc uwc = {0};
	int uok = ibv_post_send(uq, &sw, &sbad) == 0 && poll_one(a->cq, &uwc) == 0;
	T("qp_ud_send_imm_completion", uok && uwc.status == IBV_WC_SUCCESS && uwc.opcode == IBV_WC_SEND && uwc.byte_len == 24 &&
					       uwc.wc_flags == IBV_WC_WITH_IMM,
	  "status %d opcode %d byte_len %u wc_flags %#x", uok ? (int)uwc.status : -1, uwc.opcode, uwc.byte_len, uwc.wc_flags);
	r = ibv_query_qp(uq, &qa, IBV_QP_SQ_PSN, &qi);
	T("qp_ud_query_psn", r == 0 && qa.sq_psn == 1, "%d: sq_psn %#x after one datagram", r, qa.sq_psn);
	ibv_destroy_ah(ah);
	T("qp_destroy_ud", ibv_destroy_qp(uq) == 0, "%m");
}

void conform_qp(struct side *a, struct side *b)
{
	create_checks(a, b);
	modify_checks(a, b);
}
