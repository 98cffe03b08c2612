// mr.c: memory regions and windows, call by call against the man pages ibv_reg_mr(3),
// ibv_rereg_mr(3), ibv_alloc_mw(3), ibv_bind_mw(3) and what rdma-core (libibverbs,
// providers/rxe) and the kernel (uverbs_cmd.c, ib_check_mr_access, sw/rxe) do. Where rxe and
// mlx5 differ, rxe is followed unless a comment says otherwise.
#include "conform.h"

#include <sys/mman.h>
#include <unistd.h>

#define ACC_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

// drain empties cq (completions a failed check left behind).
static void drain(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
}

// rdma posts one signaled op of len bytes from a's buffer at off and waits for it; the
// completion's status, or -1 when the post or the poll failed.
static int rdma_at(struct side *a, struct ibv_qp *qp, enum ibv_wr_opcode op, int off, uint64_t va, uint32_t rkey, int len,
		   struct ibv_wc *wc)
{
	struct ibv_sge s = {.addr = (uintptr_t)a->buf + off, .length = len, .lkey = a->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w.wr.atomic.remote_addr = va;
		w.wr.atomic.rkey = rkey;
		w.wr.atomic.compare_add = op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 5 : 0;
		w.wr.atomic.swap = 77;
	} else {
		w.wr.rdma.remote_addr = va;
		w.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(qp, &w, &bad))
		return -1;
	if (poll_one(a->cq, wc))
		return -1;
	return wc->status;
}

static int rdma(struct side *a, struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t va, uint32_t rkey, int len)
{
	struct ibv_wc wc;
	return rdma_at(a, qp, op, 0, va, rkey, len, &wc);
}

static void pair_close(struct ibv_qp *aq, struct ibv_qp *bq)
{
	ibv_destroy_qp(aq);
	ibv_destroy_qp(bq);
}

// reg_errno registers len bytes at p with access and returns 0 if it worked (the region
// deregistered again), else errno.
static int reg_errno(struct ibv_pd *pd, void *p, size_t len, int access)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, p, len, access);
	if (!mr)
		return errno ? errno : -1;
	ibv_dereg_mr(mr);
	return 0;
}

