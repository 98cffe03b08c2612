// The Go side of libibverbs.so.1 — package cabi/ibverbs, built as libpibgw_verbs.so next
// to it — is loaded at the first call that needs it (the wrappers lazy.awk generates call
// pib_go_sym), not when the program starts.
//
// fork(2): a Go runtime runs threads of its own, which fork does not copy, so the runtime a
// parent loaded cannot run in its child. A child that goes on to use verbs or rdma_cm (as
// with the kernel's uverbs, where it opens devices and makes objects of its own) gets a
// runtime of its own: the first call after the fork loads a fresh copy of the Go library
// (from a memfd, so the dynamic loader maps it anew instead of handing back the parent's),
// which attaches to the daemon as a new session. The parent's objects stay off limits in
// the child, as without ibv_fork_init: their handles, from the parent's runtime, name
// nothing in the child's (each copy numbers its handles from its own base).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pib.h"

#define GO_LIBRARY "libpibgw_verbs.so"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *golib;
static volatile int loaded;
// generation counts the forks this process descends from that happened with the Go side
// loaded: 0 in a process that loaded it itself or never did.
static unsigned generation;

// library_path is the Go library in this library's own directory (dladdr), so that
// LD_LIBRARY_PATH, `pibgw exec` and an installed copy all find the pair.
static void library_path(char *path, size_t size)
{
	Dl_info info;
	snprintf(path, size, "%s", GO_LIBRARY);
	if (dladdr((void *)library_path, &info) && info.dli_fname) {
		const char *slash = strrchr(info.dli_fname, '/');
		if (slash)
			snprintf(path, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, GO_LIBRARY);
	}
}

// fresh_copy returns, in path, a name through which the loader maps the Go library anew
// although the parent's copy is mapped in this process: a memfd holding its bytes
// (/proc/self/fd/N; *fd is to be closed after dlopen). It returns -1 if none could be made.
static int fresh_copy(char *path, size_t size, int *fd)
{
	*fd = -1;
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	int out = memfd_create(GO_LIBRARY, MFD_CLOEXEC);
	char buf[65536];
	ssize_t n = out < 0 ? -1 : 0;
	while (out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n) {
			n = -1;
			break;
		}
	close(in);
	if (n < 0) {
		if (out >= 0)
			close(out);
		return -1;
	}
	*fd = out;
	snprintf(path, size, "/proc/self/fd/%d", out);
	return 0;
}

static void load(void)
{
	char path[PATH_MAX];
	library_path(path, sizeof(path));
	int fd = -1;
	if (generation && fresh_copy(path, sizeof(path), &fd) < 0) {
		fprintf(stderr, "libibverbs (pibgw): cannot copy %s for this forked process's own Go runtime: %m\n", path);
		abort();
	}
	// RTLD_LOCAL: its symbols stay out of the program's namespace (the wrappers here have
	// the same names); the Go library binds its own (-Bsymbolic).
	golib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (fd >= 0)
		close(fd);
	if (!golib) {
		fprintf(stderr, "libibverbs (pibgw): cannot load the library's Go side: %s\n", dlerror());
		abort();
	}
	if (generation) {
		void (*base)(uint64_t) = dlsym(golib, "pibgo_handle_base");
		if (base)
			base((uint64_t)generation << 48);
	}
	loaded = 1;
}

// pib_go_loaded says whether this process has loaded the Go library (and so runs its
// runtime's threads).
int pib_go_loaded(void) { return loaded; }

// pib_go_generation is the number of forks (with the Go side loaded) this process
// descends from: objects made in an earlier generation belong to an ancestor.
unsigned pib_go_generation(void) { return generation; }

// pib_go_sym returns the Go library's function name, loading the library first.
void *pib_go_sym(const char *name)
{
	pthread_mutex_lock(&mu);
	if (!loaded)
		load();
	void *f = dlsym(golib, name);
	pthread_mutex_unlock(&mu);
	if (!f) {
		fprintf(stderr, "libibverbs (pibgw): %s is missing from %s: a libibverbs.so.1 and %s from different builds?\n",
			name, GO_LIBRARY, GO_LIBRARY);
		abort();
	}
	return f;
}

// The fork handlers keep mu whole across fork(2); in the child, a loaded Go side is
// forgotten (and the wrappers' cached functions with it) so that the next call loads a
// copy of its own.
static void prepare(void) { pthread_mutex_lock(&mu); }
static void parent(void) { pthread_mutex_unlock(&mu); }
static void child(void)
{
	pthread_mutex_init(&mu, NULL);
	if (loaded) {
		loaded = 0;
		golib = NULL;
		generation++;
		pib_go_forget();
	}
}

__attribute__((constructor)) static void init_atfork(void) { pthread_atfork(prepare, parent, child); }
