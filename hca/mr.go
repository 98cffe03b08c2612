package hca

import (
	"os"
	"sync/atomic"
	"unsafe"
)

// MR is a registered memory region (ibv_mr). Its addresses are the real virtual addresses
// of the registered Go slice, as verbs addresses are, so SGEs and RDMA addresses are plain
// uint64 values.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	key    uint32
	access AccessFlags
	mwRefs atomic.Int32 // memory windows bound to the region
}

// BufAddr returns the virtual address of b[0] (of b's array when b is empty), the value an
// SGE or RETH carries for it.
func BufAddr(b []byte) uint64 {
	if cap(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// RegMR registers buf with the given access (ibv_reg_mr). Remote write or atomic access
// requires local write (ibv_reg_mr(3): EINVAL otherwise).
func (pd *PD) RegMR(buf []byte, access AccessFlags) (*MR, error) {
	return pd.RegMRIOVA(buf, BufAddr(buf), access)
}

// RegMRIOVA registers buf as the region that SGEs and RDMA requests address from iova on
// (ibv_reg_mr_iova): iova must have buf's offset in its page (ib_uverbs_reg_mr: EINVAL
// otherwise).
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access AccessFlags) (*MR, error) {
	if err := checkRegion("reg_mr", buf, access); err != nil {
		return nil, err
	}
	if iova&(pageSize-1) != BufAddr(buf)&(pageSize-1) {
		return nil, errorf("reg_mr", EINVAL, "iova %#x is not at the buffer's offset in its page (%#x)", iova, BufAddr(buf)&(pageSize-1))
	}
	if pd.dead.Load() {
		return nil, errorf("reg_mr", EINVAL, "PD %d is freed", pd.id)
	}
	mr := &MR{pd: pd, buf: buf, addr: iova, access: access}
	if access&AccessZeroBased != 0 {
		mr.addr = 0
	}
	d := pd.ctx.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts.mr >= MaxMR {
		return nil, errorf("reg_mr", ENOMEM, "device has %d MRs (max_mr)", MaxMR)
	}
	var idx uint32
	if n := len(d.freeMR); n > 0 {
		idx = d.freeMR[n-1]
		d.freeMR = d.freeMR[:n-1]
	} else {
		idx = d.nextMR
		d.nextMR++
	}
	// The low byte is a generation number so a stale key does not find a reused slot.
	d.keyGen++
	mr.key = idx<<8 | uint32(d.keyGen)
	d.mrs.store(idx, mr)
	d.counts.mr++
	pd.refs.Add(1)
	d.register(mr)
	return mr, nil
}

func checkRegion(op string, buf []byte, access AccessFlags) error {
	if len(buf) == 0 {
		return errorf(op, EINVAL, "empty buffer")
	}
	// In ib_check_mr_access's order: the local write remote access needs, the bits the
	// kernel knows (EINVAL), then the FLUSH ones a device without IB_DEVICE_FLUSH_* —
	// pibgw's — refuses (EOPNOTSUPP).
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return errorf(op, EINVAL, "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE")
	}
	if access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic|AccessMWBind|AccessZeroBased|AccessFlushGlobal|AccessFlushPersistent) != 0 {
		return errorf(op, EINVAL, "unknown access flags %#x", uint32(access))
	}
	if access&(AccessFlushGlobal|AccessFlushPersistent) != 0 {
		return errorf(op, EOPNOTSUPP, "access flags %#x: no FLUSH on this device", uint32(access))
	}
	// A zero-based region is rxe_reg_user_mr's EOPNOTSUPP (ZERO_BASED is not in
	// RXE_ACCESS_SUPPORTED_MR): ibv_reg_mr_iova with iova 0 is the way to one.
	if access&AccessZeroBased != 0 {
		return errorf(op, EOPNOTSUPP, "IBV_ACCESS_ZERO_BASED is for windows; register at iova 0 instead")
	}
	return nil
}

