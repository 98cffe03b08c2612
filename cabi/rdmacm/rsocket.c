// rsockets for pibgw's librdmacm.so.1: the stream sockets of rdma-core's <rdma/rsocket.h>
// (rsocket, rbind, rlisten, raccept, rconnect, rsend, rrecv, rpoll, …) over the rdma_cm
// API in cma.c and pibgw's libibverbs, so that rstream, rcopy and Debian's librspreload.so
// (which runs an unmodified sockets program over rsockets) work on the fabric.
//
// The wire protocol is rdma-core's (librdmacm/rsocket.c, protocol version 1), so a capture
// reads as one of theirs: the connection's private data is struct rs_conn_data (the
// receive buffer's first half and the address of a two-entry target SGL); data moves as
// RDMA WRITE with immediate into the peer's receive buffer, the immediate giving the
// operation (bits 31:29) and the length; the receiver hands out the next half of its
// buffer by an RDMA WRITE of an rs_sge into the sender's target SGL, with immediate
// RS_OP_SGL carrying the receive credits (the peer's receive sequence number it may send
// up to); RS_OP_CTRL carries shutdown and disconnect.
//
// Differences from rdma-core's, each a simplification a program cannot tell apart from a
// fast network: rconnect completes (or fails) before it returns even on a non-blocking
// rsocket; raccept on a non-blocking listener returns EAGAIN when no request waits and
// otherwise completes the accept before returning; an accepted rsocket is blocking, as
// accept(2)'s socket on Linux (rdma-core's inherits O_NONBLOCK). I/O mapping (riomap,
// riowrite) is rdma-core's too: a mapping is an RDMA WRITE with immediate RS_OP_IOMAP_SGL
// of {offset, SGE} into the peer's table (RDMA_IOMAPSIZE entries, after its target SGL),
// and riowrite an RDMA WRITE into the peer's mapped buffer. Not provided: SOCK_DGRAM
// rsockets (EOPNOTSUPP), keepalives (SO_KEEPALIVE is recorded and reported only), the
// /etc/rdma/rsocket configuration files.
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <byteswap.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <infiniband/ib.h>

#define EXPORT __attribute__((visibility("default")))

// rdma-core's defaults and limits (rsocket.c).
#define RS_OLAP_START_SIZE 2048
#define RS_MAX_TRANSFER 65536
#define RS_SNDLOWAT 2048
#define RS_QP_MIN_SIZE 16
#define RS_QP_MAX_SIZE 0xFFFE
#define RS_QP_CTRL_SIZE 4 // control messages in flight; a power of 2
#define RS_SGL_SIZE 2
#define RS_DEF_INLINE 64
#define RS_DEF_SQSIZE 384
#define RS_DEF_RQSIZE 384
#define RS_DEF_MEM (1 << 17)
#define RS_DEF_WMEM (1 << 17)

// The immediate data: bits 31:29 the operation, 28:0 its data.
enum { RS_OP_DATA, RS_OP_RSVD_DATA_MORE, RS_OP_WRITE, RS_OP_RSVD_DRA_MORE, RS_OP_SGL, RS_OP_RSVD, RS_OP_IOMAP_SGL, RS_OP_CTRL };
#define rs_msg_set(op, data) (((uint32_t)(op) << 29) | (uint32_t)(data))
#define rs_msg_op(imm) ((imm) >> 29)
#define rs_msg_data(imm) ((imm)&0x1FFFFFFF)
enum { RS_CTRL_DISCONNECT, RS_CTRL_KEEPALIVE, RS_CTRL_SHUTDOWN };

#define RS_WR_ID_FLAG_RECV (((uint64_t)1) << 63)

struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};
#define RS_MAX_CTRL_MSG (sizeof(struct rs_sge))

#define RS_CONN_FLAG_NET (1 << 0)
#define RS_CONN_FLAG_IOMAP (1 << 1)

// The connection's private data, in REQ and REP (rdma-core's struct rs_conn_data).
struct rs_conn_data {
	uint8_t version;
	uint8_t flags;
	__be16 credits;
	uint8_t reserved[3];
	uint8_t target_iomap_size;
	struct rs_sge target_sgl;
	struct rs_sge data_buf;
};

// States, ordered as rdma-core's: passive, opening, connected, disconnected.
enum {
	rs_init,
	rs_bound = 0x0001,
	rs_listening = 0x0002,
	rs_opening = 0x0004,
	rs_connected = 0x0100,
	rs_writable = 0x0200,
	rs_readable = 0x0400,
	rs_connect_rdwr = rs_connected | rs_readable | rs_writable,
	rs_connect_error = 0x0800,
	rs_disconnected = 0x1000,
	rs_error = 0x2000,
};

#define RS_OPT_SWAP_SGL (1 << 0)

struct rs_msg {
	uint32_t op;
	uint32_t data;
};

// An entry of an I/O map table: the peer's buffer for offsets [offset, offset+sge.length).
struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};

// A riomap'd buffer of ours: index is its entry in the peer's table (-1: local only).
struct iomap_mr {
	uint64_t offset;
	struct ibv_mr *mr;
	int index;
	int pending; // its entry not yet written to the peer
};

struct rsock {
	int index; // the ID's event channel's fd: a number no other descriptor has
	struct rdma_cm_id *id;
	pthread_mutex_t mu; // everything below; never held while sleeping
	int state;
	int err;
	int shut_wr; // the program shut the sending side down (SHUT_WR or SHUT_RDWR)
	int fs_flags, fd_flags;
	int opts;
	uint64_t so_opts, tcp_opts, ipv6_opts;
	int ip_tos;
	int keepalive_time;

	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	uint16_t target_iomap_size; // entries of our I/O map table (RDMA_IOMAPSIZE)

	// connected
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	int ep_ready; // create_ep finished: its receives posted, the counts set
	int armed, unack;
	int polling;         // a thread sleeps in poll(2) on the channels
	int followers;       // threads waiting on moved for it, or for another thread's progress
	pthread_cond_t moved; // broadcast when a thread took completions or events
	unsigned ctrl_seqno, ctrl_max_seqno;
	uint16_t sseq_no, sseq_comp, rseq_no, rseq_comp;
	int remote_sge;
	struct rs_sge remote_sgl; // the peer's target SGL
	struct ibv_mr *target_mr;
	volatile struct rs_sge *target_sgl; // written by the peer
	volatile struct rs_iomap *target_iomap; // after it, also written by the peer
	int target_sge;
	struct rs_sge remote_iomap; // the peer's table
	struct iomap_mr *maps;
	int nmaps, iomap_pending;
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	uint32_t rbuf_bytes_avail, rbuf_free_offset, rbuf_offset;
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t sbuf_bytes_avail;
	struct ibv_sge ssgl[2];
	struct rs_msg *rmsg;
	int rmsg_head, rmsg_tail;
	int sqe_avail;
};

static int fail(int err)
{
	errno = err;
	return -1;
}

// ---- the index: descriptor → rsocket -------------------------------------------------

#define IDX_CHUNK 1024
#define IDX_CHUNKS 1024
static struct rsock **idx[IDX_CHUNKS];
static pthread_mutex_t idx_mu = PTHREAD_MUTEX_INITIALIZER;

static struct rsock *lookup(int fd)
{
	if (fd < 0 || fd >= IDX_CHUNK * IDX_CHUNKS)
		return NULL;
	struct rsock **c = __atomic_load_n(&idx[fd / IDX_CHUNK], __ATOMIC_ACQUIRE);
	return c ? __atomic_load_n(&c[fd % IDX_CHUNK], __ATOMIC_ACQUIRE) : NULL;
}

