// pibgw's librdmacm.so.1: rdma-core 44's rdma_cm API (<rdma/rdma_cma.h>, RDMACM_1.x
// symbol versions) for unmodified programs such as rping, ucmatose, udaddy and
// rdma_server/rdma_client. It is plain C linked against pibgw's libibverbs.so.1, which
// holds the Go side (cabi/ibverbs/cma.go: package rdmacm on the attach session): one Go
// runtime, one session, and an ID's verbs objects (context, PD, CQs, QP) are that
// library's, so the program's own ibv_* calls work on them.
//
// Built by scripts/build-libs.sh. What has no meaning here is accepted and ignored:
// rdma_set_option's TOS, REUSEADDR, AFONLY and IB path records, rdma_notify.
// rsockets (rsocket, rsend, rrecv, rpoll, …) are in rsocket.c.
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <infiniband/ib.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "../ibverbs/pib_cm.h"

#define EXPORT __attribute__((visibility("default")))

struct cm_event {
	struct rdma_cm_event ev;
	uint64_t evh;
	int acked;
	uint8_t priv[256];
	struct cm_event *next; // a channel's backlog
};

struct cm_chan {
	struct rdma_event_channel ch;
	uint64_t h;
	pthread_mutex_t mu;
	struct cm_event *backlog, **tail; // events taken by a synchronous wait for another ID
};

struct cm_id {
	struct rdma_cm_id id;
	uint64_t h;
	int sync;        // synchronous ID (no channel given): calls wait for their events
	int own_channel; // the channel is the ID's, destroyed with it
	int own_cqs;     // rdma_create_qp made the CQs and their channels
	struct ibv_sa_path_rec path;
	struct ibv_qp_init_attr *qp_init; // rdma_create_ep on a passive ID: for rdma_get_request
	struct cm_event *req;             // rdma_get_request's CONNECT_REQUEST (id->event)
	int dev;                          // the device it holds (get_device), -1 if none
	struct cm_mc *mcs;                // its multicast joins
};

// cm_mc is a multicast group an ID joined, with rdma_join_multicast's context, which its
// MULTICAST_JOIN/ERROR events give as param.ud.private_data (librdmacm's cma_multicast).
struct cm_mc {
	struct sockaddr_storage addr;
	void *context;
	struct cm_mc *next;
};

#define CHAN(c) ((struct cm_chan *)(c))
#define ID(i) ((struct cm_id *)(i))

// ---- devices --------------------------------------------------------------------------

// As librdmacm's cma_dev list: a device's context, opened once and kept; its PD, made
// when an ID first takes the device (ucma_get_device) and shared by every ID on it
// (rdma_cm_id.pd), deallocated when the last of them is destroyed (ucma_put_device).
#define MAX_DEVS 64
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context *dev_ctx[MAX_DEVS];
static struct ibv_pd *dev_pd[MAX_DEVS];
static int dev_refs[MAX_DEVS];
static struct ibv_context *dev_list_ctx[MAX_DEVS + 1];

// forget_devices: a child forked from this process has verbs of its own (lazy.c), where
// the parent's contexts and PDs fail; it opens the devices again as it needs them.
static void forget_devices(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	dev_mu = fresh;
	memset(dev_ctx, 0, sizeof(dev_ctx));
	memset(dev_pd, 0, sizeof(dev_pd));
	memset(dev_refs, 0, sizeof(dev_refs));
}

__attribute__((constructor)) static void devices_init(void)
{
	pthread_atfork(NULL, NULL, forget_devices);
}

// open_device is device i's context; dev_mu held.
static struct ibv_context *open_device(int i)
{
	if (i < 0 || i >= MAX_DEVS)
		return NULL;
	if (!dev_ctx[i]) {
		int n = 0;
		struct ibv_device **l = ibv_get_device_list(&n);
		if (l && i < n)
			dev_ctx[i] = ibv_open_device(l[i]);
		if (l)
			ibv_free_device_list(l);
	}
	return dev_ctx[i];
}

static struct ibv_context *device(int i)
{
	pthread_mutex_lock(&dev_mu);
	struct ibv_context *c = open_device(i);
	pthread_mutex_unlock(&dev_mu);
	return c;
}

// get_device is ucma_get_device: a reference to device i, its context and its PD
// (allocated by the first reference); 0, or -1 with errno.
static int get_device(int i, struct ibv_context **ctx, struct ibv_pd **pd)
{
	int err = 0;
	pthread_mutex_lock(&dev_mu);
	struct ibv_context *c = open_device(i);
	if (!c)
		err = ENODEV;
	else if (!dev_pd[i] && !(dev_pd[i] = ibv_alloc_pd(c)))
		err = errno ? errno : ENOMEM;
	if (!err) {
		dev_refs[i]++;
		*ctx = c;
		*pd = dev_pd[i];
	}
	pthread_mutex_unlock(&dev_mu);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

// put_device is ucma_put_device: the last reference deallocates the device's PD.
static void put_device(int i)
{
	pthread_mutex_lock(&dev_mu);
	if (dev_refs[i] > 0 && !--dev_refs[i]) {
		ibv_dealloc_pd(dev_pd[i]);
		dev_pd[i] = NULL;
	}
	pthread_mutex_unlock(&dev_mu);
}

EXPORT struct ibv_context **rdma_get_devices(int *num)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (l)
		ibv_free_device_list(l);
	if (n > MAX_DEVS)
		n = MAX_DEVS;
	int k = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_context *c = device(i);
		if (c)
			dev_list_ctx[k++] = c;
	}
	dev_list_ctx[k] = NULL;
	if (num)
		*num = k;
	return dev_list_ctx;
}