static void reg_checks(struct side *a)
{
	size_t len = 16384;
	char *buf = aligned_alloc(4096, len);
	memset(buf, 0, len);

	struct ibv_mr *mr = ibv_reg_mr(a->pd, buf + 100, 1000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	T("mr_reg_fields", mr && mr->context == a->ctx && mr->pd == a->pd && mr->addr == buf + 100 && mr->length == 1000,
	  "mr %p: context %p pd %p addr %p length %zu", (void *)mr, mr ? (void *)mr->context : NULL,
	  mr ? (void *)mr->pd : NULL, mr ? mr->addr : NULL, mr ? mr->length : 0);
	// rxe and mlx5 give a region one key for both (rxe_mr_init: lkey = rkey).
	T("mr_reg_lkey_is_rkey", mr && mr->lkey == mr->rkey, "lkey %#x rkey %#x", mr ? mr->lkey : 0, mr ? mr->rkey : 0);
	struct ibv_mr *mr2 = ibv_reg_mr(a->pd, buf, 1000, IBV_ACCESS_LOCAL_WRITE);
	T("mr_reg_keys_distinct", mr && mr2 && mr2->lkey != mr->lkey, "two regions' keys %#x %#x", mr ? mr->lkey : 0,
	  mr2 ? mr2->lkey : 0);
	errno = 0;
	T("mr_dealloc_pd_busy", ibv_dealloc_pd(a->pd) == EBUSY, "dealloc_pd with regions: %m");
	T("mr_dereg", (!mr || ibv_dereg_mr(mr) == 0) && (!mr2 || ibv_dereg_mr(mr2) == 0), "dereg_mr: %m");

	// ib_check_mr_access: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (EINVAL).
	int e = reg_errno(a->pd, buf, len, IBV_ACCESS_REMOTE_WRITE);
	T("mr_reg_remote_write_needs_local_write", e == EINVAL, "errno %d", e);
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
	T("mr_reg_remote_atomic_needs_local_write", e == EINVAL, "errno %d", e);
	e = reg_errno(a->pd, buf, len, 0);
	T("mr_reg_no_access", e == 0, "errno %d", e);
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_REMOTE_READ);
	T("mr_reg_remote_read_alone", e == 0, "errno %d", e);
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_MW_BIND);
	T("mr_reg_mw_bind_alone", e == 0, "errno %d", e);
	// A bit the kernel does not know (outside the optional range): EINVAL.
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | (1 << 12));
	T("mr_reg_unknown_access", e == EINVAL, "errno %d", e);
	// IB_ACCESS_FLUSH_GLOBAL (1 << 8) on a device without IB_DEVICE_FLUSH_GLOBAL:
	// ib_check_mr_access says EOPNOTSUPP.
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | (1 << 8));
	T("mr_reg_flush_unsupported", e == EOPNOTSUPP, "errno %d", e);
	// ZERO_BASED is for windows: rxe_reg_user_mr refuses it (EOPNOTSUPP).
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
	T("mr_reg_zero_based_unsupported", e == EOPNOTSUPP, "errno %d", e);
	// Optional bits may be ignored (ibv_reg_mr(3)).
	e = reg_errno(a->pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	T("mr_reg_optional_ignored", e == 0, "errno %d", e);
	e = reg_errno(a->pd, buf, len, ACC_ALL | IBV_ACCESS_ON_DEMAND);
	T("mr_reg_on_demand", e == 0, "errno %d", e);

	// Memory the kernel cannot pin: EFAULT; read-only memory only without write access.
	long pg = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 2 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MUST(m != MAP_FAILED, "mmap: %m");
	e = reg_errno(a->pd, m, pg, IBV_ACCESS_REMOTE_READ);
	T("mr_reg_readonly_memory_read", e == 0, "errno %d", e);
	e = reg_errno(a->pd, m, pg, IBV_ACCESS_LOCAL_WRITE);
	T("mr_reg_readonly_memory_write_EFAULT", e == EFAULT, "errno %d", e);
	munmap(m + pg, pg);
	e = reg_errno(a->pd, m, 2 * pg, 0);
	T("mr_reg_unmapped_EFAULT", e == EFAULT, "errno %d", e);
	munmap(m, pg);
	free(buf);
}

