/*
 * pibgw's libibumad.so.3: the uMAD API of rdma-core's libibumad for unmodified libibumad
 * programs (infiniband-diags, perftest's multicast, ibping), run on a pibgw daemon's
 * fabric with no kernel module. Each opened port is a client of the daemon's ibsim
 * server (../../docs: ibsim-protocol; $IBSIM_SOCKNAME, the node named "CA/PORT"), and
 * this library does what the kernel's MAD layer (drivers/infiniband/core/mad.c,
 * mad_rmpp.c, user_mad.c) does for a umad file: agents and their classes and methods,
 * request timeouts and retries, RMPP reassembly with ACKs (IBA 13.6.3) and segmentation
 * of large sends, and the read semantics umad_recv relies on (ENOSPC with the length a
 * reassembled message needs, the send's header with status ETIMEDOUT when no response
 * came). Unlike libumad2sim over the real libibumad, nothing is cut to one MAD and the
 * devices are named as the verbs devices (pib_0, ...).
 *
 * The port id is the port's data socket, so umad_get_fd returns it and poll(2) on it
 * wakes when a datagram arrives; timeouts are kept while the program is inside umad_recv
 * or umad_poll, as programs using libibmad always are while they wait for an answer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netdb.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>

#include <infiniband/umad.h>
#include <infiniband/umad_str.h>

#define EXPORT __attribute__((visibility("default")))

#define MAD_LEN 256
#define SIM_MAGIC 0xdeadbeefu
#define CTL_LEN 80
#define REQ_LEN 288

enum { SIM_CTL_ERROR, SIM_CTL_CONNECT, SIM_CTL_DISCONNECT, SIM_CTL_GET_PORT, SIM_CTL_GET_VENDOR,
       SIM_CTL_GET_GID, SIM_CTL_GET_GUID, SIM_CTL_GET_NODEINFO, SIM_CTL_GET_PORTINFO,
       SIM_CTL_SET_ISSM, SIM_CTL_GET_PKEYS };

/* RMPP (IBA 13.6.2): header at MAD offset 24. */
#define RMPP_TYPE_DATA 1
#define RMPP_TYPE_ACK 2
#define RMPP_TYPE_STOP 3
#define RMPP_TYPE_ABORT 4
#define RMPP_FLAG_ACTIVE 1
#define RMPP_FLAG_FIRST 2
#define RMPP_FLAG_LAST 4
#define RMPP_HDR_END 36 /* common header (24) + RMPP header (12) */
#define RMPP_WINDOW 32
#define RMPP_MAX_MSG (16u << 20) /* bytes of one reassembled message */

#define METHOD_RESP 0x80
#define METHOD_TRAP 0x05
#define METHOD_TRAP_REPRESS 0x07
#define CLASS_SMI 0x01
#define CLASS_SMI_DR 0x81
#define CLASS_SA 0x03

#define MAX_AGENTS UMAD_CA_MAX_AGENTS
#define MAX_PORTS 64

struct agent {
	int used;
	uint8_t mgmt_class, class_version, rmpp_version;
	int user_rmpp; /* UMAD_USER_RMPP: segments are the program's business */
	uint64_t method_mask[2];
	uint32_t oui;
};

/* A request waiting for its response. */
struct pending {
	struct pending *next;
	uint64_t tid; /* low 48 bits */
	int agent;
	int timeout_ms, retries;
	int rmpp; /* sent in RMPP segments */
	uint64_t deadline;
	size_t len; /* of msg */
	uint8_t *msg; /* the umad header and the MAD(s) as sent */
};

/* An RMPP message being received. */
struct rmpp_rx {
	struct rmpp_rx *next;
	uint64_t tid;
	uint16_t slid;
	int agent;
	uint32_t expect, window_last;
	size_t len, cap;
	uint8_t *buf; /* the umad header, then the message */
	uint64_t deadline;
};

/* A message for umad_recv. */
struct ready {
	struct ready *next;
	size_t len; /* bytes after the umad header */
	uint8_t *msg;
};

/* A datagram for the server, built under the lock and sent without it. */
struct frame {
	struct frame *next;
	uint8_t r[REQ_LEN];
};

struct frames {
	struct frame *head, *tail;
};