static int insert(struct rsock *rs, int fd)
{
	if (fd < 0 || fd >= IDX_CHUNK * IDX_CHUNKS)
		return fail(EMFILE);
	pthread_mutex_lock(&idx_mu);
	struct rsock **c = idx[fd / IDX_CHUNK];
	if (!c) {
		c = calloc(IDX_CHUNK, sizeof(*c));
		if (!c) {
			pthread_mutex_unlock(&idx_mu);
			return fail(ENOMEM);
		}
		__atomic_store_n(&idx[fd / IDX_CHUNK], c, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&c[fd % IDX_CHUNK], rs, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&idx_mu);
	rs->index = fd;
	return 0;
}

static void remove_index(struct rsock *rs)
{
	if (rs->index < 0)
		return;
	pthread_mutex_lock(&idx_mu);
	__atomic_store_n(&idx[rs->index / IDX_CHUNK][rs->index % IDX_CHUNK], NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&idx_mu);
	rs->index = -1;
}

static int set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

// ---- set-up and tear-down -------------------------------------------------------------

static struct rsock *rs_alloc(const struct rsock *parent)
{
	struct rsock *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	rs->index = -1;
	pthread_mutex_init(&rs->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rs->moved, &ca);
	pthread_condattr_destroy(&ca);
	if (parent) {
		rs->sbuf_size = parent->sbuf_size;
		rs->rbuf_size = parent->rbuf_size;
		rs->sq_inline = parent->sq_inline;
		rs->sq_size = parent->sq_size;
		rs->rq_size = parent->rq_size;
		rs->target_iomap_size = parent->target_iomap_size;
		rs->so_opts = parent->so_opts;
		rs->tcp_opts = parent->tcp_opts;
		rs->keepalive_time = parent->keepalive_time;
	} else {
		rs->sbuf_size = RS_DEF_WMEM;
		rs->rbuf_size = RS_DEF_MEM;
		rs->sq_inline = RS_DEF_INLINE;
		rs->sq_size = RS_DEF_SQSIZE;
		rs->rq_size = RS_DEF_RQSIZE;
	}
	rs->ctrl_max_seqno = RS_QP_CTRL_SIZE;
	return rs;
}

static void poll_cq(struct rsock *rs);

static int sends_done(struct rsock *rs)
{
	return ((int)rs->ctrl_max_seqno - (int)rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size;
}

// drain moves the QP to the error state and takes its completions until every send
// has completed (flushed, if not done), for at most a second: a QP is not destroyed with
// work outstanding (rdma-core's rsockets destroy it so after a peer's disconnect).
static void drain(struct rsock *rs)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	if (ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE))
		return;
	rs->state &= ~rs_connected;
	for (int i = 0; i < 1000 && !sends_done(rs); i++) {
		poll_cq(rs);
		if (!sends_done(rs))
			usleep(1000);
	}
}

static void rs_free(struct rsock *rs)
{
	remove_index(rs);
	struct rdma_cm_id *id = rs->id;
	if (rs->ep_ready)
		drain(rs);
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (rs->cq) {
		if (rs->unack)
			ibv_ack_cq_events(rs->cq, rs->unack);
		ibv_destroy_cq(rs->cq);
	}
	if (rs->cch)
		ibv_destroy_comp_channel(rs->cch);
	if (id) {
		id->send_cq = id->recv_cq = NULL;
		id->send_cq_channel = id->recv_cq_channel = NULL;
	}
	for (int i = 0; i < rs->nmaps; i++)
		if (rs->maps[i].mr)
			ibv_dereg_mr(rs->maps[i].mr);
	free(rs->maps);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->target_mr)
		ibv_dereg_mr(rs->target_mr);
	free(rs->sbuf);
	free(rs->rbuf);
	free((void *)rs->target_sgl);
	free(rs->rmsg);
	if (id)
		rdma_destroy_id(id);
	pthread_mutex_destroy(&rs->mu);
	pthread_cond_destroy(&rs->moved);
	free(rs);
}

// free_fail frees a half-made rsocket and fails with the errno that stopped it.
static int free_fail(struct rsock *rs)
{
	int err = errno;
	rs_free(rs);
	return fail(err);
}

static void *zalloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n ? n : 1))
		return NULL;
	memset(p, 0, n);
	return p;
}

static uint16_t clamp_qp_size(uint16_t v, uint16_t max) { return v > max ? max : v < RS_QP_MIN_SIZE ? RS_QP_MIN_SIZE : v; }

// set_qp_size brings the queue sizes within the device's (rdma-core's rs_set_qp_size).
static void set_qp_size(struct rsock *rs)
{
	struct ibv_device_attr a;
	uint16_t max = RS_QP_MAX_SIZE;
	if (rs->id->verbs && !ibv_query_device(rs->id->verbs, &a) && a.max_qp_wr < max)
		max = a.max_qp_wr;
	rs->sq_size = clamp_qp_size(rs->sq_size, max);
	rs->rq_size = clamp_qp_size(rs->rq_size, max);
}

static int post_recv(struct rsock *rs)
{
	struct ibv_recv_wr wr = {.wr_id = RS_WR_ID_FLAG_RECV}, *bad;
	int err = ibv_post_recv(rs->id->qp, &wr, &bad);
	return err ? fail(err) : 0;
}

// create_ep makes the connection's CQ, QP and buffers and posts its receives
// (rdma-core's rs_create_ep and rs_init_bufs).
static int create_ep(struct rsock *rs)
{
	struct rdma_cm_id *id = rs->id;
	set_qp_size(rs);
	rs->cch = ibv_create_comp_channel(id->verbs);
	if (!rs->cch)
		return -1;
	if (set_nonblock(rs->cch->fd, 1))
		return -1;
	rs->cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, rs->cch, 0);
	if (!rs->cq)
		return -1;
	id->send_cq = id->recv_cq = rs->cq;
	id->send_cq_channel = id->recv_cq_channel = rs->cch;

	struct ibv_qp_init_attr qa = {
		.qp_context = rs,
		.send_cq = rs->cq,
		.recv_cq = rs->cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = {.max_send_wr = rs->sq_size,
			.max_recv_wr = rs->rq_size,
			.max_send_sge = 2,
			.max_recv_sge = 1,
			.max_inline_data = rs->sq_inline},
	};
	if (rdma_create_qp(id, NULL, &qa))
		return -1;
	rs->sq_inline = qa.cap.max_inline_data;

	rs->rmsg = calloc(rs->rq_size + 1, sizeof(*rs->rmsg));
	if (!rs->rmsg)
		return fail(ENOMEM);
	uint32_t sbuf_total = rs->sbuf_size;
	if (rs->sq_inline < RS_MAX_CTRL_MSG)
		sbuf_total += RS_MAX_CTRL_MSG * RS_QP_CTRL_SIZE; // control messages' SGEs
	rs->sbuf = zalloc(sbuf_total);
	size_t tlen = sizeof(struct rs_sge) * RS_SGL_SIZE + sizeof(struct rs_iomap) * rs->target_iomap_size;
	rs->target_sgl = zalloc(tlen);
	rs->rbuf = zalloc(rs->rbuf_size);
	if (!rs->sbuf || !rs->target_sgl || !rs->rbuf)
		return fail(ENOMEM);
	rs->smr = ibv_reg_mr(id->pd, rs->sbuf, sbuf_total, IBV_ACCESS_LOCAL_WRITE);
	rs->target_iomap = (volatile struct rs_iomap *)(rs->target_sgl + RS_SGL_SIZE);
	rs->target_mr = ibv_reg_mr(id->pd, (void *)rs->target_sgl, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rs->rmr = ibv_reg_mr(id->pd, rs->rbuf, rs->rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!rs->smr || !rs->target_mr || !rs->rmr)
		return -1;

	rs->ssgl[0].addr = rs->ssgl[1].addr = (uintptr_t)rs->sbuf;
	rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
	rs->sbuf_bytes_avail = rs->sbuf_size;
	// The first half of the receive buffer goes to the peer in the private data, the
	// second with the first credit update.
	rs->rbuf_free_offset = rs->rbuf_size >> 1;
	rs->rbuf_bytes_avail = rs->rbuf_size >> 1;
	rs->sqe_avail = rs->sq_size - rs->ctrl_max_seqno;
	rs->rseq_comp = rs->rq_size >> 1;
	for (int i = 0; i < rs->rq_size; i++)
		if (post_recv(rs))
			return -1;
	rs->ep_ready = 1;
	return 0;
}