// The access flags pibgw has no use for but takes where rxe does (ibv_access_flags).
const (
	AccessOnDemand        AccessFlags = 1 << 6 // IBV_ACCESS_ON_DEMAND
	AccessHugeTLB         AccessFlags = 1 << 7 // IBV_ACCESS_HUGETLB
	AccessFlushGlobal     AccessFlags = 1 << 8 // IB_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent AccessFlags = 1 << 9 // IB_ACCESS_FLUSH_PERSISTENT
	// AccessOptionalRange is IBV_ACCESS_OPTIONAL_RANGE: flags a provider may ignore.
	AccessOptionalRange AccessFlags = 0x3FF00000

	// accessSupportedQP is what qp_access_flags may hold: rxe's RXE_ACCESS_SUPPORTED_QP
	// (= RXE_ACCESS_SUPPORTED_MR; rxe_qp_chk_attr: EINVAL for any other bit; mlx5 ignores
	// every bit but the remote ones).
	accessSupportedQP = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind |
		AccessOnDemand | AccessFlushGlobal | AccessFlushPersistent | AccessOptionalRange
	// accessSupportedMW is what a window's access may hold: RXE_ACCESS_SUPPORTED_MW
	// (rxe_bind_mw: any other bit fails the bind).
	accessSupportedMW = accessSupportedQP | AccessZeroBased
)

// pageSize is the page size the kernel compares an I/O virtual address's offset in
// (PAGE_SIZE).
var pageSize = uint64(os.Getpagesize())

// ReregFlags is ibv_rereg_mr_flags: what a Rereg changes.
type ReregFlags uint32

const (
	ReregChangeTranslation ReregFlags = 1 << 0 // IBV_REREG_MR_CHANGE_TRANSLATION: new buffer
	ReregChangePD          ReregFlags = 1 << 1 // IBV_REREG_MR_CHANGE_PD
	ReregChangeAccess      ReregFlags = 1 << 2 // IBV_REREG_MR_CHANGE_ACCESS
)

// Rereg modifies a registered region (ibv_rereg_mr; the IBA's Reregister Memory Region
// verb, chapter 11): its translation (buf), PD or access, as flags say; the others stay. It returns
// the region's new handle, which keeps the L_Key and R_Key (ibv_rereg_mr(3) allows new
// keys, but the providers keep them: rxe_rereg_user_mr changes the PD and access in place
// and returns no new MR, so uverbs answers with the old keys; mlx5_ib_rereg_user_mr
// keeps the mkey when it can update it, a new translation included); mr is no longer
// registered. Windows bound to the region stay bound to it (neither rxe_rereg_user_mr nor
// mlx5_ib_rereg_user_mr looks at them; the IBA would refuse the verb, 10.6.7.2.6); a
// region whose arguments are invalid is not changed (EINVAL). rxe refuses
// CHANGE_TRANSLATION (EOPNOTSUPP); pibgw takes it as mlx5 does, with the keys kept.
func (mr *MR) Rereg(flags ReregFlags, pd *PD, buf []byte, access AccessFlags) (*MR, error) {
	const op = "rereg_mr"
	if flags == 0 || flags&^(ReregChangeTranslation|ReregChangePD|ReregChangeAccess) != 0 {
		return nil, errorf(op, EINVAL, "flags %#x (want a non-empty set of CHANGE_TRANSLATION, CHANGE_PD, CHANGE_ACCESS)", uint32(flags))
	}
	nmr := &MR{pd: mr.pd, buf: mr.buf, addr: mr.addr, access: mr.access}
	if flags&ReregChangePD != 0 {
		if pd == nil || pd.ctx != mr.pd.ctx {
			return nil, errorf(op, EINVAL, "CHANGE_PD without a PD of the region's context")
		}
		nmr.pd = pd
	}
	if flags&ReregChangeAccess != 0 {
		nmr.access = access
	}
	if flags&ReregChangeTranslation != 0 {
		nmr.buf = buf
	}
	if err := checkRegion(op, nmr.buf, nmr.access); err != nil {
		return nil, err
	}
	if nmr.pd.dead.Load() {
		return nil, errorf(op, EINVAL, "PD %d is freed", nmr.pd.id)
	}
	// A new translation starts at its buffer (libibverbs passes the address as hca_va);
	// otherwise the region keeps its I/O virtual address.
	switch {
	case nmr.access&AccessZeroBased != 0:
		nmr.addr = 0
	case flags&ReregChangeTranslation != 0 || mr.access&AccessZeroBased != 0:
		nmr.addr = BufAddr(nmr.buf)
	}
	d := mr.pd.ctx.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	idx := mr.key >> 8
	if d.mrs.load(idx) != mr {
		return nil, errorf(op, EINVAL, "MR %#x is not registered", mr.key)
	}
	nmr.key = mr.key
	d.mrs.store(idx, nmr)
	if mr.mwRefs.Load() > 0 {
		d.moveWindows(mr, nmr)
	}
	d.unregister(mr)
	d.register(nmr)
	if nmr.pd != mr.pd {
		nmr.pd.refs.Add(1)
		mr.pd.refs.Add(-1)
	}
	return nmr, nil
}

