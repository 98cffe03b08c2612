//go:build pibgw_cabi

package main

// Memory windows and region reregistration for ../libibverbs/pib.c: ibv_alloc_mw,
// ibv_dealloc_mw and ibv_bind_mw (inline in verbs.h, through context->ops), ibv_rereg_mr,
// and the window of an IBV_WR_BIND_MW work request.

/*
#include "pib.h"
*/
import "C"

import (
	"unsafe"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/umem"
)

var mws table[*hca.MW]

//export pibgo_alloc_mw
func pibgo_alloc_mw(h C.uint64_t, typ C.uint, rkey *C.uint32_t, perr *C.int) C.uint64_t {
	pd, ok := pds.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	mw, err := pd.AllocMW(hca.MWType(typ))
	if err != nil {
		*perr = errno(err)
		return 0
	}
	*rkey = C.uint32_t(mw.RKey())
	return C.uint64_t(mws.add(mw))
}

//export pibgo_dealloc_mw
func pibgo_dealloc_mw(h C.uint64_t) C.int {
	mw, ok := mws.get(h)
	if !ok {
		return einval
	}
	if err := mw.Dealloc(); err != nil {
		return errno(err)
	}
	mws.del(h)
	return 0
}

// bindOf resolves the handles of a bind (0 for no region).
func bindOf(mwh, mrh C.uint64_t, addr, length C.uint64_t, access C.uint) (hca.MWBind, bool) {
	mw, ok := mws.get(mwh)
	if !ok {
		return hca.MWBind{}, false
	}
	b := hca.MWBind{MW: mw, Addr: uint64(addr), Length: uint64(length), Access: hca.AccessFlags(access)}
	if mrh != 0 {
		if b.MR, ok = mrs.get(mrh); !ok {
			return hca.MWBind{}, false
		}
	}
	return b, true
}

//export pibgo_bind_mw
func pibgo_bind_mw(qh, mwh, wrid C.uint64_t, flags C.uint, mrh, addr, length C.uint64_t, access C.uint, rkey *C.uint32_t) C.int {
	o, ok := qps.get(qh)
	if !ok {
		return einval
	}
	b, ok := bindOf(mwh, mrh, addr, length, access)
	if !ok {
		return einval
	}
	k, err := o.qp.BindMW(b.MW, uint64(wrid), hca.SendFlags(flags), b)
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(k)
	return 0
}

// bindWR fills wr.Bind from a flattened IBV_WR_BIND_MW.
func bindWR(w *C.struct_pib_swr, wr *hca.SendWR) bool {
	if w.mw == 0 {
		return true // the post fails with EINVAL: a bind without a window
	}
	b, ok := bindOf(w.mw, w.mr, w.remote_addr, w.bind_length, C.uint(w.bind_access))
	if !ok {
		return false
	}
	b.RKey = uint32(w.rkey)
	wr.Bind = b
	wr.RemoteAddr, wr.RKey = 0, 0
	return true
}

//export pibgo_rereg_mr
func pibgo_rereg_mr(h C.uint64_t, flags C.int, pdh C.uint64_t, addr unsafe.Pointer, length C.size_t, access C.int,
	lkey, rkey *C.uint32_t) C.int {
	// Every refusal here is the kernel's (IBV_REREG_MR_ERR_CMD); libibverbs' own checks
	// are in ../libibverbs/pib.c.
	mr, ok := mrs.get(h)
	if !ok {
		return einval
	}
	var pd *hca.PD
	if pdh != 0 {
		if pd, ok = pds.get(pdh); !ok {
			return einval
		}
	}
	var buf []byte
	if addr != nil && length > 0 {
		buf = unsafe.Slice((*byte)(addr), int(length))
	}
	// The memory the region will have, with the access it will have, as ibv_reg_mr checks
	// it (a refusal of the kernel's command: IBV_REREG_MR_ERR_CMD with EFAULT).
	if flags&(C.IBV_REREG_MR_CHANGE_TRANSLATION|C.IBV_REREG_MR_CHANGE_ACCESS) != 0 {
		at, n := uintptr(hca.BufAddr(mr.Bytes())), uintptr(mr.Length())
		if buf != nil {
			at, n = uintptr(addr), uintptr(length)
		}
		writable := mr.Access()&hca.AccessFlags(accessWritable) != 0
		if flags&C.IBV_REREG_MR_CHANGE_ACCESS != 0 {
			writable = access&accessWritable != 0
		}
		if err := umem.Check(at, n, writable); err != nil {
			return errno(err)
		}
	}
	nmr, err := mr.Rereg(hca.ReregFlags(flags), pd, buf, hca.AccessFlags(access&^accessHints))
	if err != nil {
		return errno(err)
	}
	// ODP follows the access flags when they change, else stays as it was.
	if odp := odpDel(mr); flags&C.IBV_REREG_MR_CHANGE_ACCESS != 0 && access&C.IBV_ACCESS_ON_DEMAND != 0 ||
		flags&C.IBV_REREG_MR_CHANGE_ACCESS == 0 && odp {
		odpAdd(nmr)
	}
	mrs.set(h, nmr)
	*lkey = C.uint32_t(nmr.LKey())
	*rkey = C.uint32_t(nmr.RKey())
	return 0
}
