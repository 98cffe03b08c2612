//go:build pibgw_cabi

package main

// Completion timestamps for ../libibverbs/pib.c: CQs made by ibv_create_cq_ex with
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP (or _WALLCLOCK) stamp each completion with the
// device clock as it is made (hca.CQ.SetTimestamps), which counts nanoseconds
// (hca_core_clock 1 GHz); ibv_query_rt_values_ex reads that clock.

/*
#include "pib.h"
*/
import "C"

//export pibgo_cq_timestamps
func pibgo_cq_timestamps(h C.uint64_t) C.int {
	cq, ok := cqs.get(h)
	if !ok {
		return einval
	}
	cq.SetTimestamps(true)
	return 0
}

//export pibgo_read_clock
func pibgo_read_clock(h C.uint64_t, core, wallBase *C.uint64_t) C.int {
	o, ok := ctxs.get(h)
	if !ok {
		return einval
	}
	d := o.ctx.Device()
	*core = C.uint64_t(d.CoreClock())
	*wallBase = C.uint64_t(d.WallClock(0))
	return 0
}
