package hca

import (
	"sync"
)

// Memory windows (IBA 10.6.7): a window gives a remote peer access, through its own
// R_Key, to part of a registered region, with its own access rights, and is bound and
// invalidated through a QP's send queue rather than by a verb that waits for the HCA.
//
// Type 1 windows (IBA 10.6.7.2.1) belong to a PD, are bound with ibv_bind_mw (which posts
// a bind WR) and are never invalidated by LOCAL_INV or SEND_WITH_INV: rebinding with
// length 0 unbinds them. Type 2 windows (type 2B, IBA 10.6.7.2.2) are bound by a BIND_MW
// WR, only from the Free state, are tied to the QP that bound them (remote access must
// come through that QP), and go back to Free by LOCAL_INV or by a SEND_WITH_INV that
// names their R_Key.
//
// Keys: an MW's R_Key is mwKeyBit | index<<8 | key, the low 8 bits the consumer's "key"
// that each bind may change (ibv_inc_rkey), so a stale R_Key stops working after a
// rebind; MR keys never have mwKeyBit set.

// MWType is ibv_mw_type.
type MWType uint8

const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// MaxMW is how many memory windows a device holds (ibv_device_attr.max_mw).
const MaxMW = 65535

const mwKeyBit = 1 << 31

// IsMWKey reports whether an R_Key names a memory window rather than a region.
func IsMWKey(key uint32) bool { return key&mwKeyBit != 0 }

// IncRKey is ibv_inc_rkey: the same window index with the next 8-bit key, the R_Key a
// consumer gives a window's next bind.
func IncRKey(rkey uint32) uint32 { return rkey&^0xFF | (rkey+1)&0xFF }

type mwState uint8

const (
	mwFree    mwState = iota // type 2, unbound
	mwValid                  // type 1 always (bound when length > 0); type 2 bound
	mwInvalid                // deallocated
)

// MW is a memory window (ibv_mw).
type MW struct {
	pd  *PD
	typ MWType
	idx uint32

	mu     sync.Mutex
	rkey   uint32
	state  mwState
	mr     *MR
	addr   uint64 // window start as remote addresses name it (0 for zero-based)
	mrAddr uint64 // where the window starts in the MR's address space
	length uint64
	access AccessFlags
	qp     *QP // type 2: the QP the window is bound through
}

// mwTable is the device's record of its windows, by key index.
type mwTable struct {
	slots slotTable[MW]
	next  uint32
	free  []uint32
	count int
}

// AllocMW allocates a memory window (ibv_alloc_mw). A type 1 window starts valid and
// unbound (length 0), a type 2 window Free (IBA 10.6.7.2).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	const op = "alloc_mw"
	if typ != MWType1 && typ != MWType2 {
		return nil, errorf(op, EINVAL, "memory window type %d (want 1 or 2)", typ)
	}
	if pd.dead.Load() {
		return nil, errorf(op, EINVAL, "PD %d is freed", pd.id)
	}
	d := pd.ctx.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	t := &d.mws
	if t.count >= MaxMW {
		return nil, errorf(op, ENOMEM, "device has %d MWs (max_mw)", MaxMW)
	}
	var idx uint32
	if n := len(t.free); n > 0 {
		idx, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.next++ // index 0 is never used
		idx = t.next
	}
	d.keyGen++
	mw := &MW{pd: pd, typ: typ, idx: idx, rkey: mwKeyBit | idx<<8 | uint32(d.keyGen)}
	if typ == MWType1 {
		mw.state = mwValid
	}
	t.slots.store(idx, mw)
	t.count++
	pd.refs.Add(1)
	d.register(mw)
	return mw, nil
}

// RKey is the window's current R_Key: after a bind, the key that bind gave it.
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.rkey
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Bound reports whether the window currently grants access (bound, length > 0).
func (mw *MW) Bound() bool {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.state == mwValid && mw.length > 0
}

// Dealloc frees the window (ibv_dealloc_mw); a bound window is invalidated first.
func (mw *MW) Dealloc() error {
	d := mw.pd.ctx.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mws.slots.load(mw.idx) != mw {
		return errorf("dealloc_mw", EINVAL, "MW %#x is not allocated", mw.rkey)
	}
	mw.mu.Lock()
	mw.unbindLocked()
	mw.state = mwInvalid
	mw.mu.Unlock()
	d.mws.slots.store(mw.idx, nil)
	d.mws.free = append(d.mws.free, mw.idx)
	d.mws.count--
	mw.pd.refs.Add(-1)
	d.unregister(mw)
	return nil
}

func (mw *MW) unbindLocked() {
	if mw.mr != nil {
		mw.mr.mwRefs.Add(-1)
	}
	mw.mr, mw.qp = nil, nil
	mw.addr, mw.mrAddr, mw.length, mw.access = 0, 0, 0, 0
}

// moveWindows rebinds the windows bound to mr to nmr, which replaced it (Rereg, under
// d.mu). A bind racing with it checks its region by key (bindMW) and so fails on mr.
func (d *Device) moveWindows(mr, nmr *MR) {
	for i := uint32(1); i <= d.mws.next; i++ {
		mw := d.mws.slots.load(i)
		if mw == nil {
			continue
		}
		mw.mu.Lock()
		if mw.mr == mr {
			mw.mr = nmr
			mr.mwRefs.Add(-1)
			nmr.mwRefs.Add(1)
		}
		mw.mu.Unlock()
	}
}

