//go:build pibgw_cabi

package main

/*
#include "pib.h"
*/
import "C"

import "github.com/pibgw/pibgw/hca"

// handlesOf lists the handles of t's objects for which of is true.
func (t *table[T]) handlesOf(of func(T) bool) []C.uint64_t {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var hs []C.uint64_t
	for h, v := range t.m {
		if of(v) {
			hs = append(hs, C.uint64_t(h))
		}
	}
	return hs
}

// pdCtx is the context of a PD (nil for none).
func pdCtx(pd *hca.PD) *hca.Context {
	if pd == nil {
		return nil
	}
	return pd.Context()
}

// destroyContextObjects destroys every object the program left on context c at
// ibv_close_device, as closing the uverbs file does (uverbs_destroy_ufile_hw: each
// object, whatever it still holds, in the order its users go first): the QPs, so that
// nothing more arrives in the program's memory through them, then windows, AHs, SRQs,
// regions, CQs, completion channels' forwarders, XRC domains and PDs. The program's C
// objects stay allocated, as rdma-core leaves them; their handles now name nothing.
func destroyContextObjects(h C.uint64_t, c *hca.Context) {
	for _, q := range qps.handlesOf(func(o *qpObj) bool { return pdCtx(o.qp.PD()) == c }) {
		if o, ok := qps.get(q); ok {
			o.mu.Lock()
			o.mcast = nil // QP.Destroy detaches its groups
			o.mu.Unlock()
		}
		pibgo_destroy_qp(q)
	}
	for _, o := range mws.handlesOf(func(mw *hca.MW) bool { return pdCtx(mw.PD()) == c }) {
		pibgo_dealloc_mw(o)
	}
	for _, o := range ahs.handlesOf(func(ah *hca.AH) bool { return pdCtx(ah.PD()) == c }) {
		pibgo_destroy_ah(o)
	}
	for _, o := range srqs.handlesOf(func(o *srqObj) bool { return pdCtx(o.srq.PD()) == c }) {
		pibgo_destroy_srq(o)
	}
	for _, o := range mrs.handlesOf(func(mr *hca.MR) bool { return pdCtx(mr.PD()) == c }) {
		pibgo_dereg_mr(o)
	}
	for _, o := range cqs.handlesOf(func(cq *hca.CQ) bool { return cq.Context() == c }) {
		pibgo_destroy_cq(o)
	}
	for _, o := range chans.handlesOf(func(o *chanObj) bool { return o.ch.Context() == c }) {
		pibgo_destroy_channel(o) // its fd is the program's, closed by ibv_destroy_comp_channel
	}
	xrcdMu.Lock()
	xs := xrcds.handlesOf(func(o *xrcdObj) bool { return o.key.ctx == h })
	for _, x := range xs {
		if o, ok := xrcds.get(x); ok {
			o.refs = 1 // every open of it in this context ends
		}
	}
	xrcdMu.Unlock()
	for _, x := range xs {
		pibgo_close_xrcd(x)
	}
	for _, o := range pds.handlesOf(func(pd *hca.PD) bool { return pd.Context() == c }) {
		pibgo_dealloc_pd(o)
	}
}
