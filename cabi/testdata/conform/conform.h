// conform: pibgw's conformance test of the verbs and rdma_cm C API, call by call, against
// what the kernel's uverbs/ucma and rdma-core's providers (rxe, mlx5) do. One program, built
// from every .c file in this directory; each file holds one area's checks (a function
// conform_AREA that main.c calls when the file is linked in).
//
// A check prints "ok NAME" or "not ok NAME: why" and the run goes on; the last line is
// "conform: N checks, M failed" and the exit status is 1 if any failed. NAMEs are unique.
#ifndef CONFORM_H
#define CONFORM_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

extern int conform_checks, conform_failed;

// T(name, cond, fmt, ...): one check; the format says what was seen when it fails.
#define T(name, cond, ...)                                                               \
	do {                                                                             \
		conform_checks++;                                                        \
		if (cond) {                                                              \
			printf("ok %s\n", name);                                         \
		} else {                                                                 \
			conform_failed++;                                                \
			printf("not ok %s (%s:%d): ", name, __FILE__, __LINE__);         \
			printf(__VA_ARGS__);                                             \
			printf("\n");                                                    \
		}                                                                        \
		fflush(stdout);                                                          \
	} while (0)

// MUST(cond, fmt, ...): set-up that later checks depend on; a failure ends the run.
#define MUST(cond, ...)                                                                  \
	do {                                                                             \
		if (!(cond)) {                                                           \
			printf("not ok setup (%s:%d): ", __FILE__, __LINE__);            \
			printf(__VA_ARGS__);                                             \
			printf("\nconform: %d checks, %d failed, set-up failed\n",       \
			       conform_checks, conform_failed + 1);                       \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

// A device opened with a PD, a CQ and an 8 KiB region registered with every remote access.
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf;
	uint16_t lid;
};

#define SIDE_BUF 8192

struct ibv_context *open_dev(const char *name);
void side_open(struct side *s, const char *dev);
void side_close(struct side *s);
// rc_qp creates an RC QP on s with s->cq for both queues (srq may be NULL).
struct ibv_qp *rc_qp(struct side *s, struct ibv_srq *srq);
// qp_init/qp_rtr/qp_rts move an RC (or UC) QP along, toward the peer dlid/dqpn.
int qp_init(struct ibv_qp *qp, int access);
int qp_rtr(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn);
int qp_rts(struct ibv_qp *qp);
// rc_pair creates and connects an RC QP on a and one on b.
void rc_pair(struct side *a, struct side *b, struct ibv_qp **aq, struct ibv_qp **bq);
// poll_one waits up to 5 s for one completion on cq; 0 if one came, -1 on timeout.
int poll_one(struct ibv_cq *cq, struct ibv_wc *wc);
// poll_none says whether cq stays empty for ms milliseconds.
int poll_none(struct ibv_cq *cq, int ms);
// wait_async waits up to 5 s for an async event of type t on ctx (others are acknowledged
// and skipped); 0 if it came (its element in *ev, acknowledged), -1 if not.
int wait_async(struct ibv_context *ctx, enum ibv_event_type t, struct ibv_async_event *ev);
// post_rdma posts one signaled RDMA WRITE/READ/SEND of len bytes of a's buffer.
int post_rdma(struct side *a, struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, uint64_t va, uint32_t rkey, int len);
int post_recv1(struct side *s, struct ibv_qp *qp, uint64_t wr_id, int len);

// The areas: each file defines one; main.c runs those that are linked in, in this order.
void conform_context(struct side *a, struct side *b);
void conform_device(struct side *a, struct side *b);
void conform_mr(struct side *a, struct side *b);
void conform_qp(struct side *a, struct side *b);
void conform_wc(struct side *a, struct side *b);
void conform_post(struct side *a, struct side *b);
void conform_events(struct side *a, struct side *b);
void conform_mcast(struct side *a, struct side *b);
void conform_cm(struct side *a, struct side *b);
void conform_fork(struct side *a, struct side *b);

#endif
