// The C side of pibgw's libibverbs.so.1: the libibverbs API (symbols and versions from
// rdma-core's libibverbs.map, see libibverbs.map here) over the Go verbs in
// ../ibverbs/verbs.go, whose library lazy.c loads at the first call that needs it. The
// objects programs see are allocated here with the real layouts of <infiniband/verbs.h>;
// the inline data path (ibv_post_send, ibv_poll_cq, …) reaches Go through context->ops,
// the extended verbs through struct verbs_context and struct ibv_qp_ex.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "pib.h"
#include "pibgw_go.h" // the Go library's functions (build-libs.sh: cgo's header)

#define EXPORT __attribute__((visibility("default")))

#define ctx_of(c) ((struct pib_context *)((char *)(c) - offsetof(struct pib_context, vctx.context)))
#define H(p, type) (((struct type *)(p))->h)

// ---- fork ----------------------------------------------------------------------------

// A child forked after the Go side was loaded gets a copy of its own at its first call
// (lazy.c), and with it a session of its own: its device list is read again there. The
// handlers keep dev_mu whole across fork(2).
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;

static void fork_prepare(void) { pthread_mutex_lock(&dev_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&dev_mu); }
static void fork_child(void) { pthread_mutex_init(&dev_mu, NULL); }

__attribute__((constructor)) static void init_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

// ---- devices --------------------------------------------------------------------------

static struct pib_device *devs;
static int ndevs = -1;
static unsigned devs_generation; // pib_go_generation() when devs was read

static int load_devices(void)
{
	pthread_mutex_lock(&dev_mu);
	if (ndevs >= 0 && devs_generation != pib_go_generation()) {
		// Forked: the devices are the same, but this process's session is new. A device
		// list the program kept from before the fork stays valid (the array is kept).
		int n = pibgo_init();
		if (n < 0) {
			pthread_mutex_unlock(&dev_mu);
			errno = -n;
			return n;
		}
		devs_generation = pib_go_generation();
		if (n < ndevs)
			ndevs = n;
	}
	if (ndevs < 0) {
		int n = pibgo_init();
		if (n < 0) {
			pthread_mutex_unlock(&dev_mu);
			errno = -n;
			return n;
		}
		devs = calloc(n ? n : 1, sizeof(*devs));
		for (int i = 0; i < n; i++) {
			struct pib_device *d = &devs[i];
			d->index = i;
			d->dev.node_type = IBV_NODE_CA;
			d->dev.transport_type = IBV_TRANSPORT_IB;
			pibgo_device_info(i, d->dev.name, sizeof(d->dev.name), &d->guid);
			snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
			// The kernel's paths: under pibgw exec's sysfs view they hold the
			// device's attributes (ibv_devinfo's board_id); without one reads through
			// them fail, as for a device without the attribute.
			snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/%s", d->dev.dev_name);
			snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", d->dev.name);
		}
		ndevs = n;
		devs_generation = pib_go_generation();
	}
	pthread_mutex_unlock(&dev_mu);
	return ndevs;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	int n = load_devices();
	if (n < 0) {
		// No daemon to attach to: no devices, as on a host without RDMA hardware.
		n = 0;
	}
	struct ibv_device **l = calloc(n + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < n; i++)
		l[i] = &devs[i].dev;
	if (num)
		*num = n;
	return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

EXPORT int ibv_get_device_index(struct ibv_device *d) { return ((struct pib_device *)d)->index; }

EXPORT __be64 ibv_get_device_guid(struct ibv_device *d) { return htobe64(((struct pib_device *)d)->guid); }

// ---- contexts -------------------------------------------------------------------------

static int query_port_op(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);
static int query_device_ex_op(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *a, size_t len);
static int advise_mr_op(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
			struct ibv_sge *sg_list, uint32_t num_sge);
static int query_rt_values_op(struct ibv_context *c, struct ibv_values_ex *values);
static struct ibv_cq_ex *create_cq_ex_op(struct ibv_context *c, struct ibv_cq_init_attr_ex *a);
static struct ibv_qp *create_qp_ex_op(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);
static struct ibv_srq *create_srq_ex_op(struct ibv_context *c, struct ibv_srq_init_attr_ex *a);
static int get_srq_num_op(struct ibv_srq *srq, uint32_t *num);
static int modify_cq_op(struct ibv_cq *cq, struct ibv_modify_cq_attr *a);
static int poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int req_notify_cq_op(struct ibv_cq *cq, int solicited);
static int post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int post_srq_recv_op(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static struct ibv_xrcd *open_xrcd_op(struct ibv_context *c, struct ibv_xrcd_init_attr *a);
static int close_xrcd_op(struct ibv_xrcd *x);
static struct ibv_mw *alloc_mw_op(struct ibv_pd *pd, enum ibv_mw_type type);
static int dealloc_mw_op(struct ibv_mw *mw);
static int bind_mw_op(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (load_devices() < 0) // in a forked child, the first call may be this one
		return NULL;
	struct pib_device *d = (struct pib_device *)device;
	struct pib_context *pc = calloc(1, sizeof(*pc));
	if (!pc) {
		errno = ENOMEM;
		return NULL;
	}
	int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (fd < 0) {
		free(pc);
		return NULL;
	}
	int err = 0;
	pc->h = pibgo_open(d->index, fd, &err);
	if (!pc->h) {
		close(fd);
		free(pc);
		errno = err;
		return NULL;
	}
	struct verbs_context *v = &pc->vctx;
	struct ibv_context *c = &v->context;
	v->sz = sizeof(*v);
	v->query_port = query_port_op;
	v->query_device_ex = query_device_ex_op;
	v->create_cq_ex = create_cq_ex_op;
	v->create_qp_ex = create_qp_ex_op;
	v->create_srq_ex = create_srq_ex_op;
	v->get_srq_num = get_srq_num_op;
	v->open_xrcd = open_xrcd_op;
	v->close_xrcd = close_xrcd_op;
	v->modify_cq = modify_cq_op;
	v->advise_mr = advise_mr_op;
	v->query_rt_values = query_rt_values_op;
	c->device = device;
	// The kernel's is the uverbs device file, which programs and bindings dup(), fstat()
	// and pass to ibv_import_device: a descriptor of its own here too (a memfd, close-on-
	// exec as libibverbs opens uverbs), closed with the context.
	char name[64];
	snprintf(name, sizeof(name), "pibgw-%s", device->dev_name);
	c->cmd_fd = memfd_create(name, MFD_CLOEXEC);
	if (c->cmd_fd < 0) {
		int e = errno;
		pibgo_close(pc->h);
		close(fd);
		free(pc);
		errno = e;
		return NULL;
	}
	c->async_fd = fd;
	// rxe has a completion vector per possible CPU (num_possible_cpus), mlx5 one per
	// completion EQ (about as many): programs spread their CQs over them.
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	c->num_comp_vectors = ncpu > 0 ? ncpu : 1;
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&c->mutex, NULL);
	c->ops.poll_cq = poll_cq_op;
	c->ops.req_notify_cq = req_notify_cq_op;
	c->ops.post_send = post_send_op;
	c->ops.post_recv = post_recv_op;
	c->ops.post_srq_recv = post_srq_recv_op;
	c->ops.alloc_mw = alloc_mw_op;
	c->ops.dealloc_mw = dealloc_mw_op;
	c->ops.bind_mw = bind_mw_op;
	return c;
}

EXPORT int ibv_close_device(struct ibv_context *c)
{
	struct pib_context *pc = ctx_of(c);
	pibgo_close(pc->h); // stops the async event forwarder before the fd closes
	close(c->async_fd);
	close(c->cmd_fd);
	pthread_mutex_destroy(&c->mutex);
	free(pc);
	return 0;
}

EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	return pibgo_query_device(ctx_of(c)->h, a);
}

