// context.c: a device context's descriptors and the calls around them (ibv_open_device(3),
// ibv_import_device(3), ibv_fork_init(3)), as the kernel's uverbs gives them.
#include "conform.h"

#include <fcntl.h>
#include <unistd.h>

void conform_context(struct side *a, struct side *b)
{
	struct ibv_context *c = a->ctx;
	int fl = fcntl(c->cmd_fd, F_GETFD);
	T("ctx_cmd_fd_open", c->cmd_fd >= 0 && fl >= 0, "cmd_fd %d: %m", c->cmd_fd);
	T("ctx_cmd_fd_cloexec", fl >= 0 && (fl & FD_CLOEXEC), "cmd_fd flags %#x", fl);
	int d = dup(c->cmd_fd);
	T("ctx_cmd_fd_dup", d >= 0, "dup(cmd_fd): %m");
	errno = 0;
	struct ibv_context *imp = d >= 0 ? ibv_import_device(d) : NULL;
	T("ctx_import_device", imp || errno == EOPNOTSUPP, "ibv_import_device: NULL, errno %d", errno);
	if (imp)
		ibv_close_device(imp);
	else if (d >= 0)
		close(d);
	T("ctx_cmd_fd_distinct", a->ctx->cmd_fd != b->ctx->cmd_fd, "both contexts' cmd_fd %d", a->ctx->cmd_fd);
	fl = fcntl(c->async_fd, F_GETFD);
	T("ctx_async_fd_open", c->async_fd >= 0 && fl >= 0 && (fl & FD_CLOEXEC), "async_fd %d flags %#x", c->async_fd, fl);
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	T("ctx_num_comp_vectors", c->num_comp_vectors == ncpu, "num_comp_vectors %d, CPUs %ld (rxe: one a CPU)",
	  c->num_comp_vectors, ncpu);
	struct ibv_cq *last = ibv_create_cq(c, 4, NULL, NULL, c->num_comp_vectors - 1);
	T("ctx_last_comp_vector", last != NULL, "create_cq on vector %d: %m", c->num_comp_vectors - 1);
	if (last)
		ibv_destroy_cq(last);

	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	MUST(l, "ibv_get_device_list: %m");
	struct ibv_context *x = ibv_open_device(l[0]);
	struct ibv_context *y = ibv_open_device(l[0]);
	T("ctx_open_twice", x && y && x != y && x->cmd_fd != y->cmd_fd && x->device == l[0] && y->device == l[0],
	  "two contexts of %s", ibv_get_device_name(l[0]));
	int xfd = x ? x->cmd_fd : -1, xafd = x ? x->async_fd : -1;
	T("ctx_close", x && ibv_close_device(x) == 0, "ibv_close_device: %m");
	T("ctx_close_closes_fds", fcntl(xfd, F_GETFD) < 0 && errno == EBADF && fcntl(xafd, F_GETFD) < 0,
	  "cmd_fd %d or async_fd %d still open after ibv_close_device", xfd, xafd);
	if (y)
		ibv_close_device(y);
	ibv_free_device_list(l);

	T("ctx_fork_init", ibv_fork_init() == 0, "ibv_fork_init");
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	T("ctx_fork_status", fs == IBV_FORK_UNNEEDED || fs == IBV_FORK_ENABLED, "ibv_is_fork_initialized %d", fs);
}