// MRAttr is what a region query returns: ibv_mr's fields.
type MRAttr struct {
	Addr   uint64
	Length uint64
	LKey   uint32
	RKey   uint32
	Access AccessFlags
	PD     *PD
}

// Query returns the region's attributes (the fields of struct ibv_mr).
func (mr *MR) Query() MRAttr {
	return MRAttr{Addr: mr.addr, Length: uint64(len(mr.buf)), LKey: mr.key, RKey: mr.key, Access: mr.access, PD: mr.pd}
}

// LKey is the local key; RKey the remote key (the same value, as on most HCAs).
func (mr *MR) LKey() uint32 { return mr.key }

// RKey is the remote key.
func (mr *MR) RKey() uint32 { return mr.key }

// Addr is the region's start address.
func (mr *MR) Addr() uint64 { return mr.addr }

// Length is the region's length.
func (mr *MR) Length() int { return len(mr.buf) }

// Access returns the access flags.
func (mr *MR) Access() AccessFlags { return mr.access }

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// Bytes returns the registered slice.
func (mr *MR) Bytes() []byte { return mr.buf }

// Dereg deregisters the region (ibv_dereg_mr).
func (mr *MR) Dereg() error {
	d := mr.pd.ctx.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	idx := mr.key >> 8
	if d.mrs.load(idx) != mr {
		return errorf("dereg_mr", EINVAL, "MR %#x is not registered", mr.key)
	}
	// IBA 10.6.7.2.6: a region with windows bound to it cannot be deregistered; rxe_dereg_mr
	// says EINVAL (mlx5, which does not track windows, deregisters it).
	if n := mr.mwRefs.Load(); n > 0 {
		return errorf("dereg_mr", EINVAL, "MR %#x has %d memory windows bound", mr.key, n)
	}
	d.mrs.store(idx, nil)
	d.freeMR = append(d.freeMR, idx)
	d.counts.mr--
	mr.pd.refs.Add(-1)
	d.unregister(mr)
	return nil
}

// LookupKey finds the MR with the given L_Key or R_Key.
func (d *Device) LookupKey(key uint32) *MR {
	mr := d.mrs.load(key >> 8)
	if mr == nil || mr.key != key {
		return nil
	}
	return mr
}

// Slice returns the registered bytes [addr, addr+length) if they lie inside the region.
func (mr *MR) Slice(addr uint64, length uint32) ([]byte, bool) {
	if addr < mr.addr {
		return nil, false
	}
	off := addr - mr.addr
	end := off + uint64(length)
	if end < off || end > uint64(len(mr.buf)) {
		return nil, false
	}
	return mr.buf[off:end:end], true
}

// rawBytes reinterprets a user virtual address as bytes: the inline-data path, where
// libibverbs too copies from any address the caller names. The caller keeps the memory
// alive for the duration of the post.
func rawBytes(addr uint64, n uint32) []byte {
	if addr == 0 || n == 0 {
		return nil
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}