EXPORT void rdma_free_devices(struct ibv_context **list) { (void)list; }

// What refresh copies, as librdmacm's queries: ADDR (ucma_query_addr: the addresses, and
// the device, its PD, port and P_Key when the ID first has one), GID (ucma_query_gid:
// the source and destination GIDs), PATH (ucma_query_path: route.path_rec). librdmacm
// asks for them after rdma_bind_addr (ADDR|GID), rdma_listen (ADDR), at ADDR_RESOLVED
// (ADDR|GID), ROUTE_RESOLVED (PATH) and for a connection request's new ID (all three).
enum { Q_ADDR = 1, Q_GID = 2, Q_PATH = 4, Q_ALL = 7 };

// refresh copies what the Go ID shows into the rdma_cm_id; 0, or -1 with errno if the
// ID's device cannot be had (ucma_get_device's ENODEV).
static int refresh(struct cm_id *p, int what)
{
	struct pib_cm_info info;
	struct rdma_cm_id *id = &p->id;
	struct rdma_ib_addr *ib = &id->route.addr.addr.ibaddr;
	pibcm_info(p->h, &info);
	if (what & Q_ADDR) {
		memcpy(&id->route.addr.src_storage, &info.src, sizeof(info.src));
		memcpy(&id->route.addr.dst_storage, &info.dst, sizeof(info.dst));
		if (info.dev >= 0 && p->dev < 0) {
			if (get_device(info.dev, &id->verbs, &id->pd))
				return -1;
			p->dev = info.dev;
			id->port_num = info.port;
			ib->pkey = htobe16(info.pkey);
		}
	}
	if (what & Q_GID) {
		memcpy(&ib->sgid, info.sgid, 16);
		memcpy(&ib->dgid, info.dgid, 16);
	}
	if ((what & Q_PATH) && info.route_ok) {
		struct ibv_sa_path_rec *r = &p->path;
		memset(r, 0, sizeof(*r));
		memcpy(&r->dgid, info.dgid, 16);
		memcpy(&r->sgid, info.sgid, 16);
		r->dlid = htobe16(info.dlid);
		r->slid = htobe16(info.slid);
		r->pkey = htobe16(info.pkey);
		r->sl = info.sl;
		r->mtu = info.mtu;
		r->mtu_selector = 2;
		r->rate = info.rate;
		r->rate_selector = 2;
		r->packet_life_time = info.packet_life;
		r->packet_life_time_selector = 2;
		r->numb_path = 1;
		r->reversible = 1;
		id->route.path_rec = r;
		id->route.num_paths = 1;
	}
	return 0;
}

// ---- event channels -------------------------------------------------------------------

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->ch.fd < 0) {
		free(c);
		return NULL;
	}
	c->h = pibcm_create_channel(c->ch.fd);
	if (!c->h) {
		close(c->ch.fd);
		free(c);
		errno = ENODEV;
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	c->tail = &c->backlog;
	return &c->ch;
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	struct cm_chan *c = CHAN(ch);
	if (!c)
		return;
	pibcm_destroy_channel(c->h);
	close(c->ch.fd);
	while (c->backlog) {
		struct cm_event *e = c->backlog;
		c->backlog = e->next;
		free(e);
	}
	free(c);
}

static int is_ud(struct rdma_cm_id *id)
{
	return id->ps == RDMA_PS_UDP || id->ps == RDMA_PS_IPOIB;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return 0;
}

static struct cm_mc *find_mc(struct cm_id *p, const struct sockaddr *a)
{
	for (struct cm_mc *m = p->mcs; m; m = m->next)
		if (same_addr((struct sockaddr *)&m->addr, a))
			return m;
	return NULL;
}