static int query_device_ex_op(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			      struct ibv_device_attr_ex *a, size_t len)
{
	struct ibv_device_attr_ex x;
	if (in && in->comp_mask)
		return EINVAL;
	if (len < sizeof(x.orig_attr))
		return EINVAL;
	memset(&x, 0, sizeof(x));
	int rc = pibgo_query_device(ctx_of(c)->h, &x.orig_attr);
	if (rc)
		return rc;
	x.phys_port_cnt_ex = x.orig_attr.phys_port_cnt;
	// The whole capability mask, of which orig_attr has the low 32 bits (uverbs'
	// ib_uverbs_ex_query_device).
	x.device_cap_flags_ex = x.orig_attr.device_cap_flags;
	// ibv_modify_cq's moderation (modify_cq_op) takes any 16-bit count and period.
	x.cq_mod_caps.max_cq_count = UINT16_MAX;
	x.cq_mod_caps.max_cq_period = UINT16_MAX;
	// On-demand paging on every transport, explicit regions only (../ibverbs/odp.go).
	x.odp_caps.general_caps = IBV_ODP_SUPPORT;
	x.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
						    IBV_ODP_SUPPORT_SRQ_RECV;
	x.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						    IBV_ODP_SUPPORT_SRQ_RECV;
	x.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	x.xrc_odp_caps = x.odp_caps.per_transport_caps.rc_odp_caps;
	// Completion timestamps: 64 bits of a nanosecond clock (../ibverbs/clock.go).
	x.completion_timestamp_mask = UINT64_MAX;
	x.hca_core_clock = PIB_CORE_CLOCK_KHZ;
	memcpy(a, &x, len < sizeof(x) ? len : sizeof(x));
	if (len > sizeof(x))
		memset((char *)a + sizeof(x), 0, len - sizeof(x));
	return 0;
}

static int query_port_op(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len)
{
	struct ibv_port_attr x;
	memset(&x, 0, sizeof(x));
	int rc = pibgo_query_port(ctx_of(c)->h, port, &x);
	if (rc)
		return rc;
	memcpy(a, &x, len < sizeof(x) ? len : sizeof(x));
	return 0;
}

// ibv_query_port@@IBVERBS_1.1 takes the older, shorter struct (rdma-core's compat).
struct _compat_ibv_port_attr;
#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	return query_port_op(c, port, (struct ibv_port_attr *)a, offsetof(struct ibv_port_attr, port_cap_flags2));
}

EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	int rc = pibgo_query_gid(ctx_of(c)->h, port, index, gid->raw);
	if (rc) {
		errno = rc;
		return -1;
	}
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
	struct ibv_gid_entry x;
	if (flags)
		return EINVAL;
	memset(&x, 0, sizeof(x));
	int rc = pibgo_query_gid(ctx_of(c)->h, port, index, x.gid.raw);
	if (rc)
		return rc;
	if (!x.gid.global.subnet_prefix && !x.gid.global.interface_id)
		return ENODATA;
	x.gid_index = index;
	x.port_num = port;
	x.gid_type = IBV_GID_TYPE_IB;
	x.ndev_ifindex = 0;
	memcpy(e, &x, size < sizeof(x) ? size : sizeof(x));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
				    size_t max, uint32_t flags, size_t size)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	size_t n = 0;
	if (flags)
		return -EINVAL;
	if (ibv_query_device(c, &da))
		return -EIO;
	for (int p = 1; p <= da.phys_port_cnt; p++) {
		if (query_port_op(c, p, &pa, sizeof(pa)))
			return -EIO;
		for (int i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry x;
			if (_ibv_query_gid_ex(c, p, i, &x, 0, sizeof(x)))
				continue;
			if (n == max)
				return -EINVAL;
			memcpy((char *)entries + n * size, &x, size < sizeof(x) ? size : sizeof(x));
			n++;
		}
	}
	return n;
}

