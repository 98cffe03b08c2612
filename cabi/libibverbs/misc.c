// libibverbs calls that need no device: strings, rates, sysfs reads, fork support; and
// the calls a device without the capability refuses (EOPNOTSUPP), as rdma-core does.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdbool.h>

#include "pib.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	if (t < IBV_NODE_CA || t > IBV_NODE_UNSPECIFIED || !s[t])
		return "unknown";
	return s[t];
}

EXPORT const char *ibv_port_state_str(enum ibv_port_state st)
{
	static const char *const s[] = {"no state change (NOP)", "down", "init", "armed", "active", "active defer"};
	if (st < IBV_PORT_NOP || st > IBV_PORT_ACTIVE_DEFER)
		return "unknown";
	return s[st];
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	if (e < IBV_EVENT_CQ_ERR || e > IBV_EVENT_WQ_FATAL)
		return "unknown";
	return s[e];
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status st)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if (st < IBV_WC_SUCCESS || st > IBV_WC_TM_RNDV_INCOMPLETE)
		return "unknown";
	return s[st];
}

EXPORT int ibv_rate_to_mult(enum ibv_rate r)
{
	switch (r) {
	case IBV_RATE_2_5_GBPS: return 1;
	case IBV_RATE_5_GBPS: return 2;
	case IBV_RATE_10_GBPS: return 4;
	case IBV_RATE_20_GBPS: return 8;
	case IBV_RATE_30_GBPS: return 12;
	case IBV_RATE_40_GBPS: return 16;
	case IBV_RATE_60_GBPS: return 24;
	case IBV_RATE_80_GBPS: return 32;
	case IBV_RATE_120_GBPS: return 48;
	case IBV_RATE_28_GBPS: return 11;
	case IBV_RATE_50_GBPS: return 20;
	case IBV_RATE_400_GBPS: return 160;
	case IBV_RATE_600_GBPS: return 240;
	case IBV_RATE_800_GBPS: return 320;
	case IBV_RATE_1200_GBPS: return 480;
	default: return -1;
	}
}

EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	switch (mult) {
	case 1: return IBV_RATE_2_5_GBPS;
	case 2: return IBV_RATE_5_GBPS;
	case 4: return IBV_RATE_10_GBPS;
	case 8: return IBV_RATE_20_GBPS;
	case 12: return IBV_RATE_30_GBPS;
	case 16: return IBV_RATE_40_GBPS;
	case 24: return IBV_RATE_60_GBPS;
	case 32: return IBV_RATE_80_GBPS;
	case 48: return IBV_RATE_120_GBPS;
	case 11: return IBV_RATE_28_GBPS;
	case 20: return IBV_RATE_50_GBPS;
	case 160: return IBV_RATE_400_GBPS;
	case 240: return IBV_RATE_600_GBPS;
	case 320: return IBV_RATE_800_GBPS;
	case 480: return IBV_RATE_1200_GBPS;
	default: return IBV_RATE_MAX;
	}
}

EXPORT int ibv_rate_to_mbps(enum ibv_rate r)
{
	switch (r) {
	case IBV_RATE_2_5_GBPS: return 2500;
	case IBV_RATE_5_GBPS: return 5000;
	case IBV_RATE_10_GBPS: return 10000;
	case IBV_RATE_20_GBPS: return 20000;
	case IBV_RATE_30_GBPS: return 30000;
	case IBV_RATE_40_GBPS: return 40000;
	case IBV_RATE_60_GBPS: return 60000;
	case IBV_RATE_80_GBPS: return 80000;
	case IBV_RATE_120_GBPS: return 120000;
	case IBV_RATE_14_GBPS: return 14062;
	case IBV_RATE_56_GBPS: return 56250;
	case IBV_RATE_112_GBPS: return 112500;
	case IBV_RATE_168_GBPS: return 168750;
	case IBV_RATE_25_GBPS: return 25781;
	case IBV_RATE_100_GBPS: return 103125;
	case IBV_RATE_200_GBPS: return 206250;
	case IBV_RATE_300_GBPS: return 309375;
	case IBV_RATE_28_GBPS: return 28125;
	case IBV_RATE_50_GBPS: return 53125;
	case IBV_RATE_400_GBPS: return 425000;
	case IBV_RATE_600_GBPS: return 637500;
	case IBV_RATE_800_GBPS: return 850000;
	case IBV_RATE_1200_GBPS: return 1275000;
	default: return -1;
	}
}

EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; r++)
		if (ibv_rate_to_mbps(r) == mbps)
			return r;
	return IBV_RATE_MAX;
}

EXPORT const char *ibv_get_sysfs_path(void) { return "/sys"; }

// ibv_read_sysfs_file reads DIR/FILE, strips the trailing newline and returns the length
// (rdma-core's sysfs.c), -1 when it cannot.
EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	int fd, len;
	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len > 0) {
		if (len == (int)size)
			buf[len - 1] = '\0';
		else if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		else if (len < (int)size)
			buf[len] = '\0';
	}
	return len;
}

EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *dev, const char *fnfmt, ...)
{
	errno = ENOENT;
	return -1;
}

// Memory given to the HCA is the process's own: fork needs no madvise here.
EXPORT int ibv_fork_init(void) { return 0; }
EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
EXPORT int ibv_dontfork_range(void *base, size_t size) { return 0; }
EXPORT int ibv_dofork_range(void *base, size_t size) { return 0; }

EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *c, struct ibv_ah_attr *a, uint8_t eth_mac[6], uint16_t *vid)
{
	return EOPNOTSUPP; // InfiniBand ports have no Ethernet L2
}

EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *c, uint32_t h)
{
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t h)
{
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *c, uint32_t h)
{
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT void ibv_unimport_pd(struct ibv_pd *pd) {}
EXPORT void ibv_unimport_mr(struct ibv_mr *mr) {}
EXPORT void ibv_unimport_dm(struct ibv_dm *dm) {}
EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) { return EOPNOTSUPP; }
EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) { return EOPNOTSUPP; }

// Kernel ABI conversions (librdmacm uses them with the kernel's rdma_cm): no kernel here.
EXPORT void ibv_copy_qp_attr_from_kern(void *dst, void *src) {}
EXPORT void ibv_copy_ah_attr_from_kern(void *dst, void *src) {}
EXPORT void ibv_copy_path_rec_from_kern(void *dst, void *src) {}
EXPORT void ibv_copy_path_rec_to_kern(void *dst, void *src) {}

// Providers register with libibverbs; this library has its one built-in device set, so
// rdma-core's providers (libmlx5, libefa, … which perftest links) load and stay unused.
EXPORT void ibv_register_driver(const char *name, void *init) {}
EXPORT void verbs_register_driver_34(void *ops) {}
EXPORT bool verbs_allow_disassociate_destroy;

// The rest of rdma-core's provider interface (IBVERBS_PRIVATE_34): only providers call
// it, and none runs here.
#define PRIV_INT(name) \
	EXPORT int name(void) { return EOPNOTSUPP; }
#define PRIV_PTR(name) \
	EXPORT void *name(void) { errno = EOPNOTSUPP; return NULL; }
#define PRIV_VOID(name) \
	EXPORT void name(void) {}

PRIV_INT(__ioctl_final_num_attrs)
PRIV_VOID(__verbs_log)
PRIV_PTR(_verbs_init_and_alloc_context)
PRIV_INT(execute_ioctl)
PRIV_INT(ibv_cmd_advise_mr)
PRIV_INT(ibv_cmd_alloc_dm)
PRIV_INT(ibv_cmd_alloc_mw)
PRIV_INT(ibv_cmd_alloc_pd)
PRIV_INT(ibv_cmd_attach_mcast)
PRIV_INT(ibv_cmd_close_xrcd)
PRIV_INT(ibv_cmd_create_ah)
PRIV_INT(ibv_cmd_create_counters)
PRIV_INT(ibv_cmd_create_cq)
PRIV_INT(ibv_cmd_create_cq_ex)
PRIV_INT(ibv_cmd_create_flow)
PRIV_INT(ibv_cmd_create_flow_action_esp)
PRIV_INT(ibv_cmd_create_qp)
PRIV_INT(ibv_cmd_create_qp_ex)
PRIV_INT(ibv_cmd_create_qp_ex2)
PRIV_INT(ibv_cmd_create_rwq_ind_table)
PRIV_INT(ibv_cmd_create_srq)
PRIV_INT(ibv_cmd_create_srq_ex)
PRIV_INT(ibv_cmd_create_wq)
PRIV_INT(ibv_cmd_dealloc_mw)
PRIV_INT(ibv_cmd_dealloc_pd)
PRIV_INT(ibv_cmd_dereg_mr)
PRIV_INT(ibv_cmd_destroy_ah)
PRIV_INT(ibv_cmd_destroy_counters)
PRIV_INT(ibv_cmd_destroy_cq)
PRIV_INT(ibv_cmd_destroy_flow)
PRIV_INT(ibv_cmd_destroy_flow_action)
PRIV_INT(ibv_cmd_destroy_qp)
PRIV_INT(ibv_cmd_destroy_rwq_ind_table)
PRIV_INT(ibv_cmd_destroy_srq)
PRIV_INT(ibv_cmd_destroy_wq)
PRIV_INT(ibv_cmd_detach_mcast)
PRIV_INT(ibv_cmd_free_dm)
PRIV_INT(ibv_cmd_get_context)
PRIV_INT(ibv_cmd_modify_cq)
PRIV_INT(ibv_cmd_modify_flow_action_esp)
PRIV_INT(ibv_cmd_modify_qp)
PRIV_INT(ibv_cmd_modify_qp_ex)
PRIV_INT(ibv_cmd_modify_srq)
PRIV_INT(ibv_cmd_modify_wq)
PRIV_INT(ibv_cmd_open_qp)
PRIV_INT(ibv_cmd_open_xrcd)
PRIV_INT(ibv_cmd_poll_cq)
PRIV_INT(ibv_cmd_post_recv)
PRIV_INT(ibv_cmd_post_send)
PRIV_INT(ibv_cmd_post_srq_recv)
PRIV_INT(ibv_cmd_query_context)
PRIV_INT(ibv_cmd_query_device_any)
PRIV_INT(ibv_cmd_query_mr)
PRIV_INT(ibv_cmd_query_port)
PRIV_INT(ibv_cmd_query_qp)
PRIV_INT(ibv_cmd_query_srq)
PRIV_INT(ibv_cmd_read_counters)
PRIV_INT(ibv_cmd_reg_dm_mr)
PRIV_INT(ibv_cmd_reg_dmabuf_mr)
PRIV_INT(ibv_cmd_reg_mr)
PRIV_INT(ibv_cmd_req_notify_cq)
PRIV_INT(ibv_cmd_rereg_mr)
PRIV_INT(ibv_cmd_resize_cq)
PRIV_INT(verbs_init_cq)
PRIV_PTR(verbs_open_device)
PRIV_VOID(verbs_set_ops)
PRIV_VOID(verbs_uninit_context)