// inspect snapshots the window for `pibgw inspect`.
func (mw *MW) inspect() *MWInfo {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	mi := &MWInfo{Type: uint8(mw.typ), RKey: mw.rkey, Bound: mw.state == mwValid && mw.length > 0}
	if mi.Bound {
		mi.Addr, mi.Length, mi.Access, mi.MR = mw.addr, mw.length, AccessString(mw.access), mw.mr.key
		if mw.qp != nil {
			mi.QPN = mw.qp.num
		}
	}
	return mi
}

// lookupMW finds the window an R_Key names (any key generation).
func (d *Device) lookupMW(key uint32) *MW {
	if !IsMWKey(key) {
		return nil
	}
	return d.mws.slots.load(key &^ mwKeyBit >> 8)
}

// MWBind is ibv_send_wr.bind_mw (with its ibv_mw_bind_info): the window, the R_Key it
// gets (same index, the consumer's new 8-bit key: IncRKey), and what it is bound to. A
// nil MR with length 0 unbinds a type 1 window.
type MWBind struct {
	MW     *MW
	RKey   uint32
	MR     *MR
	Addr   uint64
	Length uint64
	Access AccessFlags // IBV_ACCESS_REMOTE_READ/WRITE/ATOMIC, IBV_ACCESS_ZERO_BASED
}

// BindMW binds a type 1 window (ibv_bind_mw): it posts a BIND_MW work request that
// completes like any other (IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR), and returns the
// R_Key the window has once the bind has executed (the window's next key).
func (qp *QP) BindMW(mw *MW, wrid uint64, flags SendFlags, b MWBind) (uint32, error) {
	const op = "bind_mw"
	if mw == nil || mw.typ != MWType1 {
		return 0, errorf(op, EINVAL, "ibv_bind_mw binds type 1 windows; post a BIND_MW WR for type 2")
	}
	if b.MR == nil && (b.Addr != 0 || b.Length != 0) {
		return 0, errorf(op, EINVAL, "no MR but address %#x length %d", b.Addr, b.Length)
	}
	if b.MR != nil && b.MR.pd != mw.pd {
		return 0, errorf(op, EPERM, "MR and MW are in different PDs")
	}
	// rxe_bind_mw (and mlx5_bind_mw) refuse a zero-based type 1 window at the call
	// (o10-36.2.2); every other access bit is taken (validateBind).
	if b.Access&AccessZeroBased != 0 {
		return 0, errorf(op, EINVAL, "type 1 windows are never zero-based")
	}
	b.MW = mw
	b.RKey = IncRKey(mw.RKey())
	wr := SendWR{WRID: wrid, Opcode: WRBindMW, SendFlags: flags, Bind: b, bindType1: true}
	if _, err := qp.PostSend([]SendWR{wr}); err != nil {
		return 0, err
	}
	return b.RKey, nil
}

// validateBind is the post-time check of a BIND_MW WR (ibv_post_send: EINVAL).
func validateBind(wr *SendWR) error {
	const op = "post_send"
	b := &wr.Bind
	if b.MW == nil {
		return errorf(op, EINVAL, "BIND_MW without a window")
	}
	// A type 1 window may be bound by a BIND_MW WR too: rxe's ibv_bind_mw posts just that
	// WR and the kernel (rxe_bind_mw) cannot tell them apart; mlx5's post_send binds
	// either type.
	// The window's access may carry bits besides the remote ones and ZERO_BASED (rxe takes
	// RXE_ACCESS_SUPPORTED_MW, bindMW): a window grants only remote access, so LOCAL_WRITE,
	// MW_BIND and the rest mean nothing to it (mlx5's set_bind_seg likewise uses the
	// remote bits only).
	return nil
}

// ExecLocal executes a send WR that has no packets, in its turn in the send queue: a
// BIND_MW or a LOCAL_INV. It returns the status its completion carries; an error status
// is a local error (the transport completes the WR with it and moves the QP to ERR).
func (qp *QP) ExecLocal(wr *SendWR) WCStatus {
	switch wr.Opcode {
	case WRBindMW:
		if !qp.bindMW(&wr.Bind) {
			return WCMWBindErr
		}
	case WRLocalInv:
		// IBA 10.6.7.2.2 (o10-37.2.26 for type 1 windows): only a bound type 2 window
		// of the QP's PD can be invalidated. Regions from ibv_reg_mr are not
		// invalidatable either (only fast-registered ones are, which user verbs lack).
		if !qp.invalidate(wr.InvalidateRKey, false) {
			return WCLocQPOpErr
		}
	}
	return WCSuccess
}

