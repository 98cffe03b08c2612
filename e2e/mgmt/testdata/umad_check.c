/* umad_check: the libibumad semantics programs rely on, against a pibgw daemon through
 * pibgw's libibumad.so.3 (TestE2EUmadChecks). Each check prints "ok NAME" or
 * "FAIL NAME: why"; the exit status is the number of failures. Environment: as
 * `pibgw exec --umad` sets it (PIBGW_UMAD_CAS=pib_0,pib_1, IBSIM_SOCKNAME). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/umad.h>

static int failures;

#define CHECK(name, cond, ...)                                  \
	do {                                                    \
		if (cond) {                                     \
			printf("ok %s\n", name);                \
		} else {                                        \
			printf("FAIL %s: ", name);              \
			printf(__VA_ARGS__);                    \
			printf("\n");                           \
			failures++;                             \
		}                                               \
	} while (0)

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = v >> (56 - 8 * i); }
static uint16_t get16(const uint8_t *p) { return p[0] << 8 | p[1]; }

/* mad fills a request's common header (IBA 13.4.2). */
static void mad(uint8_t *m, uint8_t cls, uint8_t ver, uint8_t method, uint16_t attr, uint64_t tid)
{
	memset(m, 0, 256);
	m[0] = 1;
	m[1] = cls;
	m[2] = ver;
	m[3] = method;
	put64(m + 8, tid);
	put16(m + 16, attr);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void)
{
	char names[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
	int n = umad_get_cas_names(names, UMAD_MAX_DEVICES);
	CHECK("cas", n == 2 && !strcmp(names[0], "pib_0") && !strcmp(names[1], "pib_1"), "%d devices (%s, %s)", n,
	      n > 0 ? names[0] : "-", n > 1 ? names[1] : "-");

	umad_ca_t ca;
	int err = umad_get_ca("pib_1", &ca);
	CHECK("get_ca", err == 0 && ca.numports == 1 && ca.node_type == 1 && ca.ports[1] && ca.ports[1]->state == 4 &&
			    ca.ports[1]->base_lid > 0 && ca.ports[1]->pkeys[0] == 0xffff,
	      "err %d numports %d type %u", err, ca.numports, ca.node_type);
	unsigned sm_lid = err == 0 && ca.ports[1] ? ca.ports[1]->sm_lid : 0;
	if (err == 0)
		umad_release_ca(&ca);

	int bad = umad_open_port("pib_9", 1);
	CHECK("open_unknown_ENODEV", bad == -ENODEV, "got %d", bad);

	int fd = umad_open_port("pib_1", 1);
	if (fd < 0) {
		printf("FAIL open: %d\n", fd);
		return failures + 1;
	}
	CHECK("get_fd", umad_get_fd(fd) == fd, "umad_get_fd %d for %d", umad_get_fd(fd), fd);

	long none[2] = {0, 0};
	int sa = umad_register(fd, 0x03, 2, 1, none);
	int pm = umad_register(fd, 0x04, 1, 0, none);
	long get[2] = {1L << 1, 0}; /* method Get */
	int srv = umad_register(fd, 0x04, 1, 0, get);
	int dup = umad_register(fd, 0x04, 1, 0, get);
	CHECK("register", sa >= 0 && pm >= 0 && srv >= 0 && sa != pm && pm != srv, "agents %d %d %d", sa, pm, srv);
	CHECK("register_twice_EINVAL", dup == -EINVAL, "second agent for PerfMgt Get: %d", dup);

	size_t big = umad_size() + 64 * 1024;
	uint8_t *u = calloc(1, big);
	int len = 256;

	/* Nothing waiting: a poll and a receive with a timeout time out; without one,
	 * EWOULDBLOCK. */
	double t0 = now();
	err = umad_poll(fd, 100);
	CHECK("poll_ETIMEDOUT", err == -ETIMEDOUT && now() - t0 >= 0.09, "%d after %.3f s", err, now() - t0);
	len = 256;
	err = umad_recv(fd, u, &len, 100);
	CHECK("recv_ETIMEDOUT", err == -ETIMEDOUT, "%d", err);
	len = 256;
	err = umad_recv(fd, u, &len, 0);
	CHECK("recv_nonblocking_EWOULDBLOCK", err == -EWOULDBLOCK && errno == EWOULDBLOCK, "%d errno %d", err, errno);

	/* A request nobody answers (no route to the LID): after its timeout and one retry
	 * its send comes back with status ETIMEDOUT and its common header. */
	mad(umad_get_mad(u), 0x04, 1, 0x01, 0x0001, 0x1111);
	umad_set_addr(u, 0x7ff0, 1, 0, 0x80010000);
	err = umad_send(fd, pm, u, 256, 300, 1);
	memset(u, 0, big);
	len = 256;
	t0 = now();
	int got = umad_recv(fd, u, &len, 5000);
	uint8_t *m = umad_get_mad(u);
	CHECK("unroutable_ETIMEDOUT", err == 0 && got == pm && umad_status(u) == ETIMEDOUT && len == 24 && m[1] == 0x04 &&
					  (m[8 + 7] == 0x11 && m[8 + 6] == 0x11) && now() - t0 >= 0.55 && now() - t0 < 3,
	      "send %d recv %d status %d len %d after %.3f s", err, got, umad_status(u), len, now() - t0);

	/* The SA's ClassPortInfo: a single-MAD answer to the agent that asked. */
	mad(umad_get_mad(u), 0x03, 2, 0x01, 0x0001, 0x2222);
	umad_set_addr(u, sm_lid, 1, 0, 0x80010000);
	err = umad_send(fd, sa, u, 256, 2000, 1);
	memset(u, 0, big);
	len = 256;
	got = umad_recv(fd, u, &len, 5000);
	m = umad_get_mad(u);
	CHECK("sa_classportinfo", err == 0 && got == sa && umad_status(u) == 0 && len == 256 && m[3] == 0x81 &&
				      get16(m + 4) == 0 && get16(m + 16) == 0x0001,
	      "send %d recv %d status %d len %d method 0x%x mad status 0x%x", err, got, umad_status(u), len, m[3], get16(m + 4));

	/* A GetTable of NodeRecords (three nodes, in RMPP segments): a buffer for one MAD
	 * gets ENOSPC, the first segment and the length the table needs; a big one all. */
	mad(umad_get_mad(u), 0x03, 2, 0x12, 0x0011, 0x3333);
	umad_set_addr(u, sm_lid, 1, 0, 0x80010000);
	err = umad_send(fd, sa, u, 256, 2000, 1);
	memset(u, 0, big);
	len = 256;
	got = umad_recv(fd, u, &len, 5000);
	int need = len;
	CHECK("rmpp_ENOSPC", err == 0 && got == -ENOSPC && need > 256, "send %d recv %d length %d", err, got, need);
	len = 64 * 1024;
	got = umad_recv(fd, u, &len, 5000);
	m = umad_get_mad(u);
	int recsize = get16(m + 44) * 8; /* AttributeOffset, in 8-byte words */
	CHECK("rmpp_table", got == sa && len == need && m[3] == 0x92 && recsize > 0 && (len - 56) / recsize == 3,
	      "recv %d length %d (need %d) method 0x%x records %d", got, len, need, m[3], recsize ? (len - 56) / recsize : -1);

	CHECK("unregister", umad_unregister(fd, srv) == 0 && umad_unregister(fd, srv) == -EINVAL, "twice");
	CHECK("close", umad_close_port(fd) == 0 && umad_close_port(fd) == -EINVAL, "twice");
	free(u);
	return failures;
}