// take reads the channel's next event from Go.
static int take(struct cm_chan *c, struct cm_event **out)
{
	struct pib_cm_ev e;
	for (;;) {
		uint64_t n;
		ssize_t r = read(c->ch.fd, &n, sizeof(n));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1; // EAGAIN for an O_NONBLOCK channel
		}
		if (pibcm_get_event(c->h, &e) == 0)
			break;
	}
	struct cm_event *ce = calloc(1, sizeof(*ce));
	if (!ce) {
		pibcm_ack(e.evh);
		errno = ENOMEM;
		return -1;
	}
	ce->evh = e.evh;
	struct rdma_cm_event *ev = &ce->ev;
	struct cm_id *lp = e.listenp;
	ev->listen_id = lp ? &lp->id : NULL;
	struct cm_id *p = e.idp;
	if (e.new_id || !p) {
		// A connection request's new ID: as the listener's, on its channel.
		p = calloc(1, sizeof(*p));
		if (!p) {
			pibcm_ack(e.evh);
			free(ce);
			errno = ENOMEM;
			return -1;
		}
		p->h = e.id;
		p->dev = -1;
		pibcm_set_cptr(e.id, p);
		if (lp) {
			p->id.channel = lp->id.channel;
			p->id.context = lp->id.context;
			p->id.ps = lp->id.ps;
			p->id.qp_type = lp->id.qp_type;
			p->sync = lp->sync;
		} else {
			p->id.channel = &c->ch;
		}
		refresh(p, Q_ALL); // ucma_query_req_info: the new ID has its device's PD
	} else if (e.type == RDMA_CM_EVENT_ADDR_RESOLVED) {
		// ucma_process_addr_resolved: a device the ID cannot have is an ADDR_ERROR.
		if (refresh(p, Q_ADDR | Q_GID) || !p->id.verbs) {
			e.type = RDMA_CM_EVENT_ADDR_ERROR;
			e.status = -ENODEV;
		}
	} else if (e.type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
		refresh(p, Q_PATH); // ucma_process_route_resolved
	}
	ev->id = &p->id;
	ev->event = e.type;
	ev->status = e.status;
	int n = e.p.priv_len;
	memcpy(ce->priv, e.p.priv, n);
	if (is_ud(&p->id)) {
		struct rdma_ud_param *u = &ev->param.ud;
		u->private_data = n ? ce->priv : NULL;
		u->private_data_len = n;
		if (e.type == RDMA_CM_EVENT_MULTICAST_JOIN || e.type == RDMA_CM_EVENT_MULTICAST_ERROR) {
			struct cm_mc *m = find_mc(p, (struct sockaddr *)&e.group);
			u->private_data = m ? m->context : NULL; // rdma_get_cm_event: mc->context
		}
		u->ah_attr = e.p.ah;
		u->qp_num = e.p.qp_num;
		u->qkey = e.p.qkey;
	} else {
		struct rdma_conn_param *cp = &ev->param.conn;
		cp->private_data = n ? ce->priv : NULL;
		cp->private_data_len = n;
		cp->responder_resources = e.p.responder_resources;
		cp->initiator_depth = e.p.initiator_depth;
		cp->flow_control = e.p.flow_control;
		cp->retry_count = e.p.retry_count;
		cp->rnr_retry_count = e.p.rnr_retry_count;
		cp->srq = e.p.srq;
		cp->qp_num = e.p.qp_num;
	}
	*out = ce;
	return 0;
}

// next is the channel's next event: the backlog first.
static int next(struct cm_chan *c, struct cm_event **out)
{
	pthread_mutex_lock(&c->mu);
	struct cm_event *e = c->backlog;
	if (e) {
		c->backlog = e->next;
		if (!c->backlog)
			c->tail = &c->backlog;
		e->next = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	if (e) {
		*out = e;
		return 0;
	}
	return take(c, out);
}

static void stash(struct cm_chan *c, struct cm_event *e)
{
	pthread_mutex_lock(&c->mu);
	e->next = NULL;
	*c->tail = e;
	c->tail = &e->next;
	pthread_mutex_unlock(&c->mu);
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **event)
{
	struct cm_event *e;
	if (!ch || !event) {
		errno = EINVAL;
		return -1;
	}
	if (next(CHAN(ch), &e))
		return -1;
	*event = &e->ev;
	return 0;
}

static void ack(struct cm_event *e)
{
	if (!e->acked) {
		e->acked = 1;
		pibcm_ack(e->evh);
	}
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event) {
		errno = EINVAL;
		return -1;
	}
	struct cm_event *e = (struct cm_event *)event;
	ack(e);
	free(e);
	return 0;
}

static const char *const event_names[] = {
	"RDMA_CM_EVENT_ADDR_RESOLVED",	  "RDMA_CM_EVENT_ADDR_ERROR",	    "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR",	  "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR",	  "RDMA_CM_EVENT_UNREACHABLE",	    "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED",	  "RDMA_CM_EVENT_DISCONNECTED",	    "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN",	  "RDMA_CM_EVENT_MULTICAST_ERROR",  "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
};

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	if ((unsigned)event < sizeof(event_names) / sizeof(event_names[0]))
		return event_names[event];
	return "UNKNOWN EVENT";
}