// access_checks: remote access is what the region and the QP allow, with the region's key,
// inside it (IBA 10.6.3.1, 9.7.5.2.4: REM_ACCESS_ERR otherwise).
static void access_checks(struct side *a, struct side *b)
{
	struct ibv_qp *aq, *bq;
	uint64_t va = (uintptr_t)b->buf;
	rc_pair(a, b, &aq, &bq);
	memcpy(a->buf, "conform-mr", 10);
	int st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + 64, b->mr->rkey, 10);
	T("mr_remote_write", st == IBV_WC_SUCCESS && !memcmp(b->buf + 64, "conform-mr", 10), "status %d", st);
	st = rdma(a, aq, IBV_WR_RDMA_READ, va + 64, b->mr->rkey, 10);
	T("mr_remote_read", st == IBV_WC_SUCCESS, "status %d", st);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + SIDE_BUF - 4, b->mr->rkey, 10);
	T("mr_remote_out_of_bounds", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	pair_close(aq, bq);

	rc_pair(a, b, &aq, &bq);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, va, b->mr->rkey ^ 0x80, 10);
	T("mr_remote_bad_rkey", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	pair_close(aq, bq);

	// Two bad WRITEs in a row (issue 43 item 12): the first completes with the
	// responder's NAK, REM_ACCESS_ERR; the QP is then in error and the second is
	// flushed (IBA 10.8.3.3, 11.6.2), whichever way the two were posted.
	for (int list = 0; list < 2; list++) {
		rc_pair(a, b, &aq, &bq);
		struct ibv_sge s = {.addr = (uintptr_t)a->buf, .length = 10, .lkey = a->mr->lkey};
		struct ibv_send_wr w2 = {.wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = va + SIDE_BUF - 4, .rkey = b->mr->rkey}};
		struct ibv_send_wr w1 = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED, .next = list ? &w2 : NULL,
					 .wr.rdma = {.remote_addr = va, .rkey = b->mr->rkey ^ 0x80}};
		struct ibv_send_wr *bad;
		int posted = ibv_post_send(aq, &w1, &bad) == 0 && (list || ibv_post_send(aq, &w2, &bad) == 0);
		struct ibv_wc c1 = {0}, c2 = {0};
		int got = posted && poll_one(a->cq, &c1) == 0 && poll_one(a->cq, &c2) == 0;
		T(list ? "mr_remote_errors_in_order_list" : "mr_remote_errors_in_order",
		  got && c1.wr_id == 1 && c1.status == IBV_WC_REM_ACCESS_ERR && c2.wr_id == 2 && c2.status == IBV_WC_WR_FLUSH_ERR,
		  "posted %d, polled %d: wr %llu status %d, wr %llu status %d", posted, got, (unsigned long long)c1.wr_id,
		  c1.status, (unsigned long long)c2.wr_id, c2.status);
		pair_close(aq, bq);
		drain(a->cq);
		drain(b->cq);
	}

	// A region without REMOTE_READ refuses a READ.
	struct ibv_mr *wo = ibv_reg_mr(b->pd, b->buf, SIDE_BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST(wo, "reg_mr: %m");
	rc_pair(a, b, &aq, &bq);
	st = rdma(a, aq, IBV_WR_RDMA_READ, va, wo->rkey, 8);
	T("mr_remote_read_without_access", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	pair_close(aq, bq);
	ibv_dereg_mr(wo);

	// ibv_reg_mr_iova: the region is addressed by its I/O virtual address, remotely and
	// in local SGEs; the address keeps the buffer's offset in its page (ib_uverbs_reg_mr:
	// EINVAL otherwise).
	uint64_t iova = 0x500000000000ull + ((uintptr_t)b->buf & 0xfff);
	struct ibv_mr *im = ibv_reg_mr_iova(b->pd, b->buf, SIDE_BUF, iova, ACC_ALL);
	T("mr_reg_iova", im && im->addr == b->buf && im->length == SIDE_BUF, "reg_mr_iova: %m");
	errno = 0;
	struct ibv_mr *bad_iova = ibv_reg_mr_iova(b->pd, b->buf, SIDE_BUF, iova + 8, ACC_ALL);
	T("mr_reg_iova_page_offset", !bad_iova && errno == EINVAL, "%p errno %d", (void *)bad_iova, errno);
	if (bad_iova)
		ibv_dereg_mr(bad_iova);
	if (im) {
		rc_pair(a, b, &aq, &bq);
		memcpy(a->buf, "iova-addressed", 14);
		st = rdma(a, aq, IBV_WR_RDMA_WRITE, iova + 300, im->rkey, 14);
		T("mr_iova_remote_write", st == IBV_WC_SUCCESS && !memcmp(b->buf + 300, "iova-addressed", 14), "status %d", st);
		st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + 300, im->rkey, 14);
		T("mr_iova_buffer_address_refused", st == IBV_WC_REM_ACCESS_ERR, "WRITE to the buffer's address: status %d", st);
		pair_close(aq, bq);
		ibv_dereg_mr(im);
	}

	// A bad L_Key is the local side's error.
	rc_pair(a, b, &aq, &bq);
	struct ibv_sge s = {.addr = (uintptr_t)a->buf, .length = 8, .lkey = a->mr->lkey ^ 0x80};
	struct ibv_send_wr w = {.wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = va, .rkey = b->mr->rkey}},
			   *bad;
	struct ibv_wc wc = {0};
	int ok = ibv_post_send(aq, &w, &bad) == 0 && poll_one(a->cq, &wc) == 0;
	T("mr_local_bad_lkey", ok && wc.status == IBV_WC_LOC_PROT_ERR, "status %d", ok ? (int)wc.status : -1);
	pair_close(aq, bq);
	drain(a->cq);
	drain(b->cq);
}

