// cm.c: the rdma_cm area — rdma_cm(7) and librdmacm's man pages call by call, in one
// process, against what the kernel's ucma/cma.c and rdma-core's librdmacm (cma.c,
// addrinfo.c) do: event channels, IDs and their fields (verbs, pd, port_num, route),
// bind, address and route resolution, a connection from 10.10.0.1 (pib_0's IPoIB
// address) to 10.10.0.2 (pib_1's) with private data as the IB CM carries it, reject,
// disconnect, migrate, UD, rdma_getaddrinfo and the errnos of misuse. The channels are
// non-blocking and polled with a timeout, so a missing event fails a check.
#include "conform.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define ADDR_A "10.10.0.1"
#define ADDR_B "10.10.0.2"

static struct sockaddr_in sin4(const char *ip, uint16_t port)
{
	struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

static int is_ip(const struct sockaddr *sa, const char *ip)
{
	struct sockaddr_in want = sin4(ip, 0);
	return sa->sa_family == AF_INET && ((const struct sockaddr_in *)sa)->sin_addr.s_addr == want.sin_addr.s_addr;
}

static const char *dev_name(struct ibv_context *c)
{
	return c ? ibv_get_device_name(c->device) : "(none)";
}

static struct rdma_event_channel *channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	MUST(ch, "rdma_create_event_channel: %m");
	int fl = fcntl(ch->fd, F_GETFL);
	MUST(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK: %m");
	return ch;
}

// next_ev takes ch's next event, waiting up to 5 s: 0, or -1 (errno ETIMEDOUT if none came).
static int next_ev(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
	for (int i = 0; i < 50; i++) {
		if (rdma_get_cm_event(ch, ev) == 0)
			return 0;
		if (errno != EAGAIN)
			return -1;
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
	errno = ETIMEDOUT;
	return -1;
}

// expect takes ch's next event and says whether it is t for id (NULL: any ID); the event
// stays in *ev for the caller to look at and acknowledge (NULL if none came).
static int expect(struct rdma_event_channel *ch, struct rdma_cm_id *id, enum rdma_cm_event_type t,
		  struct rdma_cm_event **ev)
{
	*ev = NULL;
	if (next_ev(ch, ev)) {
		*ev = NULL;
		return 0;
	}
	return (*ev)->event == t && (!id || (*ev)->id == id);
}

static const char *ev_str(struct rdma_cm_event *ev)
{
	return ev ? rdma_event_str(ev->event) : "no event";
}

static void ack(struct rdma_cm_event *ev)
{
	if (ev)
		rdma_ack_cm_event(ev);
}

static int zeros(const void *p, int n)
{
	for (int i = 0; i < n; i++)
		if (((const uint8_t *)p)[i])
			return 0;
	return 1;
}

struct destroyer {
	struct rdma_cm_id *id;
	volatile int done;
	int ret;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	d->ret = rdma_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

// resolve takes a fresh ID on ch from src to dst:port through ADDR_RESOLVED and
// ROUTE_RESOLVED (set-up for the checks after).
static struct rdma_cm_id *resolve(struct rdma_event_channel *ch, enum rdma_port_space ps, const char *src,
				  const char *dst, uint16_t port)
{
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	MUST(rdma_create_id(ch, &id, NULL, ps) == 0, "rdma_create_id: %m");
	struct sockaddr_in s = sin4(src, 0), d = sin4(dst, port);
	MUST(rdma_resolve_addr(id, (struct sockaddr *)&s, (struct sockaddr *)&d, 2000) == 0, "rdma_resolve_addr: %m");
	MUST(expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, &ev), "ADDR_RESOLVED: %s", ev_str(ev));
	ack(ev);
	MUST(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %m");
	MUST(expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev), "ROUTE_RESOLVED: %s", ev_str(ev));
	ack(ev);
	return id;
}

static struct ibv_qp_init_attr qp_attr(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = t, .sq_sig_all = 1,
	};
	return a;
}

static void cm_ids(struct side *a, struct side *b)
{
	(void)a;
	(void)b;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	T("cm_create_event_channel", ch && ch->fd >= 0, "channel %p: %m", (void *)ch);
	if (!ch)
		return;
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct rdma_cm_event *ev = NULL;
	errno = 0;
	int r = rdma_get_cm_event(ch, &ev);
	T("cm_get_event_none_eagain", r == -1 && errno == EAGAIN, "rdma_get_cm_event on an empty non-blocking channel: %d, %m", r);
	errno = 0;
	r = rdma_get_cm_event(ch, NULL);
	T("cm_get_event_null_einval", r == -1 && errno == EINVAL, "rdma_get_cm_event(ch, NULL): %d, %m", r);

	struct rdma_cm_id *id = NULL;
	int ctx;
	r = rdma_create_id(ch, &id, &ctx, RDMA_PS_TCP);
	T("cm_create_id_tcp", r == 0 && id->context == &ctx && id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC &&
				      id->channel == ch && !id->verbs && !id->pd && !id->qp && id->port_num == 0,
	  "rdma_create_id: %d %m; context %p ps %d qp_type %d channel %p verbs %p pd %p port %d", r,
	  id ? id->context : NULL, id ? (int)id->ps : -1, id ? (int)id->qp_type : -1, id ? (void *)id->channel : NULL,
	  id ? (void *)id->verbs : NULL, id ? (void *)id->pd : NULL, id ? id->port_num : -1);
	if (!r)
		rdma_destroy_id(id);
	r = rdma_create_id(ch, &id, NULL, RDMA_PS_UDP);
	T("cm_create_id_udp", r == 0 && id->qp_type == IBV_QPT_UD && id->ps == RDMA_PS_UDP, "%d %m qp_type %d", r,
	  r ? -1 : (int)id->qp_type);
	if (!r)
		rdma_destroy_id(id);
	r = rdma_create_id(ch, &id, NULL, RDMA_PS_IPOIB);
	T("cm_create_id_ipoib", r == 0 && id->qp_type == IBV_QPT_UD, "%d %m", r);
	if (!r)
		rdma_destroy_id(id);
	r = rdma_create_id(ch, &id, NULL, RDMA_PS_IB);
	T("cm_create_id_ib", r == 0 && id->qp_type == IBV_QPT_RC, "%d %m", r);
	if (!r)
		rdma_destroy_id(id);
	errno = 0;
	r = rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x0999);
	T("cm_create_id_bad_ps_einval", r == -1 && errno == EINVAL, "port space 0x999: %d, %m", r);
	if (!r)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);

	// A synchronous ID (no channel) has one of its own.
	r = rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP);
	T("cm_create_id_sync", r == 0 && id->channel, "%d %m", r);
	if (!r) {
		errno = 0;
		int m = rdma_migrate_id(id, NULL);
		T("cm_migrate_sync_null_einval", m == -1 && errno == EINVAL, "rdma_migrate_id(sync ID, NULL): %d, %m", m);
		rdma_destroy_id(id);
	}
}