// wait is a synchronous ID's wait for its next event, which must be want: 0, or -1 with
// errno as librdmacm's (ECONNREFUSED for REJECTED, the status's errno otherwise). Events
// of other IDs on a shared channel wait in its backlog.
static int wait(struct cm_id *p, enum rdma_cm_event_type want)
{
	struct cm_chan *c = CHAN(p->id.channel);
	for (;;) {
		struct cm_event *e;
		if (take(c, &e))
			return -1;
		if (e->ev.id != &p->id) {
			stash(c, e);
			continue;
		}
		int type = e->ev.event, status = e->ev.status;
		if (p->id.event)
			rdma_ack_cm_event(p->id.event);
		ack(e);
		p->id.event = &e->ev; // kept for the program until its next call, as ucma_complete's
		if (type == (int)want)
			return 0;
		if (type == RDMA_CM_EVENT_CONNECT_RESPONSE && want == RDMA_CM_EVENT_ESTABLISHED)
			return 0;
		if (type == RDMA_CM_EVENT_REJECTED)
			errno = ECONNREFUSED;
		else if (status < 0)
			errno = -status;
		else
			errno = ECONNREFUSED;
		return -1;
	}
}

// ---- IDs ------------------------------------------------------------------------------

static int fail(int err)
{
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

EXPORT int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **out, void *context,
			  enum rdma_port_space ps)
{
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
	case RDMA_PS_IB:
		break;
	default:
		return fail(EINVAL); // the kernel's ucma_get_qp_type
	}
	struct cm_id *p = calloc(1, sizeof(*p));
	if (!p)
		return fail(ENOMEM);
	if (!ch) {
		ch = rdma_create_event_channel();
		if (!ch) {
			free(p);
			return -1;
		}
		p->sync = 1;
		p->own_channel = 1;
	}
	int err = 0;
	p->dev = -1;
	p->h = pibcm_create_id(CHAN(ch)->h, ps, p, &err);
	if (!p->h) {
		if (p->own_channel)
			rdma_destroy_event_channel(ch);
		free(p);
		return fail(err);
	}
	p->id.channel = ch;
	p->id.context = context;
	p->id.ps = ps;
	p->id.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
	*out = &p->id;
	return 0;
}

static void destroy_cqs(struct cm_id *p)
{
	struct rdma_cm_id *id = &p->id;
	if (!p->own_cqs)
		return;
	if (id->recv_cq && id->recv_cq != id->send_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->send_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->recv_cq_channel && id->recv_cq_channel != id->send_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	if (id->send_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	id->send_cq = id->recv_cq = NULL;
	id->send_cq_channel = id->recv_cq_channel = NULL;
	p->own_cqs = 0;
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cm_id *p = ID(id);
	if (!p)
		return fail(EINVAL);
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	int err = pibcm_destroy_id(p->h);
	if (p->dev >= 0)
		put_device(p->dev); // ucma_free_id
	while (p->mcs) {
		struct cm_mc *m = p->mcs;
		p->mcs = m->next;
		free(m);
	}
	if (p->own_channel)
		rdma_destroy_event_channel(id->channel);
	free(p->qp_init);
	free(p);
	return fail(err);
}

// addr_len is librdmacm's ucma_addrlen: 0 for no address or another family.
static socklen_t addr_len(const struct sockaddr *a)
{
	if (!a)
		return 0;
	switch (a->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	case AF_IB: // the Go side binds, resolves and listens on AF_IB addresses (libfabric's)
		return sizeof(struct sockaddr_ib);
	}
	return 0;
}

// As librdmacm's rdma_bind_addr: the ID's addresses, device (and its PD) and GIDs
// are there when it returns (ucma_query_addr, ucma_query_gid).
EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!addr_len(addr))
		return fail(EINVAL);
	int err = pibcm_bind(ID(id)->h, addr);
	if (err)
		return fail(err);
	return refresh(ID(id), Q_ADDR | Q_GID);
}

// rdma_resolve_addr: the destination address is in the ID when it returns, the device
// and the source at ADDR_RESOLVED (librdmacm's rdma_resolve_addr, ucma_process_addr_resolved).
EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int ms)
{
	if (!addr_len(dst) || (src && !addr_len(src)))
		return fail(EINVAL);
	int err = pibcm_resolve_addr(ID(id)->h, src, dst, ms > 0 ? ms : 2000);
	if (err)
		return fail(err);
	memcpy(&id->route.addr.dst_storage, dst, addr_len(dst));
	if (ID(id)->sync && wait(ID(id), RDMA_CM_EVENT_ADDR_RESOLVED))
		return -1;
	return 0;
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int ms)
{
	int err = pibcm_resolve_route(ID(id)->h, ms > 0 ? ms : 2000);
	if (err)
		return fail(err);
	if (ID(id)->sync && wait(ID(id), RDMA_CM_EVENT_ROUTE_RESOLVED))
		return -1;
	return 0;
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	int err = pibcm_listen(ID(id)->h, backlog);
	if (err)
		return fail(err);
	return refresh(ID(id), Q_ADDR); // ucma_query_addr
}