// rdma-core's driver.h, which Debian does not install.
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, enum ibv_gid_type_sysfs *type)
{
	union ibv_gid gid;
	if (ibv_query_gid(c, port, index, &gid))
		return -1;
	*type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1; // "IB/RoCE v1": an InfiniBand port's GIDs
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	uint16_t v;
	int rc = pibgo_query_pkey(ctx_of(c)->h, port, index, &v);
	if (rc) {
		errno = rc;
		return -1;
	}
	*pkey = htobe16(v);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	for (int i = 0;; i++) {
		__be16 v;
		if (ibv_query_pkey(c, port, i, &v))
			break;
		if (v == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}

// ---- async events ---------------------------------------------------------------------

EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	struct pib_async a;
	for (;;) {
		uint64_t v;
		if (read(c->async_fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		if (pibgo_get_async_event(ctx_of(c)->h, &a) == 0)
			break;
	}
	memset(ev, 0, sizeof(*ev));
	ev->event_type = a.type;
	switch (a.type) {
	case IBV_EVENT_CQ_ERR:
		ev->element.cq = a.element;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		ev->element.qp = a.element;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		ev->element.srq = a.element;
		break;
	default:
		ev->element.port_num = a.port;
	}
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = ev->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		break;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = ev->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = ev->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		break;
	}
	default:
		break;
	}
}

// ---- PD, MR ---------------------------------------------------------------------------

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct pib_pd *p = calloc(1, sizeof(*p));
	int err = 0;
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->h = pibgo_alloc_pd(ctx_of(c)->h, &err);
	if (!p->h) {
		free(p);
		errno = err;
		return NULL;
	}
	p->pd.context = c;
	p->pd.handle = (uint32_t)p->h;
	return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int rc = pibgo_dealloc_pd(H(pd, pib_pd));
	if (rc)
		return rc;
	free(pd);
	return 0;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	struct pib_mr *m;
	int err = 0;
	uint32_t lkey = 0, rkey = 0;
	access &= ~IBV_ACCESS_OPTIONAL_RANGE; // optional flags may be ignored (ibv_reg_mr(3))
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->h = pibgo_reg_mr(H(pd, pib_pd), addr, length, iova, access, &lkey, &rkey, &err);
	if (!m->h) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = (uint32_t)m->h;
	m->mr.lkey = lkey;
	m->mr.rkey = rkey;
	return &m->mr;
}

// ibv_advise_mr (inline in verbs.h, through verbs_context): the SGEs must lie in ODP
// regions of pd; a prefetch has nothing to do ahead of the first access (../ibverbs/odp.go).
static int advise_mr_op(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
			struct ibv_sge *sg_list, uint32_t num_sge)
{
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	if (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH)
		return EOPNOTSUPP;
	return pibgo_advise_mr(H(pd, pib_pd), sg_list, num_sge);
}

#undef ibv_reg_mr
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

#undef ibv_reg_mr_iova
EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
					int fd, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

// ibv_rereg_mr: 0, or IBV_REREG_MR_ERR_INPUT (what libibverbs' ibv_rereg_mr refuses
// itself: unknown flags, an empty new translation, access without CHANGE_ACCESS) or
// IBV_REREG_MR_ERR_CMD (what the kernel refuses: no flags, bad access, memory it cannot
// pin, …) with errno set. The keys stay, as with rxe and mlx5 (../../hca/mr.go).
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd) {
		errno = EINVAL; // libibverbs would follow the NULL PD; the kernel knows no handle
		return IBV_REREG_MR_ERR_CMD;
	}
	uint32_t lkey = 0, rkey = 0;
	access &= ~IBV_ACCESS_OPTIONAL_RANGE;
	int rc = pibgo_rereg_mr(H(mr, pib_mr), flags, (flags & IBV_REREG_MR_CHANGE_PD) ? H(pd, pib_pd) : 0, addr, length,
				access, &lkey, &rkey);
	if (rc) {
		errno = rc;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = length;
	}
	mr->lkey = lkey;
	mr->rkey = rkey;
	return 0;
}

// ---- memory windows (context->ops: ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw are inline)

static struct ibv_mw *alloc_mw_op(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct pib_mw *m = calloc(1, sizeof(*m));
	int err = 0;
	uint32_t rkey = 0;
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->h = pibgo_alloc_mw(H(pd, pib_pd), type, &rkey, &err);
	if (!m->h) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mw.context = pd->context;
	m->mw.pd = pd;
	m->mw.rkey = rkey;
	m->mw.handle = (uint32_t)m->h;
	m->mw.type = type;
	return &m->mw;
}

static int dealloc_mw_op(struct ibv_mw *mw)
{
	int rc = pibgo_dealloc_mw(H(mw, pib_mw));
	if (rc)
		return rc;
	free(mw);
	return 0;
}

// bind_mw_op is ibv_bind_mw's provider half (verbs.h has checked the type and the PDs): it
// posts a BIND_MW WR and gives the window the R_Key it will have, as providers do.
static int bind_mw_op(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	uint32_t rkey = 0;
	const struct ibv_mw_bind_info *i = &b->bind_info;
	int rc = pibgo_bind_mw(H(qp, pib_qp), H(mw, pib_mw), b->wr_id, b->send_flags, i->mr ? H(i->mr, pib_mr) : 0,
			       i->addr, i->length, i->mw_access_flags, &rkey);
	if (rc)
		return rc;
	mw->rkey = rkey;
	return 0;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int rc = pibgo_dereg_mr(H(mr, pib_mr));
	if (rc)
		return rc;
	free(mr);
	return 0;
}

// ---- completion channels and CQs ------------------------------------------------------

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct pib_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (fd < 0) {
		free(ch);
		return NULL;
	}
	ch->h = pibgo_create_channel(ctx_of(c)->h, fd);
	ch->ch.context = c;
	ch->ch.fd = fd;
	ch->ch.refcnt = 0;
	return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct pib_channel *ch = (struct pib_channel *)channel;
	pthread_mutex_lock(&channel->context->mutex);
	if (channel->refcnt) {
		pthread_mutex_unlock(&channel->context->mutex);
		return EBUSY;
	}
	pthread_mutex_unlock(&channel->context->mutex);
	pibgo_destroy_channel(ch->h); // stops the forwarder before the fd closes
	close(channel->fd);
	free(ch);
	return 0;
}