static int host_is_net(void) { return __BYTE_ORDER == __BIG_ENDIAN; }

// The I/O map size's one-byte encoding in the private data: up to 128 as it is, above in
// units of 256 (rdma-core's rs_value_to_scale and rs_scale_to_value).
static int value_to_scale(int v) { return v <= 128 ? v : 128 | (v >> 8); }
static int scale_to_value(int v) { return v <= 128 ? v : (v & ~128) << 8; }

static void format_conn_data(struct rsock *rs, struct rs_conn_data *c)
{
	memset(c, 0, sizeof(*c));
	c->version = 1;
	c->flags = RS_CONN_FLAG_IOMAP | (host_is_net() ? RS_CONN_FLAG_NET : 0);
	c->credits = htobe16(rs->rq_size);
	c->target_iomap_size = (uint8_t)value_to_scale(rs->target_iomap_size);
	c->target_sgl.addr = htobe64((uintptr_t)rs->target_sgl);
	c->target_sgl.length = htobe32(RS_SGL_SIZE);
	c->target_sgl.key = htobe32(rs->target_mr->rkey);
	c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	c->data_buf.length = htobe32(rs->rbuf_size >> 1);
	c->data_buf.key = htobe32(rs->rmr->rkey);
}

// conn_data_ok tells whether the private data is an rsocket's.
static int conn_data_ok(const void *priv, int len)
{
	const struct rs_conn_data *c = priv;
	return c && len >= (int)sizeof(*c) && c->version == 1 && c->target_sgl.length != 0;
}

// save_conn_data takes the peer's buffers from its private data (after create_ep).
static int save_conn_data(struct rsock *rs, const void *priv, int len)
{
	const struct rs_conn_data *c = priv;
	if (!conn_data_ok(priv, len))
		return fail(EPROTO);
	rs->remote_sgl.addr = be64toh(c->target_sgl.addr);
	rs->remote_sgl.length = be32toh(c->target_sgl.length);
	rs->remote_sgl.key = be32toh(c->target_sgl.key);
	rs->remote_sge = 1;
	if (host_is_net() != !!(c->flags & RS_CONN_FLAG_NET))
		rs->opts |= RS_OPT_SWAP_SGL;
	if (c->flags & RS_CONN_FLAG_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr + sizeof(struct rs_sge) * rs->remote_sgl.length;
		rs->remote_iomap.length = scale_to_value(c->target_iomap_size);
		rs->remote_iomap.key = rs->remote_sgl.key;
	}
	rs->target_sgl[0].addr = be64toh(c->data_buf.addr);
	rs->target_sgl[0].length = be32toh(c->data_buf.length);
	rs->target_sgl[0].key = be32toh(c->data_buf.key);
	rs->sseq_comp = be16toh(c->credits);
	return 0;
}

// ---- the data path --------------------------------------------------------------------

static int post_msg(struct rsock *rs, uint32_t msg)
{
	struct ibv_send_wr wr = {
		.wr_id = msg,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.imm_data = htobe32(msg),
	},
			   *bad;
	int err = ibv_post_send(rs->id->qp, &wr, &bad);
	return err ? fail(err) : 0;
}

static int post_write_msg(struct rsock *rs, struct ibv_sge *sgl, int nsge, uint32_t msg, int flags, uint64_t addr,
			  uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = msg,
		.sg_list = sgl,
		.num_sge = nsge,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = flags,
		.imm_data = htobe32(msg),
	},
			   *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	int err = ibv_post_send(rs->id->qp, &wr, &bad);
	return err ? fail(err) : 0;
}

// write_data sends length bytes into the peer's current target SGE, taking it before the
// write so that the peer's next update lands in the other entry.
static int write_data(struct rsock *rs, struct ibv_sge *sgl, int nsge, uint32_t length, int flags)
{
	rs->sseq_no++;
	rs->sqe_avail--;
	rs->sbuf_bytes_avail -= length;
	volatile struct rs_sge *t = &rs->target_sgl[rs->target_sge];
	uint64_t addr = t->addr;
	uint32_t rkey = t->key;
	t->addr += length;
	t->length -= length;
	if (!t->length && ++rs->target_sge == RS_SGL_SIZE)
		rs->target_sge = 0;
	return post_write_msg(rs, sgl, nsge, rs_msg_set(RS_OP_DATA, length), flags, addr, rkey);
}

static int ctrl_avail(struct rsock *rs) { return rs->ctrl_seqno != rs->ctrl_max_seqno; }

// send_credits tells the peer how far it may send, and gives it the next half of the
// receive buffer when that half is free.
static void send_credits(struct rsock *rs)
{
	rs->ctrl_seqno++;
	rs->rseq_comp = rs->rseq_no + (rs->rq_size >> 1);
	uint32_t msg = rs_msg_set(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	if (rs->rbuf_bytes_avail < (rs->rbuf_size >> 1)) {
		post_msg(rs, msg);
		return;
	}
	struct rs_sge sge = {
		.addr = (uintptr_t)&rs->rbuf[rs->rbuf_free_offset],
		.key = rs->rmr->rkey,
		.length = rs->rbuf_size >> 1,
	};
	if (rs->opts & RS_OPT_SWAP_SGL) {
		sge.addr = bswap_64(sge.addr);
		sge.key = bswap_32(sge.key);
		sge.length = bswap_32(sge.length);
	}
	struct ibv_sge ib = {.length = sizeof(sge)};
	int flags;
	if (rs->sq_inline < sizeof(sge)) {
		void *buf = rs->sbuf + rs->sbuf_size + RS_MAX_CTRL_MSG * (rs->ctrl_seqno & (RS_QP_CTRL_SIZE - 1));
		memcpy(buf, &sge, sizeof(sge));
		ib.addr = (uintptr_t)buf;
		ib.lkey = rs->smr->lkey;
		flags = 0;
	} else {
		ib.addr = (uintptr_t)&sge;
		flags = IBV_SEND_INLINE;
	}
	post_write_msg(rs, &ib, 1, msg, flags, rs->remote_sgl.addr + rs->remote_sge * sizeof(struct rs_sge),
		       rs->remote_sgl.key);
	rs->rbuf_bytes_avail -= rs->rbuf_size >> 1;
	rs->rbuf_free_offset += rs->rbuf_size >> 1;
	if (rs->rbuf_free_offset >= rs->rbuf_size)
		rs->rbuf_free_offset = 0;
	if (++rs->remote_sge == (int)rs->remote_sgl.length)
		rs->remote_sge = 0;
}

static void update_credits(struct rsock *rs)
{
	if (!(rs->state & rs_connected) || !ctrl_avail(rs))
		return;
	if (rs->rbuf_bytes_avail >= (rs->rbuf_size >> 1) || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0)
		send_credits(rs);
}

// poll_cq takes the CQ's completions (rdma-core's rs_poll_cq).
static void poll_cq(struct rsock *rs)
{
	struct ibv_wc wc[16];
	int n, rcnt = 0, took = 0;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		took = 1;
		for (int i = 0; i < n; i++) {
			struct ibv_wc *w = &wc[i];
			if (w->wr_id & RS_WR_ID_FLAG_RECV) {
				if (w->status != IBV_WC_SUCCESS)
					continue;
				rcnt++;
				if (!(w->wc_flags & IBV_WC_WITH_IMM))
					continue; // not this protocol's
				uint32_t msg = be32toh(w->imm_data);
				switch (rs_msg_op(msg)) {
				case RS_OP_SGL:
					rs->sseq_comp = (uint16_t)rs_msg_data(msg);
					break;
				case RS_OP_IOMAP_SGL:
				case RS_OP_WRITE:
					break;
				case RS_OP_CTRL:
					if (rs_msg_data(msg) == RS_CTRL_DISCONNECT)
						rs->state = rs_disconnected;
					else if (rs_msg_data(msg) == RS_CTRL_SHUTDOWN) {
						if (rs->state & rs_writable)
							rs->state &= ~rs_readable;
						else
							rs->state = rs_disconnected;
					}
					break;
				default:
					rs->rmsg[rs->rmsg_tail].op = rs_msg_op(msg);
					rs->rmsg[rs->rmsg_tail].data = rs_msg_data(msg);
					if (++rs->rmsg_tail == rs->rq_size + 1)
						rs->rmsg_tail = 0;
					break;
				}
			} else {
				uint32_t msg = (uint32_t)w->wr_id;
				switch (rs_msg_op(msg)) {
				case RS_OP_SGL:
					rs->ctrl_max_seqno++;
					break;
				case RS_OP_CTRL:
					rs->ctrl_max_seqno++;
					if (rs_msg_data(msg) == RS_CTRL_DISCONNECT)
						rs->state = rs_disconnected;
					break;
				case RS_OP_IOMAP_SGL:
					rs->sqe_avail++;
					rs->sbuf_bytes_avail += sizeof(struct rs_iomap);
					break;
				default: // RS_OP_DATA, RS_OP_WRITE: the length
					rs->sqe_avail++;
					rs->sbuf_bytes_avail += rs_msg_data(msg);
					break;
				}
				if (w->status != IBV_WC_SUCCESS && (rs->state & rs_connected)) {
					rs->state = rs_error;
					rs->err = EIO;
				}
			}
		}
	}
	if (rs->state & rs_connected) {
		while (rcnt--)
			if (post_recv(rs)) {
				rs->state = rs_error;
				rs->err = errno;
				break;
			}
	}
	if (took && rs->followers)
		pthread_cond_broadcast(&rs->moved); // what they wait for may be among these
}