// param_in is librdmacm's ucma_valid_param and ucma_copy_conn_param_to_kern: in the TCP
// port space an ID without a QP needs parameters, and a READ depth above the device's
// (max_qp_rd_atom, max_qp_init_rd_atom) is EINVAL; RDMA_MAX_* or no parameters mean the
// device's maxima, no parameters retries 7; an ID's QP gives the QP number and the SRQ
// flag. 0 or an errno.
static int param_in(struct rdma_cm_id *id, struct rdma_conn_param *cp, struct pib_cm_param *p)
{
	memset(p, 0, sizeof(*p));
	struct ibv_device_attr da = {.max_qp_rd_atom = 16, .max_qp_init_rd_atom = 16};
	if (id->verbs)
		ibv_query_device(id->verbs, &da);
	if (id->ps == RDMA_PS_TCP) {
		if (!id->qp && !cp)
			return EINVAL;
		if (cp && ((cp->responder_resources != RDMA_MAX_RESP_RES && cp->responder_resources > da.max_qp_rd_atom) ||
			   (cp->initiator_depth != RDMA_MAX_INIT_DEPTH && cp->initiator_depth > da.max_qp_init_rd_atom)))
			return EINVAL;
	}
	p->responder_resources = cp && cp->responder_resources != RDMA_MAX_RESP_RES ? cp->responder_resources : da.max_qp_rd_atom;
	p->initiator_depth = cp && cp->initiator_depth != RDMA_MAX_INIT_DEPTH ? cp->initiator_depth : da.max_qp_init_rd_atom;
	if (cp) {
		int n = cp->private_data ? cp->private_data_len : 0;
		memcpy(p->priv, cp->private_data, n);
		p->priv_len = n;
		p->flow_control = cp->flow_control;
		p->retry_count = cp->retry_count;
		p->rnr_retry_count = cp->rnr_retry_count;
		p->srq = cp->srq;
		p->qp_num = cp->qp_num;
	} else {
		p->retry_count = p->rnr_retry_count = 7;
	}
	if (id->qp) {
		p->qp_num = id->qp->qp_num;
		p->srq = id->qp->srq != NULL;
	}
	return 0;
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *cp)
{
	struct pib_cm_param p;
	int err = param_in(id, cp, &p);
	if (err)
		return fail(err);
	err = pibcm_connect(ID(id)->h, &p);
	if (err)
		return fail(err);
	if (ID(id)->sync && wait(ID(id), is_ud(id) ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_ESTABLISHED))
		return -1;
	return 0;
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *cp)
{
	struct pib_cm_param p;
	int err = param_in(id, cp, &p);
	if (err)
		return fail(err);
	err = pibcm_accept(ID(id)->h, &p);
	if (err)
		return fail(err);
	if (ID(id)->sync && is_ud(id) && id->event) {
		rdma_ack_cm_event(id->event); // librdmacm's rdma_accept: the request, for UD
		id->event = NULL;
	}
	if (ID(id)->sync && !is_ud(id) && wait(ID(id), RDMA_CM_EVENT_ESTABLISHED))
		return -1;
	return 0;
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *priv, uint8_t len)
{
	return fail(pibcm_reject(ID(id)->h, (void *)priv, priv ? len : 0));
}

// complete is librdmacm's ucma_complete for a synchronous ID: its next event, kept in
// id->event for the program (the one before acknowledged); the event's status as errno
// (REJECTED: ECONNREFUSED). A non-blocking channel with none: -1, EAGAIN.
static int complete(struct cm_id *p)
{
	if (!p->sync)
		return 0;
	if (p->id.event) {
		rdma_ack_cm_event(p->id.event);
		p->id.event = NULL;
	}
	struct cm_chan *c = CHAN(p->id.channel);
	struct cm_event *e;
	for (;;) {
		if (take(c, &e))
			return -1;
		if (e->ev.id == &p->id)
			break;
		stash(c, e);
	}
	ack(e);
	p->id.event = &e->ev;
	int st = e->ev.status;
	if (!st)
		return 0;
	return fail(e->ev.event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : st < 0 ? -st : st);
}

// rdma_disconnect: a synchronous ID waits for its DISCONNECTED (librdmacm's ucma_complete),
// which the peer's DREP or DREQ brings.
EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	int err = pibcm_disconnect(ID(id)->h);
	if (err)
		return fail(err);
	return complete(ID(id));
}

// rdma_establish is for an ID without a QP (librdmacm's: EINVAL with one).
EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (id->qp)
		return fail(EINVAL);
	return fail(pibcm_establish(ID(id)->h));
}

// rdma_notify: IBV_EVENT_COMM_EST establishes a passive ID whose RTU was lost (the kernel's
// rdma_notify → ib_cm_notify): EISCONN once established, EINVAL in other states and for
// events other than COMM_EST and LID_CHANGE.
EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	if (!id)
		return fail(EINVAL);
	return fail(pibcm_notify(ID(id)->h, (int)event));
}

