//go:build pibgw_cabi

package main

// XRC for ../libibverbs/pib.c (IBA Annex A14): ibv_open_xrcd/ibv_close_xrcd, XRC SRQs
// (ibv_create_srq_ex with IBV_SRQT_XRC), ibv_get_srq_num, and the domain of an XRC
// receive QP (pibgo_create_qp).

/*
#include <fcntl.h>
#include "pib.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/pibgw/pibgw/hca"
)

// xrcdObj is an open XRC domain. Opened through a file, it is shared by every open of
// that file in this process (the kernel shares it between processes too; here each
// process's receive QPs and SRQs live in its own session, so that is all a domain needs).
type xrcdObj struct {
	x    *hca.XRCD
	key  xrcdKey
	refs int
}

type xrcdKey struct {
	ctx      C.uint64_t
	dev, ino uint64
}

var (
	xrcds   table[*xrcdObj]
	xrcdMu  sync.Mutex
	xrcdByF = map[xrcdKey]C.uint64_t{}
)

//export pibgo_open_xrcd
func pibgo_open_xrcd(h C.uint64_t, file C.int, dev, ino C.uint64_t, oflags C.int, perr *C.int) C.uint64_t {
	o, ok := ctxs.get(h)
	if !ok {
		*perr = einval
		return 0
	}
	xrcdMu.Lock()
	defer xrcdMu.Unlock()
	key := xrcdKey{ctx: h, dev: uint64(dev), ino: uint64(ino)}
	if file != 0 {
		if xh, ok := xrcdByF[key]; ok {
			if oflags&C.O_EXCL != 0 {
				*perr = C.int(C.EEXIST)
				return 0
			}
			x, _ := xrcds.get(xh)
			x.refs++
			return C.uint64_t(xh)
		}
		if oflags&C.O_CREAT == 0 {
			*perr = C.int(C.ENOENT) // ibv_open_xrcd(3): no domain for the file and no O_CREAT
			return 0
		}
	}
	x, err := o.ctx.OpenXRCD()
	if err != nil {
		*perr = errno(err)
		return 0
	}
	xh := xrcds.add(&xrcdObj{x: x, key: key, refs: 1})
	if file != 0 {
		xrcdByF[key] = C.uint64_t(xh)
	}
	return C.uint64_t(xh)
}

//export pibgo_close_xrcd
func pibgo_close_xrcd(h C.uint64_t) C.int {
	xrcdMu.Lock()
	defer xrcdMu.Unlock()
	o, ok := xrcds.get(h)
	if !ok {
		return einval
	}
	if o.refs > 1 {
		o.refs--
		return 0
	}
	if err := o.x.Close(); err != nil {
		return errno(err)
	}
	if xrcdByF[o.key] == h {
		delete(xrcdByF, o.key)
	}
	xrcds.del(h)
	return 0
}

//export pibgo_create_xrc_srq
func pibgo_create_xrc_srq(pdh, xh, cqh C.uint64_t, a *C.struct_ibv_srq_attr, cptr unsafe.Pointer, perr *C.int) C.uint64_t {
	pd, ok1 := pds.get(pdh)
	x, ok2 := xrcds.get(xh)
	cq, ok3 := cqs.get(cqh)
	if !ok1 || !ok2 || !ok3 {
		*perr = einval
		return 0
	}
	srq, err := pd.CreateXRCSRQ(x.x, cq, hca.SRQInitAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge)}) // srq_limit: see pibgo_create_srq
	return addSRQ(srq, err, a, cptr, perr)
}

//export pibgo_srq_num
func pibgo_srq_num(h C.uint64_t, num *C.uint32_t) C.int {
	o, ok := srqs.get(h)
	if !ok {
		return einval
	}
	n := o.srq.Num()
	if n == 0 {
		return C.int(hca.EOPNOTSUPP) // SRQ numbers belong to XRC SRQs
	}
	*num = C.uint32_t(n)
	return 0
}

// xrcdOf returns the domain of an XRC receive QP's creation.
func xrcdOf(h C.uint64_t) (*hca.XRCD, bool) {
	o, ok := xrcds.get(h)
	if !ok {
		return nil, false
	}
	return o.x, true
}