static void cm_bind(struct side *a, struct side *b)
{
	struct rdma_event_channel *ch = channel();
	union ibv_gid ga, gb;
	MUST(ibv_query_gid(a->ctx, 1, 0, &ga) == 0 && ibv_query_gid(b->ctx, 1, 0, &gb) == 0, "query_gid: %m");
	struct rdma_cm_id *x, *y, *z, *w;
	MUST(rdma_create_id(ch, &x, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &y, NULL, RDMA_PS_TCP) == 0 &&
		     rdma_create_id(ch, &z, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &w, NULL, RDMA_PS_TCP) == 0,
	     "rdma_create_id: %m");

	struct sockaddr_in s = sin4(ADDR_A, 0);
	int r = rdma_bind_addr(x, (struct sockaddr *)&s);
	T("cm_bind_a", r == 0, "rdma_bind_addr(%s): %m", ADDR_A);
	T("cm_bind_a_verbs", x->verbs && !strcmp(dev_name(x->verbs), "pib_0") && x->port_num == 1,
	  "after bind: verbs %s port_num %d", dev_name(x->verbs), x->port_num);
	T("cm_bind_a_pd", x->pd && x->pd->context == x->verbs,
	  "after bind: pd %p (its context %p, the ID's %p): librdmacm gives the device's PD", (void *)x->pd,
	  x->pd ? (void *)x->pd->context : NULL, (void *)x->verbs);
	uint16_t px = ntohs(rdma_get_src_port(x));
	T("cm_bind_a_addr", is_ip(rdma_get_local_addr(x), ADDR_A) && px != 0 && rdma_get_dst_port(x) == 0 &&
				    rdma_get_peer_addr(x)->sa_family == 0,
	  "local family %d port %u; peer port %u family %d", rdma_get_local_addr(x)->sa_family, px,
	  ntohs(rdma_get_dst_port(x)), rdma_get_peer_addr(x)->sa_family);
	struct rdma_ib_addr *ib = &x->route.addr.addr.ibaddr;
	T("cm_bind_a_gid", !memcmp(&ib->sgid, &ga, 16) && zeros(&ib->dgid, 16) && ib->pkey == htobe16(0xffff),
	  "sgid %s pib_0's, dgid %s, pkey 0x%x", memcmp(&ib->sgid, &ga, 16) ? "is not" : "is",
	  zeros(&ib->dgid, 16) ? "zero" : "set", be16toh(ib->pkey));
	T("cm_bind_no_route", x->route.num_paths == 0 && !x->route.path_rec, "num_paths %d path_rec %p",
	  x->route.num_paths, (void *)x->route.path_rec);

	errno = 0;
	r = rdma_bind_addr(x, (struct sockaddr *)&s);
	T("cm_bind_twice_einval", r == -1 && errno == EINVAL, "second rdma_bind_addr: %d, %m", r);

	// The same address and port: EADDRINUSE; another device's address, the same port: fine.
	struct sockaddr_in same = sin4(ADDR_A, px), other = sin4(ADDR_B, px);
	errno = 0;
	r = rdma_bind_addr(y, (struct sockaddr *)&same);
	T("cm_bind_in_use_eaddrinuse", r == -1 && errno == EADDRINUSE, "bind %s:%u again: %d, %m", ADDR_A, px, r);
	r = rdma_bind_addr(y, (struct sockaddr *)&other);
	T("cm_bind_same_port_other_addr", r == 0 && ntohs(rdma_get_src_port(y)) == px,
	  "bind %s:%u (%s has the port): %d, %m", ADDR_B, px, ADDR_A, r);
	T("cm_bind_b_verbs_pd", y->verbs && !strcmp(dev_name(y->verbs), "pib_1") && y->pd && y->pd != x->pd &&
					y->pd->context == y->verbs && !memcmp(&y->route.addr.addr.ibaddr.sgid, &gb, 16),
	  "pib_1's ID: verbs %s pd %p (pib_0's %p)", dev_name(y->verbs), (void *)y->pd, (void *)x->pd);
	struct sockaddr_in any_same = sin4("0.0.0.0", px);
	errno = 0;
	r = rdma_bind_addr(z, (struct sockaddr *)&any_same);
	T("cm_bind_any_port_in_use_eaddrnotavail", r == -1 && errno == EADDRNOTAVAIL,
	  "bind 0.0.0.0:%u (in use): %d, %m", px, r);

	struct sockaddr_in s2 = sin4(ADDR_A, 0);
	r = rdma_bind_addr(z, (struct sockaddr *)&s2);
	T("cm_bind_pd_shared", r == 0 && z->pd == x->pd && z->verbs == x->verbs,
	  "two IDs on pib_0: pd %p and %p, verbs %p and %p (librdmacm: one PD a device)", (void *)z->pd,
	  (void *)x->pd, (void *)z->verbs, (void *)x->verbs);

	struct sockaddr_in none = sin4("192.0.2.1", 0);
	errno = 0;
	r = rdma_bind_addr(w, (struct sockaddr *)&none);
	T("cm_bind_no_device_eaddrnotavail", r == -1 && errno == EADDRNOTAVAIL, "bind 192.0.2.1: %d, %m", r);
	errno = 0;
	r = rdma_bind_addr(w, NULL);
	T("cm_bind_null_einval", r == -1 && errno == EINVAL, "bind NULL: %d, %m", r);
	struct sockaddr_in any = sin4("0.0.0.0", 0);
	r = rdma_bind_addr(w, (struct sockaddr *)&any);
	T("cm_bind_any", r == 0 && !w->verbs && !w->pd && ntohs(rdma_get_src_port(w)) != 0,
	  "bind 0.0.0.0: %d %m; verbs %s pd %p port %u", r, dev_name(w->verbs), (void *)w->pd,
	  ntohs(rdma_get_src_port(w)));

	// A bound ID has no route: rdma_resolve_route and rdma_connect are EINVAL.
	errno = 0;
	r = rdma_resolve_route(z, 1000);
	T("cm_route_unresolved_einval", r == -1 && errno == EINVAL, "rdma_resolve_route on a bound ID: %d, %m", r);
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
	errno = 0;
	r = rdma_connect(z, &cp);
	T("cm_connect_no_route_einval", r == -1 && errno == EINVAL, "rdma_connect on a bound ID: %d, %m", r);
	errno = 0;
	r = rdma_disconnect(z);
	T("cm_disconnect_unconnected_einval", r == -1 && errno == EINVAL, "rdma_disconnect on a bound ID: %d, %m", r);

	rdma_destroy_id(x);
	rdma_destroy_id(y);
	rdma_destroy_id(z);
	rdma_destroy_id(w);

	// REUSEADDR (rdma_set_reuseaddr, cma_check_port): IDs that all set it share an address
	// and port, not beside one that did not; a listener's are its alone; off only before
	// the bind, never on a listener.
	struct rdma_cm_id *r1, *r2, *r3;
	MUST(rdma_create_id(ch, &r1, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &r2, NULL, RDMA_PS_TCP) == 0 &&
		     rdma_create_id(ch, &r3, NULL, RDMA_PS_TCP) == 0,
	     "rdma_create_id: %m");
	int on = 1, off = 0;
	MUST(rdma_bind_addr(r1, (struct sockaddr *)&s) == 0, "bind: %m");
	uint16_t pr = ntohs(rdma_get_src_port(r1));
	struct sockaddr_in at = sin4(ADDR_A, pr);
	r = rdma_set_option(r2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on));
	errno = 0;
	int r2b = rdma_bind_addr(r2, (struct sockaddr *)&at);
	T("cm_reuseaddr_beside_not_reusing", r == 0 && r2b == -1 && errno == EADDRINUSE,
	  "REUSEADDR %d; bind beside an ID without it: %d, %m", r, r2b);
	r = rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on));
	r2b = rdma_bind_addr(r2, (struct sockaddr *)&at);
	T("cm_reuseaddr_shared", r == 0 && r2b == 0, "REUSEADDR on the bound ID %d; bind %s:%u again: %d, %m", r, ADDR_A,
	  pr, r2b);
	errno = 0;
	r = rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &off, sizeof(off));
	T("cm_reuseaddr_off_bound_einval", r == -1 && errno == EINVAL, "REUSEADDR off after the bind: %d, %m", r);
	errno = 0;
	r = rdma_listen(r2, 1);
	T("cm_reuseaddr_listen_eaddrinuse", r == -1 && errno == EADDRINUSE, "listen on a shared address and port: %d, %m", r);
	rdma_destroy_id(r1);
	r = rdma_listen(r2, 1);
	errno = 0;
	int r3s = rdma_set_option(r2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on));
	T("cm_reuseaddr_listener_einval", r == 0 && r3s == -1 && errno == EINVAL,
	  "listen alone %d; REUSEADDR on a listener: %d, %m", r, r3s);
	errno = 0;
	r = rdma_set_option(r3, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, 1);
	T("cm_reuseaddr_optlen_einval", r == -1 && errno == EINVAL, "REUSEADDR with optlen 1: %d, %m", r);
	rdma_destroy_id(r2);
	rdma_destroy_id(r3);

	// rdma_listen before rdma_bind_addr binds the any address (the kernel's rdma_listen);
	// a second rdma_listen is EINVAL.
	struct rdma_cm_id *l;
	MUST(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %m");
	r = rdma_listen(l, 1);
	T("cm_listen_unbound_binds_any", r == 0 && rdma_get_local_addr(l)->sa_family == AF_INET &&
						 is_ip(rdma_get_local_addr(l), "0.0.0.0") && rdma_get_src_port(l) != 0 && !l->verbs,
	  "rdma_listen before bind: %d %m; family %d port %u verbs %s", r, rdma_get_local_addr(l)->sa_family,
	  ntohs(rdma_get_src_port(l)), dev_name(l->verbs));
	errno = 0;
	r = rdma_listen(l, 1);
	T("cm_listen_twice_einval", r == -1 && errno == EINVAL, "second rdma_listen: %d, %m", r);
	struct rdma_cm_id *got;
	errno = 0;
	r = rdma_get_request(l, &got);
	T("cm_get_request_async_einval", r == -1 && errno == EINVAL, "rdma_get_request on an ID with a channel: %d, %m", r);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
}