// odp_checks (issue 41 item 2): regions registered with IBV_ACCESS_ON_DEMAND, and QPs whose
// qp_access_flags carry it (uverbs passes the bits through; rxe keeps them, providers use
// the remote ones), carry RC READ, WRITE and atomics.
static void odp_checks(struct side *a, struct side *b)
{
	int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *bo = ibv_reg_mr(b->pd, b->buf, SIDE_BUF, ACC_ALL | IBV_ACCESS_ON_DEMAND);
	MUST(bo, "reg_mr ODP: %m");
	struct ibv_qp *aq = rc_qp(a, NULL), *bq = rc_qp(b, NULL);
	int r1 = qp_init(aq, acc | IBV_ACCESS_ON_DEMAND), r2 = qp_init(bq, acc | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	T("mr_qp_access_on_demand", r1 == 0 && r2 == 0, "modify_qp INIT with ON_DEMAND: %d %d", r1, r2);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int r = ibv_query_qp(bq, &qa, IBV_QP_ACCESS_FLAGS, &qi);
	T("mr_qp_access_flags_kept", r == 0 && qa.qp_access_flags == (unsigned)(acc | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE),
	  "query_qp: %d, qp_access_flags %#x", r, qa.qp_access_flags);
	if (r1 || r2) {
		MUST(qp_init(aq, acc) == 0 && qp_init(bq, acc) == 0, "INIT: %m");
	}
	MUST(qp_rtr(aq, b->lid, bq->qp_num) == 0 && qp_rtr(bq, a->lid, aq->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(aq) == 0 && qp_rts(bq) == 0, "RTS: %m");
	uint64_t va = (uintptr_t)b->buf + 256;
	memcpy(a->buf, "on-demand", 9);
	int st = rdma(a, aq, IBV_WR_RDMA_WRITE, va, bo->rkey, 9);
	T("mr_odp_write", st == IBV_WC_SUCCESS && !memcmp(b->buf + 256, "on-demand", 9), "status %d", st);
	st = rdma(a, aq, IBV_WR_RDMA_READ, va, bo->rkey, 9);
	T("mr_odp_read", st == IBV_WC_SUCCESS, "status %d", st);
	uint64_t *t = (uint64_t *)(b->buf + 512);
	*t = 0;
	struct ibv_wc wc = {0};
	st = rdma_at(a, aq, IBV_WR_ATOMIC_CMP_AND_SWP, 1024, (uintptr_t)t, bo->rkey, 8, &wc);
	T("mr_odp_cmp_swap", st == IBV_WC_SUCCESS && *t == 77 && wc.opcode == IBV_WC_COMP_SWAP, "status %d, target %llu", st,
	  (unsigned long long)*t);
	// Issue 41 item 7: an atomic's completion reports its 8 bytes (rxe: wqe->dma.length).
	T("mr_atomic_byte_len", st == IBV_WC_SUCCESS && wc.byte_len == 8, "byte_len %u", wc.byte_len);
	st = rdma_at(a, aq, IBV_WR_ATOMIC_FETCH_AND_ADD, 1024, (uintptr_t)t, bo->rkey, 8, &wc);
	T("mr_odp_fetch_add", st == IBV_WC_SUCCESS && *t == 82 && *(uint64_t *)(a->buf + 1024) == 77 && wc.byte_len == 8,
	  "status %d, target %llu, byte_len %u", st, (unsigned long long)*t, wc.byte_len);
	struct ibv_sge sg = {.addr = (uintptr_t)b->buf, .length = 64, .lkey = bo->lkey};
	r = ibv_advise_mr(b->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sg, 1);
	T("mr_advise_mr_odp", r == 0, "advise_mr: %d", r);
	sg.lkey = b->mr->lkey;
	r = ibv_advise_mr(b->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1);
	T("mr_advise_mr_not_odp", r == EINVAL, "advise_mr of a pinned region: %d", r);
	pair_close(aq, bq);
	ibv_dereg_mr(bo);
	drain(a->cq);
}

// rereg_checks: ibv_rereg_mr keeps the keys (issue 41 item 3: rxe_rereg_user_mr changes the
// region in place, mlx5 updates its mkey); the changes take effect for the peer.
static void rereg_checks(struct side *a, struct side *b)
{
	size_t len = 8192;
	char *buf = aligned_alloc(4096, len), *buf2 = aligned_alloc(4096, len);
	memset(buf, 0, len);
	memset(buf2, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(b->pd, buf, len, ACC_ALL);
	MUST(mr, "reg_mr: %m");
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	struct ibv_qp *aq, *bq;

	int r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	T("mr_rereg_access_keeps_keys", r == 0 && mr->lkey == lkey && mr->rkey == rkey, "rereg: %d, keys %#x/%#x were %#x/%#x", r,
	  mr->lkey, mr->rkey, lkey, rkey);
	rc_pair(a, b, &aq, &bq);
	int st = rdma(a, aq, IBV_WR_RDMA_READ, (uintptr_t)buf, rkey, 8);
	T("mr_rereg_access_old_rkey_reads", st == IBV_WC_SUCCESS, "status %d", st);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, (uintptr_t)buf, rkey, 8);
	T("mr_rereg_access_takes_effect", st == IBV_WC_REM_ACCESS_ERR, "WRITE after REMOTE_WRITE was taken: status %d", st);
	pair_close(aq, bq);

	struct ibv_pd *pd2 = ibv_alloc_pd(b->ctx);
	MUST(pd2, "alloc_pd: %m");
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0, ACC_ALL);
	T("mr_rereg_pd_keeps_keys", r == 0 && mr->pd == pd2 && mr->lkey == lkey && mr->rkey == rkey,
	  "rereg: %d, pd %p (want %p), keys %#x/%#x", r, (void *)mr->pd, (void *)pd2, mr->lkey, mr->rkey);
	errno = 0;
	T("mr_rereg_pd_holds_new_pd", ibv_dealloc_pd(pd2) == EBUSY, "dealloc of the region's new PD: %m");
	rc_pair(a, b, &aq, &bq);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, (uintptr_t)buf, rkey, 8);
	T("mr_rereg_pd_takes_effect", st == IBV_WC_REM_ACCESS_ERR, "WRITE from a QP of the old PD: status %d", st);
	pair_close(aq, bq);
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b->pd, NULL, 0, 0);
	T("mr_rereg_pd_back", r == 0 && mr->pd == b->pd && ibv_dealloc_pd(pd2) == 0, "rereg back: %d", r);

	// CHANGE_TRANSLATION: rxe refuses it (EOPNOTSUPP); mlx5 takes it and keeps the mkey when
	// it can update it in place. pibgw follows mlx5 here.
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, len, 0);
	T("mr_rereg_translation", r == 0 && mr->addr == buf2 && mr->length == len && mr->rkey == rkey,
	  "rereg: %d, addr %p length %zu rkey %#x", r, mr->addr, mr->length, mr->rkey);
	rc_pair(a, b, &aq, &bq);
	memcpy(a->buf, "moved", 5);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, (uintptr_t)buf2 + 8, rkey, 5);
	T("mr_rereg_translation_takes_effect", st == IBV_WC_SUCCESS && !memcmp(buf2 + 8, "moved", 5) && buf[8] == 0,
	  "status %d", st);
	pair_close(aq, bq);

	// A new translation the kernel cannot pin: ERR_CMD with EFAULT, the region unchanged.
	char *un = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MUST(un != MAP_FAILED, "mmap: %m");
	munmap(un, 8192);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, un, 8192, 0);
	T("mr_rereg_translation_EFAULT", r == IBV_REREG_MR_ERR_CMD && errno == EFAULT && mr->addr == buf2, "%d, errno %d", r,
	  errno);

	// What libibverbs' ibv_rereg_mr refuses itself: IBV_REREG_MR_ERR_INPUT, EINVAL.
	errno = 0;
	r = ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0);
	T("mr_rereg_unknown_flag", r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "%d, errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, len, 0);
	T("mr_rereg_translation_no_addr", r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "%d, errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b->pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	T("mr_rereg_access_without_flag", r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "%d, errno %d", r, errno);
	// What the kernel refuses: IBV_REREG_MR_ERR_CMD.
	errno = 0;
	r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
	T("mr_rereg_no_flags", r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "%d, errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
	T("mr_rereg_bad_access", r == IBV_REREG_MR_ERR_CMD && errno == EINVAL && mr->rkey == rkey, "%d, errno %d", r, errno);
	T("mr_rereg_dereg", ibv_dereg_mr(mr) == 0, "dereg: %m");
	free(buf);
	free(buf2);
}

static int post_bind_wr(struct ibv_qp *qp, struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, uint64_t addr,
			uint64_t len, int acc)
{
	struct ibv_send_wr w = {.wr_id = 11, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
				.bind_mw = {.mw = mw, .rkey = rkey, .bind_info = {.mr = mr, .addr = addr, .length = len,
										    .mw_access_flags = acc}}},
			   *bad;
	return ibv_post_send(qp, &w, &bad);
}

// mw_checks: ibv_alloc_mw(3), ibv_bind_mw(3), IBV_WR_BIND_MW and ibv_wr_bind_mw.
static void mw_checks(struct side *a, struct side *b)
{
	struct ibv_mr *bmr = ibv_reg_mr(b->pd, b->buf, SIDE_BUF, ACC_ALL | IBV_ACCESS_MW_BIND);
	MUST(bmr, "reg_mr MW_BIND: %m");
	struct ibv_mw *w1 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1), *w2 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	T("mr_alloc_mw_type1", w1 && w1->type == IBV_MW_TYPE_1 && w1->pd == b->pd && w1->context == b->ctx, "alloc_mw: %m");
	T("mr_alloc_mw_type2", w2 && w2->type == IBV_MW_TYPE_2 && w2->pd == b->pd && (!w1 || w2->rkey != w1->rkey),
	  "alloc_mw: %m");
	MUST(w1 && w2, "alloc_mw");
	errno = 0;
	struct ibv_mw *w3 = ibv_alloc_mw(b->pd, (enum ibv_mw_type)3);
	T("mr_alloc_mw_bad_type", !w3 && errno == EINVAL, "alloc_mw type 3: %p errno %d", (void *)w3, errno);

	struct ibv_qp *aq, *bq;
	rc_pair(a, b, &aq, &bq);
	uint64_t va = (uintptr_t)b->buf + 2048;
	// Issue 41 item 1: LOCAL_WRITE in a window's access means nothing and is taken (rxe's
	// rxe_check_bind_mw checks no such bit; mlx5 uses the remote ones).
	uint32_t before = w1->rkey;
	struct ibv_mw_bind mb = {.wr_id = 21, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = {.mr = bmr, .addr = va, .length = 1024,
					       .mw_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
								  IBV_ACCESS_REMOTE_READ}};
	int r = ibv_bind_mw(bq, w1, &mb);
	T("mr_bind_mw_local_write", r == 0, "ibv_bind_mw with LOCAL_WRITE: %d", r);
	T("mr_bind_mw_new_rkey", r == 0 && w1->rkey == ibv_inc_rkey(before), "rkey %#x, was %#x", w1->rkey, before);
	struct ibv_wc wc = {0};
	int got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_bind_mw_completion", got && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 21,
	  "status %d opcode %d", got ? (int)wc.status : -1, wc.opcode);
	memcpy(a->buf, "window", 6);
	int st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + 10, w1->rkey, 6);
	T("mr_bind_mw_write_through", st == IBV_WC_SUCCESS && !memcmp(b->buf + 2048 + 10, "window", 6), "status %d", st);

	// Refused at the call: a zero-based type 1 window (rxe_bind_mw), a type 2 window and a
	// region of another PD (verbs.h's ibv_bind_mw), an address without a region.
	mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED;
	r = ibv_bind_mw(bq, w1, &mb);
	T("mr_bind_mw_zero_based", r == EINVAL, "ibv_bind_mw zero-based: %d", r);
	mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	r = ibv_bind_mw(bq, w2, &mb);
	T("mr_bind_mw_type2", r == EINVAL, "ibv_bind_mw of a type 2 window: %d", r);
	struct ibv_mr *amr = a->mr;
	mb.bind_info.mr = amr;
	r = ibv_bind_mw(bq, w1, &mb);
	T("mr_bind_mw_other_pd", r == EPERM, "ibv_bind_mw with another PD's region: %d", r);
	mb.bind_info.mr = NULL;
	r = ibv_bind_mw(bq, w1, &mb);
	T("mr_bind_mw_no_region", r == EINVAL, "ibv_bind_mw with a length and no region: %d", r);

	// rxe_dereg_mr: a region with windows bound is not deregistered (EINVAL; IBA 10.6.7.2.6).
	r = ibv_dereg_mr(bmr);
	T("mr_dereg_with_window", r == EINVAL, "dereg_mr with a window bound: %d", r);

	// ibv_rereg_mr of a region with a window bound: neither rxe nor mlx5 refuses it, and the
	// window stays (here over the region's keys, which stay too).
	r = ibv_rereg_mr(bmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, ACC_ALL | IBV_ACCESS_MW_BIND);
	T("mr_rereg_with_window", r == 0, "rereg_mr with a window bound: %d, errno %d", r, errno);
	memcpy(a->buf, "again!", 6);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + 20, w1->rkey, 6);
	T("mr_rereg_window_stays", st == IBV_WC_SUCCESS && !memcmp(b->buf + 2048 + 20, "again!", 6), "status %d", st);

	// A type 1 window is unbound by a zero-length bind; its R_Key then reaches nothing.
	mb.bind_info = (struct ibv_mw_bind_info){0};
	r = ibv_bind_mw(bq, w1, &mb);
	got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_unbind_mw", got && wc.status == IBV_WC_SUCCESS, "unbind: %d status %d", r, got ? (int)wc.status : -1);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + 10, w1->rkey, 6);
	T("mr_unbound_mw_rkey", st == IBV_WC_REM_ACCESS_ERR, "status %d", st);
	pair_close(aq, bq);
	drain(b->cq);

	// Type 2 through IBV_WR_BIND_MW, LOCAL_WRITE included (issue 41 item 1).
	rc_pair(a, b, &aq, &bq);
	uint32_t k2 = ibv_inc_rkey(w2->rkey);
	r = post_bind_wr(bq, w2, k2, bmr, va, 512, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_bind_wr_local_write", got && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	  "post %d, status %d", r, got ? (int)wc.status : -1);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, va, k2, 6);
	T("mr_bind_wr_write_through", st == IBV_WC_SUCCESS, "status %d", st);
	// A type 1 window bound by an IBV_WR_BIND_MW: rxe's ibv_bind_mw posts this very WR, and
	// mlx5's post_send binds either type.
	uint32_t k1 = ibv_inc_rkey(w1->rkey);
	r = post_bind_wr(bq, w1, k1, bmr, va + 1024, 64, IBV_ACCESS_REMOTE_WRITE);
	got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_bind_wr_type1", got && wc.status == IBV_WC_SUCCESS, "post %d, status %d", r, got ? (int)wc.status : -1);
	st = rdma(a, aq, IBV_WR_RDMA_WRITE, va + 1024, k1, 6);
	T("mr_bind_wr_type1_write_through", st == IBV_WC_SUCCESS, "status %d", st);
	st = rdma(a, aq, IBV_WR_RDMA_READ, va, k2, 6);
	T("mr_bind_wr_window_access", st == IBV_WC_REM_ACCESS_ERR, "READ through a write-only window: status %d", st);
	pair_close(aq, bq);
	drain(b->cq);

	// An access bit beyond RXE_ACCESS_SUPPORTED_MW (HUGETLB) fails the bind (rxe_bind_mw).
	rc_pair(a, b, &aq, &bq);
	struct ibv_mw *w6 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	MUST(w6, "alloc_mw: %m");
	r = post_bind_wr(bq, w6, ibv_inc_rkey(w6->rkey), bmr, va, 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_HUGETLB);
	got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_bind_unsupported_access", got && wc.status == IBV_WC_MW_BIND_ERR, "post %d, status %d", r, got ? (int)wc.status : -1);
	pair_close(aq, bq);
	drain(b->cq);

	// A region without MW_BIND cannot take a window: the bind completes in error.
	rc_pair(a, b, &aq, &bq);
	struct ibv_mw *w4 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	MUST(w4, "alloc_mw: %m");
	r = post_bind_wr(bq, w4, ibv_inc_rkey(w4->rkey), b->mr, va, 64, IBV_ACCESS_REMOTE_READ);
	got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_bind_without_mw_bind", got && wc.status == IBV_WC_MW_BIND_ERR, "post %d, status %d", r,
	  got ? (int)wc.status : -1);
	pair_close(aq, bq);
	drain(b->cq);

	// ibv_wr_bind_mw on an extended QP, LOCAL_WRITE included.
	struct ibv_qp_init_attr_ex ax = {
		.send_cq = b->cq, .recv_cq = b->cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = b->pd,
		.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *xq = ibv_create_qp_ex(b->ctx, &ax);
	MUST(xq, "create_qp_ex: %m");
	aq = rc_qp(a, NULL);
	int acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	MUST(qp_init(aq, acc) == 0 && qp_init(xq, acc) == 0, "INIT: %m");
	MUST(qp_rtr(aq, b->lid, xq->qp_num) == 0 && qp_rtr(xq, a->lid, aq->qp_num) == 0, "RTR: %m");
	MUST(qp_rts(aq) == 0 && qp_rts(xq) == 0, "RTS: %m");
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(xq);
	struct ibv_mw *w5 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	MUST(x && w5, "qp_ex, alloc_mw: %m");
	uint32_t k5 = ibv_inc_rkey(w5->rkey);
	struct ibv_mw_bind_info bi = {.mr = bmr, .addr = va, .length = 256,
				      .mw_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ};
	ibv_wr_start(x);
	x->wr_id = 31;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, w5, k5, &bi);
	r = ibv_wr_complete(x);
	got = r == 0 && poll_one(b->cq, &wc) == 0;
	T("mr_wr_bind_mw_local_write", got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 31, "complete %d, status %d", r,
	  got ? (int)wc.status : -1);
	st = rdma(a, aq, IBV_WR_RDMA_READ, va, k5, 8);
	T("mr_wr_bind_mw_read_through", st == IBV_WC_SUCCESS, "status %d", st);
	pair_close(aq, xq);
	drain(a->cq);
	drain(b->cq);

	T("mr_dealloc_mw", ibv_dealloc_mw(w1) == 0 && ibv_dealloc_mw(w2) == 0 && ibv_dealloc_mw(w4) == 0 &&
				   ibv_dealloc_mw(w5) == 0 && ibv_dealloc_mw(w6) == 0,
	  "dealloc_mw: %m");
	T("mr_dereg_after_windows", ibv_dereg_mr(bmr) == 0, "dereg_mr: %m");
}

void conform_mr(struct side *a, struct side *b)
{
	reg_checks(a);
	access_checks(a, b);
	odp_checks(a, b);
	rereg_checks(a, b);
	mw_checks(a, b);
}