// rdma_set_option checks each option's size as the kernel's ucma_set_option does. The ACK
// timeout goes to the ID's RC QP at RTS (rdma_create_qp's and rdma_init_qp_attr's);
// REUSEADDR lets IDs that all set it share an address and port (rdma_set_reuseaddr); TOS,
// AFONLY and IB path records are accepted and change nothing (one fabric, one path).
// Other options: ENOSYS, as the kernel's.
EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || !optval)
		return fail(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			return fail(optlen == sizeof(uint8_t) ? 0 : EINVAL);
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			return fail(pibcm_set_reuseaddr(ID(id)->h, *(int *)optval)); // rdma_set_reuseaddr
		case RDMA_OPTION_ID_AFONLY:
			return fail(optlen == sizeof(int) ? 0 : EINVAL);
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			return fail(pibcm_set_ack_timeout(ID(id)->h, *(uint8_t *)optval));
		}
	} else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
		return fail(optlen && optlen % sizeof(struct ibv_path_data) == 0 ? 0 : EINVAL);
	}
	return fail(ENOSYS);
}

// rdma_migrate_id moves the ID, its queued events with it, to channel ch; no channel makes
// it synchronous on a channel of its own, as rdma-core's does. A channel the ID had of its
// own is destroyed.
EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	struct cm_id *p = ID(id);
	struct rdma_event_channel *own = NULL;
	if (!p)
		return fail(EINVAL);
	if (!ch) {
		if (p->sync)
			return fail(EINVAL); // librdmacm's: a synchronous ID has its channel
		own = ch = rdma_create_event_channel();
		if (!ch)
			return -1;
	}
	if (ch == id->channel)
		return 0;
	int err = pibcm_migrate(p->h, CHAN(ch)->h);
	if (err) {
		if (own)
			rdma_destroy_event_channel(own);
		return fail(err);
	}
	// The ID's events a synchronous wait on the old channel stashed move too.
	struct cm_chan *oc = CHAN(id->channel);
	struct cm_event *moved = NULL, **mt = &moved;
	pthread_mutex_lock(&oc->mu);
	struct cm_event **pp = &oc->backlog;
	while (*pp) {
		struct cm_event *e = *pp;
		if (e->ev.id == id || e->ev.listen_id == id) {
			*pp = e->next;
			e->next = NULL;
			*mt = e;
			mt = &e->next;
		} else {
			pp = &e->next;
		}
	}
	oc->tail = pp;
	pthread_mutex_unlock(&oc->mu);
	while (moved) {
		struct cm_event *e = moved;
		moved = e->next;
		stash(CHAN(ch), e);
	}
	if (p->own_channel) {
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		rdma_destroy_event_channel(id->channel);
	}
	id->channel = ch;
	p->sync = p->own_channel = own != NULL;
	return 0;
}

// rdma_join_multicast keeps context for the join's event; a synchronous ID waits for it
// (librdmacm's rdma_join_multicast2, ucma_complete).
EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct cm_id *p = ID(id);
	socklen_t n = addr_len(addr);
	if (!n)
		return fail(EINVAL);
	struct cm_mc *m = calloc(1, sizeof(*m));
	if (!m)
		return fail(ENOMEM);
	memcpy(&m->addr, addr, n);
	m->context = context;
	m->next = p->mcs;
	p->mcs = m;
	int err = pibcm_mcast(p->h, addr, 1);
	if (err) {
		p->mcs = m->next;
		free(m);
		return fail(err);
	}
	return complete(p);
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
		return fail(EINVAL);
	return rdma_join_multicast(id, attr->addr, context);
}

// rdma_leave_multicast: a group the ID did not join is EADDRNOTAVAIL (librdmacm's search
// of its list).
EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_id *p = ID(id);
	if (!addr)
		return fail(EINVAL);
	struct cm_mc **pp = &p->mcs;
	while (*pp && !same_addr((struct sockaddr *)&(*pp)->addr, addr))
		pp = &(*pp)->next;
	if (!*pp)
		return fail(EADDRNOTAVAIL);
	struct cm_mc *m = *pp;
	*pp = m->next;
	free(m);
	return fail(pibcm_mcast(p->h, addr, 0));
}

// rdma_init_qp_attr: the attributes that take a QP the program made itself to
// attr->qp_state on the ID's connection (Linux's rdma_init_qp_attr; rdmacm.ID.InitQPAttr).
EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	return fail(pibcm_init_qp_attr(ID(id)->h, attr, mask));
}

// addr_port is librdmacm's ucma_get_port: an AF_IB address's port is its service ID's low
// 16 bits.
static __be16 addr_port(struct sockaddr *a)
{
	switch (a->sa_family) {
	case AF_INET6:
		return ((struct sockaddr_in6 *)a)->sin6_port;
	case AF_IB:
		return htobe16((uint16_t)be64toh(((struct sockaddr_ib *)a)->sib_sid));
	}
	return ((struct sockaddr_in *)a)->sin_port;
}

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id) { return addr_port(&id->route.addr.src_addr); }

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id) { return addr_port(&id->route.addr.dst_addr); }

EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece) { return fail(EOPNOTSUPP); }
EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece) { return fail(EOPNOTSUPP); }
EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *priv, uint8_t len) { return rdma_reject(id, priv, len); }