// cm_events takes a connected rsocket's rdma_cm events: a DISCONNECTED (the peer went
// without its RS_CTRL_DISCONNECT, or its process died) ends the connection after the
// completions already in the CQ, as rdma-core's connection service does.
static void cm_events(struct rsock *rs)
{
	struct rdma_cm_event *e;
	while (!rdma_get_cm_event(rs->id->channel, &e)) {
		int t = e->event;
		rdma_ack_cm_event(e);
		if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL) {
			if (rs->state & rs_connected) {
				rdma_disconnect(rs->id);
				poll_cq(rs);
				rs->state = t == RDMA_CM_EVENT_DISCONNECTED ? rs_disconnected : rs_error;
				if (t != RDMA_CM_EVENT_DISCONNECTED)
					rs->err = ENODEV;
			}
		}
	}
}

static void get_cq_event(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	while (!ibv_get_cq_event(rs->cch, &cq, &ctx)) {
		rs->armed = 0;
		if (++rs->unack >= 64) {
			ibv_ack_cq_events(rs->cq, rs->unack);
			rs->unack = 0;
		}
	}
}

static int can_send(struct rsock *rs)
{
	return rs->sqe_avail && rs->sbuf_bytes_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->target_sgl[rs->target_sge].length != 0;
}
static int conn_can_send(struct rsock *rs) { return can_send(rs) || !(rs->state & rs_writable); }
static int have_rdata(struct rsock *rs) { return rs->rmsg_head != rs->rmsg_tail; }
static int conn_have_rdata(struct rsock *rs) { return have_rdata(rs) || !(rs->state & rs_readable); }
static int conn_can_send_ctrl(struct rsock *rs) { return ctrl_avail(rs) || !(rs->state & rs_connected); }
static int conn_all_sends_done(struct rsock *rs) { return sends_done(rs) || !(rs->state & rs_connected); }

// process gives credits and takes completions; with rs->mu held.
static void process(struct rsock *rs)
{
	update_credits(rs);
	poll_cq(rs);
	update_credits(rs);
}

// wait processes completions until test holds: 0, or -1 with EWOULDBLOCK when nonblock.
// One thread at a time sleeps in poll(2) on the CQ's channel and the ID's event channel,
// with rs->mu released so that another thread's rsend or rrecv on the same rsocket goes
// on; the others wait on rs->moved, which the poller broadcasts when it wakes and any
// thread when it took completions (the CQ's event is the poller's alone to take, so no
// wake-up is lost to another thread's taking it).
static int wait(struct rsock *rs, int nonblock, int (*test)(struct rsock *))
{
	for (;;) {
		process(rs);
		if (test(rs))
			return 0;
		if (nonblock)
			return fail(EWOULDBLOCK);
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = 1;
			continue; // what completed before the arming
		}
		if (rs->polling) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			t.tv_sec++; // bounded, should a wake-up still be missed
			rs->followers++;
			pthread_cond_timedwait(&rs->moved, &rs->mu, &t);
			rs->followers--;
			continue;
		}
		struct pollfd p[2] = {{.fd = rs->cch->fd, .events = POLLIN}, {.fd = rs->id->channel->fd, .events = POLLIN}};
		rs->polling = 1;
		pthread_mutex_unlock(&rs->mu);
		int n = poll(p, 2, 1000);
		pthread_mutex_lock(&rs->mu);
		rs->polling = 0;
		if (n > 0 && p[0].revents)
			get_cq_event(rs);
		if (n > 0 && p[1].revents)
			cm_events(rs);
		if (rs->followers)
			pthread_cond_broadcast(&rs->moved); // one of them polls next, if need be
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

static int nonblocking(struct rsock *rs, int flags) { return (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT); }

// ---- the API --------------------------------------------------------------------------

EXPORT int rsocket(int domain, int type, int protocol)
{
	int st = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (domain != AF_INET && domain != AF_INET6 && domain != AF_IB)
		return fail(EAFNOSUPPORT);
	if (st != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP))
		return fail(EOPNOTSUPP); // datagram rsockets are not provided
	struct rsock *rs = rs_alloc(NULL);
	if (!rs)
		return fail(ENOMEM);
	rs->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	rs->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
	if (rdma_create_id(NULL, &rs->id, rs, RDMA_PS_TCP))
		return free_fail(rs);
	rs->id->route.addr.src_addr.sa_family = domain;
	if (insert(rs, rs->id->channel->fd))
		return free_fail(rs);
	return rs->index;
}

// lookup_addr is the rsocket of a call that takes an address: NULL with EBADF or EINVAL.
static struct rsock *lookup_addr(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		errno = EBADF;
	else if (!addr || addrlen < sizeof(struct sockaddr_in))
		errno = EINVAL;
	else
		return rs;
	return NULL;
}

EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = lookup_addr(socket, addr, addrlen);
	if (!rs)
		return -1;
	if (rs->state != rs_init)
		return fail(EINVAL);
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = rs_bound;
	return 0;
}

EXPORT int rlisten(int socket, int backlog)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	if (rs->state == rs_listening)
		return 0;
	if (rs->state & (rs_opening | rs_connected))
		return fail(EINVAL);
	if (rdma_listen(rs->id, backlog))
		return -1;
	if ((rs->fs_flags & O_NONBLOCK) && set_nonblock(rs->id->channel->fd, 1))
		return -1;
	rs->state = rs_listening;
	return 0;
}

EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen);

EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	if (rs->state != rs_listening)
		return fail(EINVAL);
	for (;;) {
		struct rdma_cm_id *id;
		if (rdma_get_request(rs->id, &id))
			return -1; // EAGAIN on a non-blocking listener
		struct rsock *n = rs_alloc(rs);
		if (!n) {
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			return fail(ENOMEM);
		}
		n->id = id;
		id->context = n;
		struct rdma_conn_param param = id->event->param.conn;
		struct rs_conn_data resp;
		if (!conn_data_ok(param.private_data, param.private_data_len) || create_ep(n) ||
		    save_conn_data(n, param.private_data, param.private_data_len)) {
			// Not an rsocket's request, or no resources: refused, and the next one taken.
			rdma_reject(id, NULL, 0);
			rs_free(n);
			continue;
		}
		format_conn_data(n, &resp);
		param.private_data = &resp;
		param.private_data_len = sizeof(resp);
		if (rdma_accept(id, &param)) {
			rs_free(n);
			continue; // the peer gave up; as the kernel's accept queue drops it
		}
		n->state = rs_connect_rdwr;
		if (set_nonblock(id->channel->fd, 1) || insert(n, id->channel->fd))
			return free_fail(n);
		if (addr && addrlen)
			rgetpeername(n->index, addr, addrlen);
		return n->index;
	}
}

EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = lookup_addr(socket, addr, addrlen);
	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->mu);
	int ret = -1, err = 0;
	if (rs->state & rs_connected) {
		err = EISCONN;
		goto out;
	}
	if (rs->state & ~rs_bound) {
		err = rs->state == rs_listening ? EINVAL : rs->state & rs_opening ? EALREADY : ECONNABORTED;
		goto out;
	}
	rs->state = rs_opening;
	if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr, 2000) || rdma_resolve_route(rs->id, 2000) ||
	    create_ep(rs)) {
		err = errno;
		goto failed;
	}
	struct rs_conn_data req;
	format_conn_data(rs, &req);
	struct rdma_conn_param param = {
		.private_data = &req,
		.private_data_len = sizeof(req),
		.flow_control = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	if (rdma_connect(rs->id, &param)) {
		err = errno;
		goto failed;
	}
	struct rdma_cm_event *e = rs->id->event;
	if (!e || save_conn_data(rs, e->param.conn.private_data, e->param.conn.private_data_len)) {
		err = e ? errno : EPROTO;
		rdma_disconnect(rs->id);
		goto failed;
	}
	if (set_nonblock(rs->id->channel->fd, 1)) {
		err = errno;
		goto failed;
	}
	rs->state = rs_connect_rdwr;
	ret = 0;
	goto out;
failed:
	rs->state = rs_connect_error;
	rs->err = err;
out:
	pthread_mutex_unlock(&rs->mu);
	return ret ? fail(err) : 0;
}

// recv_locked is rrecv with rs->mu held.
static ssize_t recv_locked(struct rsock *rs, void *buf, size_t len, int flags)
{
	size_t left = len;
	int ret = 0;
	if (!(rs->state & (rs_connected | rs_disconnected | rs_error)) || !rs->cq)
		return fail(ENOTCONN);
	do {
		if (!have_rdata(rs)) {
			ret = wait(rs, nonblocking(rs, flags), conn_have_rdata);
			if (ret)
				break;
		}
		int head = rs->rmsg_head;
		uint32_t off = rs->rbuf_offset;
		int peek = flags & MSG_PEEK;
		uint8_t *p = buf;
		while (left && head != rs->rmsg_tail) {
			uint32_t rsize = rs->rmsg[head].data;
			if (left < rsize) {
				rsize = left;
				if (!peek)
					rs->rmsg[head].data -= left;
			} else {
				if (!peek)
					rs->rseq_no++;
				if (++head == rs->rq_size + 1)
					head = 0;
			}
			left -= rsize;
			uint32_t end = rs->rbuf_size - off;
			if (rsize > end) {
				memcpy(p, &rs->rbuf[off], end);
				p += end;
				rsize -= end;
				off = 0;
				if (!peek)
					rs->rbuf_bytes_avail += end;
			}
			memcpy(p, &rs->rbuf[off], rsize);
			p += rsize;
			off += rsize;
			if (!peek)
				rs->rbuf_bytes_avail += rsize;
		}
		buf = p;
		if (peek)
			break;
		rs->rmsg_head = head;
		rs->rbuf_offset = off;
	} while (left && (flags & MSG_WAITALL) && (rs->state & rs_readable));
	update_credits(rs);
	return (ret && left == len) ? ret : (ssize_t)(len - left);
}

EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	pthread_mutex_lock(&rs->mu);
	ssize_t n = recv_locked(rs, buf, len, flags);
	int err = errno;
	pthread_mutex_unlock(&rs->mu);
	errno = err;
	return n;
}

EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
{
	ssize_t n = rrecv(socket, buf, len, flags);
	if (n > 0 && src_addr && addrlen)
		rgetpeername(socket, src_addr, addrlen);
	return n;
}

static ssize_t recvv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		ssize_t n = rrecv(socket, iov[i].iov_base, iov[i].iov_len, total ? flags | MSG_DONTWAIT : flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return fail(EOPNOTSUPP);
	return recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

EXPORT ssize_t rread(int socket, void *buf, size_t count) { return rrecv(socket, buf, count, 0); }
EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt) { return recvv(socket, iov, iovcnt, 0); }

// stage gives the SGEs (one, or two where the send ring wraps) of len bytes of src for a
// WRITE: src itself when it fits the QP's inline size, else a copy in the send ring.
static int stage(struct rsock *rs, const void *src, uint32_t len, struct ibv_sge *sge, int *flags)
{
	if (len <= rs->sq_inline) {
		sge[0] = (struct ibv_sge){.addr = (uintptr_t)src, .length = len};
		*flags = IBV_SEND_INLINE;
		return 1;
	}
	*flags = 0;
	uint32_t tail = (uint32_t)((uintptr_t)&rs->sbuf[rs->sbuf_size] - rs->ssgl[0].addr);
	if (len <= tail) {
		memcpy((void *)(uintptr_t)rs->ssgl[0].addr, src, len);
		sge[0] = rs->ssgl[0];
		sge[0].length = len;
		rs->ssgl[0].addr = len < tail ? rs->ssgl[0].addr + len : (uintptr_t)rs->sbuf;
		return 1;
	}
	memcpy((void *)(uintptr_t)rs->ssgl[0].addr, src, tail);
	memcpy(rs->sbuf, (const uint8_t *)src + tail, len - tail);
	sge[0] = rs->ssgl[0];
	sge[0].length = tail;
	sge[1] = rs->ssgl[1];
	sge[1].length = len - tail;
	rs->ssgl[0].addr = (uintptr_t)rs->sbuf + (len - tail);
	return 2;
}

// next_xfer is the size of a WRITE of the left bytes: transfers grow from 2 KiB to 64 KiB
// (rdma-core's overlap), each within the send buffer's free space and room at the target.
static uint32_t next_xfer(struct rsock *rs, uint32_t *olen, size_t left, uint64_t room)
{
	uint64_t xfer = left;
	if (*olen < left) {
		xfer = *olen;
		if (*olen < RS_MAX_TRANSFER)
			*olen <<= 1;
	}
	if (xfer > rs->sbuf_bytes_avail)
		xfer = rs->sbuf_bytes_avail;
	if (xfer > room)
		xfer = room;
	return (uint32_t)xfer;
}

// wait_send waits until a WRITE may go: ECONNRESET once the connection cannot send.
static int wait_send(struct rsock *rs, int flags)
{
	if (can_send(rs))
		return 0;
	if (wait(rs, nonblocking(rs, flags), conn_can_send))
		return -1;
	return (rs->state & rs_writable) ? 0 : fail(ECONNRESET);
}

static int send_iomaps(struct rsock *rs, int flags);

