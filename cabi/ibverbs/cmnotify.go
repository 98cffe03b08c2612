//go:build pibgw_cabi

package main

/*
#include <stdint.h>
*/
import "C"

import "github.com/pibgw/pibgw/hca"

// pibcm_notify is rdma_notify (rdmacm.ID.Notify): 0 or an errno.
//
//export pibcm_notify
func pibcm_notify(h C.uint64_t, event C.int) C.int {
	id := cmGet(h)
	if id == nil || event < 0 || event > 255 {
		return einval
	}
	return cmErr(id.Notify(hca.EventType(event)))
}