static void cm_resolve(struct side *a, struct side *b)
{
	struct rdma_event_channel *ch = channel();
	union ibv_gid ga, gb;
	MUST(ibv_query_gid(a->ctx, 1, 0, &ga) == 0 && ibv_query_gid(b->ctx, 1, 0, &gb) == 0, "query_gid: %m");
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	MUST(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %m");
	struct sockaddr_in s = sin4(ADDR_A, 0), d = sin4(ADDR_B, 7471);
	errno = 0;
	int r = rdma_resolve_addr(id, NULL, NULL, 1000);
	T("cm_resolve_addr_null_einval", r == -1 && errno == EINVAL, "rdma_resolve_addr(dst NULL): %d, %m", r);
	r = rdma_resolve_addr(id, (struct sockaddr *)&s, (struct sockaddr *)&d, 2000);
	T("cm_resolve_addr", r == 0, "rdma_resolve_addr: %m");
	// librdmacm has the destination at once, the device at ADDR_RESOLVED.
	T("cm_resolve_addr_before_event", is_ip(rdma_get_peer_addr(id), ADDR_B) && ntohs(rdma_get_dst_port(id)) == 7471 &&
						  !id->verbs && !id->pd,
	  "before ADDR_RESOLVED: peer %s port %u verbs %s pd %p", is_ip(rdma_get_peer_addr(id), ADDR_B) ? ADDR_B : "?",
	  ntohs(rdma_get_dst_port(id)), dev_name(id->verbs), (void *)id->pd);
	int ok = expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, &ev);
	T("cm_addr_resolved_event", ok && ev->status == 0 && !ev->listen_id, "%s status %d", ev_str(ev), ev ? ev->status : 0);
	ack(ev);
	T("cm_addr_resolved_fields", id->verbs && !strcmp(dev_name(id->verbs), "pib_0") && id->port_num == 1 && id->pd &&
					     id->pd->context == id->verbs && is_ip(rdma_get_local_addr(id), ADDR_A) &&
					     rdma_get_src_port(id) != 0,
	  "verbs %s port %d pd %p src %s", dev_name(id->verbs), id->port_num, (void *)id->pd,
	  is_ip(rdma_get_local_addr(id), ADDR_A) ? ADDR_A : "?");
	struct rdma_ib_addr *ib = &id->route.addr.addr.ibaddr;
	T("cm_addr_resolved_gids", !memcmp(&ib->sgid, &ga, 16) && !memcmp(&ib->dgid, &gb, 16),
	  "sgid %s pib_0's, dgid %s pib_1's", memcmp(&ib->sgid, &ga, 16) ? "is not" : "is",
	  memcmp(&ib->dgid, &gb, 16) ? "is not" : "is");
	T("cm_addr_resolved_no_path", id->route.num_paths == 0 && !id->route.path_rec, "num_paths %d", id->route.num_paths);
	errno = 0;
	r = rdma_resolve_addr(id, (struct sockaddr *)&s, (struct sockaddr *)&d, 2000);
	T("cm_resolve_addr_twice_einval", r == -1 && errno == EINVAL, "second rdma_resolve_addr: %d, %m", r);

	r = rdma_resolve_route(id, 2000);
	ok = r == 0 && expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev);
	T("cm_route_resolved_event", ok && ev->status == 0, "rdma_resolve_route %d %m: %s", r, ev_str(ev));
	ack(ev);
	struct ibv_sa_path_rec *p = id->route.path_rec;
	T("cm_route_path_rec", id->route.num_paths == 1 && p && p->dlid == htobe16(b->lid) && p->slid == htobe16(a->lid) &&
				       !memcmp(&p->sgid, &ga, 16) && !memcmp(&p->dgid, &gb, 16) && p->pkey == htobe16(0xffff) &&
				       p->mtu_selector == 2 && p->mtu >= IBV_MTU_256 && p->mtu <= IBV_MTU_4096 && p->numb_path == 1,
	  "num_paths %d dlid %u (pib_1 %u) slid %u (pib_0 %u) pkey 0x%x mtu %d numb_path %d", id->route.num_paths,
	  p ? be16toh(p->dlid) : 0, b->lid, p ? be16toh(p->slid) : 0, a->lid, p ? be16toh(p->pkey) : 0, p ? p->mtu : -1,
	  p ? p->numb_path : -1);

	// rdma_create_qp with no PD uses id->pd (what librdmacm's UD and RC examples do).
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	r = rdma_create_qp(id, NULL, &qa);
	T("cm_create_qp_id_pd", r == 0 && id->qp && id->qp->pd == id->pd && id->send_cq && id->recv_cq,
	  "rdma_create_qp(id, NULL): %d %m; qp %p", r, (void *)id->qp);
	errno = 0;
	r = rdma_create_qp(id, NULL, &qa);
	T("cm_create_qp_twice_einval", r == -1 && errno == EINVAL, "second rdma_create_qp: %d, %m", r);
	rdma_destroy_qp(id);
	T("cm_destroy_qp", id->qp == NULL && !id->send_cq && !id->recv_cq, "qp %p send_cq %p recv_cq %p after rdma_destroy_qp",
	  (void *)id->qp, (void *)id->send_cq, (void *)id->recv_cq);
	// A send CQ of the program's: rdma_create_qp makes the receive CQ only (ucma_create_cqs)
	// and leaves the program's CQ alone.
	struct ibv_cq *mine = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	MUST(mine, "ibv_create_cq: %m");
	qa = qp_attr(IBV_QPT_RC);
	qa.send_cq = mine;
	r = rdma_create_qp(id, NULL, &qa);
	T("cm_create_qp_own_send_cq", r == 0 && !id->send_cq && id->recv_cq && id->recv_cq != mine && id->qp->send_cq == mine &&
					      id->qp->recv_cq == id->recv_cq && id->recv_cq_channel && !id->send_cq_channel,
	  "rdma_create_qp with a send CQ: %d %m; id send_cq %p recv_cq %p (mine %p)", r, (void *)id->send_cq,
	  (void *)id->recv_cq, (void *)mine);
	rdma_destroy_qp(id);
	T("cm_destroy_qp_leaves_program_cq", ibv_destroy_cq(mine) == 0, "ibv_destroy_cq of the program's CQ: %m");
	rdma_destroy_id(id);

	// A neighbour that never answers: ADDR_ERROR at the timeout, the kernel's -ETIMEDOUT.
	MUST(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %m");
	struct sockaddr_in nobody = sin4("10.10.0.99", 7471);
	r = rdma_resolve_addr(id, (struct sockaddr *)&s, (struct sockaddr *)&nobody, 300);
	ok = r == 0 && expect(ch, id, RDMA_CM_EVENT_ADDR_ERROR, &ev);
	T("cm_addr_error_timeout", ok && ev->status == -ETIMEDOUT, "resolve 10.10.0.99: %d %m; %s status %d", r,
	  ev_str(ev), ev ? ev->status : 0);
	ack(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

// cm_connect: 10.10.0.1 connects to a listener on 10.10.0.2, both IDs in this process.
static void cm_connect(struct side *a, struct side *b)
{
	(void)a;
	(void)b;
	struct rdma_event_channel *cc = channel(), *sc = channel();
	struct rdma_cm_id *l;
	struct rdma_cm_event *ev;
	int lctx;
	MUST(rdma_create_id(sc, &l, &lctx, RDMA_PS_TCP) == 0, "rdma_create_id: %m");
	struct sockaddr_in ls = sin4(ADDR_B, 0);
	MUST(rdma_bind_addr(l, (struct sockaddr *)&ls) == 0, "bind %s: %m", ADDR_B);
	int lr = rdma_listen(l, 4);
	T("cm_listen", lr == 0 && l->verbs && !strcmp(dev_name(l->verbs), "pib_1") && l->pd,
	  "rdma_listen: %d %m; verbs %s", lr, dev_name(l->verbs));
	uint16_t port = ntohs(rdma_get_src_port(l));

	struct rdma_cm_id *c = resolve(cc, RDMA_PS_TCP, ADDR_A, ADDR_B, port);
	// The client's QP takes its receives from an SRQ (rdma_create_srq: in id->pd, and
	// rdma_create_qp uses id->srq).
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	int r = rdma_create_srq(c, NULL, &sa);
	T("cm_create_srq_id_pd", r == 0 && c->srq && c->srq->pd == c->pd, "rdma_create_srq(id, NULL): %d %m", r);
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
	MUST(rdma_create_qp(c, NULL, &qa) == 0, "rdma_create_qp: %m");
	T("cm_create_qp_id_srq", c->qp->srq == c->srq, "the QP's SRQ %p, the ID's %p", (void *)c->qp->srq, (void *)c->srq);

	// READ depths above the device's: EINVAL (librdmacm's ucma_valid_param).
	struct ibv_device_attr da;
	MUST(ibv_query_device(c->verbs, &da) == 0, "query_device: %m");
	struct rdma_conn_param deep = {.responder_resources = da.max_qp_rd_atom + 1, .initiator_depth = 1};
	errno = 0;
	r = rdma_connect(c, &deep);
	T("cm_connect_resources_above_device_einval", r == -1 && errno == EINVAL,
	  "responder_resources %d (max_qp_rd_atom %d): %d, %m", deep.responder_resources, da.max_qp_rd_atom, r);

	// 57 bytes do not fit the REQ's 92 after the 36-byte IP CM header.
	uint8_t big[57] = {0};
	struct rdma_conn_param cp = {.private_data = big, .private_data_len = 57, .responder_resources = 2,
				     .initiator_depth = 3, .retry_count = 6, .rnr_retry_count = 5};
	errno = 0;
	r = rdma_connect(c, &cp);
	T("cm_connect_private_57_einval", r == -1 && errno == EINVAL, "rdma_connect with 57 bytes: %d, %m", r);
	cp.private_data = "hello";
	cp.private_data_len = 5;
	r = rdma_connect(c, &cp);
	T("cm_connect", r == 0, "rdma_connect: %m");

	int ok = expect(sc, NULL, RDMA_CM_EVENT_CONNECT_REQUEST, &ev);
	T("cm_connect_request_event", ok && ev->listen_id == l && ev->id && ev->id != l && ev->status == 0,
	  "%s listen_id %p (listener %p)", ev_str(ev), ev ? (void *)ev->listen_id : NULL, (void *)l);
	if (!ok) {
		ack(ev);
		rdma_destroy_id(c);
		rdma_destroy_id(l);
		return;
	}
	struct rdma_cm_id *s = ev->id;
	struct rdma_conn_param *p = &ev->param.conn;
	// The REQ carries 92 bytes of private data, 56 after the IP CM header: the kernel
	// reports them all (cma_set_req_event_data), the 5 sent and zeros.
	T("cm_connect_request_private", p->private_data_len == 56 && p->private_data &&
						!memcmp(p->private_data, "hello", 5) && zeros((uint8_t *)p->private_data + 5, 51),
	  "private_data_len %d", p->private_data_len);
	// The CM swaps them: the passive side's responder resources are the active side's
	// initiator depth (cm_format_req_event).
	T("cm_connect_request_param", p->responder_resources == 3 && p->initiator_depth == 2 && p->retry_count == 6 &&
					      p->rnr_retry_count == 5 && p->qp_num == c->qp->qp_num && p->srq == 1,
	  "responder_resources %d initiator_depth %d retry %d rnr %d qp_num %u (client's %u) srq %d",
	  p->responder_resources, p->initiator_depth, p->retry_count, p->rnr_retry_count, p->qp_num, c->qp->qp_num, p->srq);
	T("cm_connect_request_id", s->context == &lctx && s->channel == sc && s->ps == RDMA_PS_TCP && s->verbs &&
					   !strcmp(dev_name(s->verbs), "pib_1") && s->port_num == 1 && s->pd == l->pd && !s->qp,
	  "context %p channel %p verbs %s port %d pd %p (listener's %p)", s->context, (void *)s->channel,
	  dev_name(s->verbs), s->port_num, (void *)s->pd, (void *)l->pd);
	T("cm_connect_request_addrs", is_ip(rdma_get_local_addr(s), ADDR_B) && is_ip(rdma_get_peer_addr(s), ADDR_A) &&
					      rdma_get_src_port(s) == htons(port) && rdma_get_dst_port(s) == rdma_get_src_port(c) &&
					      s->route.num_paths >= 1 && s->route.path_rec,
	  "src port %u (listener %u) dst port %u (client %u) num_paths %d", ntohs(rdma_get_src_port(s)), port,
	  ntohs(rdma_get_dst_port(s)), ntohs(rdma_get_src_port(c)), s->route.num_paths);
	ack(ev);

	qa = qp_attr(IBV_QPT_RC);
	r = rdma_create_qp(s, NULL, &qa);
	T("cm_accept_create_qp", r == 0 && s->qp && s->qp->pd == s->pd, "rdma_create_qp on the new ID: %d %m", r);
	struct rdma_conn_param ap = {.private_data = "ok!", .private_data_len = 3, .responder_resources = 3,
				     .initiator_depth = 2, .rnr_retry_count = 7};
	r = rdma_accept(s, &ap);
	T("cm_accept", r == 0, "rdma_accept: %m");

	ok = expect(cc, c, RDMA_CM_EVENT_ESTABLISHED, &ev);
	// The REP's 196 bytes of private data (cma_set_rep_event_data), its responder
	// resources and initiator depth swapped (cm_format_rep_event).
	T("cm_established_active", ok && ev->status == 0 && ev->param.conn.private_data_len == 196 &&
					   ev->param.conn.private_data && !memcmp(ev->param.conn.private_data, "ok!", 3) &&
					   ev->param.conn.responder_resources == 2 && ev->param.conn.initiator_depth == 3 &&
					   ev->param.conn.qp_num == s->qp->qp_num,
	  "%s status %d private_data_len %d responder_resources %d initiator_depth %d qp_num %u (server's %u)", ev_str(ev),
	  ev ? ev->status : 0, ev ? ev->param.conn.private_data_len : -1, ev ? ev->param.conn.responder_resources : -1,
	  ev ? ev->param.conn.initiator_depth : -1, ev ? ev->param.conn.qp_num : 0, s->qp ? s->qp->qp_num : 0);
	ack(ev);
	errno = 0;
	r = rdma_establish(c);
	T("cm_establish_with_qp_einval", r == -1 && errno == EINVAL, "rdma_establish on an ID with a QP: %d, %m", r);
	ok = expect(sc, s, RDMA_CM_EVENT_ESTABLISHED, &ev);
	// The RTU's private data is not reported.
	T("cm_established_passive", ok && ev->status == 0 && ev->param.conn.private_data_len == 0 &&
					    !ev->param.conn.private_data,
	  "%s private_data_len %d", ev_str(ev), ev ? ev->param.conn.private_data_len : -1);
	ack(ev);

	// A SEND through the connection, in MRs of the IDs' PDs.
	char sbuf[64] = "through rdma_cm", rbuf[64] = "";
	struct ibv_mr *smr = ibv_reg_mr(c->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(s->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	MUST(smr && rmr, "reg_mr on the IDs' PDs: %m");
	struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = sizeof(rbuf), .lkey = rmr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = 16, .lkey = smr->lkey};
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *sbad;
	struct ibv_wc wc, wc2;
	r = ibv_post_recv(s->qp, &rw, &rbad) || ibv_post_send(c->qp, &sw, &sbad);
	int got = !r && poll_one(s->recv_cq, &wc) == 0 && poll_one(c->send_cq, &wc2) == 0;
	T("cm_connected_send", got && wc.status == IBV_WC_SUCCESS && wc.byte_len == 16 && !strcmp(rbuf, "through rdma_cm"),
	  "post %d; completion %s status %d len %u", r, got ? "came" : "missing", got ? wc.status : -1, got ? wc.byte_len : 0);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);

	// The DREQ: DISCONNECTED on the passive side; its rdma_disconnect sends the DREP,
	// which is the active side's DISCONNECTED (cma_ib_handler, DREQ/DREP_RECEIVED).
	r = rdma_disconnect(c);
	T("cm_disconnect", r == 0, "rdma_disconnect: %m");
	ok = expect(sc, s, RDMA_CM_EVENT_DISCONNECTED, &ev);
	T("cm_disconnected_passive", ok && ev->status == 0 && ev->param.conn.private_data_len == 0, "%s status %d len %d",
	  ev_str(ev), ev ? ev->status : 0, ev ? ev->param.conn.private_data_len : -1);
	ack(ev);
	r = rdma_disconnect(s);
	T("cm_disconnect_passive", r == 0, "the passive side's rdma_disconnect after DISCONNECTED: %d, %m", r);
	ok = expect(cc, c, RDMA_CM_EVENT_DISCONNECTED, &ev);
	T("cm_disconnected_active", ok && ev->status == 0 && ev->param.conn.private_data_len == 0, "%s status %d len %d",
	  ev_str(ev), ev ? ev->status : 0, ev ? ev->param.conn.private_data_len : -1);
	ack(ev);
	// Once more, after the DREQ and DREP: 0 (the kernel's rdma_disconnect reports neither
	// ib_send_cm_dreq's failure nor ib_send_cm_drep's), and no event.
	r = rdma_disconnect(c);
	T("cm_disconnect_after_disconnected", r == 0, "rdma_disconnect after DISCONNECTED: %d, %m", r);
	struct rdma_cm_event *extra = NULL;
	usleep(100000);
	errno = 0;
	r = rdma_get_cm_event(cc, &extra);
	T("cm_disconnected_once", r == -1 && errno == EAGAIN, "another event: %s", extra ? rdma_event_str(extra->event) : "");
	ack(extra);
	rdma_destroy_qp(s);
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_srq(c);
	rdma_destroy_id(c);

	// Reject, with private data: REJECTED with the REJ's reason 28 (consumer reject) and
	// its 148 bytes of private data.
	c = resolve(cc, RDMA_PS_TCP, ADDR_A, ADDR_B, port);
	errno = 0;
	r = rdma_connect(c, NULL);
	T("cm_connect_no_qp_no_param_einval", r == -1 && errno == EINVAL, "rdma_connect(no QP, NULL): %d, %m", r);
	struct rdma_conn_param cp2 = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .qp_num = 0x123};
	MUST(rdma_connect(c, &cp2) == 0, "rdma_connect: %m");
	ok = expect(sc, NULL, RDMA_CM_EVENT_CONNECT_REQUEST, &ev);
	MUST(ok, "CONNECT_REQUEST: %s", ev_str(ev));
	s = ev->id;
	T("cm_connect_request_no_qp_qpn", ev->param.conn.qp_num == 0x123, "qp_num %#x, the connect's 0x123",
	  ev->param.conn.qp_num);
	ack(ev);
	// Too much private data: a REP holds 196 bytes, a REJ 148 (ib_send_cm_rep/rej).
	uint8_t lots[200] = {0};
	struct rdma_conn_param ap2 = {.private_data = lots, .private_data_len = 197, .responder_resources = 1,
				      .initiator_depth = 1};
	errno = 0;
	r = rdma_accept(s, &ap2);
	T("cm_accept_private_197_einval", r == -1 && errno == EINVAL, "rdma_accept with 197 bytes: %d, %m", r);
	errno = 0;
	r = rdma_reject(s, lots, 149);
	T("cm_reject_private_149_einval", r == -1 && errno == EINVAL, "rdma_reject with 149 bytes: %d, %m", r);
	r = rdma_reject(s, "nope", 4);
	T("cm_reject", r == 0, "rdma_reject: %m");
	ok = expect(cc, c, RDMA_CM_EVENT_REJECTED, &ev);
	T("cm_rejected_event", ok && ev->status == 28 && ev->param.conn.private_data_len == 148 &&
				       ev->param.conn.private_data && !memcmp(ev->param.conn.private_data, "nope", 4),
	  "%s status %d private_data_len %d", ev_str(ev), ev ? ev->status : 0, ev ? ev->param.conn.private_data_len : -1);
	rdma_destroy_id(s);

	// rdma_destroy_id waits for the ID's events the program holds (librdmacm's
	// events_completed): the REJECTED event is not acknowledged yet.
	if (ev) {
		struct destroyer d = {.id = c};
		pthread_t th;
		MUST(pthread_create(&th, NULL, destroy_thread, &d) == 0, "pthread_create");
		usleep(200000);
		int early = d.done;
		rdma_ack_cm_event(ev);
		pthread_join(th, NULL);
		T("cm_destroy_waits_for_ack", !early && d.done && d.ret == 0, "destroy returned %s the ack (%d)",
		  early ? "before" : "after", d.ret);
	} else {
		rdma_destroy_id(c);
	}
	errno = 0;
	r = rdma_ack_cm_event(NULL);
	T("cm_ack_null_einval", r == -1 && errno == EINVAL, "rdma_ack_cm_event(NULL): %d, %m", r);

	// Without QPs: CONNECT_RESPONSE with the REP's data, then rdma_establish sends the RTU
	// (the passive side's ESTABLISHED).
	c = resolve(cc, RDMA_PS_TCP, ADDR_A, ADDR_B, port);
	MUST(rdma_connect(c, &cp2) == 0, "rdma_connect: %m");
	ok = expect(sc, NULL, RDMA_CM_EVENT_CONNECT_REQUEST, &ev);
	MUST(ok, "CONNECT_REQUEST: %s", ev_str(ev));
	s = ev->id;
	ack(ev);
	struct rdma_conn_param ap3 = {.private_data = "rep", .private_data_len = 3, .responder_resources = 1,
				      .initiator_depth = 1, .rnr_retry_count = 7, .qp_num = 0x456};
	r = rdma_accept(s, &ap3);
	ok = r == 0 && expect(cc, c, RDMA_CM_EVENT_CONNECT_RESPONSE, &ev);
	T("cm_connect_response_no_qp", ok && ev->status == 0 && ev->param.conn.private_data_len == 196 &&
					       !memcmp(ev->param.conn.private_data, "rep", 3) && ev->param.conn.qp_num == 0x456,
	  "accept %d %m: %s private_data_len %d qp_num %#x", r, ev_str(ev), ev ? ev->param.conn.private_data_len : -1,
	  ev ? ev->param.conn.qp_num : 0);
	ack(ev);
	r = rdma_establish(c);
	ok = r == 0 && expect(sc, s, RDMA_CM_EVENT_ESTABLISHED, &ev);
	T("cm_establish", ok, "rdma_establish %d %m: the passive side's %s", r, ev_str(ev));
	ack(ev);
	MUST(rdma_disconnect(c) == 0, "rdma_disconnect: %m");
	ok = expect(sc, s, RDMA_CM_EVENT_DISCONNECTED, &ev);
	ack(ev);
	rdma_disconnect(s);
	ok = expect(cc, c, RDMA_CM_EVENT_DISCONNECTED, &ev);
	ack(ev);
	rdma_destroy_id(s);
	rdma_destroy_id(c);

	// No listener on the port: the peer's CM rejects the REQ, invalid service ID (8).
	c = resolve(cc, RDMA_PS_TCP, ADDR_A, ADDR_B, port ^ 1);
	MUST(rdma_connect(c, &cp2) == 0, "rdma_connect: %m");
	ok = expect(cc, c, RDMA_CM_EVENT_REJECTED, &ev);
	T("cm_connect_no_listener_rejected", ok && ev->status == 8, "%s status %d (IB_CM_REJ_INVALID_SERVICE_ID 8)",
	  ev_str(ev), ev ? ev->status : 0);
	ack(ev);
	rdma_destroy_id(c);

	// rdma_migrate_id: the listener's requests go to the new channel.
	struct rdma_event_channel *mc = channel();
	r = rdma_migrate_id(l, mc);
	T("cm_migrate_id", r == 0 && l->channel == mc, "rdma_migrate_id: %d %m", r);
	c = resolve(cc, RDMA_PS_TCP, ADDR_A, ADDR_B, port);
	MUST(rdma_connect(c, &cp2) == 0, "rdma_connect: %m");
	ok = expect(mc, NULL, RDMA_CM_EVENT_CONNECT_REQUEST, &ev);
	T("cm_migrate_id_events", ok && ev->listen_id == l && ev->id->channel == mc, "on the new channel: %s", ev_str(ev));
	struct rdma_cm_event *none = NULL;
	errno = 0;
	r = rdma_get_cm_event(sc, &none);
	T("cm_migrate_id_old_channel_empty", r == -1 && errno == EAGAIN, "old channel: %d %m (%s)", r,
	  none ? rdma_event_str(none->event) : "");
	if (ok) {
		s = ev->id;
		ack(ev);
		rdma_reject(s, NULL, 0);
		rdma_destroy_id(s);
		ok = expect(cc, c, RDMA_CM_EVENT_REJECTED, &ev);
		ack(ev);
	} else {
		ack(ev);
	}
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(mc);
	rdma_destroy_event_channel(cc);
	rdma_destroy_event_channel(sc);
}

struct peer {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	int got;
};

// disconnect_on_dreq is an active side that answers the peer's DREQ.
static void *disconnect_on_dreq(void *arg)
{
	struct peer *p = arg;
	struct rdma_cm_event *ev;
	p->got = expect(p->ch, p->id, RDMA_CM_EVENT_DISCONNECTED, &ev);
	ack(ev);
	rdma_disconnect(p->id);
	return NULL;
}

// cm_sync: a synchronous listener (no channel): rdma_get_request, rdma_accept and
// rdma_disconnect wait for their events (librdmacm's ucma_complete) and leave them in
// id->event.
static void cm_sync(struct side *a, struct side *b)
{
	(void)a;
	(void)b;
	struct rdma_event_channel *cc = channel();
	struct rdma_cm_id *l, *s;
	struct rdma_cm_event *ev;
	MUST(rdma_create_id(NULL, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %m");
	struct sockaddr_in ls = sin4(ADDR_B, 0);
	MUST(rdma_bind_addr(l, (struct sockaddr *)&ls) == 0 && rdma_listen(l, 4) == 0, "sync listener: %m");
	uint16_t port = ntohs(rdma_get_src_port(l));
	for (int round = 0; round < 2; round++) {
		struct rdma_cm_id *c = resolve(cc, RDMA_PS_TCP, ADDR_A, ADDR_B, port);
		struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
		MUST(rdma_create_qp(c, NULL, &qa) == 0, "rdma_create_qp: %m");
		struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
					     .rnr_retry_count = 7};
		MUST(rdma_connect(c, &cp) == 0, "rdma_connect: %m");
		int r = rdma_get_request(l, &s);
		if (round == 0)
			T("cm_get_request", r == 0 && s->event && s->event->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
						    s->event->listen_id == l && s->channel && s->channel != l->channel &&
						    s->verbs && !strcmp(dev_name(s->verbs), "pib_1") && s->pd == l->pd && s->pd,
			  "rdma_get_request: %d %m; event %s channel %p (listener's %p) verbs %s pd %p (listener's %p)", r,
			  r ? "" : ev_str(s->event), r ? NULL : (void *)s->channel, (void *)l->channel,
			  r ? "" : dev_name(s->verbs), r ? NULL : (void *)s->pd, (void *)l->pd);
		MUST(r == 0, "rdma_get_request: %m");
		qa = qp_attr(IBV_QPT_RC);
		MUST(rdma_create_qp(s, NULL, &qa) == 0, "rdma_create_qp: %m");
		struct rdma_conn_param ap = {.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7};
		r = rdma_accept(s, &ap);
		if (round == 0)
			T("cm_sync_accept", r == 0 && s->event && s->event->event == RDMA_CM_EVENT_ESTABLISHED,
			  "rdma_accept (synchronous): %d %m; id->event %s", r, r ? "" : ev_str(s->event));
		MUST(expect(cc, c, RDMA_CM_EVENT_ESTABLISHED, &ev), "ESTABLISHED: %s", ev_str(ev));
		ack(ev);
		if (round == 0) {
			// The peer disconnects first: DISCONNECTED is there for the passive side's call.
			MUST(rdma_disconnect(c) == 0, "rdma_disconnect: %m");
			r = rdma_disconnect(s);
			T("cm_sync_disconnect", r == 0 && s->event && s->event->event == RDMA_CM_EVENT_DISCONNECTED,
			  "rdma_disconnect (synchronous, after the peer's): %d %m; id->event %s", r, r ? "" : ev_str(s->event));
			MUST(expect(cc, c, RDMA_CM_EVENT_DISCONNECTED, &ev), "DISCONNECTED: %s", ev_str(ev));
			ack(ev);
		} else {
			// This side first: its rdma_disconnect returns with the peer's DREP.
			struct peer p = {.ch = cc, .id = c};
			pthread_t th;
			MUST(pthread_create(&th, NULL, disconnect_on_dreq, &p) == 0, "pthread_create");
			r = rdma_disconnect(s);
			pthread_join(th, NULL);
			T("cm_sync_disconnect_waits", r == 0 && p.got && s->event && s->event->event == RDMA_CM_EVENT_DISCONNECTED,
			  "rdma_disconnect (synchronous, first): %d %m; id->event %s; the peer's DISCONNECTED %s", r,
			  r ? "" : ev_str(s->event), p.got ? "came" : "missing");
		}
		rdma_destroy_qp(s);
		rdma_destroy_id(s);
		rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cc);
}

// cm_ud: RDMA_PS_UDP — SIDR with private data, the UD parameters, and an address handle
// made in id->pd from ESTABLISHED's ah_attr (what udaddy does).
static void cm_ud(struct side *a, struct side *b)
{
	(void)a;
	struct rdma_event_channel *cc = channel(), *sc = channel();
	struct rdma_cm_id *l;
	struct rdma_cm_event *ev;
	MUST(rdma_create_id(sc, &l, NULL, RDMA_PS_UDP) == 0, "rdma_create_id: %m");
	struct sockaddr_in ls = sin4(ADDR_B, 0);
	MUST(rdma_bind_addr(l, (struct sockaddr *)&ls) == 0 && rdma_listen(l, 4) == 0, "UDP listener: %m");
	uint16_t port = ntohs(rdma_get_src_port(l));

	struct rdma_cm_id *c = resolve(cc, RDMA_PS_UDP, ADDR_A, ADDR_B, port);
	T("cm_ud_resolved_pd", c->pd && c->verbs && c->pd->context == c->verbs && c->qp_type == IBV_QPT_UD,
	  "UDP ID after route: pd %p verbs %s", (void *)c->pd, dev_name(c->verbs));
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_UD);
	int r = rdma_create_qp(c, NULL, &qa);
	MUST(r == 0, "rdma_create_qp (UD): %m");
	uint8_t big[181] = {0};
	struct rdma_conn_param cp = {.private_data = big, .private_data_len = 181};
	errno = 0;
	r = rdma_connect(c, &cp);
	T("cm_ud_connect_private_181_einval", r == -1 && errno == EINVAL, "181 bytes (SIDR_REQ: 216 - 36): %d, %m", r);
	cp.private_data = "udp!";
	cp.private_data_len = 4;
	r = rdma_connect(c, &cp);
	T("cm_ud_connect", r == 0, "rdma_connect (UDP): %m");
	int ok = expect(sc, NULL, RDMA_CM_EVENT_CONNECT_REQUEST, &ev);
	// The SIDR_REQ's 216 bytes, 180 after the header (cma_ib_req_handler).
	T("cm_ud_connect_request", ok && ev->listen_id == l && ev->param.ud.private_data_len == 180 &&
					   ev->param.ud.private_data && !memcmp(ev->param.ud.private_data, "udp!", 4) &&
					   ev->id->qp_type == IBV_QPT_UD && ev->id->pd,
	  "%s private_data_len %d", ev_str(ev), ev ? ev->param.ud.private_data_len : -1);
	if (!ok) {
		ack(ev);
		rdma_destroy_id(c);
		rdma_destroy_id(l);
		return;
	}
	struct rdma_cm_id *s = ev->id;
	ack(ev);
	qa = qp_attr(IBV_QPT_UD);
	MUST(rdma_create_qp(s, NULL, &qa) == 0, "rdma_create_qp (UD server): %m");
	r = rdma_accept(s, NULL);
	T("cm_ud_accept", r == 0, "rdma_accept (UDP): %m");
	ok = expect(cc, c, RDMA_CM_EVENT_ESTABLISHED, &ev);
	struct rdma_ud_param *u = ok ? &ev->param.ud : NULL;
	// The SIDR_REP's 136 bytes of private data, the server's QP and rdma_cm's UDP Q_Key.
	T("cm_ud_established", u && u->qp_num == s->qp->qp_num && u->qkey == RDMA_UDP_QKEY && u->private_data_len == 136 &&
				       u->ah_attr.dlid == b->lid && u->ah_attr.port_num == 1,
	  "%s qp_num %u (server %u) qkey %#x private_data_len %d dlid %u (pib_1 %u)", ev_str(ev), u ? u->qp_num : 0,
	  s->qp->qp_num, u ? u->qkey : 0, u ? u->private_data_len : -1, u ? u->ah_attr.dlid : 0, b->lid);
	struct ibv_ah *ah = u ? ibv_create_ah(c->pd, &u->ah_attr) : NULL;
	T("cm_ud_create_ah_id_pd", ah != NULL, "ibv_create_ah(id->pd, ESTABLISHED's ah_attr): %m");
	if (ah) {
		char sbuf[32] = "datagram", rbuf[32 + 40] = "";
		struct ibv_mr *smr = ibv_reg_mr(c->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
		struct ibv_mr *rmr = ibv_reg_mr(s->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
		MUST(smr && rmr, "reg_mr: %m");
		struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = sizeof(rbuf), .lkey = rmr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
		struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = 9, .lkey = smr->lkey};
		struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.ud = {.ah = ah, .remote_qpn = u->qp_num, .remote_qkey = u->qkey}}, *sbad;
		struct ibv_wc wc, wc2;
		r = ibv_post_recv(s->qp, &rw, &rbad) || ibv_post_send(c->qp, &sw, &sbad);
		int got = !r && poll_one(s->recv_cq, &wc) == 0 && poll_one(c->send_cq, &wc2) == 0;
		T("cm_ud_send", got && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 9 && !strcmp(rbuf + 40, "datagram"),
		  "post %d; completion %s status %d len %u", r, got ? "came" : "missing", got ? wc.status : -1,
		  got ? wc.byte_len : 0);
		ibv_dereg_mr(smr);
		ibv_dereg_mr(rmr);
		ibv_destroy_ah(ah);
	}
	ack(ev);
	rdma_destroy_qp(s);
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	// A rejected SIDR_REQ: UNREACHABLE with the SIDR_REP's status (2, rejected) and its
	// 136 bytes of private data (cma_sidr_rep_handler).
	c = resolve(cc, RDMA_PS_UDP, ADDR_A, ADDR_B, port);
	qa = qp_attr(IBV_QPT_UD);
	MUST(rdma_create_qp(c, NULL, &qa) == 0 && rdma_connect(c, &cp) == 0, "UD connect: %m");
	ok = expect(sc, NULL, RDMA_CM_EVENT_CONNECT_REQUEST, &ev);
	MUST(ok, "CONNECT_REQUEST: %s", ev_str(ev));
	s = ev->id;
	ack(ev);
	r = rdma_reject(s, "no", 2);
	ok = r == 0 && expect(cc, c, RDMA_CM_EVENT_UNREACHABLE, &ev);
	T("cm_ud_rejected_unreachable", ok && ev->status == 2 && ev->param.ud.private_data_len == 136 &&
						ev->param.ud.private_data && !memcmp(ev->param.ud.private_data, "no", 2),
	  "reject %d %m: %s status %d private_data_len %d", r, ev_str(ev), ev ? ev->status : 0,
	  ev ? ev->param.ud.private_data_len : -1);
	ack(ev);
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cc);
	rdma_destroy_event_channel(sc);
}