// ---- QPs ------------------------------------------------------------------------------

// id_pd is the PD a QP or SRQ of the ID goes in: pd, else the ID's (its device's,
// as rdma_create_qp_ex's attr->pd = id->pd).
static struct ibv_pd *id_pd(struct rdma_cm_id *id, struct ibv_pd *pd)
{
	return pd ? pd : id->pd;
}

// create_cqs is rdma_create_qp_ex's ucma_create_cqs: a CQ (and its completion channel)
// for each queue that has none in attr and none in the ID, of the queue's max_*_wr
// entries (none for a queue of 0); the QP takes the ID's CQs. A CQ in attr that is not
// the ID's is EINVAL.
static int create_cqs(struct rdma_cm_id *id, struct ibv_qp_init_attr *a)
{
	if ((id->recv_cq && a->recv_cq && id->recv_cq != a->recv_cq) ||
	    (id->send_cq && a->send_cq && id->send_cq != a->send_cq))
		return fail(EINVAL);
	uint32_t ssz = a->send_cq || id->send_cq ? 0 : a->cap.max_send_wr;
	uint32_t rsz = a->recv_cq || id->recv_cq ? 0 : a->cap.max_recv_wr;
	if (rsz) {
		ID(id)->own_cqs = 1;
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel || !(id->recv_cq = ibv_create_cq(id->verbs, rsz, id, id->recv_cq_channel, 0)))
			goto bad;
	}
	if (ssz) {
		ID(id)->own_cqs = 1;
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel || !(id->send_cq = ibv_create_cq(id->verbs, ssz, id, id->send_cq_channel, 0)))
			goto bad;
	}
	if (!a->send_cq)
		a->send_cq = id->send_cq;
	if (!a->recv_cq)
		a->recv_cq = id->recv_cq;
	return 0;