// send_locked is rsend with rs->mu held: the data goes out in next_xfer's transfers, each
// within the peer's current target SGE.
static ssize_t send_locked(struct rsock *rs, const void *buf, size_t len, int flags)
{
	size_t left = len;
	uint32_t olen = RS_OLAP_START_SIZE;
	int ret = 0;
	// After shutdown(SHUT_WR) send(2) is EPIPE whatever the peer did since, unless the
	// connection failed (tcp_sendmsg → sk_stream_error: the socket's error first).
	if (rs->shut_wr && !(rs->state & rs_error && rs->err))
		return fail(EPIPE);
	if (!(rs->state & rs_connected)) {
		if (rs->state & (rs_disconnected | rs_error))
			return fail(rs->state & rs_error && rs->err ? rs->err : ECONNRESET);
		return fail(ENOTCONN);
	}
	if (!(rs->state & rs_writable))
		return fail(EPIPE); // after rshutdown(SHUT_WR), as send(2)
	if (rs->iomap_pending && send_iomaps(rs, flags))
		return -1;
	const uint8_t *p = buf;
	while (left) {
		if ((ret = wait_send(rs, flags)))
			break;
		uint32_t xfer = next_xfer(rs, &olen, left, rs->target_sgl[rs->target_sge].length);
		struct ibv_sge sge[2];
		int wflags, n = stage(rs, p, xfer, sge, &wflags);
		if ((ret = write_data(rs, sge, n, xfer, wflags)))
			break;
		left -= xfer;
		p += xfer;
	}
	return (ret && left == len) ? ret : (ssize_t)(len - left);
}

EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	pthread_mutex_lock(&rs->mu);
	ssize_t n = send_locked(rs, buf, len, flags);
	int err = errno;
	pthread_mutex_unlock(&rs->mu);
	errno = err;
	return n;
}

EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
		       socklen_t addrlen)
{
	if (dest_addr || addrlen)
		return fail(EISCONN);
	return rsend(socket, buf, len, flags);
}

static ssize_t sendv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		ssize_t n = rsend(socket, iov[i].iov_base, iov[i].iov_len, flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return fail(EOPNOTSUPP);
	return sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

EXPORT ssize_t rwrite(int socket, const void *buf, size_t count) { return rsend(socket, buf, count, 0); }
EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt) { return sendv(socket, iov, iovcnt, 0); }

// ---- rpoll and rselect ----------------------------------------------------------------

// poll_rs is an rsocket's readiness now, having taken what completed.
static short poll_rs(struct rsock *rs, short events)
{
	short revents = 0;
	pthread_mutex_lock(&rs->mu);
	if (rs->cq && (rs->state & (rs_connected | rs_disconnected | rs_error))) {
		process(rs);
		if ((events & POLLIN) && conn_have_rdata(rs))
			revents |= POLLIN;
		if ((events & POLLOUT) && can_send(rs))
			revents |= POLLOUT;
		// Hung up once what the peer sent before it left is read (rdma-core's says so
		// at once, and a program that stops at POLLHUP loses that data).
		if (rs->state == rs_disconnected && !have_rdata(rs))
			revents |= POLLHUP;
		else if (rs->state & rs_error)
			revents |= POLLERR;
	} else if (rs->state == rs_listening) {
		struct pollfd p = {.fd = rs->id->channel->fd, .events = POLLIN};
		if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
			revents |= events & POLLIN;
	} else if (rs->state == rs_connect_error) {
		revents = (events & (POLLIN | POLLOUT)) | POLLERR;
	}
	pthread_mutex_unlock(&rs->mu);
	return revents;
}

static int check_all(struct pollfd *fds, nfds_t nfds)
{
	int cnt = 0;
	for (nfds_t i = 0; i < nfds; i++) {
		struct rsock *rs = lookup(fds[i].fd);
		if (rs)
			fds[i].revents = poll_rs(rs, fds[i].events);
		else if (poll(&fds[i], 1, 0) < 0)
			return -1;
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// rpoll is poll(2) over rsockets and other descriptors together: an rsocket waits on its
// CQ's channel (connected) or its event channel (listening), its events taken and its
// readiness computed again after each wake-up.
EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	uint64_t start = now_ms();
	struct pollfd *rf = NULL;
	int ret;
	for (;;) {
		ret = check_all(fds, nfds);
		if (ret || !timeout)
			break;
		int left = -1;
		if (timeout > 0) {
			left = timeout - (int)(now_ms() - start);
			if (left <= 0)
				break;
		}
		if (!rf) {
			rf = calloc(2 * nfds + 1, sizeof(*rf));
			if (!rf)
				return fail(ENOMEM);
		}
		int armed_ready = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsock *rs = lookup(fds[i].fd);
			struct pollfd *a = &rf[2 * i], *b = &rf[2 * i + 1];
			*a = (struct pollfd){.fd = -1};
			*b = (struct pollfd){.fd = -1};
			if (!rs) {
				*a = fds[i];
				a->revents = 0;
				continue;
			}
			pthread_mutex_lock(&rs->mu);
			if (rs->cq && (rs->state & rs_connected)) {
				if (!rs->armed) {
					ibv_req_notify_cq(rs->cq, 0);
					rs->armed = 1;
					armed_ready = 1; // what completed before the arming is looked at again
				}
				*a = (struct pollfd){.fd = rs->cch->fd, .events = POLLIN};
				*b = (struct pollfd){.fd = rs->id->channel->fd, .events = POLLIN};
			} else if (rs->state == rs_listening) {
				*a = (struct pollfd){.fd = rs->id->channel->fd, .events = POLLIN};
			}
			pthread_mutex_unlock(&rs->mu);
		}
		if (armed_ready)
			continue;
		int n = poll(rf, 2 * nfds, left < 0 || left > 500 ? 500 : left);
		if (n < 0) {
			ret = -1;
			break;
		}
		for (nfds_t i = 0; i < nfds && n > 0; i++) {
			struct rsock *rs = lookup(fds[i].fd);
			if (!rs)
				continue;
			pthread_mutex_lock(&rs->mu);
			if (rs->cq && rf[2 * i].revents && rf[2 * i].fd == rs->cch->fd)
				get_cq_event(rs);
			if (rs->cq && rf[2 * i + 1].revents)
				cm_events(rs);
			pthread_mutex_unlock(&rs->mu);
		}
	}
	free(rf);
	return ret;
}

EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *fds = calloc(nfds > 0 ? nfds : 1, sizeof(*fds));
	if (!fds)
		return fail(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (ev)
			fds[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int ms = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	int ret = rpoll(fds, n, ms);
	if (ret >= 0) {
		if (readfds)
			FD_ZERO(readfds);
		if (writefds)
			FD_ZERO(writefds);
		if (exceptfds)
			FD_ZERO(exceptfds);
		ret = 0;
		for (int i = 0; i < n; i++) {
			int hit = 0;
			if (readfds && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && (fds[i].events & POLLIN)) {
				FD_SET(fds[i].fd, readfds);
				hit++;
			}
			if (writefds && (fds[i].revents & (POLLOUT | POLLERR)) && (fds[i].events & POLLOUT)) {
				FD_SET(fds[i].fd, writefds);
				hit++;
			}
			if (exceptfds && (fds[i].revents & POLLPRI)) {
				FD_SET(fds[i].fd, exceptfds);
				hit++;
			}
			ret += hit;
		}
	}
	free(fds);
	return ret;
}

// ---- shutdown and close ---------------------------------------------------------------

static int shutdown_locked(struct rsock *rs, int how)
{
	int ret = 0;
	if (how == SHUT_WR || how == SHUT_RDWR)
		rs->shut_wr = 1;
	if (rs->state & rs_connected) {
		int ctrl;
		if (how == SHUT_RDWR) {
			ctrl = RS_CTRL_DISCONNECT;
			rs->state &= ~(rs_readable | rs_writable);
		} else if (how == SHUT_WR) {
			rs->state &= ~rs_writable;
			ctrl = (rs->state & rs_readable) ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
		} else if (how == SHUT_RD) {
			rs->state &= ~rs_readable;
			if (rs->state & rs_writable)
				return 0;
			ctrl = RS_CTRL_DISCONNECT;
		} else {
			return fail(EINVAL);
		}
		if (!ctrl_avail(rs) && wait(rs, 0, conn_can_send_ctrl))
			return -1;
		if ((rs->state & rs_connected) && ctrl_avail(rs)) {
			rs->ctrl_seqno++;
			ret = post_msg(rs, rs_msg_set(RS_OP_CTRL, ctrl));
		}
	}
	if (rs->state & rs_connected)
		wait(rs, 0, conn_all_sends_done);
	return ret;
}

EXPORT int rshutdown(int socket, int how)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	pthread_mutex_lock(&rs->mu);
	int ret = (rs->state & (rs_connected | rs_disconnected | rs_error)) ? shutdown_locked(rs, how) : fail(ENOTCONN);
	int err = errno;
	pthread_mutex_unlock(&rs->mu);
	errno = err;
	return ret;
}