static int cq_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr);
static int cq_next_poll(struct ibv_cq_ex *cq);
static void cq_end_poll(struct ibv_cq_ex *cq);
static enum ibv_wc_opcode cq_read_opcode(struct ibv_cq_ex *cq);
static uint32_t cq_read_vendor_err(struct ibv_cq_ex *cq);
static uint32_t cq_read_byte_len(struct ibv_cq_ex *cq);
static __be32 cq_read_imm_data(struct ibv_cq_ex *cq);
static uint32_t cq_read_qp_num(struct ibv_cq_ex *cq);
static uint32_t cq_read_src_qp(struct ibv_cq_ex *cq);
static unsigned int cq_read_wc_flags(struct ibv_cq_ex *cq);
static uint32_t cq_read_slid(struct ibv_cq_ex *cq);
static uint8_t cq_read_sl(struct ibv_cq_ex *cq);
static uint8_t cq_read_dlid_path_bits(struct ibv_cq_ex *cq);

static struct pib_cq *create_cq(struct ibv_context *c, int cqe, void *cq_context,
				struct ibv_comp_channel *channel, int comp_vector)
{
	struct pib_cq *q;
	int err = 0, actual = 0;
	if (comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	if (channel && channel->context != c) {
		errno = EBADF; // not an fd of this context (the kernel's lookup_get_fd_uobject)
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->h = pibgo_create_cq(ctx_of(c)->h, cqe, channel ? ((struct pib_channel *)channel)->h : 0, q, &actual, &err);
	if (!q->h) {
		free(q);
		errno = err;
		return NULL;
	}
	q->cq.context = c;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	q->cq.handle = (uint32_t)q->h;
	q->cq.cqe = actual;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	q->cq.start_poll = cq_start_poll;
	q->cq.next_poll = cq_next_poll;
	q->cq.end_poll = cq_end_poll;
	q->cq.read_opcode = cq_read_opcode;
	q->cq.read_vendor_err = cq_read_vendor_err;
	q->cq.read_byte_len = cq_read_byte_len;
	q->cq.read_imm_data = cq_read_imm_data;
	q->cq.read_qp_num = cq_read_qp_num;
	q->cq.read_src_qp = cq_read_src_qp;
	q->cq.read_wc_flags = cq_read_wc_flags;
	q->cq.read_slid = cq_read_slid;
	q->cq.read_sl = cq_read_sl;
	q->cq.read_dlid_path_bits = cq_read_dlid_path_bits;
	if (channel) {
		pthread_mutex_lock(&c->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&c->mutex);
	}
	return q;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct pib_cq *q = create_cq(c, cqe, cq_context, channel, comp_vector);
	return q ? ibv_cq_ex_to_cq(&q->cq) : NULL;
}

static uint64_t cq_read_completion_ts(struct ibv_cq_ex *cq)
{
	return ((struct pib_cq *)cq)->ts;
}

static uint64_t cq_read_completion_wallclock_ns(struct ibv_cq_ex *cq)
{
	struct pib_cq *q = (struct pib_cq *)cq;
	return q->wall_base + q->ts;
}

static struct ibv_cq_ex *create_cq_ex_op(struct ibv_context *c, struct ibv_cq_init_attr_ex *a)
{
	const uint64_t stamps = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	const uint64_t supported = IBV_WC_STANDARD_FLAGS | stamps;
	if (a->wc_flags & ~supported) {
		errno = EOPNOTSUPP; // CVLAN, flow tags, TM: not on this HCA
		return NULL;
	}
	if (a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct pib_cq *q = create_cq(c, a->cqe, a->cq_context, a->channel, a->comp_vector);
	if (q && (a->wc_flags & stamps)) {
		uint64_t now;
		int rc = pibgo_cq_timestamps(q->h);
		if (!rc)
			rc = pibgo_read_clock(ctx_of(c)->h, &now, &q->wall_base);
		if (rc) {
			ibv_destroy_cq(ibv_cq_ex_to_cq(&q->cq));
			errno = rc;
			return NULL;
		}
		q->stamps = 1;
		q->cq.read_completion_ts = cq_read_completion_ts;
		q->cq.read_completion_wallclock_ns = cq_read_completion_wallclock_ns;
	}
	return q ? &q->cq : NULL;
}

// ibv_query_rt_values_ex (inline in verbs.h, through verbs_context): the raw clock is the
// device clock's count, in tv_nsec, as mlx5 returns its cycles.
static int query_rt_values_op(struct ibv_context *c, struct ibv_values_ex *values)
{
	if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	uint32_t done = 0;
	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		uint64_t now, base;
		int rc = pibgo_read_clock(ctx_of(c)->h, &now, &base);
		if (rc)
			return rc;
		values->raw_clock.tv_sec = 0;
		values->raw_clock.tv_nsec = (long)now;
		done |= IBV_VALUES_MASK_RAW_CLOCK;
	}
	values->comp_mask = done;
	return 0;
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	int actual = 0;
	int rc = pibgo_resize_cq(H(cq, pib_cq), cqe, &actual);
	if (rc)
		return rc;
	cq->cqe = actual;
	return 0;
}

static int modify_cq_op(struct ibv_cq *cq, struct ibv_modify_cq_attr *a)
{
	// An empty mask is EINVAL too (uverbs' ib_uverbs_ex_modify_cq).
	if (!a->attr_mask || (a->attr_mask & ~(uint32_t)IBV_CQ_ATTR_MODERATE))
		return EINVAL;
	return pibgo_moderate_cq(H(cq, pib_cq), a->moderate.cq_count, a->moderate.cq_period);
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct ibv_comp_channel *channel = cq->channel;
	int rc = pibgo_destroy_cq(H(cq, pib_cq));
	if (rc)
		return rc;
	if (channel) {
		pthread_mutex_lock(&channel->context->mutex);
		channel->refcnt--;
		pthread_mutex_unlock(&channel->context->mutex);
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(cq);
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct pib_channel *ch = (struct pib_channel *)channel;
	for (;;) {
		uint64_t v;
		// A blocking fd: spin a little first, taking in what arrives (pibgo_spin_cq_event),
		// as the answer to a request usually comes within microseconds. A non-blocking
		// one belongs to a program that polls it and wants EAGAIN at once.
		int fl = fcntl(channel->fd, F_GETFL);
		if (fl >= 0 && !(fl & O_NONBLOCK)) {
			void *p = pibgo_spin_cq_event(ch->h);
			if (p) {
				*cq = p;
				*cq_context = (*cq)->cq_context;
				return 0;
			}
		}
		if (read(channel->fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		void *p = pibgo_get_cq_event(ch->h);
		if (p) {
			*cq = p;
			*cq_context = (*cq)->cq_context;
			return 0;
		}
	}
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
	pibgo_ack_cq_events(H(cq, pib_cq), nevents);
}

static int poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	if (n <= 0)
		return 0;
	return pibgo_poll_cq(H(cq, pib_cq), n, wc, NULL);
}

static int req_notify_cq_op(struct ibv_cq *cq, int solicited)
{
	// A CQ without a channel can be armed, and its event goes nowhere (rxe_req_notify_cq,
	// mlx5's arm doorbell): 0, as there.
	if (!cq->channel)
		return 0;
	return pibgo_req_notify_cq(H(cq, pib_cq), solicited);
}

// ibv_cq_ex polling: the read_* calls read the current completion (cq_poll_one).
#define CUR(cq) (&((struct pib_cq *)(cq))->wc)

// ibv_cq_ex polling takes one completion from the CQ per start_poll or next_poll, as a
// driver reads one CQE: a program may end_poll after any of them (ibv_rc_pingpong -t
// takes two at most), and what it did not read stays in the CQ. (Taking 16 at once lost
// the rest at end_poll: ibv_rc_pingpong -t hung now and then.)
static int cq_poll_one(struct pib_cq *q)
{
	int n = pibgo_poll_cq(q->h, 1, &q->wc, q->stamps ? &q->ts : NULL);
	if (n < 0)
		return -n;
	if (n == 0)
		return ENOENT;
	q->cq.wr_id = q->wc.wr_id;
	q->cq.status = q->wc.status;
	return 0;
}

static int cq_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	return cq_poll_one((struct pib_cq *)cq);
}

static int cq_next_poll(struct ibv_cq_ex *cq)
{
	return cq_poll_one((struct pib_cq *)cq);
}

static void cq_end_poll(struct ibv_cq_ex *cq)
{
	(void)cq;
}

static enum ibv_wc_opcode cq_read_opcode(struct ibv_cq_ex *cq) { return CUR(cq)->opcode; }
static uint32_t cq_read_vendor_err(struct ibv_cq_ex *cq) { return CUR(cq)->vendor_err; }
static uint32_t cq_read_byte_len(struct ibv_cq_ex *cq) { return CUR(cq)->byte_len; }
static __be32 cq_read_imm_data(struct ibv_cq_ex *cq) { return CUR(cq)->imm_data; }
static uint32_t cq_read_qp_num(struct ibv_cq_ex *cq) { return CUR(cq)->qp_num; }
static uint32_t cq_read_src_qp(struct ibv_cq_ex *cq) { return CUR(cq)->src_qp; }
static unsigned int cq_read_wc_flags(struct ibv_cq_ex *cq) { return CUR(cq)->wc_flags; }
static uint32_t cq_read_slid(struct ibv_cq_ex *cq) { return CUR(cq)->slid; }
static uint8_t cq_read_sl(struct ibv_cq_ex *cq) { return CUR(cq)->sl; }
static uint8_t cq_read_dlid_path_bits(struct ibv_cq_ex *cq) { return CUR(cq)->dlid_path_bits; }

// ---- SRQs -----------------------------------------------------------------------------

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct pib_srq *s = calloc(1, sizeof(*s));
	int err = 0;
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->h = pibgo_create_srq(H(pd, pib_pd), &a->attr, s, &err);
	if (!s->h) {
		free(s);
		errno = err;
		return NULL;
	}
	s->srq.context = pd->context;
	s->srq.srq_context = a->srq_context;
	s->srq.pd = pd;
	s->srq.handle = (uint32_t)s->h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

static struct ibv_srq *create_srq_ex_op(struct ibv_context *c, struct ibv_srq_init_attr_ex *a)
{
	// Basic SRQs with a PD, and XRC SRQs (a PD, an XRC domain and a CQ); no tag matching.
	const uint32_t xrc = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC) {
		if ((a->comp_mask & xrc) != xrc || (a->comp_mask & ~xrc) || !a->pd || !a->xrcd || !a->cq) {
			errno = EINVAL;
			return NULL;
		}
		struct pib_srq *s = calloc(1, sizeof(*s));
		int err = 0;
		if (!s) {
			errno = ENOMEM;
			return NULL;
		}
		s->h = pibgo_create_xrc_srq(H(a->pd, pib_pd), H(a->xrcd, pib_xrcd), H(a->cq, pib_cq), &a->attr, s, &err);
		if (!s->h) {
			free(s);
			errno = err;
			return NULL;
		}
		s->srq.context = c;
		s->srq.srq_context = a->srq_context;
		s->srq.pd = a->pd;
		s->srq.handle = (uint32_t)s->h;
		pthread_mutex_init(&s->srq.mutex, NULL);
		pthread_cond_init(&s->srq.cond, NULL);
		return &s->srq;
	}
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
	    (a->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return ibv_create_srq(a->pd, (struct ibv_srq_init_attr *)a);
}

static int get_srq_num_op(struct ibv_srq *srq, uint32_t *num)
{
	return pibgo_srq_num(H(srq, pib_srq), num); // EOPNOTSUPP for an SRQ that is not XRC's
}

// ---- XRC domains (ibv_open_xrcd/ibv_close_xrcd are inline, through verbs_context) -------

static struct ibv_xrcd *open_xrcd_op(struct ibv_context *c, struct ibv_xrcd_init_attr *a)
{
	const uint32_t need = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	if (a->comp_mask & ~need) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & need) != need) {
		errno = EINVAL; // as rdma-core's ibv_cmd_open_xrcd
		return NULL;
	}
	// Processes share a domain through a file (its inode); within this process the same
	// file opens the same domain, fd -1 a new one.
	uint64_t dev = 0, ino = 0;
	if (a->fd >= 0) {
		struct stat st;
		if (fstat(a->fd, &st))
			return NULL;
		dev = st.st_dev;
		ino = st.st_ino;
	}
	struct pib_xrcd *x = calloc(1, sizeof(*x));
	int err = 0;
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	x->h = pibgo_open_xrcd(ctx_of(c)->h, a->fd >= 0, dev, ino, a->oflags, &err);
	if (!x->h) {
		free(x);
		errno = err;
		return NULL;
	}
	x->xrcd.context = c;
	return &x->xrcd;
}

static int close_xrcd_op(struct ibv_xrcd *x)
{
	int rc = pibgo_close_xrcd(H(x, pib_xrcd));
	if (rc)
		return rc;
	free(x);
	return 0;
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *a, int mask)
{
	return pibgo_modify_srq(H(srq, pib_srq), a, mask);
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *a)
{
	return pibgo_query_srq(H(srq, pib_srq), a);
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	int rc = pibgo_destroy_srq(H(srq, pib_srq));
	if (rc)
		return rc;
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(srq);
	return 0;
}

static int post_srq_recv_op(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return pibgo_post_srq_recv(H(srq, pib_srq), wr, bad);
}

// ---- QPs ------------------------------------------------------------------------------

static void wr_set_ops(struct ibv_qp_ex *q);

// The rdma_cm ID whose QP create_qp makes (pib_cm_create_qp), per thread.
static __thread uint64_t cm_qp_id;

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_xrcd *xrcd, struct ibv_qp_init_attr *a, uint64_t send_ops)
{
	struct pib_qp *q;
	struct pib_qp_create pc;
	int err = 0;
	// An XRC send QP has no receive side, an XRC receive QP (created in an XRC domain,
	// xrcd set) no CQs at all.
	int xrc_recv = a->qp_type == IBV_QPT_XRC_RECV, xrc_send = a->qp_type == IBV_QPT_XRC_SEND;
	if ((!xrc_recv && !a->send_cq) || (!xrc_recv && !xrc_send && !a->recv_cq) || (xrc_recv && !xrcd) ||
	    (!xrc_recv && !pd)) {
		errno = EINVAL;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&pc, 0, sizeof(pc));
	pc.pd = pd ? H(pd, pib_pd) : 0;
	pc.xrcd = xrc_recv ? H(xrcd, pib_xrcd) : 0;
	pc.send_cq = a->send_cq ? H(a->send_cq, pib_cq) : 0;
	pc.recv_cq = a->recv_cq ? H(a->recv_cq, pib_cq) : 0;
	pc.srq = a->srq ? H(a->srq, pib_srq) : 0;
	pc.cap = a->cap;
	pc.qp_type = a->qp_type;
	pc.sq_sig_all = a->sq_sig_all;
	pc.cmid = cm_qp_id;
	q->h = pibgo_create_qp(&pc, q, &err);
	if (!q->h) {
		free(q);
		errno = err;
		return NULL;
	}
	a->cap = pc.cap;
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = pd ? pd->context : xrcd->context;
	qp->qp_context = a->qp_context;
	qp->pd = pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = (uint32_t)q->h;
	qp->qp_num = pc.qp_num;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = a->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	q->qpx.comp_mask = 0;
	wr_set_ops(&q->qpx);
	(void)send_ops;
	return qp;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	return create_qp(pd, NULL, a, 0);
}

