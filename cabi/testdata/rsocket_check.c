// rsocket_check: pibgw's rsockets call by call, as a sockets program would use them: both
// ends in one process (a server thread and the main thread as client), each check printed
// as "ok NAME" when it holds; the first that fails prints FAIL with its line and exits 1.
//
//   rsocket_check ADDR PORT      ADDR an IPoIB address of the fabric, PORT a free port
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <rdma/rsocket.h>

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "FAIL line %d (errno %d %s): ", __LINE__, errno, strerror(errno)); \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			exit(1);                                                \
		}                                                               \
	} while (0)
#define OK(name) printf("ok %s\n", name), fflush(stdout)

#define BIG (8 << 20)

static struct sockaddr_in addr;
static int lfd;

static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + (i >> 12)); }

static void recv_all(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = rrecv(fd, (char *)buf + got, n - got, 0);
		CHECK(r > 0, "rrecv: %zd after %zu of %zu bytes", r, got, n);
		got += r;
	}
}

static void send_all(int fd, const void *buf, size_t n)
{
	size_t sent = 0;
	while (sent < n) {
		ssize_t r = rsend(fd, (const char *)buf + sent, n - sent, 0);
		CHECK(r > 0, "rsend: %zd after %zu of %zu bytes", r, sent, n);
		sent += r;
	}
}

// send_pattern sends BIG bytes of the pattern (a thread's body: arg points to the fd).
static void *send_pattern(void *arg)
{
	int fd = *(int *)arg;
	uint8_t *big = malloc(BIG);
	for (size_t i = 0; i < BIG; i++)
		big[i] = pattern(i);
	send_all(fd, big, BIG);
	free(big);
	return NULL;
}

// recv_pattern receives BIG bytes and checks them against the pattern.
static void recv_pattern(int fd)
{
	uint8_t *buf = malloc(BIG);
	recv_all(fd, buf, BIG);
	for (size_t i = 0; i < BIG; i++)
		CHECK(buf[i] == pattern(i), "byte %zu: %#x, want %#x", i, buf[i], pattern(i));
	free(buf);
}

// both_ways sends the pattern from a second thread while this one receives it, on one
// rsocket: each thread's waits must not hold up the other's.
static void both_ways(int fd)
{
	pthread_t th;
	pthread_create(&th, NULL, send_pattern, &fd);
	recv_pattern(fd);
	pthread_join(th, NULL);
}

// connect_refused connects to the address arg points to; the errno it ends with is
// refused_errno (0 if it connected).
static int refused_errno = -1;
static void *connect_refused(void *arg)
{
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0, "rsocket");
	refused_errno = rconnect(fd, (struct sockaddr *)arg, sizeof(struct sockaddr_in)) ? errno : 0;
	rclose(fd);
	return NULL;
}

