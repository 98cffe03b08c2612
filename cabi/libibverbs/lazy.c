// The Go side of libibverbs.so.1 — package cabi/ibverbs, built as libpibgw_verbs.so next
// to it — is loaded at the first call that needs it (the wrappers lazy.awk generates call
// pib_go_sym), not when the program starts. A Go runtime runs threads of its own, which
// fork(2) does not copy: a process that forks before its first verb (qperf's server forks
// for each client) then has children that load their own runtime and work, where a
// runtime started with the program would have been lost in every child.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pib.h"

#define GO_LIBRARY "libpibgw_verbs.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *golib;
static volatile int loaded;

// load opens the Go library from this library's own directory (dladdr), so that
// LD_LIBRARY_PATH, `pibgw exec` and an installed copy all find the pair.
static void load(void)
{
	char path[PATH_MAX] = GO_LIBRARY;
	Dl_info info;
	if (dladdr((void *)load, &info) && info.dli_fname) {
		const char *slash = strrchr(info.dli_fname, '/');
		if (slash)
			snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, GO_LIBRARY);
	}
	// RTLD_LOCAL: its symbols stay out of the program's namespace (the wrappers here have
	// the same names); the Go library binds its own (-Bsymbolic).
	golib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!golib) {
		fprintf(stderr, "libibverbs (pibgw): cannot load the library's Go side: %s\n", dlerror());
		abort();
	}
	loaded = 1;
}

// pib_go_loaded says whether this process has loaded the Go library (and so runs its
// runtime's threads).
int pib_go_loaded(void) { return loaded; }

// pib_go_sym returns the Go library's function name, loading the library first.
void *pib_go_sym(const char *name)
{
	pthread_once(&once, load);
	void *f = dlsym(golib, name);
	if (!f) {
		fprintf(stderr, "libibverbs (pibgw): %s is missing from %s: a libibverbs.so.1 and %s from different builds?\n",
			name, GO_LIBRARY, GO_LIBRARY);
		abort();
	}
	return f;
}