// pib_cm_create_qp is rdma_create_qp's ibv_create_qp (librdmacm.so.1): the QP is the rdma_cm
// ID's, created and moved to INIT (UD: RTS) by package rdmacm.
EXPORT struct ibv_qp *pib_cm_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, uint64_t id)
{
	cm_qp_id = id;
	struct ibv_qp *qp = create_qp(pd, NULL, a, 0);
	cm_qp_id = 0;
	if (qp)
		qp->state = a->qp_type == IBV_QPT_UD ? IBV_QPS_RTS : IBV_QPS_INIT;
	return qp;
}

static struct ibv_qp *create_qp_ex_op(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
			       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	// The send ops per transport, as rxe's check_qp_init_attr takes them (XRC send QPs,
	// which rxe lacks, as RC; mlx5 does the same).
	const uint64_t rc_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
				IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
				IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW;
	const uint64_t uc_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
				IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
	const uint64_t ud_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	if (a->comp_mask & ~known) {
		errno = EOPNOTSUPP; // RSS, TSO, source QPN, …: not on this HCA
		return NULL;
	}
	// No create flag is supported (rxe: RXE_QP_CREATE_FLAGS_SUP is 0, EOPNOTSUPP for any);
	// CREATE_FLAGS in comp_mask with none set is a plain create.
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	// XRC receive QPs belong to an XRC domain, every other QP to a PD.
	struct ibv_xrcd *xrcd = NULL;
	if (a->qp_type == IBV_QPT_XRC_RECV) {
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd) {
			errno = EINVAL;
			return NULL;
		}
		xrcd = a->xrcd;
	} else if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd) {
		errno = EINVAL;
		return NULL;
	}
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		uint64_t ops = 0;
		switch (a->qp_type) {
		case IBV_QPT_RC:
		case IBV_QPT_XRC_SEND:
			ops = rc_ops;
			break;
		case IBV_QPT_UC:
			ops = uc_ops;
			break;
		case IBV_QPT_UD:
			ops = ud_ops;
			break;
		default:
			break; // rxe: no send ops on other types
		}
		if (a->send_ops_flags & ~ops) {
			errno = EOPNOTSUPP;
			return NULL;
		}
	}
	struct ibv_qp_init_attr ia = {
		.qp_context = a->qp_context,
		.send_cq = a->send_cq,
		.recv_cq = a->recv_cq,
		.srq = a->srq,
		.cap = a->cap,
		.qp_type = a->qp_type,
		.sq_sig_all = a->sq_sig_all,
	};
	struct ibv_qp *qp = create_qp(a->pd, xrcd, &ia, a->send_ops_flags);
	if (qp) {
		a->cap = ia.cap;
		if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
			((struct ibv_qp_ex *)qp)->comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	}
	return qp;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	return (struct ibv_qp_ex *)qp;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	int rc = pibgo_modify_qp(H(qp, pib_qp), a, mask);
	if (rc)
		return rc;
	if (mask & IBV_QP_STATE)
		qp->state = a->qp_state;
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	memset(a, 0, sizeof(*a));
	memset(init, 0, sizeof(*init));
	int rc = pibgo_query_qp(H(qp, pib_qp), a, init);
	if (rc)
		return rc;
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	init->qp_type = qp->qp_type;
	if (mask & IBV_QP_STATE) // libibverbs' ibv_query_qp
		qp->state = a->qp_state;
	return 0;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	return 0; // no guarantee claimed
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct pib_qp *q = (struct pib_qp *)qp;
	int rc = pibgo_destroy_qp(q->h);
	if (rc)
		return rc;
	free(q->b.wrs);
	free(q->b.sges);
	free(q->b.inl);
	free(q->b.arena);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q);
	return 0;
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return pibgo_mcast(H(qp, pib_qp), (uint8_t *)gid->raw, lid, 1);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return pibgo_mcast(H(qp, pib_qp), (uint8_t *)gid->raw, lid, 0);
}