// server: accepts one connection and runs its side of main's script.
static void *server(void *arg)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "rpoll on the listener: revents %#x", p.revents);
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	int fd = raccept(lfd, (struct sockaddr *)&peer, &len);
	CHECK(fd >= 0, "raccept");
	CHECK(len == sizeof(peer) && peer.sin_family == AF_INET, "raccept's address: len %u family %d", len, peer.sin_family);

	send_all(fd, "hello", 5);

	recv_pattern(fd); // the client's 8 MiB, checked byte by byte
	both_ways(fd);

	// The client shut its sending side: end of file here, and this side still sends.
	char c;
	CHECK(rrecv(fd, &c, 1, 0) == 0, "rrecv after the peer's SHUT_WR: want 0 (end of file)");
	send_all(fd, "bye", 3);
	CHECK(rclose(fd) == 0, "rclose");
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: rsocket_check ADDR PORT\n");
		return 2;
	}
	addr.sin_family = AF_INET;
	addr.sin_port = htons(atoi(argv[2]));
	CHECK(inet_pton(AF_INET, argv[1], &addr.sin_addr) == 1, "address %s", argv[1]);

	CHECK(rsocket(AF_INET, SOCK_DGRAM, 0) < 0 && errno == EOPNOTSUPP, "SOCK_DGRAM: want EOPNOTSUPP");
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) < 0 && errno == EAFNOSUPPORT, "AF_UNIX: want EAFNOSUPPORT");
	CHECK(rsend(0, "x", 1, 0) < 0 && errno == EBADF, "rsend on stdin: want EBADF");
	CHECK(rclose(0) < 0 && errno == EBADF, "rclose of stdin: want EBADF");
	OK("bad_arguments");

	// Nobody listens on PORT yet.
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0, "rsocket");
	CHECK(rconnect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 && errno == ECONNREFUSED,
	      "rconnect with no listener: want ECONNREFUSED");
	int err = -1;
	socklen_t len = sizeof(err);
	CHECK(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED, "SO_ERROR %d", err);
	CHECK(rclose(fd) == 0, "rclose");
	OK("refused_ECONNREFUSED");

	// A listener closed with a request it never accepted: its client is refused at once,
	// not after its REQ's timeout.
	struct sockaddr_in a2 = addr;
	a2.sin_port = htons(ntohs(addr.sin_port) + 1);
	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0 && rbind(lfd, (struct sockaddr *)&a2, sizeof(a2)) == 0 && rlisten(lfd, 1) == 0, "listen");
	pthread_t th;
	pthread_create(&th, NULL, connect_refused, &a2);
	struct pollfd lp = {.fd = lfd, .events = POLLIN};
	CHECK(rpoll(&lp, 1, 10000) == 1, "the request did not arrive");
	struct timespec c0, c1;
	clock_gettime(CLOCK_MONOTONIC, &c0);
	CHECK(rclose(lfd) == 0, "rclose of the listener");
	pthread_join(th, NULL);
	clock_gettime(CLOCK_MONOTONIC, &c1);
	long ms = (long)((c1.tv_sec - c0.tv_sec) * 1000 + (c1.tv_nsec - c0.tv_nsec) / 1000000);
	CHECK(refused_errno == ECONNREFUSED && ms < 2000, "rconnect to a listener closed with it pending: errno %d after %ld ms, want ECONNREFUSED at once",
	      refused_errno, ms);
	OK("listener_closed_refuses");

	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0, "rsocket");
	int one = 1;
	CHECK(rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0, "SO_REUSEADDR");
	CHECK(rbind(lfd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "rbind");
	CHECK(rlisten(lfd, 4) == 0, "rlisten");
	CHECK(rfcntl(lfd, F_SETFL, O_NONBLOCK) == 0 && (rfcntl(lfd, F_GETFL) & O_NONBLOCK), "O_NONBLOCK");
	CHECK(raccept(lfd, NULL, NULL) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "raccept with nothing waiting: want EAGAIN");
	OK("listen_nonblocking_EAGAIN");

	pthread_create(&th, NULL, server, NULL);

	fd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0, "rsocket");
	int rcvbuf = 65536;
	CHECK(rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0, "SO_RCVBUF");
	len = sizeof(rcvbuf);
	CHECK(rgetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) == 0 && rcvbuf == 131072, "SO_RCVBUF reads %d, want 131072 (doubled)", rcvbuf);
	CHECK(rconnect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "rconnect");
	struct sockaddr_in peer;
	len = sizeof(peer);
	CHECK(rgetpeername(fd, (struct sockaddr *)&peer, &len) == 0 && peer.sin_addr.s_addr == addr.sin_addr.s_addr &&
		      peer.sin_port == addr.sin_port,
	      "rgetpeername");
	int mss = 0;
	len = sizeof(mss);
	CHECK(rgetsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) == 0 && mss >= 256 && mss <= 4096, "TCP_MAXSEG %d", mss);
	CHECK(rsetsockopt(fd, SOL_RDMA, RDMA_INLINE, &one, sizeof(one)) < 0 && errno == EINVAL, "RDMA_INLINE once connected: want EINVAL");
	OK("connect");

	char buf[16];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "rpoll POLLIN: revents %#x", p.revents);
	CHECK(rrecv(fd, buf, sizeof(buf), MSG_PEEK) == 5 && !memcmp(buf, "hello", 5), "MSG_PEEK");
	CHECK(rrecv(fd, buf, 2, 0) == 2 && !memcmp(buf, "he", 2), "the first 2 bytes");
	CHECK(rrecv(fd, buf, sizeof(buf), 0) == 3 && !memcmp(buf, "llo", 3), "the other 3");
	CHECK(rrecv(fd, buf, sizeof(buf), MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "nothing more: want EAGAIN");
	p.revents = 0;
	CHECK(rpoll(&p, 1, 0) == 0, "rpoll with nothing to read: revents %#x", p.revents);
	p.events = POLLOUT;
	CHECK(rpoll(&p, 1, 1000) == 1 && (p.revents & POLLOUT), "rpoll POLLOUT: revents %#x", p.revents);
	fd_set w;
	FD_ZERO(&w);
	FD_SET(fd, &w);
	struct timeval tv = {1, 0};
	CHECK(rselect(fd + 1, NULL, &w, NULL, &tv) == 1 && FD_ISSET(fd, &w), "rselect writable");
	OK("recv_peek_poll");

	send_pattern(&fd);
	OK("send_8MiB");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	both_ways(fd);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	OK("both_ways_two_threads");
	printf("both_ways_ms %ld\n", (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));

	CHECK(rshutdown(fd, SHUT_WR) == 0, "rshutdown SHUT_WR");
	CHECK(rsend(fd, "x", 1, 0) < 0 && errno == EPIPE, "rsend after SHUT_WR: want EPIPE");
	recv_all(fd, buf, 3);
	CHECK(!memcmp(buf, "bye", 3), "bye");
	CHECK(rrecv(fd, buf, sizeof(buf), 0) == 0, "rrecv after the peer's rclose: want 0 (end of file)");
	pthread_join(th, NULL);
	OK("shutdown_and_close");

	// The server set no RDMA_IOMAPSIZE: its table has no entry for a map of ours.
	CHECK(riomap(fd, buf, sizeof(buf), PROT_WRITE, 0, -1) < 0 && errno == ENOMEM, "riomap with no room at the peer: want ENOMEM");
	CHECK(riomap(fd, buf, sizeof(buf), PROT_NONE, 0, 4096) == 4096, "a local riomap at offset 4096");
	CHECK(riounmap(fd, buf, 1) < 0 && errno == EINVAL, "riounmap of no map: want EINVAL");
	CHECK(riounmap(fd, buf, sizeof(buf)) == 0, "riounmap");
	OK("iomap_errors");
	CHECK(rclose(fd) == 0, "rclose");
	CHECK(rclose(lfd) == 0, "rclose of the listener");
	OK("done");
	return 0;
}