// bindMW carries out a bind, checking it as IBA 10.6.7.2 requires; false is a bind
// error (IBV_WC_MW_BIND_ERR).
func (qp *QP) bindMW(b *MWBind) bool {
	mw := b.MW
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.state == mwInvalid || b.RKey&^0xFF != mw.rkey&^0xFF {
		return false // deallocated, or an R_Key of another window
	}
	// C10-72: the QP and the window share a PD.
	if qp.pd != mw.pd {
		return false
	}
	// rxe_bind_mw: access bits beyond RXE_ACCESS_SUPPORTED_MW fail the bind.
	if b.Access&^accessSupportedMW != 0 {
		return false
	}
	switch mw.typ {
	case MWType1:
		// o10-36.2.2: type 1 windows are never zero-based.
		if b.Access&AccessZeroBased != 0 {
			return false
		}
	case MWType2:
		// o10-37.2.30: a type 2 window is bound only from the Free state; o10-37.2.40:
		// it cannot be "unbound" by a zero-length bind (it is invalidated instead).
		if mw.state != mwFree || b.MR == nil || b.Length == 0 {
			return false
		}
	}
	var mrAddr uint64
	if b.MR != nil {
		mr := b.MR
		d := qp.dev
		if d.LookupKey(mr.key) != mr || mr.pd != mw.pd || mr.access&AccessZeroBased != 0 {
			return false
		}
		// C10-73: the region allows binding; C10-74: a writable window needs a
		// region with local write.
		if mr.access&AccessMWBind == 0 {
			return false
		}
		if b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && mr.access&AccessLocalWrite == 0 {
			return false
		}
		// C10-75: the window lies inside the region. A zero-based window's remote
		// address 0 is its bind address.
		end := b.Addr + b.Length
		if b.Addr < mr.addr || end < b.Addr || end > mr.addr+uint64(len(mr.buf)) {
			return false
		}
		mrAddr = b.Addr
	} else if b.Length != 0 {
		return false
	}
	mw.unbindLocked()
	mw.rkey = b.RKey
	mw.state = mwValid
	if b.Length > 0 {
		mw.mr = b.MR
		mw.mr.mwRefs.Add(1)
		mw.length, mw.access, mw.mrAddr = b.Length, b.Access, mrAddr
		if b.Access&AccessZeroBased == 0 {
			mw.addr = b.Addr
		}
		if mw.typ == MWType2 {
			mw.qp = qp
		}
	}
	return true
}

// invalidate returns the type 2 window rkey names to the Free state (LOCAL_INV, or the
// responder's part of SEND_WITH_INV when remote is set, IBA 10.6.7.2.2). It fails for a
// key that names no bound type 2 window of the QP's PD; a remote invalidation must also
// come through the QP the window is bound to.
func (qp *QP) invalidate(rkey uint32, remote bool) bool {
	mw := qp.dev.lookupMW(rkey)
	if mw == nil {
		return false
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.rkey != rkey || mw.typ != MWType2 || mw.state != mwValid || mw.pd != qp.pd {
		return false
	}
	if remote && mw.qp != qp {
		return false
	}
	mw.unbindLocked()
	mw.state = mwFree
	return true
}

// InvalidateRemote carries out the invalidation a SEND_WITH_INV asks of its responder
// (IBA 10.6.7.2.2). False is the IBA's class J error (9.9.3: Invalid Request NAK, the
// receive WQE completes with IBV_WC_REM_INV_REQ_ERR): the key names no type 2 window
// bound through this QP, or a type 1 window (o10-37.2.26).
func (qp *QP) InvalidateRemote(rkey uint32) bool { return qp.invalidate(rkey, true) }

// RemoteAccess checks an R_Key for an access of n bytes at va (IBA 9.7.5.2.4, 10.6.7.2):
// it names a region of the QP's PD, or a window bound in it (a type 2 window through this
// QP), that allows the access, and [va, va+n) lies inside. It returns the region and the
// address in the region's address space where the access starts.
func (qp *QP) RemoteAccess(rkey uint32, va, n uint64, acc AccessFlags) (*MR, uint64, bool) {
	return qp.remoteAccess(qp.pd, rkey, va, n, acc)
}

func (qp *QP) remoteAccess(qpd *PD, rkey uint32, va, n uint64, acc AccessFlags) (*MR, uint64, bool) {
	if n > 1<<31 {
		return nil, 0, false
	}
	if !IsMWKey(rkey) {
		mr := qp.dev.LookupKey(rkey)
		if mr == nil || mr.pd != qpd || mr.access&acc == 0 {
			return nil, 0, false
		}
		if _, ok := mr.Slice(va, uint32(n)); !ok {
			return nil, 0, false
		}
		return mr, va, true
	}
	mw := qp.dev.lookupMW(rkey)
	if mw == nil {
		return nil, 0, false
	}
	mw.mu.Lock()
	mr, base, mrAddr, length, access, bqp, ok := mw.mr, mw.addr, mw.mrAddr, mw.length, mw.access, mw.qp, mw.rkey == rkey && mw.state == mwValid
	typ, pd := mw.typ, mw.pd
	mw.mu.Unlock()
	if !ok || mr == nil || pd != qpd || access&acc == 0 || (typ == MWType2 && bqp != qp) {
		return nil, 0, false
	}
	off := va - base
	if va < base || off+n < off || off+n > length {
		return nil, 0, false
	}
	return mr, mrAddr + off, true
}