struct port {
	int used;
	int fd, ctl;
	uint32_t client;
	int issm;
	struct agent agents[MAX_AGENTS];
	struct pending *pending;
	struct rmpp_rx *rmpp;
	struct ready *ready, *ready_tail;
	struct frames out; /* ACKs and resends for the next wait_ready to send */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct port ports[MAX_PORTS];
static uint32_t conn_seq;
static int debug_level;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *sockname(void)
{
	const char *s = getenv("IBSIM_SOCKNAME");
	return s && *s ? s : "sim";
}

/* The abstract socket address "\0<base>:<what>\0", the trailing NUL counted as ibsim does. */
static socklen_t abstract_addr(struct sockaddr_un *a, const char *what)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 2, "%s:%s", sockname(), what);
	return offsetof(struct sockaddr_un, sun_path) + 1 + n + 1;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t be16at(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32at(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
static uint64_t be64at(const uint8_t *p) { return (uint64_t)be32at(p) << 32 | be32at(p + 4); }
static void putbe32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

/* ctl_call sends a control message and waits for its answer (5 s); the answer's data
 * is copied to out (64 bytes). */
static int ctl_call(int ctl, uint32_t client, uint32_t type, const void *data, uint32_t len, uint8_t *out)
{
	uint8_t m[CTL_LEN] = {0}, r[CTL_LEN];
	put32(m, SIM_MAGIC);
	put32(m + 4, client);
	put32(m + 8, type);
	put32(m + 12, len);
	if (data)
		memcpy(m + 16, data, len > 64 ? 64 : len);
	if (send(ctl, m, sizeof(m), 0) != sizeof(m))
		return -errno;
	struct pollfd p = {.fd = ctl, .events = POLLIN};
	for (;;) {
		int k = poll(&p, 1, 5000);
		if (k == 0)
			return -ETIMEDOUT;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		ssize_t n = recv(ctl, r, sizeof(r), 0);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (n != CTL_LEN || get32(r) != SIM_MAGIC)
			continue;
		if (get32(r + 8) == SIM_CTL_ERROR)
			return -ENODEV;
		if (out)
			memcpy(out, r + 16, 64);
		return 0;
	}
}

struct conn {
	int fd, ctl;
	uint32_t client, id;
};

static void conn_close(struct conn *c)
{
	if (c->client != UINT32_MAX)
		ctl_call(c->ctl, c->client, SIM_CTL_DISCONNECT, NULL, 0, NULL);
	if (c->fd >= 0)
		close(c->fd);
	if (c->ctl >= 0)
		close(c->ctl);
	c->fd = c->ctl = -1;
	c->client = UINT32_MAX;
}

/* udp_server resolves $IBSIM_SERVER_NAME and $IBSIM_SERVER_PORT (default 7070): ibsim's
 * remote mode. It returns 0 with *sa set, 1 when the variables are not set, or -errno. */
static int udp_server(struct sockaddr_storage *sa, socklen_t *len, int *port)
{
	const char *host = getenv("IBSIM_SERVER_NAME"), *ps = getenv("IBSIM_SERVER_PORT");
	if (!host || !*host)
		return 1;
	*port = ps && *ps ? atoi(ps) : 7070;
	if (*port <= 0 || *port > 0xffff - 1 - 256)
		return -EINVAL;
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
		fprintf(stderr, "libibumad (pibgw): IBSIM_SERVER_NAME %s: cannot resolve it\n", host);
		return -EHOSTUNREACH;
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void set_port(struct sockaddr_storage *sa, int port)
{
	if (sa->ss_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)sa)->sin_port = htons(port);
}

/* conn_open attaches to the node named node ("CA/PORT", "" for the server's default) as
 * an ibsim client — over Unix abstract sockets named by $IBSIM_SOCKNAME, or over UDP to
 * $IBSIM_SERVER_NAME:$IBSIM_SERVER_PORT when that is set — and *name gets the node's
 * name from the answer. */
static int conn_open(struct conn *c, const char *node, int issm, char *name, size_t namelen)
{
	struct sockaddr_un a;
	struct sockaddr_storage srv;
	socklen_t l, srvlen = 0;
	char what[32];
	int err, port = 0;

	c->fd = c->ctl = -1;
	c->client = UINT32_MAX;
	int udp = udp_server(&srv, &srvlen, &port);
	if (udp < 0)
		return udp;
	if (udp == 0) {
		c->ctl = socket(srv.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		c->fd = socket(srv.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (c->ctl < 0 || c->fd < 0)
			goto fail_errno;
		set_port(&srv, port);
		if (connect(c->ctl, (struct sockaddr *)&srv, srvlen) < 0)
			goto fail_errno;
		/* The data socket on the control socket's address, any port: the server sends
		 * to that address at the port CONNECT names. */
		struct sockaddr_storage me;
		socklen_t melen = sizeof(me);
		if (getsockname(c->ctl, (struct sockaddr *)&me, &melen) < 0)
			goto fail_errno;
		set_port(&me, 0);
		if (bind(c->fd, (struct sockaddr *)&me, melen) < 0 || getsockname(c->fd, (struct sockaddr *)&me, &melen) < 0)
			goto fail_errno;
		c->id = ntohs(me.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&me)->sin6_port : ((struct sockaddr_in *)&me)->sin_port);
	} else {
		pthread_mutex_lock(&lock);
		c->id = ((uint32_t)getpid() << 8 | (conn_seq++ & 0xff)) & 0x7fffffff;
		pthread_mutex_unlock(&lock);
		c->ctl = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		c->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (c->ctl < 0 || c->fd < 0)
			goto fail_errno;
		snprintf(what, sizeof(what), "ctl%u", c->id);
		l = abstract_addr(&a, what);
		if (bind(c->ctl, (struct sockaddr *)&a, l) < 0)
			goto fail_errno;
		l = abstract_addr(&a, "ctl");
		if (connect(c->ctl, (struct sockaddr *)&a, l) < 0) {
			err = -errno;
			fprintf(stderr, "libibumad (pibgw): no ibsim server at @%s:ctl (%s): is pibgw up running with [ibsim] enable = true, and IBSIM_SOCKNAME its socket name? (pibgw exec --umad sets it)\n",
				sockname(), strerror(-err));
			goto fail;
		}
		snprintf(what, sizeof(what), "in%u", c->id);
		l = abstract_addr(&a, what);
		if (bind(c->fd, (struct sockaddr *)&a, l) < 0)
			goto fail_errno;
	}

	uint8_t info[44] = {0}, out[64];
	put32(info, c->id);
	put32(info + 8, issm);
	snprintf((char *)info + 12, 32, "%s", node ? node : "");
	err = ctl_call(c->ctl, 0, SIM_CTL_CONNECT, info, sizeof(info), out);
	if (err < 0) {
		if (err == -ENODEV)
			fprintf(stderr, "libibumad (pibgw): the ibsim server refused to attach to \"%s\" (no such node, or no free client slot)\n",
				node && *node ? node : "(default)");
		else if (udp == 0)
			fprintf(stderr, "libibumad (pibgw): no answer from an ibsim server at %s port %d (%s): is it pibgw's [ibsim] udp address?\n",
				getenv("IBSIM_SERVER_NAME"), port, strerror(-err));
		goto fail;
	}
	c->client = get32(out);
	if (name) {
		char n[33] = {0};
		memcpy(n, out + 12, 32);
		char *slash = strchr(n, '/');
		if (slash)
			*slash = 0;
		snprintf(name, namelen, "%s", n);
	}
	if (udp == 0) {
		set_port(&srv, port + 1 + c->client);
		if (c->client > 0xfffe - (uint32_t)port) {
			err = -ERANGE;
			goto fail;
		}
		if (connect(c->fd, (struct sockaddr *)&srv, srvlen) < 0)
			goto fail_errno;
		return 0;
	}
	snprintf(what, sizeof(what), "out%u", c->client);
	l = abstract_addr(&a, what);
	if (connect(c->fd, (struct sockaddr *)&a, l) < 0)
		goto fail_errno;
	return 0;
fail_errno:
	err = -errno;
fail:
	conn_close(c);
	return err;
}

/* ---- devices ---- */

static char cas[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
static int ncas = -1;

/* load_cas fills cas: $PIBGW_UMAD_CAS (names separated by commas or spaces; pibgw exec
 * --umad sets it, --node's first), else the one node the server attaches to by default
 * ($SIM_HOST's or its own). */
static int load_cas(void)
{
	pthread_mutex_lock(&lock);
	if (ncas >= 0) {
		pthread_mutex_unlock(&lock);
		return ncas;
	}
	pthread_mutex_unlock(&lock);
	char names[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
	int n = 0;
	const char *env = getenv("PIBGW_UMAD_CAS");
	if (env && *env) {
		char *s = strdup(env), *save = NULL;
		for (char *t = strtok_r(s, ", ", &save); t && n < UMAD_MAX_DEVICES; t = strtok_r(NULL, ", ", &save))
			snprintf(names[n++], UMAD_CA_NAME_LEN, "%s", t);
		free(s);
	} else {
		struct conn c;
		const char *host = getenv("SIM_HOST");
		if (conn_open(&c, host ? host : "", 0, names[0], UMAD_CA_NAME_LEN) == 0) {
			n = 1;
			conn_close(&c);
		}
	}
	pthread_mutex_lock(&lock);
	if (ncas < 0) {
		memcpy(cas, names, sizeof(names));
		ncas = n;
	}
	n = ncas;
	pthread_mutex_unlock(&lock);
	return n;
}

static int known_ca(const char *name)
{
	int n = load_cas();
	for (int i = 0; i < n; i++)
		if (!strcmp(cas[i], name))
			return 1;
	return 0;
}

/* fill_port reads port portnum of the node c is attached to. */
static int fill_port(struct conn *c, const char *ca, int portnum, umad_port_t *p)
{
	uint8_t ni[64], pi[64], pk[64], arg[4] = {(uint8_t)portnum};
	int err;
	if ((err = ctl_call(c->ctl, c->client, SIM_CTL_GET_NODEINFO, NULL, 64, ni)) < 0 ||
	    (err = ctl_call(c->ctl, c->client, SIM_CTL_GET_PORTINFO, arg, 64, pi)) < 0 ||
	    (err = ctl_call(c->ctl, c->client, SIM_CTL_GET_PKEYS, NULL, 64, pk)) < 0)
		return err;
	memset(p, 0, sizeof(*p));
	snprintf(p->ca_name, sizeof(p->ca_name), "%s", ca);
	p->portnum = portnum;
	p->base_lid = be16at(pi + 16);
	p->sm_lid = be16at(pi + 18);
	p->capmask = htobe32(be32at(pi + 20));
	p->state = pi[32] & 0x0f;
	p->phys_state = pi[33] >> 4;
	p->lmc = pi[34] & 0x07;
	p->sm_sl = pi[36] & 0x0f;
	memcpy(&p->gid_prefix, pi + 8, 8);
	memcpy(&p->port_guid, ni + 20, 8);
	/* IBA 14.2.5.6: LinkWidthActive 1, 2, 4, 8 = 1x, 4x, 8x, 12x; LinkSpeedActive
	 * 1, 2, 4 = 2.5, 5, 10 Gb/s a lane. Rate as sysfs gives it, in Gb/s. */
	int lanes = 1;
	switch (pi[31]) {
	case 2: lanes = 4; break;
	case 4: lanes = 8; break;
	case 8: lanes = 12; break;
	case 16: lanes = 2; break;
	}
	int speed10 = 25; /* tenths of Gb/s */
	switch (pi[35] >> 4) {
	case 2: speed10 = 50; break;
	case 4: speed10 = 100; break;
	}
	p->rate = lanes * speed10 / 10;
	p->pkeys_size = 32;
	p->pkeys = calloc(32, sizeof(uint16_t));
	if (!p->pkeys)
		return -ENOMEM;
	for (int i = 0; i < 32; i++)
		p->pkeys[i] = be16at(pk + 2 * i);
	snprintf(p->link_layer, sizeof(p->link_layer), "InfiniBand");
	return 0;
}

/* node_of names port portnum of CA ca as the server takes it: "ca/portnum". */
static void node_of(const char *ca, int portnum, char *node, size_t len)
{
	snprintf(node, len, "%s/%d", ca, portnum);
}

/* resolve_ca returns the CA name names if known, or for a NULL or empty name the first
 * CA: pibgw exec --umad lists --node's, else the SM's, first. */
static const char *resolve_ca(const char *name)
{
	if (name && *name)
		return known_ca(name) ? name : NULL;
	int n = load_cas();
	return n > 0 ? cas[0] : NULL;
}

EXPORT int umad_init(void) { return 0; }
EXPORT int umad_done(void) { return 0; }

EXPORT int umad_get_cas_names(char names[][UMAD_CA_NAME_LEN], int max)
{
	int n = load_cas();
	if (n > max)
		n = max;
	for (int i = 0; i < n; i++)
		memcpy(names[i], cas[i], UMAD_CA_NAME_LEN);
	return n;
}

/* sysfs_ca_attr reads the CA's sysfs attribute attr (hca_type, fw_ver, hw_rev) as
 * rdma-core's get_ca does, its newline cut: pibgw exec's sysfs view has them. 0 when
 * there is none. */
static int sysfs_ca_attr(const char *name, const char *attr, char *buf, size_t len)
{
	char path[256];
	buf[0] = 0;
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/%s", name, attr);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	int ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (!ok) {
		buf[0] = 0;
		return 0;
	}
	buf[strcspn(buf, "\n")] = 0;
	return 1;
}

EXPORT int umad_get_ca(const char *ca_name, umad_ca_t *ca)
{
	const char *name = resolve_ca(ca_name);
	char node[64];
	struct conn c;
	uint8_t ni[64], ven[64];
	int err;

	if (!name || !ca)
		return -ENODEV;
	memset(ca, 0, sizeof(*ca));
	node_of(name, 1, node, sizeof(node));
	if ((err = conn_open(&c, node, 0, NULL, 0)) < 0)
		return err;
	if ((err = ctl_call(c.ctl, c.client, SIM_CTL_GET_NODEINFO, NULL, 64, ni)) < 0 ||
	    (err = ctl_call(c.ctl, c.client, SIM_CTL_GET_VENDOR, NULL, 24, ven)) < 0) {
		conn_close(&c);
		return err;
	}
	conn_close(&c);
	snprintf(ca->ca_name, sizeof(ca->ca_name), "%s", name);
	ca->node_type = ni[2];
	ca->numports = ni[3];
	if (ca->numports >= UMAD_CA_MAX_PORTS)
		ca->numports = UMAD_CA_MAX_PORTS - 1;
	memcpy(&ca->system_guid, ni + 4, 8);
	memcpy(&ca->node_guid, ni + 12, 8);
	uint64_t fw;
	memcpy(&fw, ven + 16, 8);
	/* The CA's own attributes when sysfs has them (under pibgw exec), else ibsim's. */
	if (!sysfs_ca_attr(name, "fw_ver", ca->fw_ver, sizeof(ca->fw_ver)))
		snprintf(ca->fw_ver, sizeof(ca->fw_ver), "%llu.0.0", (unsigned long long)fw);
	if (!sysfs_ca_attr(name, "hw_rev", ca->hw_ver, sizeof(ca->hw_ver)))
		snprintf(ca->hw_ver, sizeof(ca->hw_ver), "%x", get32(ven + 8));
	sysfs_ca_attr(name, "hca_type", ca->ca_type, sizeof(ca->ca_type));
	for (int p = 1; p <= ca->numports; p++) {
		umad_port_t *up = calloc(1, sizeof(*up));
		if (!up) {
			umad_release_ca(ca);
			return -ENOMEM;
		}
		if ((err = umad_get_port(name, p, up)) < 0) {
			free(up);
			umad_release_ca(ca);
			return err;
		}
		ca->ports[p] = up;
	}
	return 0;
}

EXPORT int umad_release_ca(umad_ca_t *ca)
{
	if (!ca)
		return -ENODEV;
	for (int i = 0; i < UMAD_CA_MAX_PORTS; i++) {
		if (ca->ports[i]) {
			umad_release_port(ca->ports[i]);
			free(ca->ports[i]);
			ca->ports[i] = NULL;
		}
	}
	return 0;
}

EXPORT int umad_get_port(const char *ca_name, int portnum, umad_port_t *port)
{
	const char *name = resolve_ca(ca_name);
	char node[64];
	struct conn c;
	int err;
	if (!name || !port)
		return -ENODEV;
	if (portnum == 0)
		portnum = 1;
	node_of(name, portnum, node, sizeof(node));
	if ((err = conn_open(&c, node, 0, NULL, 0)) < 0)
		return err;
	err = fill_port(&c, name, portnum, port);
	conn_close(&c);
	return err;
}

EXPORT int umad_release_port(umad_port_t *port)
{
	if (!port)
		return -ENODEV;
	free(port->pkeys);
	port->pkeys = NULL;
	return 0;
}

EXPORT int umad_get_ca_portguids(const char *ca_name, __be64 *portguids, int max)
{
	umad_ca_t ca;
	int err = umad_get_ca(ca_name, &ca);
	if (err < 0)
		return err;
	if (ca.numports + 1 > max) {
		umad_release_ca(&ca);
		return -ENOMEM;
	}
	portguids[0] = 0;
	for (int i = 1; i <= ca.numports; i++)
		portguids[i] = ca.ports[i] ? ca.ports[i]->port_guid : 0;
	umad_release_ca(&ca);
	return ca.numports + 1;
}

EXPORT struct umad_device_node *umad_get_ca_device_list(void)
{
	struct umad_device_node *head = NULL, **tail = &head;
	int n = load_cas();
	for (int i = 0; i < n; i++) {
		struct umad_device_node *d = calloc(1, sizeof(*d));
		if (!d)
			break;
		d->ca_name = cas[i];
		*tail = d;
		tail = &d->next;
	}
	if (!head)
		errno = ENODEV;
	return head;
}

EXPORT void umad_free_ca_device_list(struct umad_device_node *head)
{
	while (head) {
		struct umad_device_node *n = head->next;
		free(head);
		head = n;
	}
}

static int cmp_node(const void *a, const void *b)
{
	return strcmp((*(struct umad_device_node *const *)a)->ca_name, (*(struct umad_device_node *const *)b)->ca_name);
}

EXPORT int umad_sort_ca_device_list(struct umad_device_node **head, size_t size)
{
	size_t n = 0;
	for (struct umad_device_node *d = *head; d; d = d->next)
		n++;
	if (n < 2)
		return 0;
	struct umad_device_node **v = calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	n = 0;
	for (struct umad_device_node *d = *head; d; d = d->next)
		v[n++] = d;
	qsort(v, n, sizeof(*v), cmp_node);
	for (size_t i = 0; i + 1 < n; i++)
		v[i]->next = v[i + 1];
	v[n - 1]->next = NULL;
	*head = v[0];
	free(v);
	return 0;
}

EXPORT int umad_get_issm_path(const char *ca_name, int portnum, char path[], int max)
{
	/* No issm device: an agent that takes the SM class's traps (opensm) makes its port
	 * the SM's (IsSM) instead; opening this path changes nothing. */
	if (!resolve_ca(ca_name))
		return -ENODEV;
	snprintf(path, max, "/dev/null");
	return 0;
}

/* ---- ports and agents ---- */

static struct port *port_of(int fd)
{
	for (int i = 0; i < MAX_PORTS; i++)
		if (ports[i].used && ports[i].fd == fd)
			return &ports[i];
	return NULL;
}

EXPORT int umad_open_port(const char *ca_name, int portnum)
{
	const char *name = resolve_ca(ca_name);
	char node[64];
	struct conn c;
	int err;
	if (!name) {
		errno = ENODEV;
		return -ENODEV;
	}
	if (portnum == 0)
		portnum = 1;
	node_of(name, portnum, node, sizeof(node));
	if ((err = conn_open(&c, node, 0, NULL, 0)) < 0) {
		errno = -err;
		return err;
	}
	pthread_mutex_lock(&lock);
	struct port *p = NULL;
	for (int i = 0; i < MAX_PORTS; i++)
		if (!ports[i].used) {
			p = &ports[i];
			break;
		}
	if (!p) {
		pthread_mutex_unlock(&lock);
		conn_close(&c);
		errno = EMFILE;
		return -EMFILE;
	}
	memset(p, 0, sizeof(*p));
	p->used = 1;
	p->fd = c.fd;
	p->ctl = c.ctl;
	p->client = c.client;
	pthread_mutex_unlock(&lock);
	return c.fd;
}

static void free_port_state(struct port *p)
{
	while (p->pending) {
		struct pending *n = p->pending->next;
		free(p->pending->msg);
		free(p->pending);
		p->pending = n;
	}
	while (p->rmpp) {
		struct rmpp_rx *n = p->rmpp->next;
		free(p->rmpp->buf);
		free(p->rmpp);
		p->rmpp = n;
	}
	while (p->ready) {
		struct ready *n = p->ready->next;
		free(p->ready->msg);
		free(p->ready);
		p->ready = n;
	}
	while (p->out.head) {
		struct frame *n = p->out.head->next;
		free(p->out.head);
		p->out.head = n;
	}
	p->out.tail = NULL;
}

EXPORT int umad_close_port(int fd)
{
	pthread_mutex_lock(&lock);
	struct port *p = port_of(fd);
	if (!p) {
		pthread_mutex_unlock(&lock);
		return -EINVAL;
	}
	struct conn c = {.fd = p->fd, .ctl = p->ctl, .client = p->client};
	int issm = p->issm;
	free_port_state(p);
	p->used = 0;
	pthread_mutex_unlock(&lock);
	if (issm) {
		int32_t off = 0;
		ctl_call(c.ctl, c.client, SIM_CTL_SET_ISSM, &off, 4, NULL);
	}
	conn_close(&c);
	return 0;
}

EXPORT int umad_get_fd(int fd)
{
	pthread_mutex_lock(&lock);
	struct port *p = port_of(fd);
	pthread_mutex_unlock(&lock);
	return p ? fd : -EINVAL;
}

/* test_method reports whether method's bit is set in a 128-bit method mask. */
static int test_method(const uint64_t mask[2], uint8_t method)
{
	method &= 0x7f;
	return (mask[method / 64] >> (method % 64)) & 1;
}

static int do_register(int fd, uint8_t mgmt_class, uint8_t version, uint8_t rmpp_version, int user_rmpp,
		       const uint64_t mask[2], uint32_t oui, uint32_t *agent_id)
{
	int set_sm = 0, ctl = -1;
	uint32_t client = 0;
	pthread_mutex_lock(&lock);
	struct port *p = port_of(fd);
	if (!p) {
		pthread_mutex_unlock(&lock);
		return -EINVAL;
	}
	int id = -1;
	for (int i = 0; i < MAX_AGENTS; i++) {
		struct agent *a = &p->agents[i];
		if (!a->used) {
			if (id < 0)
				id = i;
			continue;
		}
		/* The kernel refuses a second agent for the same class, version and method. */
		if (a->mgmt_class == mgmt_class && a->class_version == version && a->oui == oui &&
		    ((a->method_mask[0] & mask[0]) || (a->method_mask[1] & mask[1]))) {
			pthread_mutex_unlock(&lock);
			return -EINVAL;
		}
	}
	if (id < 0) {
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	p->agents[id] = (struct agent){.used = 1, .mgmt_class = mgmt_class, .class_version = version,
				       .rmpp_version = rmpp_version, .user_rmpp = user_rmpp,
				       .method_mask = {mask[0], mask[1]}, .oui = oui};
	/* The SM takes the traps of its class: that agent's port is the SM's (IsSM), as the
	 * kernel's issm device makes it (opensm opens that and binds such an agent). */
	if ((mgmt_class == CLASS_SMI || mgmt_class == CLASS_SMI_DR) && test_method(mask, METHOD_TRAP) && !p->issm) {
		p->issm = set_sm = 1;
		ctl = p->ctl;
		client = p->client;
	}
	pthread_mutex_unlock(&lock);
	if (set_sm) {
		int32_t on = 1;
		if (ctl_call(ctl, client, SIM_CTL_SET_ISSM, &on, 4, NULL) < 0)
			fprintf(stderr, "libibumad (pibgw): could not make this port the SM's (is another SM attached?)\n");
	}
	*agent_id = id;
	return 0;
}

static void mask_from_longs(uint64_t out[2], long *mask)
{
	out[0] = out[1] = 0;
	if (!mask)
		return;
	memcpy(out, mask, 16);
}

EXPORT int umad_register(int fd, int mgmt_class, int mgmt_version, uint8_t rmpp_version, long method_mask[16 / sizeof(long)])
{
	uint64_t mask[2];
	uint32_t id;
	mask_from_longs(mask, method_mask);
	int err = do_register(fd, mgmt_class, mgmt_version, rmpp_version, 0, mask, 0, &id);
	return err < 0 ? err : (int)id;
}

EXPORT int umad_register_oui(int fd, int mgmt_class, uint8_t rmpp_version, uint8_t oui[3], long method_mask[16 / sizeof(long)])
{
	uint64_t mask[2];
	uint32_t id;
	if (mgmt_class < 0x30 || mgmt_class > 0x4f)
		return -EINVAL;
	mask_from_longs(mask, method_mask);
	int err = do_register(fd, mgmt_class, 1, rmpp_version, 0, mask,
			      (uint32_t)oui[0] << 16 | oui[1] << 8 | oui[2], &id);
	return err < 0 ? err : (int)id;
}

EXPORT int umad_register2(int fd, struct umad_reg_attr *attr, uint32_t *agent_id)
{
	if (!attr || !agent_id)
		return EINVAL;
	if (attr->flags & ~UMAD_USER_RMPP)
		return EINVAL;
	int err = do_register(fd, attr->mgmt_class, attr->mgmt_class_version, attr->rmpp_version,
			      !!(attr->flags & UMAD_USER_RMPP), attr->method_mask, attr->oui & 0xffffff, agent_id);
	return err < 0 ? -err : 0;
}

EXPORT int umad_unregister(int fd, int agentid)
{
	pthread_mutex_lock(&lock);
	struct port *p = port_of(fd);
	if (!p || agentid < 0 || agentid >= MAX_AGENTS || !p->agents[agentid].used) {
		pthread_mutex_unlock(&lock);
		return -EINVAL;
	}
	p->agents[agentid].used = 0;
	pthread_mutex_unlock(&lock);
	return 0;
}

/* ---- MAD buffers ---- */

EXPORT size_t umad_size(void) { return sizeof(struct ib_user_mad); }
EXPORT void *umad_get_mad(void *umad) { return ((struct ib_user_mad *)umad)->data; }
EXPORT int umad_status(void *umad) { return ((struct ib_user_mad *)umad)->status; }
EXPORT ib_mad_addr_t *umad_get_mad_addr(void *umad) { return &((struct ib_user_mad *)umad)->addr; }

EXPORT int umad_set_grh_net(void *umad, void *mad_addr)
{
	struct ib_user_mad *m = umad;
	struct ib_mad_addr *a = mad_addr;
	if (a) {
		m->addr.grh_present = 1;
		memcpy(m->addr.gid, a->gid, 16);
		m->addr.flow_label = a->flow_label;
		m->addr.hop_limit = a->hop_limit;
		m->addr.traffic_class = a->traffic_class;
	} else
		m->addr.grh_present = 0;
	return 0;
}

EXPORT int umad_set_grh(void *umad, void *mad_addr)
{
	struct ib_user_mad *m = umad;
	struct ib_mad_addr *a = mad_addr;
	if (a) {
		m->addr.grh_present = 1;
		memcpy(m->addr.gid, a->gid, 16);
		m->addr.flow_label = htobe32(a->flow_label);
		m->addr.hop_limit = a->hop_limit;
		m->addr.traffic_class = a->traffic_class;
	} else
		m->addr.grh_present = 0;
	return 0;
}

EXPORT int umad_set_pkey(void *umad, int pkey_index)
{
	((struct ib_user_mad *)umad)->addr.pkey_index = pkey_index;
	return 0;
}

EXPORT int umad_get_pkey(void *umad) { return ((struct ib_user_mad *)umad)->addr.pkey_index; }

EXPORT int umad_set_addr(void *umad, int dlid, int dqp, int sl, int qkey)
{
	struct ib_user_mad *m = umad;
	m->addr.qpn = htobe32(dqp);
	m->addr.lid = htobe16(dlid);
	m->addr.qkey = htobe32(qkey);
	m->addr.sl = sl;
	return 0;
}

EXPORT int umad_set_addr_net(void *umad, __be16 dlid, __be32 dqp, int sl, __be32 qkey)
{
	struct ib_user_mad *m = umad;
	m->addr.qpn = dqp;
	m->addr.lid = dlid;
	m->addr.qkey = qkey;
	m->addr.sl = sl;
	return 0;
}

/* ---- the MAD layer ---- */

/* hdr_len is the bytes before the data in each RMPP segment (Linux's
 * ib_get_mad_data_offset): the SA's header, a vendor class's OUI, else the RMPP header. */
static size_t hdr_len(uint8_t mgmt_class)
{
	if (mgmt_class == CLASS_SA)
		return 56;
	if ((mgmt_class >= 0x09 && mgmt_class <= 0x0f) || (mgmt_class >= 0x30 && mgmt_class <= 0x4f))
		return 40;
	return RMPP_HDR_END;
}

static int is_request(uint8_t method)
{
	return !(method & METHOD_RESP) && method != METHOD_TRAP_REPRESS;
}

/* frame_mad appends one MAD (≤ 256 bytes) to addr, as the server takes it, to q. */
static int frame_mad(struct frames *q, const ib_mad_addr_t *addr, const uint8_t *mad, size_t len)
{
	struct frame *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	uint8_t *r = f->r;
	uint8_t mgmt_class = mad[1];
	uint16_t dlid = be16toh(addr->lid);
	r[0] = dlid >> 8;
	r[1] = dlid;
	if (mgmt_class == CLASS_SMI_DR) {
		r[4] = r[5] = 0xff; /* directed route: the server routes by the path */
	}
	putbe32(r + 8, be32toh(addr->qpn));
	putbe32(r + 12, (mgmt_class == CLASS_SMI || mgmt_class == CLASS_SMI_DR) ? 0 : 1);
	uint64_t l = htobe64(len);
	memcpy(r + 24, &l, 8);
	memcpy(r + 32, mad, len > MAD_LEN ? MAD_LEN : len);
	if (q->tail)
		q->tail->next = f;
	else
		q->head = f;
	q->tail = f;
	return 0;
}

/* frame_msg appends a message to q: one MAD, or (rmpp) its segments, all at once with
 * the Active, First and Last flags and PayloadLengths of IBA 13.6.2.3. */
static int frame_msg(struct frames *q, const ib_mad_addr_t *addr, const uint8_t *msg, size_t len, int rmpp)
{
	if (len <= MAD_LEN && !rmpp)
		return frame_mad(q, addr, msg, len);
	size_t hl = hdr_len(msg[1]);
	size_t per = MAD_LEN - hl;
	size_t data = len > hl ? len - hl : 0;
	uint32_t segs = data ? (data + per - 1) / per : 1;
	uint8_t seg[MAD_LEN];
	for (uint32_t s = 1; s <= segs; s++) {
		memset(seg, 0, sizeof(seg));
		memcpy(seg, msg, hl);
		size_t off = (s - 1) * per, n = data - off < per ? data - off : per;
		memcpy(seg + hl, msg + hl + off, n);
		seg[24] = 1; /* RMPPVersion */
		seg[25] = RMPP_TYPE_DATA;
		seg[26] = 0x1f << 3 | RMPP_FLAG_ACTIVE | (s == 1 ? RMPP_FLAG_FIRST : 0) | (s == segs ? RMPP_FLAG_LAST : 0);
		seg[27] = 0;
		putbe32(seg + 28, s);
		/* PayloadLength: the first segment's counts every segment's class header and all
		 * data; the last's its own (as Linux's RMPP sender). */
		size_t chl = hl - RMPP_HDR_END;
		uint32_t pl = s == 1 ? (uint32_t)(segs * chl + data) : s == segs ? (uint32_t)(chl + n) : 0;
		putbe32(seg + 32, pl);
		int err = frame_mad(q, addr, seg, MAD_LEN);
		if (err < 0)
			return err;
	}
	return 0;
}

/* send_frames sends q's datagrams on fd, waiting while the socket is full, and frees
 * them; it returns the first error. Called without the lock. */
static int send_frames(int fd, struct frames *q)
{
	int err = 0;
	while (q->head) {
		struct frame *f = q->head;
		ssize_t n = err ? 0 : send(fd, f->r, REQ_LEN, 0);
		if (!err && n < 0 && errno == EINTR)
			continue;
		if (!err && n < 0 && errno == EAGAIN) {
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			poll(&pf, 1, 100);
			continue;
		}
		if (!err && n != REQ_LEN)
			err = n < 0 ? -errno : -EIO;
		q->head = f->next;
		free(f);
	}
	q->tail = NULL;
	return err;
}

static void enqueue(struct port *p, uint8_t *msg, size_t len)
{
	struct ready *r = calloc(1, sizeof(*r));
	if (!r) {
		free(msg);
		return;
	}
	r->msg = msg;
	r->len = len;
	((struct ib_user_mad *)msg)->length = sizeof(struct ib_user_mad) + len;
	if (p->ready_tail)
		p->ready_tail->next = r;
	else
		p->ready = r;
	p->ready_tail = r;
}

EXPORT int umad_send(int fd, int agentid, void *umad, int length, int timeout_ms, int retries)
{
	struct ib_user_mad *m = umad;
	if (!umad || length < 24 || length > 1 << 20) {
		errno = EINVAL;
		return -EINVAL;
	}
	pthread_mutex_lock(&lock);
	struct port *p = port_of(fd);
	if (!p || agentid < 0 || agentid >= MAX_AGENTS || !p->agents[agentid].used) {
		pthread_mutex_unlock(&lock);
		errno = EINVAL;
		return -EINVAL;
	}
	struct agent *a = &p->agents[agentid];
	/* As the kernel (user_mad.c: rmpp_active from the header's flag): a message of an
	 * RMPP agent whose RMPP header says Active goes out in segments, numbered and
	 * flagged here, however short; a longer one must. */
	int rmpp = a->rmpp_version && !a->user_rmpp && (length > MAD_LEN || (m->data[26] & RMPP_FLAG_ACTIVE));
	if (length > MAD_LEN && !rmpp) {
		pthread_mutex_unlock(&lock);
		errno = EINVAL;
		return -EINVAL;
	}
	uint8_t *mad = m->data;
	uint8_t method = mad[3];
	uint64_t tid = be64at(mad + 8);
	if (is_request(method)) {
		/* As the kernel puts its agent's id in a request's TID (here bits 32-47, where
		 * the ibsim server expects it; it fills 48-63 with the client's slot). */
		tid = (tid & 0xffffffffull) | (uint64_t)agentid << 32;
		uint64_t be = htobe64(tid);
		memcpy(mad + 8, &be, 8);
	}
	m->agent_id = agentid;
	m->timeout_ms = timeout_ms;
	m->retries = retries;
	struct pending *pd = NULL;
	if (is_request(method) && timeout_ms > 0) {
		pd = calloc(1, sizeof(*pd));
		if (pd)
			pd->msg = malloc(sizeof(*m) + length);
		if (!pd || !pd->msg) {
			free(pd);
			pthread_mutex_unlock(&lock);
			errno = ENOMEM;
			return -ENOMEM;
		}
		memcpy(pd->msg, m, sizeof(*m) + length);
		pd->len = length;
		pd->rmpp = rmpp;
		pd->tid = tid & 0xffffffffffffull;
		pd->agent = agentid;
		pd->timeout_ms = timeout_ms;
		pd->retries = retries;
		pd->deadline = now_ms() + timeout_ms;
		pd->next = p->pending;
		p->pending = pd;
	}
	pthread_mutex_unlock(&lock);
	struct frames q = {0};
	int err = frame_msg(&q, &m->addr, mad, length, rmpp);
	int serr = send_frames(fd, &q);
	if (err == 0)
		err = serr;
	if (err < 0) {
		errno = -err;
		return err;
	}
	return 0;
}

/* timed_out delivers a request that got no response: the umad header with status
 * ETIMEDOUT and the MAD's common header (the kernel's ib_umad_send_handler). */
static void timed_out(struct port *p, struct pending *pd)
{
	uint8_t *msg = calloc(1, sizeof(struct ib_user_mad) + 24);
	if (msg) {
		memcpy(msg, pd->msg, sizeof(struct ib_user_mad) + 24);
		((struct ib_user_mad *)msg)->status = ETIMEDOUT;
		enqueue(p, msg, 24);
	}
	free(pd->msg);
	free(pd);
}

/* run_timers resends (into the port's outbox) or times out the requests whose time is
 * up; it returns the time of the next deadline (0: none). Lock held. */
static uint64_t run_timers(struct port *p)
{
	uint64_t now = now_ms(), next = 0;
	for (struct pending **pp = &p->pending; *pp;) {
		struct pending *pd = *pp;
		if (pd->deadline > now) {
			if (!next || pd->deadline < next)
				next = pd->deadline;
			pp = &pd->next;
			continue;
		}
		if (pd->retries > 0) {
			pd->retries--;
			pd->deadline = now + pd->timeout_ms;
			struct ib_user_mad *m = (struct ib_user_mad *)pd->msg;
			frame_msg(&p->out, &m->addr, m->data, pd->len, pd->rmpp);
			if (!next || pd->deadline < next)
				next = pd->deadline;
			pp = &pd->next;
			continue;
		}
		*pp = pd->next;
		timed_out(p, pd);
	}
	for (struct rmpp_rx **rp = &p->rmpp; *rp;) {
		struct rmpp_rx *r = *rp;
		if (r->deadline <= now) {
			*rp = r->next; /* the sender went quiet: drop the partial message */
			free(r->buf);
			free(r);
			continue;
		}
		if (!next || r->deadline < next)
			next = r->deadline;
		rp = &r->next;
	}
	return next;
}

/* find_pending returns the link to agent's request with tid, or NULL. */
static struct pending **find_pending(struct port *p, uint64_t tid, int agent)
{
	for (struct pending **pp = &p->pending; *pp; pp = &(*pp)->next)
		if ((*pp)->tid == tid && (*pp)->agent == agent)
			return pp;
	return NULL;
}

/* take_pending removes the request a response with tid answers; it reports whether one
 * was waiting (extend: keep it, its deadline moved on, while RMPP segments arrive). */
static int take_pending(struct port *p, uint64_t tid, int agent, int extend)
{
	struct pending **pp = find_pending(p, tid, agent);
	if (!pp)
		return 0;
	struct pending *pd = *pp;
	if (extend) {
		pd->deadline = now_ms() + pd->timeout_ms + 1000;
		return 1;
	}
	*pp = pd->next;
	free(pd->msg);
	free(pd);
	return 1;
}

/* rmpp_drop unlinks r from the port's reassemblies and frees it. */
static void rmpp_drop(struct port *p, struct rmpp_rx *r)
{
	for (struct rmpp_rx **rp = &p->rmpp; *rp; rp = &(*rp)->next)
		if (*rp == r) {
			*rp = r->next;
			break;
		}
	free(r->buf);
	free(r);
}

/* send_ack puts an ACK of segments up to acked, the window open to nwl, in the port's
 * outbox. */
static void send_ack(struct port *p, const ib_mad_addr_t *addr, const uint8_t *seg, uint32_t acked, uint32_t nwl)
{
	uint8_t ack[MAD_LEN] = {0};
	memcpy(ack, seg, hdr_len(seg[1]));
	/* The DATA's method with the response bit flipped (Linux's format_ack): an ACK of
	 * a response reaches the agent that sent it as a request of its class. */
	ack[3] ^= METHOD_RESP;
	ack[24] = 1;
	ack[25] = RMPP_TYPE_ACK;
	ack[26] = 0x1f << 3 | RMPP_FLAG_ACTIVE;
	ack[27] = 0;
	putbe32(ack + 28, acked);
	putbe32(ack + 32, nwl);
	frame_mad(&p->out, addr, ack, MAD_LEN);
}

/* rmpp_data takes a DATA segment of a response for an RMPP agent (IBA 13.6.3.1, the
 * receiver): segments in order are appended, an ACK goes back at the window's end and at
 * the last segment (opening the window RMPP_WINDOW further), a gap or a duplicate is
 * answered with an ACK of what arrived so the sender goes back. */
static void rmpp_data(struct port *p, int agent, const ib_mad_addr_t *addr, const uint8_t *mad)
{
	uint64_t tid = be64at(mad + 8) & 0xffffffffffffull;
	uint16_t slid = be16toh(addr->lid);
	uint32_t seg = be32at(mad + 28);
	uint8_t flags = mad[26] & 7;
	size_t hl = hdr_len(mad[1]), per = MAD_LEN - hl;
	struct rmpp_rx *r = NULL;
	for (r = p->rmpp; r; r = r->next)
		if (r->tid == tid && r->slid == slid && r->agent == agent)
			break;
	if (seg == 1 && (flags & RMPP_FLAG_FIRST)) {
		if (!r) {
			r = calloc(1, sizeof(*r));
			if (!r)
				return;
			r->next = p->rmpp;
			p->rmpp = r;
		}
		r->tid = tid;
		r->slid = slid;
		r->agent = agent;
		r->expect = 1;
		r->window_last = 1;
		r->len = 0;
		if (!r->buf) {
			r->cap = sizeof(struct ib_user_mad) + 16 * MAD_LEN;
			r->buf = malloc(r->cap);
		}
		if (!r->buf) {
			rmpp_drop(p, r);
			return;
		}
		memset(r->buf, 0, sizeof(struct ib_user_mad));
		struct ib_user_mad *m = (struct ib_user_mad *)r->buf;
		m->agent_id = agent;
		m->addr = *addr;
		memcpy(m->data, mad, hl);
		r->len = hl;
	}
	if (!r)
		return; /* a segment of a message whose start we never saw */
	take_pending(p, tid, agent, 1);
	r->deadline = now_ms() + 10000;
	int ack = 0, done = 0;
	if (seg != r->expect) {
		ack = r->expect > 1;
	} else {
		size_t need = sizeof(struct ib_user_mad) + r->len + per;
		if (need > RMPP_MAX_MSG) {
			rmpp_drop(p, r); /* larger than any table of the fabric: a runaway sender */
			return;
		}
		if (need > r->cap) {
			size_t cap = r->cap * 2 > need ? r->cap * 2 : need;
			uint8_t *b = realloc(r->buf, cap);
			if (!b)
				return;
			r->buf = b;
			r->cap = cap;
		}
		memcpy(r->buf + sizeof(struct ib_user_mad) + r->len, mad + hl, per);
		r->len += per;
		r->expect++;
		if (flags & RMPP_FLAG_LAST) {
			/* Linux's get_mad_len: the last PayloadLength says how much of the last
			 * segment is data (IB_MGMT_RMPP_DATA = 220 bytes after the RMPP header). */
			long pad = (long)(MAD_LEN - RMPP_HDR_END) - (long)be32at(mad + 32);
			if (pad < 0 || pad > (long)per)
				pad = 0;
			r->len -= pad;
			done = ack = 1;
		} else if (seg >= r->window_last)
			ack = 1;
	}
	uint32_t acked = r->expect - 1;
	uint32_t nwl = done ? acked : acked + RMPP_WINDOW;
	if (ack)
		r->window_last = nwl;
	if (ack && acked > 0)
		send_ack(p, addr, mad, acked, nwl);
	if (!done)
		return;
	take_pending(p, tid, agent, 0);
	size_t len = r->len;
	uint8_t *buf = r->buf;
	r->buf = NULL; /* handed to umad_recv */
	rmpp_drop(p, r);
	enqueue(p, buf, len);
}

/* find_agent returns the agent a received request goes to, or -1 (the kernel's
 * find_mad_agent: class, class version, method, and a vendor class's OUI). */
static int find_agent(struct port *p, const uint8_t *mad)
{
	uint8_t mgmt_class = mad[1], version = mad[2], method = mad[3];
	uint32_t oui = (uint32_t)mad[37] << 16 | mad[38] << 8 | mad[39];
	for (int i = 0; i < MAX_AGENTS; i++) {
		struct agent *a = &p->agents[i];
		if (!a->used || a->mgmt_class != mgmt_class || !test_method(a->method_mask, method))
			continue;
		if (mgmt_class >= 0x30 && mgmt_class <= 0x4f) {
			if (a->oui != oui)
				continue;
		} else if (a->class_version != version)
			continue;
		return i;
	}
	return -1;
}

/* handle takes one datagram from the server. Lock held. */
static void handle(struct port *p, const uint8_t *r, size_t n)
{
	if (n != REQ_LEN)
		return;
	uint64_t len;
	memcpy(&len, r + 24, 8);
	len = be64toh(len);
	if (len < 24 || len > MAD_LEN)
		len = MAD_LEN;
	const uint8_t *mad = r + 32;
	uint32_t status = be32at(r + 16);
	ib_mad_addr_t addr = {0};
	addr.lid = htobe16(be16at(r + 4));
	addr.qpn = htobe32(be32at(r + 12));
	addr.qkey = htobe32(be32at(r + 12) ? 0x80010000u : 0);
	uint8_t method = mad[3];
	uint64_t tid = be64at(mad + 8) & 0xffffffffffffull;
	int agent;

	if (status) {
		/* The server could not deliver our request (no route, no receiver): its
		 * requester learns at once, as with a timeout. */
		if (!is_request(method))
			return;
		struct pending **pp = find_pending(p, tid, (tid >> 32) & 0xffff);
		if (pp) {
			struct pending *pd = *pp;
			*pp = pd->next;
			timed_out(p, pd);
		}
		return;
	}
	/* A request goes to the agent registered for it, a response to the agent its TID
	 * names. */
	agent = is_request(method) ? find_agent(p, mad) : (int)((tid >> 32) & 0xffff);
	if (agent < 0 || agent >= MAX_AGENTS || !p->agents[agent].used)
		return;
	struct agent *a = &p->agents[agent];
	if (a->rmpp_version && !a->user_rmpp && (mad[26] & RMPP_FLAG_ACTIVE)) {
		/* RMPP for the agent: DATA is reassembled (a response, or — rarely — a request
		 * of many records); an ACK needs nothing (our segments went out at once); after
		 * a STOP or ABORT the request times out. */
		if (mad[25] == RMPP_TYPE_DATA)
			rmpp_data(p, agent, &addr, mad);
		return;
	}
	/* The kernel drops a response nothing waits for. */
	if (!is_request(method) && !take_pending(p, tid, agent, 0))
		return;
	uint8_t *msg = calloc(1, sizeof(struct ib_user_mad) + len);
	if (!msg)
		return;
	struct ib_user_mad *m = (struct ib_user_mad *)msg;
	m->agent_id = agent;
	m->addr = addr;
	memcpy(m->data, mad, len);
	enqueue(p, msg, len);
}

/* service takes every datagram waiting and runs the timers; it returns the next
 * deadline (0: none). Lock held. */
static uint64_t service(struct port *p)
{
	uint8_t r[REQ_LEN + 16];
	for (;;) {
		ssize_t n = recv(p->fd, r, sizeof(r), MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		handle(p, r, n);
	}
	return run_timers(p);
}

/* wait_ready waits until a message is ready (0), the timeout passes (-ETIMEDOUT) or
 * nothing is there and timeout_ms is 0 (-EWOULDBLOCK). Lock held on entry and exit. */
static int wait_ready(int fd, struct port **pp, int timeout_ms)
{
	uint64_t end = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
	for (;;) {
		struct port *p = port_of(fd);
		*pp = p;
		if (!p)
			return -EINVAL;
		uint64_t next = service(p);
		if (p->out.head) {
			/* The ACKs and resends service made leave without the lock. */
			struct frames q = p->out;
			p->out = (struct frames){0};
			pthread_mutex_unlock(&lock);
			send_frames(fd, &q);
			pthread_mutex_lock(&lock);
			if (!(*pp = p = port_of(fd)))
				return -EINVAL;
		}
		if (p->ready)
			return 0;
		if (timeout_ms == 0)
			return -EWOULDBLOCK;
		uint64_t now = now_ms();
		if (end && now >= end)
			return -ETIMEDOUT;
		int wait = -1;
		if (end)
			wait = end - now;
		if (next && (wait < 0 || next - now < (uint64_t)wait))
			wait = next > now ? next - now : 0;
		pthread_mutex_unlock(&lock);
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int k = poll(&pf, 1, wait);
		pthread_mutex_lock(&lock);
		if (k < 0 && errno != EINTR)
			return -errno;
	}
}

EXPORT int umad_recv(int fd, void *umad, int *length, int timeout_ms)
{
	if (!umad || !length) {
		errno = EINVAL;
		return -EINVAL;
	}
	pthread_mutex_lock(&lock);
	struct port *p;
	int err = wait_ready(fd, &p, timeout_ms);
	if (err < 0) {
		pthread_mutex_unlock(&lock);
		errno = -err;
		return err;
	}
	struct ready *r = p->ready;
	size_t hdr = sizeof(struct ib_user_mad);
	if ((size_t)*length < r->len) {
		/* As the kernel's read: the header and the first segment when they fit
		 * (ENOSPC, the message stays queued, its length in the header), else EINVAL. */
		size_t first = r->len < MAD_LEN ? r->len : MAD_LEN;
		if ((size_t)*length < first) {
			pthread_mutex_unlock(&lock);
			errno = EINVAL;
			return -EINVAL;
		}
		memcpy(umad, r->msg, hdr + first);
		*length = r->len;
		pthread_mutex_unlock(&lock);
		errno = ENOSPC;
		return -ENOSPC;
	}
	memcpy(umad, r->msg, hdr + r->len);
	*length = r->len;
	p->ready = r->next;
	if (!p->ready)
		p->ready_tail = NULL;
	int agent = ((struct ib_user_mad *)r->msg)->agent_id;
	free(r->msg);
	free(r);
	pthread_mutex_unlock(&lock);
	return agent;
}

EXPORT int umad_poll(int fd, int timeout_ms)
{
	pthread_mutex_lock(&lock);
	struct port *p;
	int err = wait_ready(fd, &p, timeout_ms);
	pthread_mutex_unlock(&lock);
	if (err == -EWOULDBLOCK)
		err = -ETIMEDOUT;
	if (err < 0)
		errno = -err;
	return err;
}

/* ---- debugging and strings ---- */

EXPORT int umad_debug(int level)
{
	if (level >= 0)
		debug_level = level;
	return debug_level;
}

EXPORT void umad_addr_dump(ib_mad_addr_t *addr)
{
	char gid[64];
	inet_ntop(AF_INET6, addr->gid, gid, sizeof(gid));
	fprintf(stderr, "umad_addr: qpn %d qkey 0x%x lid %d sl %d\n"
		"grh_present %d gid_index %d hop_limit %d traffic_class %d flow_label 0x%x pkey_index 0x%x\n"
		"Gid 0x%s\n",
		be32toh(addr->qpn), be32toh(addr->qkey), be16toh(addr->lid), addr->sl, addr->grh_present,
		addr->gid_index, addr->hop_limit, addr->traffic_class, be32toh(addr->flow_label), addr->pkey_index, gid);
}

EXPORT void umad_dump(void *umad)
{
	struct ib_user_mad *m = umad;
	fprintf(stderr, "agent id %d status %x timeout %d\n", m->agent_id, m->status, m->timeout_ms);
	umad_addr_dump(&m->addr);
}

EXPORT const char *umad_class_str(uint8_t mgmt_class)
{
	switch (mgmt_class) {
	case 0x01: return "Subn";
	case 0x81: return "SubnDirectedRoute";
	case 0x03: return "SubnAdmin";
	case 0x04: return "Perf";
	case 0x05: return "BM";
	case 0x06: return "DevMgt";
	case 0x07: return "ComMgt";
	case 0x08: return "SNMP";
	case 0x10: return "DevAdm";
	case 0x20: return "BIS";
	case 0x21: return "CC";
	}
	if ((mgmt_class >= 0x09 && mgmt_class <= 0x0f) || (mgmt_class >= 0x30 && mgmt_class <= 0x4f))
		return "Vendor";
	if (mgmt_class >= 0x50 && mgmt_class <= 0x5f)
		return "Application";
	return "<unknown>";
}

EXPORT const char *umad_method_str(uint8_t mgmt_class, uint8_t method)
{
	switch (method) {
	case 0x01: return "Get";
	case 0x02: return "Set";
	case 0x81: return "GetResp";
	case 0x03: return "Send";
	case 0x05: return "Trap";
	case 0x06: return "Report";
	case 0x86: return "ReportResp";
	case 0x07: return "TrapRepress";
	}
	if (mgmt_class == CLASS_SA) {
		switch (method) {
		case 0x12: return "GetTable";
		case 0x92: return "GetTableResp";
		case 0x13: return "GetTraceTable";
		case 0x14: return "GetMulti";
		case 0x94: return "GetMultiResp";
		case 0x15: return "Delete";
		case 0x95: return "DeleteResp";
		}
	}
	return "<unknown>";
}

EXPORT const char *umad_common_mad_status_str(__be16 _status)
{
	uint16_t status = be16toh(_status);
	if (status & 0x0001)
		return "Busy";
	if (status & 0x0002)
		return "Redirection required";
	switch ((status & 0x001c) >> 2) {
	case 0: return "Success";
	case 1: return "Bad Version";
	case 2: return "Method not supported";
	case 3: return "Method/Attribute combo not supported";
	case 7: return "Invalid Attribute/Modifier value";
	}
	return "Undefined Error";
}

EXPORT const char *umad_sa_mad_status_str(__be16 _status)
{
	switch ((be16toh(_status) >> 8) & 0x7f) {
	case 0: return "Success";
	case 1: return "No Resources";
	case 2: return "Request Denied";
	case 3: return "No Records";
	case 4: return "Too Many Records";
	case 5: return "Invalid GID";
	case 6: return "Insufficient Components";
	case 7: return "Request Denied by SA";
	}
	return "Undefined Error";
}

EXPORT const char *umad_attribute_str(uint8_t mgmt_class, __be16 attr_id)
{
	uint16_t id = be16toh(attr_id);
	switch (id) {
	case 0x0001: return "ClassPortInfo";
	case 0x0002: return "Notice";
	case 0x0003: return "InformInfo";
	}
	switch (mgmt_class) {
	case CLASS_SMI:
	case CLASS_SMI_DR:
		switch (id) {
		case 0x0010: return "NodeDescription";
		case 0x0011: return "NodeInfo";
		case 0x0012: return "SwitchInfo";
		case 0x0014: return "GUIDInfo";
		case 0x0015: return "PortInfo";
		case 0x0016: return "P_KeyTable";
		case 0x0017: return "SLtoVLMappingTable";
		case 0x0018: return "VLArbitrationTable";
		case 0x0019: return "LinearForwardingTable";
		case 0x001A: return "RandomForwardingTable";
		case 0x001B: return "MulticastForwardingTable";
		case 0x0020: return "SMInfo";
		case 0x0030: return "VendorDiag";
		case 0x0031: return "LedInfo";
		}
		break;
	case CLASS_SA:
		switch (id) {
		case 0x0011: return "NodeRecord";
		case 0x0012: return "PortInfoRecord";
		case 0x0013: return "SLtoVLMappingTableRecord";
		case 0x0014: return "SwitchInfoRecord";
		case 0x0015: return "LinearForwardingTableRecord";
		case 0x0017: return "MulticastForwardingTableRecord";
		case 0x0018: return "SMInfoRecord";
		case 0x0020: return "LinkRecord";
		case 0x0030: return "GuidInfoRecord";
		case 0x0031: return "ServiceRecord";
		case 0x0033: return "P_KeyTableRecord";
		case 0x0035: return "PathRecord";
		case 0x0036: return "VLArbitrationTableRecord";
		case 0x0038: return "MCMemberRecord";
		case 0x0039: return "TraceRecord";
		case 0x003A: return "MultiPathRecord";
		case 0x00F3: return "InformInfoRecord";
		}
		break;
	case 0x04:
		switch (id) {
		case 0x0010: return "PortSamplesControl";
		case 0x0011: return "PortSamplesResult";
		case 0x0012: return "PortCounters";
		case 0x001D: return "PortCountersExtended";
		}
		break;
	}
	return "<unknown>";
}