EXPORT int rclose(int socket)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	remove_index(rs);
	pthread_mutex_lock(&rs->mu);
	if (rs->state & rs_connected)
		shutdown_locked(rs, SHUT_RDWR);
	pthread_mutex_unlock(&rs->mu);
	rs_free(rs);
	return 0;
}

// ---- names, options, flags ------------------------------------------------------------

static void copy_addr(struct sockaddr *dst, struct sockaddr *src, socklen_t *len)
{
	socklen_t size = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
			 : src->sa_family == AF_IB  ? sizeof(struct sockaddr_ib)
						    : sizeof(struct sockaddr_in);
	memcpy(dst, src, *len < size ? *len : size);
	*len = size;
}

EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	if (!addr || !addrlen)
		return fail(EFAULT);
	if (!(rs->state & (rs_connected | rs_disconnected)))
		return fail(ENOTCONN);
	copy_addr(addr, rdma_get_peer_addr(rs->id), addrlen);
	return 0;
}

EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	if (!addr || !addrlen)
		return fail(EFAULT);
	copy_addr(addr, rdma_get_local_addr(rs->id), addrlen);
	return 0;
}

static int optint(const void *optval, socklen_t optlen, int *v)
{
	if (!optval || optlen < sizeof(int))
		return fail(EINVAL);
	memcpy(v, optval, sizeof(int));
	return 0;
}

EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	int v = 0;
	uint64_t *opts = NULL;
	int on = 0;
	if (level == SOL_SOCKET && optname == SO_LINGER) {
		if (!optval || optlen < sizeof(struct linger))
			return fail(EINVAL);
	} else if (optint(optval, optlen, &v)) {
		return -1;
	}
	switch (level) {
	case SOL_SOCKET:
		opts = &rs->so_opts;
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			on = v;
			break;
		case SO_RCVBUF:
			if (!rs->rbuf && v > 0)
				rs->rbuf_size = (uint32_t)v << 1; // doubled, as Linux's
			return 0;
		case SO_SNDBUF:
			if (!rs->sbuf && v > 0)
				rs->sbuf_size = (uint32_t)v << 1;
			if (rs->sbuf_size < RS_SNDLOWAT)
				rs->sbuf_size = RS_SNDLOWAT << 1;
			return 0;
		case SO_LINGER:
			on = !((const struct linger *)optval)->l_onoff; // inverted: the default is on
			break;
		default:
			return fail(ENOPROTOOPT);
		}
		break;
	case IPPROTO_IP:
		if (optname != IP_TOS)
			return fail(ENOPROTOOPT);
		rs->ip_tos = v;
		return 0;
	case IPPROTO_TCP:
		opts = &rs->tcp_opts;
		switch (optname) {
		case TCP_NODELAY:
			on = v;
			break;
		case TCP_KEEPIDLE:
			if (v <= 0)
				return fail(EINVAL);
			rs->keepalive_time = v;
			return 0;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
		case TCP_CONGESTION:
			return 0; // nothing to tune on a reliable connection
		default:
			return fail(ENOPROTOOPT);
		}
		break;
	case IPPROTO_IPV6:
		opts = &rs->ipv6_opts;
		if (optname != IPV6_V6ONLY)
			return fail(ENOPROTOOPT);
		on = v;
		break;
	case SOL_RDMA:
		if (rs->state >= rs_opening)
			return fail(EINVAL); // the QP exists
		switch (optname) {
		case RDMA_SQSIZE:
			rs->sq_size = (uint32_t)v < RS_QP_MAX_SIZE ? (uint32_t)v : RS_QP_MAX_SIZE;
			return 0;
		case RDMA_RQSIZE:
			rs->rq_size = (uint32_t)v < RS_QP_MAX_SIZE ? (uint32_t)v : RS_QP_MAX_SIZE;
			return 0;
		case RDMA_INLINE:
			rs->sq_inline = (uint32_t)v < RS_QP_MAX_SIZE ? (uint32_t)v : RS_QP_MAX_SIZE;
			return 0;
		case RDMA_IOMAPSIZE:
			rs->target_iomap_size = (uint16_t)scale_to_value((uint8_t)value_to_scale(v));
			return 0;
		case RDMA_ROUTE:
			return 0; // routes come from the SA
		default:
			return fail(ENOPROTOOPT);
		}
	default:
		return fail(ENOPROTOOPT);
	}
	if (on)
		*opts |= 1ULL << optname;
	else
		*opts &= ~(1ULL << optname);
	return 0;
}

static int putint(void *optval, socklen_t *optlen, int v)
{
	if (!optval || !optlen || *optlen < sizeof(int))
		return fail(EINVAL);
	memcpy(optval, &v, sizeof(int));
	*optlen = sizeof(int);
	return 0;
}

EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			return putint(optval, optlen, !!(rs->so_opts & (1ULL << optname)));
		case SO_RCVBUF:
			return putint(optval, optlen, rs->rbuf_size);
		case SO_SNDBUF:
			return putint(optval, optlen, rs->sbuf_size);
		case SO_TYPE:
			return putint(optval, optlen, SOCK_STREAM);
		case SO_ERROR: {
			pthread_mutex_lock(&rs->mu);
			int e = rs->err;
			rs->err = 0;
			pthread_mutex_unlock(&rs->mu);
			return putint(optval, optlen, e);
		}
		case SO_LINGER:
			if (!optval || !optlen || *optlen < sizeof(struct linger))
				return fail(EINVAL);
			((struct linger *)optval)->l_onoff = !(rs->so_opts & (1ULL << optname));
			((struct linger *)optval)->l_linger = 0;
			*optlen = sizeof(struct linger);
			return 0;
		}
		return fail(ENOPROTOOPT);
	case IPPROTO_IP:
		if (optname == IP_TOS)
			return putint(optval, optlen, rs->ip_tos);
		return fail(ENOPROTOOPT);
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_NODELAY:
			return putint(optval, optlen, !!(rs->tcp_opts & (1ULL << optname)));
		case TCP_KEEPIDLE:
			return putint(optval, optlen, rs->keepalive_time ? rs->keepalive_time : 7200);
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			return putint(optval, optlen, 1);
		case TCP_MAXSEG:
			// the path MTU (IBV_MTU_*: 1 is 256 bytes)
			return putint(optval, optlen,
				      rs->id->route.num_paths ? 1 << (7 + rs->id->route.path_rec->mtu) : 2048);
		case TCP_INFO: {
			if (!optval || !optlen)
				return fail(EINVAL);
			struct tcp_info ti;
			memset(&ti, 0, sizeof(ti));
			ti.tcpi_state = (rs->state & rs_connected) ? TCP_ESTABLISHED : TCP_CLOSE;
			ti.tcpi_snd_cwnd = rs->sq_size;
			ti.tcpi_snd_mss = ti.tcpi_rcv_mss = rs->id->route.num_paths ? 1 << (7 + rs->id->route.path_rec->mtu) : 2048;
			socklen_t n = *optlen < sizeof(ti) ? *optlen : sizeof(ti);
			memcpy(optval, &ti, n);
			*optlen = n;
			return 0;
		}
		}
		return fail(ENOPROTOOPT);
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY)
			return putint(optval, optlen, !!(rs->ipv6_opts & (1ULL << optname)));
		return fail(ENOPROTOOPT);
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			return putint(optval, optlen, rs->sq_size);
		case RDMA_RQSIZE:
			return putint(optval, optlen, rs->rq_size);
		case RDMA_INLINE:
			return putint(optval, optlen, rs->sq_inline);
		case RDMA_IOMAPSIZE:
			return putint(optval, optlen, rs->target_iomap_size);
		}
		return fail(ENOPROTOOPT);
	}
	return fail(ENOPROTOOPT);
}