// flatten turns one ibv_send_wr into a pib_swr.
static void flatten(struct ibv_qp *qp, struct ibv_send_wr *wr, struct pib_swr *s)
{
	memset(s, 0, sizeof(*s));
	s->wr_id = wr->wr_id;
	s->sg = wr->sg_list;
	s->num_sge = wr->num_sge;
	s->opcode = wr->opcode;
	s->flags = wr->send_flags;
	switch (wr->opcode) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		s->imm = be32toh(wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		s->imm = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		s->remote_addr = wr->wr.rdma.remote_addr;
		s->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		s->remote_addr = wr->wr.atomic.remote_addr;
		s->rkey = wr->wr.atomic.rkey;
		s->compare_add = wr->wr.atomic.compare_add;
		s->swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_BIND_MW:
		s->mw = wr->bind_mw.mw ? H(wr->bind_mw.mw, pib_mw) : 0;
		s->rkey = wr->bind_mw.rkey;
		s->mr = wr->bind_mw.bind_info.mr ? H(wr->bind_mw.bind_info.mr, pib_mr) : 0;
		s->remote_addr = wr->bind_mw.bind_info.addr;
		s->bind_length = wr->bind_mw.bind_info.length;
		s->bind_access = wr->bind_mw.bind_info.mw_access_flags;
		break;
	default:
		break;
	}
	if (qp->qp_type == IBV_QPT_XRC_SEND)
		s->remote_srqn = wr->qp_type.xrc.remote_srqn;
	if (qp->qp_type == IBV_QPT_UD) {
		s->ah = wr->wr.ud.ah ? H(wr->wr.ud.ah, pib_ah) : 0;
		s->remote_qpn = wr->wr.ud.remote_qpn;
		s->remote_qkey = wr->wr.ud.remote_qkey;
	}
}

