// Shared between the C side (../libibverbs: pib.c, misc.c) and the Go side (verbs.go) of
// pibgw's libibverbs.so.1. The verbs objects a program sees are C memory allocated here; each
// carries the handle of its Go object (h), never a Go pointer.
#ifndef PIB_H
#define PIB_H

#include <stdint.h>
#include <stddef.h>
#include <infiniband/verbs.h>

#define PIB_MAX_SGE 32

struct pib_device {
	struct ibv_device dev;
	int index;
	uint64_t guid; // host order
};

struct pib_context {
	struct verbs_context vctx; // ends with struct ibv_context, as verbs.h requires
	uint64_t h;
};

struct pib_pd {
	struct ibv_pd pd;
	uint64_t h;
};

struct pib_mr {
	struct ibv_mr mr;
	uint64_t h;
};

struct pib_xrcd {
	struct ibv_xrcd xrcd;
	uint64_t h;
};

struct pib_mw {
	struct ibv_mw mw;
	uint64_t h;
};

struct pib_channel {
	struct ibv_comp_channel ch;
	uint64_t h;
};

struct pib_cq {
	struct ibv_cq_ex cq; // ibv_cq is its prefix
	uint64_t h;
	// ibv_cq_ex polling (start_poll/next_poll/end_poll): the current completion
	struct ibv_wc wc;
	// completion timestamps (../ibverbs/clock.go): the device clock of the current
	// completion, and the clock's zero in Unix nanoseconds
	int stamps;
	uint64_t ts;
	uint64_t wall_base;
};

// The device clock counts nanoseconds: hca_core_clock in kHz (hca.CoreClockKHz).
#define PIB_CORE_CLOCK_KHZ 1000000

struct pib_srq {
	struct ibv_srq srq;
	uint64_t h;
};

struct pib_ah {
	struct ibv_ah ah;
	uint64_t h;
};

// pib_swr is an ibv_send_wr flattened for Go (no unions, no list).
struct pib_swr {
	uint64_t wr_id;
	struct ibv_sge *sg;
	int num_sge;
	uint32_t opcode;
	uint32_t flags;
	uint32_t imm; // host order (immediate data), or the R_Key to invalidate
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t pad;
	uint64_t compare_add;
	uint64_t swap;
	uint64_t ah; // Go handle of the AH (UD)
	// IBV_WR_BIND_MW: the window and region (Go handles), the window's new R_Key in
	// rkey, the bind address in remote_addr, and these.
	uint64_t mw, mr;
	uint64_t bind_length;
	uint32_t bind_access;
	uint32_t remote_srqn; // XRC send QPs: wr.qp_type.xrc.remote_srqn
};

// The ibv_wr_* builder of a QP: WRs collect between ibv_wr_start and ibv_wr_complete.
struct pib_wrb {
	struct pib_swr *wrs;
	struct ibv_sge *sges; // PIB_MAX_SGE per WR
	size_t *inl;          // per WR: offset+1 into arena of inline data, 0 if none
	int n, cap;
	char *arena;
	size_t alen, acap;
	int err;
};

struct pib_qp {
	struct ibv_qp_ex qpx; // ibv_qp is its prefix
	uint64_t h;
	struct pib_wrb b;
};

// pib_qp_create carries ibv_qp_init_attr(_ex) to Go.
struct pib_qp_create {
	uint64_t pd, send_cq, recv_cq, srq;
	uint64_t xrcd; // XRC receive QPs: the domain (no PD, no CQs)
	struct ibv_qp_cap cap; // in: requested; out: actual
	uint32_t qp_type;
	int sq_sig_all;
	uint32_t qp_num; // out
	uint64_t cmid;   // rdma_create_qp: the Go handle of the rdma_cm ID, else 0
};

// pib_async is an async event for ibv_get_async_event.
struct pib_async {
	uint32_t type;
	uint32_t port;
	void *element; // the C object (ibv_qp, ibv_cq, ibv_srq), or NULL
};

// ../libibverbs/lazy.c: the Go library's function name, the library loaded at the first
// call; whether this process has loaded it (so runs its runtime's threads).
void *pib_go_sym(const char *name);
int pib_go_loaded(void);
// The forks with the Go side loaded that this process descends from (lazy.c); the generated
// wrappers' pib_go_forget drops the functions they found.
unsigned pib_go_generation(void);
void pib_go_forget(void);

#endif
