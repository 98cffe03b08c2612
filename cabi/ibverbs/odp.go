//go:build pibgw_cabi

package main

// On-demand paging for ../libibverbs/pib.c: regions registered with IBV_ACCESS_ON_DEMAND,
// the ODP capabilities of ibv_query_device_ex, and ibv_advise_mr. A pibgw HCA never pins
// a region's pages: it reads and writes them from the program's own process, where the
// kernel brings them in as it does for any access (a page not touched yet, or swapped
// out, is faulted in then) — what an ODP region asks of an HCA. So every transport
// takes ODP regions, explicit ones: the range must be mapped when it is registered
// (internal/umem, as for any region), where a real HCA would also take a range mapped
// later; implicit ODP (the whole address space, addr NULL and length SIZE_MAX) is not
// offered (IBV_ODP_SUPPORT_IMPLICIT unset; EOPNOTSUPP).

/*
#include "pib.h"
*/
import "C"

import (
	"sync"
	"syscall"
	"unsafe"

	"github.com/pibgw/pibgw/hca"
)

// The regions registered with IBV_ACCESS_ON_DEMAND: ibv_advise_mr takes only those.
var (
	odpMu  sync.Mutex
	odpMRs = map[*hca.MR]bool{}
)

func odpAdd(mr *hca.MR) {
	odpMu.Lock()
	odpMRs[mr] = true
	odpMu.Unlock()
}

// odpDel forgets mr and reports whether it was an ODP region.
func odpDel(mr *hca.MR) bool {
	odpMu.Lock()
	defer odpMu.Unlock()
	was := odpMRs[mr]
	delete(odpMRs, mr)
	return was
}

// odpLookup returns the ODP region of pd with lkey.
func odpLookup(pd *hca.PD, lkey uint32) *hca.MR {
	odpMu.Lock()
	defer odpMu.Unlock()
	for mr := range odpMRs {
		if mr.PD() == pd && mr.LKey() == lkey {
			return mr
		}
	}
	return nil
}

//export pibgo_advise_mr
func pibgo_advise_mr(h C.uint64_t, sgl *C.struct_ibv_sge, n C.uint32_t) C.int {
	pd, ok := pds.get(h)
	if !ok || n == 0 || sgl == nil {
		return einval
	}
	for _, sge := range unsafe.Slice(sgl, int(n)) {
		mr := odpLookup(pd, uint32(sge.lkey))
		if mr == nil {
			return einval // not an ODP region of this PD (mlx5: EINVAL as well)
		}
		if _, ok := mr.Slice(uint64(sge.addr), uint32(sge.length)); !ok {
			return C.int(syscall.EFAULT)
		}
	}
	// Nothing to bring in ahead: the pages fault in at the first access, as they would
	// during a prefetch.
	return 0
}