// cm_mcast: rdma_join_multicast in the UDP port space: MULTICAST_JOIN with the group's
// address vector (MLID, MGID with the RDMA CM signature), QPN 0xFFFFFF, rdma_cm's Q_Key
// and the join's context as private_data (librdmacm); leave.
static void cm_mcast(struct side *a, struct side *b)
{
	(void)a;
	(void)b;
	struct rdma_event_channel *ch = channel();
	struct rdma_cm_id *id, *idle;
	struct rdma_cm_event *ev;
	MUST(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0 && rdma_create_id(ch, &idle, NULL, RDMA_PS_UDP) == 0,
	     "rdma_create_id: %m");
	struct sockaddr_in group = sin4("224.1.2.3", 0), other = sin4("224.1.2.4", 0);
	errno = 0;
	int r = rdma_join_multicast(idle, (struct sockaddr *)&group, NULL);
	T("cm_join_unbound_einval", r == -1 && errno == EINVAL, "rdma_join_multicast on an ID with no address: %d, %m", r);
	struct sockaddr_in s = sin4(ADDR_A, 0);
	MUST(rdma_bind_addr(id, (struct sockaddr *)&s) == 0, "bind: %m");
	struct ibv_qp_init_attr qa = qp_attr(IBV_QPT_UD);
	MUST(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp: %m");
	errno = 0;
	r = rdma_join_multicast(id, NULL, NULL);
	T("cm_join_null_einval", r == -1 && errno == EINVAL, "rdma_join_multicast(NULL): %d, %m", r);
	int ctx;
	r = rdma_join_multicast(id, (struct sockaddr *)&group, &ctx);
	int ok = r == 0 && expect(ch, id, RDMA_CM_EVENT_MULTICAST_JOIN, &ev);
	struct rdma_ud_param *u = ok ? &ev->param.ud : NULL;
	const uint8_t *g = u ? u->ah_attr.grh.dgid.raw : NULL;
	T("cm_join_event", u && ev->status == 0 && u->private_data == &ctx && u->private_data_len == 0 &&
				   u->qp_num == 0xFFFFFF && u->qkey == RDMA_UDP_QKEY,
	  "join %d %m: %s status %d private_data %p (context %p) len %d qp_num %#x qkey %#x", r, ev_str(ev),
	  ev ? ev->status : 0, u ? u->private_data : NULL, (void *)&ctx, u ? u->private_data_len : -1, u ? u->qp_num : 0,
	  u ? u->qkey : 0);
	T("cm_join_ah_attr", u && u->ah_attr.is_global && u->ah_attr.dlid >= 0xC000 && u->ah_attr.port_num == 1 && g[0] == 0xff &&
				     g[3] == 0x01 && g[12] == 0 && g[13] == 1 && g[14] == 2 && g[15] == 3,
	  "is_global %d dlid %#x port %d mgid %02x%02x:%02x%02x ... %02x%02x:%02x%02x", u ? u->ah_attr.is_global : -1,
	  u ? u->ah_attr.dlid : 0, u ? u->ah_attr.port_num : 0, g ? g[0] : 0, g ? g[1] : 0, g ? g[2] : 0, g ? g[3] : 0,
	  g ? g[12] : 0, g ? g[13] : 0, g ? g[14] : 0, g ? g[15] : 0);
	ack(ev);
	errno = 0;
	r = rdma_leave_multicast(id, (struct sockaddr *)&other);
	T("cm_leave_not_joined_eaddrnotavail", r == -1 && errno == EADDRNOTAVAIL, "leave a group not joined: %d, %m", r);
	r = rdma_leave_multicast(id, (struct sockaddr *)&group);
	T("cm_leave", r == 0, "rdma_leave_multicast: %m");
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);
}