#define BATCH 32

static int post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct pib_swr s[BATCH];
	struct ibv_send_wr *w[BATCH];
	uint64_t h = H(qp, pib_qp);
	while (wr) {
		int n = 0;
		for (; wr && n < BATCH; wr = wr->next, n++) {
			w[n] = wr;
			flatten(qp, wr, &s[n]);
		}
		int posted = 0;
		int rc = pibgo_post_send(h, s, n, &posted);
		if (rc) {
			*bad = w[posted];
			return rc;
		}
	}
	return 0;
}

static int post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return pibgo_post_recv(H(qp, pib_qp), wr, bad);
}

// ---- the ibv_wr_* send API (struct ibv_qp_ex) -----------------------------------------

static struct pib_swr *wr_new(struct ibv_qp_ex *x, uint32_t opcode)
{
	struct pib_qp *q = (struct pib_qp *)x;
	struct pib_wrb *b = &q->b;
	if (b->n == b->cap) {
		int cap = b->cap ? 2 * b->cap : 16;
		struct pib_swr *wrs = realloc(b->wrs, cap * sizeof(*wrs));
		struct ibv_sge *sges = realloc(b->sges, (size_t)cap * PIB_MAX_SGE * sizeof(*sges));
		size_t *inl = realloc(b->inl, cap * sizeof(*inl));
		if (wrs)
			b->wrs = wrs;
		if (sges)
			b->sges = sges;
		if (inl)
			b->inl = inl;
		if (!wrs || !sges || !inl) {
			b->err = ENOMEM;
			return NULL;
		}
		b->cap = cap;
	}
	struct pib_swr *s = &b->wrs[b->n];
	memset(s, 0, sizeof(*s));
	s->wr_id = x->wr_id;
	s->flags = x->wr_flags;
	s->opcode = opcode;
	s->sg = NULL;
	b->inl[b->n] = 0;
	b->n++;
	return s;
}

static struct pib_swr *wr_cur(struct ibv_qp_ex *x)
{
	struct pib_qp *q = (struct pib_qp *)x;
	if (q->b.n == 0) {
		q->b.err = EINVAL;
		return NULL;
	}
	return &q->b.wrs[q->b.n - 1];
}

static void wr_start(struct ibv_qp_ex *x)
{
	struct pib_qp *q = (struct pib_qp *)x;
	q->b.n = 0;
	q->b.alen = 0;
	q->b.err = 0;
}

static void wr_abort(struct ibv_qp_ex *x) { wr_start(x); }

static int wr_complete(struct ibv_qp_ex *x)
{
	struct pib_qp *q = (struct pib_qp *)x;
	struct pib_wrb *b = &q->b;
	int rc = b->err;
	if (!rc && b->n) {
		for (int i = 0; i < b->n; i++) {
			if (b->inl[i]) { // the inline data now has its final place
				struct ibv_sge *sg = &b->sges[(size_t)i * PIB_MAX_SGE];
				sg->addr = (uintptr_t)(b->arena + b->inl[i] - 1);
				b->wrs[i].sg = sg;
			}
		}
		int posted = 0;
		rc = pibgo_post_send(q->h, b->wrs, b->n, &posted);
	}
	wr_start(x);
	return rc;
}