bad:;
	int e = errno;
	destroy_cqs(ID(id));
	return fail(e ? e : ENOMEM);
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	pd = id_pd(id, pd);
	if (id->qp || !pd || !attr || !id->verbs || pd->context != id->verbs)
		return fail(EINVAL); // rdma_create_qp_ex: one QP an ID, on the ID's device
	if (create_cqs(id, attr))
		return -1;
	if (!attr->srq && id->srq)
		attr->srq = id->srq;
	attr->qp_type = id->qp_type;
	struct ibv_qp *qp = pib_cm_create_qp(pd, attr, ID(id)->h);
	if (!qp) {
		int e = errno;
		destroy_cqs(ID(id));
		return fail(e);
	}
	id->qp = qp;
	id->pd = qp->pd; // rdma_create_qp_ex
	return 0;
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *a)
{
	if (!a || (a->comp_mask & ~IBV_QP_INIT_ATTR_PD))
		return fail(EOPNOTSUPP);
	struct ibv_qp_init_attr ia = {
		.qp_context = a->qp_context, .send_cq = a->send_cq, .recv_cq = a->recv_cq,
		.srq = a->srq, .cap = a->cap, .qp_type = a->qp_type, .sq_sig_all = a->sq_sig_all,
	};
	int r = rdma_create_qp(id, (a->comp_mask & IBV_QP_INIT_ATTR_PD) ? a->pd : NULL, &ia);
	a->cap = ia.cap;
	return r;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp) {
		ibv_destroy_qp(id->qp);
		pibcm_destroy_qp(ID(id)->h);
		id->qp = NULL;
	}
	destroy_cqs(ID(id));
}

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	pd = id_pd(id, pd);
	if (!pd)
		return fail(EINVAL);
	struct ibv_srq *srq = ibv_create_srq(pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *a)
{
	struct ibv_srq_init_attr ia = {.srq_context = a->srq_context, .attr = a->attr};
	return rdma_create_srq(id, (a->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? a->pd : NULL, &ia);
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

// ---- rdma_getaddrinfo and endpoints ---------------------------------------------------

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return fail(ENOMEM);
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

// rdma_getaddrinfo is librdmacm's (addrinfo.c): with a node or a service, getaddrinfo(3)'s
// first answer, asked with the hints' family, passive flag and the socket type and
// protocol their QP type and port space stand for; the QP type and port space are the
// hints', else the answer's (stream: RC and TCP; datagram: UD and UDP); the address is
// the source if passive, else the destination; a failed lookup returns getaddrinfo's
// EAI_ code. With neither, the result is the hints' flags, family, QP type, port space
// and destination, as given — a multicast sender's source-only hints succeed. Then a
// result without a source takes the hints'. (No ibacm: no route, no AF_IB.)
EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	if (!node && !service && !hints)
		return fail(EINVAL);
	struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));
	if (!rai)
		return fail(ENOMEM);
	int ret = 0;
	if (node || service) {
		// ucma_convert_to_ai, getaddrinfo, ucma_convert_to_rai
		struct addrinfo h = {0}, *ai = NULL;
		if (hints) {
			if (hints->ai_flags & RAI_PASSIVE)
				h.ai_flags = AI_PASSIVE;
			if (hints->ai_flags & RAI_NUMERICHOST)
				h.ai_flags |= AI_NUMERICHOST;
			if (hints->ai_family != AF_IB)
				h.ai_family = hints->ai_family;
			switch (hints->ai_qp_type) {
			case IBV_QPT_RC:
			case IBV_QPT_UC:
			case IBV_QPT_XRC_SEND:
			case IBV_QPT_XRC_RECV:
				h.ai_socktype = SOCK_STREAM;
				break;
			case IBV_QPT_UD:
				h.ai_socktype = SOCK_DGRAM;
				break;
			default:
				break;
			}
			switch (hints->ai_port_space) {
			case RDMA_PS_TCP:
				h.ai_protocol = IPPROTO_TCP;
				break;
			case RDMA_PS_IPOIB:
			case RDMA_PS_UDP:
				h.ai_protocol = IPPROTO_UDP;
				break;
			case RDMA_PS_IB:
				h.ai_protocol = h.ai_socktype == SOCK_STREAM ? IPPROTO_TCP :
						h.ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : 0;
				break;
			}
		}
		ret = getaddrinfo(node, service, hints ? &h : NULL, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		if (!hints)
			hints = &nohints;
		rai->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type :
				  ai->ai_socktype == SOCK_STREAM ? IBV_QPT_RC :
				  ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : 0;
		rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space :
				     ai->ai_protocol == IPPROTO_TCP ? RDMA_PS_TCP :
				     ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : 0;
		rai->ai_family = ai->ai_family;
		if (ai->ai_flags & AI_PASSIVE) {
			rai->ai_flags = RAI_PASSIVE;
			if (ai->ai_canonname)
				rai->ai_src_canonname = strdup(ai->ai_canonname);
			ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
		} else {
			if (ai->ai_canonname)
				rai->ai_dst_canonname = strdup(ai->ai_canonname);
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
		}
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints->ai_src_len)
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
	if (ret) {
		rdma_freeaddrinfo(rai);
		return ret;
	}
	*res = rai;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

EXPORT int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *id;
	if (!res)
		return fail(EINVAL);
	// XRC through rdma_cm (rdma_xserver/rdma_xclient -c x) is not implemented: say so
	// rather than make an RC QP the program does not expect.
	if (res->ai_qp_type == IBV_QPT_XRC_SEND || res->ai_qp_type == IBV_QPT_XRC_RECV)
		return fail(EOPNOTSUPP);
	if (rdma_create_id(NULL, &id, NULL, res->ai_port_space))
		return -1;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(id, res->ai_src_addr))
			goto bad;
		if (qp_init_attr) {
			ID(id)->qp_init = malloc(sizeof(*qp_init_attr));
			if (!ID(id)->qp_init)
				goto bad;
			*ID(id)->qp_init = *qp_init_attr;
		}
		if (pd)
			id->pd = pd; // ucma_passive_ep; else the device's
		*out = id;
		return 0;
	}
	if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000))
		goto bad;
	if (rdma_resolve_route(id, 2000))
		goto bad;
	if (qp_init_attr) { // id->pd becomes pd with the QP (rdma_create_qp_ex)
		if (rdma_create_qp(id, pd, qp_init_attr))
			goto bad;
	}
	*out = id;
	return 0;
bad:;
	int e = errno;
	rdma_destroy_id(id);
	errno = e;
	return -1;
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

// own_channel gives a synchronous listener's new ID an event channel of its own, as
// librdmacm's ucma_process_conn_req does (rdma_migrate_id(id, NULL)): the ID's events do
// not mix with the listener's, and its channel's descriptor is its own (an rsocket is
// numbered by it).
static int own_channel(struct rdma_cm_id *id)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return -1;
	if (rdma_migrate_id(id, ch)) {
		rdma_destroy_event_channel(ch);
		return -1;
	}
	ID(id)->sync = ID(id)->own_channel = 1;
	return 0;
}

EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
	struct cm_id *lp = ID(listen);
	if (!lp->sync)
		return fail(EINVAL);
	struct cm_chan *c = CHAN(listen->channel);
	struct cm_event *e;
	for (;;) {
		if (next(c, &e))
			return -1;
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id == listen)
			break;
		if (e->ev.id == listen || e->ev.listen_id == listen) {
			rdma_ack_cm_event(&e->ev); // not a request: nothing to give
			continue;
		}
		stash(c, e);
	}
	struct rdma_cm_id *id = e->ev.id;
	ack(e); // the request is acknowledged; id->event keeps it for the program
	if (own_channel(id)) {
		int err = errno;
		rdma_ack_cm_event(&e->ev);
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return fail(err);
	}
	id->event = &e->ev;
	if (lp->qp_init) {
		struct ibv_qp_init_attr a = *lp->qp_init;
		if (rdma_create_qp(id, listen->pd, &a)) {
			int err = errno;
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			return fail(err);
		}
	}
	*out = id;
	return 0;
}
