// mcast.c: ibv_attach_mcast(3) and ibv_detach_mcast, with the kernel's checks
// (ib_attach_mcast: a multicast GID, a UD QP, a multicast LID — is_valid_mcast_lid).
#include "conform.h"

static struct ibv_qp *ud_qp(struct side *s)
{
	struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);
	MUST(qp, "create UD QP: %m");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x11111111};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0, "UD INIT: %m");
	return qp;
}

void conform_mcast(struct side *a, struct side *b)
{
	union ibv_gid mgid = {.raw = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78}};
	union ibv_gid ugid;
	MUST(ibv_query_gid(a->ctx, 1, 0, &ugid) == 0, "query_gid: %m");
	struct ibv_qp *ud = ud_qp(a);
	T("mcast_attach", ibv_attach_mcast(ud, &mgid, 0xc123) == 0, "attach a UD QP: %m");
	T("mcast_attach_again", ibv_attach_mcast(ud, &mgid, 0xc123) == 0, "attach the same group again: %m");
	int r = ibv_attach_mcast(ud, &ugid, 0xc123);
	T("mcast_attach_unicast_gid_EINVAL", r == EINVAL, "attach to a unicast GID: %d", r);
	union ibv_gid g2 = mgid;
	g2.raw[15] ^= 1;
	r = ibv_attach_mcast(ud, &g2, a->lid);
	T("mcast_attach_unicast_lid_EINVAL", r == EINVAL, "attach with a unicast LID %#x: %d", a->lid, r);
	r = ibv_attach_mcast(ud, &g2, 0xffff);
	T("mcast_attach_permissive_lid_EINVAL", r == EINVAL, "attach with the permissive LID: %d", r);
	r = ibv_detach_mcast(ud, &g2, 0xc124);
	T("mcast_detach_not_attached_EINVAL", r == EINVAL, "detach from a group not attached: %d", r);
	r = ibv_destroy_qp(ud);
	T("mcast_destroy_attached_EBUSY", r == EBUSY, "destroy_qp with a group attached: %d", r);
	T("mcast_detach", ibv_detach_mcast(ud, &mgid, 0xc123) == 0, "detach: %m");
	T("mcast_destroy_detached", ibv_destroy_qp(ud) == 0, "destroy_qp after detach: %m");

	struct ibv_qp *rc = rc_qp(a, NULL);
	r = ibv_attach_mcast(rc, &mgid, 0xc123);
	T("mcast_attach_rc_EINVAL", r == EINVAL, "attach an RC QP: %d", r);
	ibv_destroy_qp(rc);
}