static void wr_rdma(struct ibv_qp_ex *x, uint32_t op, uint32_t rkey, uint64_t addr)
{
	struct pib_swr *s = wr_new(x, op);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = addr;
	}
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr) { wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr); }
static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr) { wr_rdma(x, IBV_WR_RDMA_READ, rkey, addr); }
static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	struct pib_swr *s = wr_cur(x);
	if (s)
		s->imm = be32toh(imm);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	struct pib_swr *s = wr_new(x, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = addr;
		s->compare_add = compare;
		s->swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct pib_swr *s = wr_new(x, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (s) {
		s->rkey = rkey;
		s->remote_addr = addr;
		s->compare_add = add;
	}
}

static void wr_send(struct ibv_qp_ex *x) { wr_new(x, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct pib_swr *s = wr_new(x, IBV_WR_SEND_WITH_IMM);
	if (s)
		s->imm = be32toh(imm);
}

static void wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct pib_swr *s = wr_new(x, IBV_WR_SEND_WITH_INV);
	if (s)
		s->imm = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct pib_swr *s = wr_new(x, IBV_WR_LOCAL_INV);
	if (s)
		s->imm = rkey;
}

static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct pib_swr *s = wr_new(x, IBV_WR_BIND_MW);
	if (s) {
		s->mw = mw ? H(mw, pib_mw) : 0;
		s->rkey = rkey;
		s->mr = info->mr ? H(info->mr, pib_mr) : 0;
		s->remote_addr = info->addr;
		s->bind_length = info->length;
		s->bind_access = info->mw_access_flags;
	}
}

static void wr_unsupported_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	((struct pib_qp *)x)->b.err = EOPNOTSUPP;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	struct pib_swr *s = wr_cur(x);
	if (s)
		s->remote_srqn = srqn;
}

static void wr_unsupported_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *wr)
{
	((struct pib_qp *)x)->b.err = EOPNOTSUPP;
}

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct pib_swr *s = wr_cur(x);
	if (s) {
		s->ah = ah ? H(ah, pib_ah) : 0;
		s->remote_qpn = qpn;
		s->remote_qkey = qkey;
	}
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct pib_qp *q = (struct pib_qp *)x;
	struct pib_swr *s = wr_cur(x);
	if (!s)
		return;
	struct ibv_sge *sg = &q->b.sges[(size_t)(q->b.n - 1) * PIB_MAX_SGE];
	sg->addr = addr;
	sg->length = length;
	sg->lkey = lkey;
	s->sg = sg;
	s->num_sge = 1;
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *list)
{
	struct pib_qp *q = (struct pib_qp *)x;
	struct pib_swr *s = wr_cur(x);
	if (!s)
		return;
	if (n > PIB_MAX_SGE) {
		q->b.err = EINVAL;
		return;
	}
	struct ibv_sge *sg = &q->b.sges[(size_t)(q->b.n - 1) * PIB_MAX_SGE];
	memcpy(sg, list, n * sizeof(*sg));
	s->sg = sg;
	s->num_sge = n;
}

static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct pib_qp *q = (struct pib_qp *)x;
	struct pib_wrb *b = &q->b;
	struct pib_swr *s = wr_cur(x);
	size_t total = 0;
	if (!s)
		return;
	for (size_t i = 0; i < n; i++)
		total += bufs[i].length;
	if (b->alen + total > b->acap) {
		size_t cap = b->acap ? b->acap : 4096;
		while (cap < b->alen + total)
			cap *= 2;
		char *a = realloc(b->arena, cap);
		if (!a) {
			b->err = ENOMEM;
			return;
		}
		b->arena = a;
		b->acap = cap;
	}
	size_t off = b->alen;
	for (size_t i = 0; i < n; i++) {
		memcpy(b->arena + b->alen, bufs[i].addr, bufs[i].length);
		b->alen += bufs[i].length;
	}
	// Copied now, as ibv_wr_set_inline_data(3) allows the buffer's reuse at once; the SGE
	// points into the arena when the WRs are posted (the arena may move until then).
	struct ibv_sge *sg = &b->sges[(size_t)(b->n - 1) * PIB_MAX_SGE];
	sg->addr = 0;
	sg->length = total;
	sg->lkey = 0;
	s->sg = sg;
	s->num_sge = 1;
	s->flags |= IBV_SEND_INLINE;
	b->inl[b->n - 1] = off + 1;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf d = {.addr = addr, .length = length};
	wr_set_inline_data_list(x, 1, &d);
}

static void wr_set_ops(struct ibv_qp_ex *x)
{
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_unsupported_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_unsupported_atomic_write;
}

// ---- AHs ------------------------------------------------------------------------------

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a)
{
	struct pib_ah *ah = calloc(1, sizeof(*ah));
	int err = 0;
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	ah->h = pibgo_create_ah(H(pd, pib_pd), a, &err);
	if (!ah->h) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = (uint32_t)ah->h;
	return &ah->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	int rc = pibgo_destroy_ah(H(ah, pib_ah));
	if (rc)
		return rc;
	free(ah);
	return 0;
}

// ibv_init_ah_from_wc builds the address vector back to a completion's sender
// (rdma-core's verbs.c, for an InfiniBand port).
EXPORT int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc,
			       struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->src_path_bits = wc->dlid_path_bits;
	ah->port_num = port;
	if (wc->wc_flags & IBV_WC_GRH) {
		uint32_t flow = be32toh(grh->version_tclass_flow);
		union ibv_gid sgid;
		ah->is_global = 1;
		ah->grh.dgid = grh->sgid;
		ah->grh.flow_label = flow & 0xFFFFF;
		ah->grh.hop_limit = 0xFF;
		ah->grh.traffic_class = (flow >> 20) & 0xFF;
		// The SGID index is the one of our GID the packet was sent to.
		for (int i = 0;; i++) {
			if (ibv_query_gid(c, port, i, &sgid)) {
				errno = ENOENT;
				return -1;
			}
			if (!memcmp(sgid.raw, grh->dgid.raw, 16)) {
				ah->grh.sgid_index = i;
				break;
			}
		}
	}
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}
