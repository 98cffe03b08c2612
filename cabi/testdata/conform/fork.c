// fork.c: fork(2) after verbs and rdma_cm were used, as Python's multiprocessing, MPI
// launchers and test harnesses do. With the kernel's uverbs the child opens devices and
// makes objects of its own normally; only the parent's objects are off limits (without
// ibv_fork_init their memory is the parent's). The parent carries on.
#include "conform.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

// child_rc: in a fresh process, both devices, an RC pair between them and a SEND across.
static int child_rc(void)
{
	struct side a, b;
	side_open(&a, "pib_0");
	side_open(&b, "pib_1");
	struct ibv_qp *aq, *bq;
	rc_pair(&a, &b, &aq, &bq);
	strcpy(a.buf, "from the child");
	struct ibv_wc wc;
	if (post_recv1(&b, bq, 7, 64) || post_rdma(&a, aq, IBV_WR_SEND, 8, 0, 0, 15))
		return 2;
	if (poll_one(a.cq, &wc) || wc.status != IBV_WC_SUCCESS || wc.wr_id != 8)
		return 3;
	if (poll_one(b.cq, &wc) || wc.status != IBV_WC_SUCCESS || wc.wr_id != 7 || wc.byte_len != 15 ||
	    strcmp(b.buf + SIDE_BUF / 2, "from the child"))
		return 4;
	if (ibv_destroy_qp(aq) || ibv_destroy_qp(bq))
		return 5;
	side_close(&a);
	side_close(&b);
	return 0;
}

// child_cm: rdma_cm in a fresh process: an event channel, an ID, an address resolved.
static int child_cm(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return 2;
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return 3;
	struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
	inet_pton(AF_INET, "10.10.0.1", &src.sin_addr);
	inet_pton(AF_INET, "10.10.0.2", &dst.sin_addr);
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000))
		return 4;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	if (poll(&p, 1, 5000) != 1)
		return 5;
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return 6;
	int ok = e->event == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs &&
		 !strcmp(ibv_get_device_name(id->verbs->device), "pib_0");
	rdma_ack_cm_event(e);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return ok ? 0 : 7;
}

// in_child runs f in a child and returns its exit status (-1 if it died of a signal).
static int in_child(int (*f)(void))
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(f());
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static struct side *parent_a;

// child_parents_objects: the parent's objects in the child fail cleanly (no crash, no hang).
static int child_parents_objects(void)
{
	struct ibv_wc wc;
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(parent_a->pd, parent_a->buf, 64, IBV_ACCESS_LOCAL_WRITE);
	if (mr)
		return 2;
	if (ibv_poll_cq(parent_a->cq, 1, &wc) > 0)
		return 3;
	return 0;
}

// child_forks_again: a grandchild of a process that used verbs, itself forked from a child
// that used verbs, has verbs too.
static int child_forks_again(void)
{
	if (child_rc())
		return 2;
	return in_child(child_rc) ? 3 : 0;
}

void conform_fork(struct side *a, struct side *b)
{
	int st = in_child(child_rc);
	T("fork_child_rc", st == 0, "child after verbs: RC between its own objects: status %d", st);
	st = in_child(child_cm);
	T("fork_child_rdma_cm", st == 0, "child after verbs: rdma_cm address resolution: status %d", st);
	parent_a = a;
	st = in_child(child_parents_objects);
	T("fork_child_parents_objects", st == 0, "child using the parent's PD and CQ: status %d", st);
	st = in_child(child_forks_again);
	T("fork_grandchild", st == 0, "a child's child after both used verbs: status %d", st);

	// The parent's objects still work.
	struct ibv_qp *aq, *bq;
	rc_pair(a, b, &aq, &bq);
	strcpy(a->buf, "parent");
	struct ibv_wc wc;
	int ok = post_recv1(b, bq, 1, 64) == 0 && post_rdma(a, aq, IBV_WR_SEND, 2, 0, 0, 7) == 0 && poll_one(a->cq, &wc) == 0 &&
		 wc.status == IBV_WC_SUCCESS && poll_one(b->cq, &wc) == 0 && wc.status == IBV_WC_SUCCESS &&
		 !strcmp(b->buf + SIDE_BUF / 2, "parent");
	T("fork_parent_goes_on", ok, "the parent's SEND after its children: %s", ibv_wc_status_str(wc.status));
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
}