// cm_getaddrinfo: rdma_getaddrinfo as librdmacm's addrinfo.c.
static void cm_getaddrinfo(struct side *a, struct side *b)
{
	(void)a;
	(void)b;
	struct rdma_addrinfo *res = NULL, hints;
	errno = 0;
	int r = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	T("cm_getaddrinfo_nothing_einval", r == -1 && errno == EINVAL, "rdma_getaddrinfo(NULL, NULL, NULL): %d, %m", r);

	// Only a source in the hints (a multicast sender's): the hints as given, the source.
	struct sockaddr_in src = sin4(ADDR_A, 0);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	r = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	T("cm_getaddrinfo_src_only", r == 0 && res->ai_flags == 0 && res->ai_family == AF_INET && res->ai_qp_type == 0 &&
					     res->ai_port_space == RDMA_PS_UDP && res->ai_src_addr &&
					     res->ai_src_len == sizeof(src) && is_ip(res->ai_src_addr, ADDR_A) &&
					     !res->ai_dst_addr && res->ai_dst_len == 0 && !res->ai_next,
	  "%d %m; flags %#x family %d qp_type %d ps %#x src_len %u dst %p", r, r ? 0 : res->ai_flags,
	  r ? 0 : res->ai_family, r ? 0 : res->ai_qp_type, r ? 0 : res->ai_port_space, r ? 0 : res->ai_src_len,
	  r ? NULL : (void *)res->ai_dst_addr);
	if (!r)
		rdma_freeaddrinfo(res);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	r = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	T("cm_getaddrinfo_src_only_passive", r == 0 && res->ai_flags == RAI_PASSIVE && res->ai_qp_type == IBV_QPT_RC &&
						     res->ai_port_space == RDMA_PS_TCP && res->ai_src_addr &&
						     is_ip(res->ai_src_addr, ADDR_A) && !res->ai_dst_addr,
	  "%d %m", r);
	if (!r)
		rdma_freeaddrinfo(res);

	// A node and a service, no hints: getaddrinfo's first answer (a stream: RC, TCP).
	r = rdma_getaddrinfo(ADDR_B, "7471", NULL, &res);
	T("cm_getaddrinfo_node_service", r == 0 && res->ai_flags == 0 && res->ai_family == AF_INET &&
						 res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP &&
						 res->ai_dst_addr && is_ip(res->ai_dst_addr, ADDR_B) &&
						 ((struct sockaddr_in *)res->ai_dst_addr)->sin_port == htons(7471) &&
						 res->ai_dst_len == sizeof(struct sockaddr_in) && !res->ai_src_addr,
	  "%d; flags %#x qp_type %d ps %#x dst_len %u src %p", r, r ? 0 : res->ai_flags, r ? 0 : res->ai_qp_type,
	  r ? 0 : res->ai_port_space, r ? 0 : res->ai_dst_len, r ? NULL : (void *)res->ai_src_addr);
	if (!r)
		rdma_freeaddrinfo(res);

	// UD in the hints: a datagram lookup, the UDP port space; a source in the hints is kept.
	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	r = rdma_getaddrinfo(ADDR_B, "7471", &hints, &res);
	T("cm_getaddrinfo_ud_hints", r == 0 && res->ai_qp_type == IBV_QPT_UD && res->ai_port_space == RDMA_PS_UDP &&
					     res->ai_dst_addr && is_ip(res->ai_dst_addr, ADDR_B) && res->ai_src_addr &&
					     is_ip(res->ai_src_addr, ADDR_A),
	  "%d; qp_type %d ps %#x", r, r ? 0 : res->ai_qp_type, r ? 0 : res->ai_port_space);
	if (!r)
		rdma_freeaddrinfo(res);

	// Passive with a service: the source is the any address; no destination.
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_family = AF_INET;
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_getaddrinfo(NULL, "7471", &hints, &res);
	T("cm_getaddrinfo_passive_service", r == 0 && res->ai_flags == RAI_PASSIVE && res->ai_src_addr &&
						    is_ip(res->ai_src_addr, "0.0.0.0") &&
						    ((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7471) &&
						    !res->ai_dst_addr && res->ai_qp_type == IBV_QPT_RC,
	  "%d; flags %#x", r, r ? 0 : res->ai_flags);
	if (!r)
		rdma_freeaddrinfo(res);

	// A name getaddrinfo cannot resolve: its EAI_ code, returned as is.
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	r = rdma_getaddrinfo("not-an-address", "7471", &hints, &res);
	T("cm_getaddrinfo_eai", r == EAI_NONAME, "rdma_getaddrinfo(\"not-an-address\", RAI_NUMERICHOST): %d (EAI_NONAME %d)",
	  r, EAI_NONAME);
}

void conform_cm(struct side *a, struct side *b)
{
	T("cm_event_str", !strcmp(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED), "RDMA_CM_EVENT_ADDR_RESOLVED") &&
				  !strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT") &&
				  !strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT"),
	  "rdma_event_str: %s, %s, %s", rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED),
	  rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), rdma_event_str((enum rdma_cm_event_type)99));
	cm_ids(a, b);
	cm_bind(a, b);
	cm_resolve(a, b);
	cm_connect(a, b);
	cm_sync(a, b);
	cm_ud(a, b);
	cm_mcast(a, b);
	cm_getaddrinfo(a, b);
}