EXPORT int rfcntl(int socket, int cmd, ... /* arg */)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	va_list ap;
	va_start(ap, cmd);
	int ret = 0;
	switch (cmd) {
	case F_GETFL:
		ret = rs->fs_flags | O_RDWR;
		break;
	case F_SETFL: {
		int v = va_arg(ap, int);
		if (rs->state == rs_listening && ((rs->fs_flags ^ v) & O_NONBLOCK) &&
		    set_nonblock(rs->id->channel->fd, v & O_NONBLOCK))
			ret = -1;
		else
			rs->fs_flags = v & (O_NONBLOCK | O_APPEND | O_ASYNC);
		break;
	}
	case F_GETFD:
		ret = rs->fd_flags;
		break;
	case F_SETFD:
		rs->fd_flags = va_arg(ap, int);
		break;
	default:
		ret = fail(EINVAL);
		break;
	}
	va_end(ap);
	return ret;
}

// ---- I/O mapping ----------------------------------------------------------------------

// send_iomaps writes the entries of the buffers riomap gave since into the peer's table.
static int send_iomaps(struct rsock *rs, int flags)
{
	for (int i = 0; i < rs->nmaps; i++) {
		struct iomap_mr *m = &rs->maps[i];
		if (!m->pending)
			continue;
		if (wait_send(rs, flags))
			return -1;
		struct rs_iomap iom = {
			.offset = m->offset,
			.sge = {.addr = (uintptr_t)m->mr->addr, .key = m->mr->rkey, .length = (uint32_t)m->mr->length},
		};
		if (rs->opts & RS_OPT_SWAP_SGL) {
			iom.offset = bswap_64(iom.offset);
			iom.sge.addr = bswap_64(iom.sge.addr);
			iom.sge.key = bswap_32(iom.sge.key);
			iom.sge.length = bswap_32(iom.sge.length);
		}
		struct ibv_sge sge[2];
		int wflags, n = stage(rs, &iom, sizeof(iom), sge, &wflags);
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= sizeof(iom);
		m->pending = 0;
		if (post_write_msg(rs, sge, n, rs_msg_set(RS_OP_IOMAP_SGL, m->index), wflags,
				   rs->remote_iomap.addr + m->index * sizeof(struct rs_iomap), rs->remote_iomap.key))
			return -1;
	}
	rs->iomap_pending = 0;
	return 0;
}

// riomap registers buf for the peer's riowrite at offset (-1: the buffer's address) and
// sends its entry to the peer's table with the next rsend or riowrite (PROT_WRITE); a
// PROT_NONE map is local only. Offsets are not checked for overlap (as rdma-core's).
EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	pthread_mutex_lock(&rs->mu);
	off_t ret = -1;
	if (!rs->cq || (prot & ~(PROT_WRITE | PROT_NONE))) {
		errno = EINVAL;
		goto out;
	}
	int index = -1;
	if (prot & PROT_WRITE) {
		// the first entry of the peer's table no map of ours holds
		for (int i = 0; i < (int)rs->remote_iomap.length && index < 0; i++) {
			index = i;
			for (int j = 0; j < rs->nmaps; j++)
				if (rs->maps[j].mr && rs->maps[j].index == i)
					index = -1;
		}
		if (index < 0) {
			errno = ENOMEM; // the peer's table (its RDMA_IOMAPSIZE) is full
			goto out;
		}
	}
	struct iomap_mr *m = NULL;
	for (int j = 0; j < rs->nmaps && !m; j++)
		if (!rs->maps[j].mr)
			m = &rs->maps[j];
	if (!m) {
		struct iomap_mr *g = realloc(rs->maps, (rs->nmaps + 1) * sizeof(*g));
		if (!g) {
			errno = ENOMEM;
			goto out;
		}
		rs->maps = g;
		m = &rs->maps[rs->nmaps++];
	}
	int access = IBV_ACCESS_LOCAL_WRITE | ((prot & PROT_WRITE) ? IBV_ACCESS_REMOTE_WRITE : 0);
	*m = (struct iomap_mr){.offset = offset == -1 ? (uintptr_t)buf : (uint64_t)offset, .index = index};
	m->mr = ibv_reg_mr(rs->id->pd, buf, len, access);
	if (!m->mr)
		goto out;
	if (index >= 0)
		m->pending = rs->iomap_pending = 1;
	ret = (off_t)m->offset;
out:
	pthread_mutex_unlock(&rs->mu);
	return ret;
}

// riounmap drops the map of exactly buf and len (the peer is not told, as with rdma-core).
EXPORT int riounmap(int socket, void *buf, size_t len)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return fail(EBADF);
	pthread_mutex_lock(&rs->mu);
	int ret = fail(EINVAL);
	for (int j = 0; j < rs->nmaps; j++) {
		struct iomap_mr *m = &rs->maps[j];
		if (m->mr && m->mr->addr == buf && m->mr->length == len) {
			ibv_dereg_mr(m->mr);
			*m = (struct iomap_mr){.index = -1};
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&rs->mu);
	return ret;
}

// find_iomap is the peer's entry that holds offset.
static int find_iomap(struct rsock *rs, uint64_t offset, struct rs_iomap *out)
{
	for (int i = 0; i < rs->target_iomap_size; i++) {
		volatile struct rs_iomap *e = &rs->target_iomap[i];
		if (offset >= e->offset && offset < e->offset + e->sge.length) {
			out->offset = e->offset;
			out->sge.addr = e->sge.addr;
			out->sge.key = e->sge.key;
			out->sge.length = e->sge.length;
			return 1;
		}
	}
	return 0;
}

// riowrite writes count bytes into the peer's buffer mapped at offset (RDMA WRITE, no
// notification): what lies past the peer's maps is not written (a short count).
EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = lookup(socket);
	if (!rs)
		return (size_t)fail(EBADF);
	pthread_mutex_lock(&rs->mu);
	size_t left = count;
	uint32_t olen = RS_OLAP_START_SIZE;
	int ret = 0;
	struct rs_iomap iom;
	int have = 0;
	const uint8_t *p = buf;
	if (!(rs->state & rs_writable)) {
		ret = fail(rs->state & rs_connected ? EPIPE : (rs->state & (rs_disconnected | rs_error)) ? ECONNRESET : ENOTCONN);
		goto out;
	}
	if (rs->iomap_pending && (ret = send_iomaps(rs, flags)))
		goto out;
	while (left) {
		if (!have || (uint64_t)offset >= iom.offset + iom.sge.length) {
			if (!(have = find_iomap(rs, offset, &iom))) {
				if (left == count)
					ret = fail(EINVAL); // nothing of the peer's there
				break;
			}
		}
		if ((ret = wait_send(rs, flags)))
			break;
		uint32_t xfer = next_xfer(rs, &olen, left, iom.offset + iom.sge.length - offset);
		struct ibv_sge sge[2];
		int wflags, n = stage(rs, p, xfer, sge, &wflags);
		rs->sqe_avail--;
		rs->sbuf_bytes_avail -= xfer;
		struct ibv_send_wr wr = {
			.wr_id = rs_msg_set(RS_OP_WRITE, xfer),
			.sg_list = sge,
			.num_sge = n,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = wflags,
		},
				   *bad;
		wr.wr.rdma.remote_addr = iom.sge.addr + offset - iom.offset;
		wr.wr.rdma.rkey = iom.sge.key;
		int err = ibv_post_send(rs->id->qp, &wr, &bad);
		if (err) {
			ret = fail(err);
			break;
		}
		left -= xfer;
		p += xfer;
		offset += xfer;
	}
out:
	pthread_mutex_unlock(&rs->mu);
	return (ret && left == count) ? (size_t)ret : count - left;
}
