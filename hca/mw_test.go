package hca

import (
	"errors"
	"slices"
	"testing"
)

// mwFixture is a device with an RC QP (no transport behind it), a region that allows
// binding and one that does not; the tests drive the bind, invalidate and access rules
// directly.
type mwFixture struct {
	d      *Device
	pd     *PD
	qp     *QP
	mr     *MR
	noBind *MR
	buf    []byte
}

func newMWFixture(t *testing.T) *mwFixture {
	t.Helper()
	d, err := NewDevice(Config{Name: "pib_0", NodeGUID: 0x0002c90300000300,
		Transports: map[QPType]Transport{QPTypeRC: nopTransport{}, QPTypeUC: nopTransport{}}})
	if err != nil {
		t.Fatal(err)
	}
	f := &mwFixture{d: d, buf: make([]byte, 8192)}
	c := d.Open()
	if f.pd, err = c.AllocPD(); err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.qp, err = f.pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if f.mr, err = f.pd.RegMR(f.buf, AccessLocalWrite|AccessRemoteRead|AccessRemoteWrite|AccessMWBind); err != nil {
		t.Fatal(err)
	}
	if f.noBind, err = f.pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMWAllocAndKeys(t *testing.T) {
	f := newMWFixture(t)
	if _, err := f.pd.AllocMW(3); !errors.Is(err, EINVAL) {
		t.Fatalf("type 3: %v", err)
	}
	w1, err := f.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	w2, _ := f.pd.AllocMW(MWType2)
	if !IsMWKey(w1.RKey()) || !IsMWKey(w2.RKey()) || IsMWKey(f.mr.RKey()) || w1.RKey()>>8 == w2.RKey()>>8 {
		t.Fatalf("keys %#x %#x (MR %#x)", w1.RKey(), w2.RKey(), f.mr.RKey())
	}
	if IncRKey(0x800001FF) != 0x80000100 || IncRKey(0x80000105) != 0x80000106 {
		t.Fatal("IncRKey")
	}
	if d := f.d.Query(); d.MaxMW != MaxMW || d.DeviceCapFlags&DeviceMemWindow == 0 {
		t.Fatalf("device attr max_mw %d flags %#x", d.MaxMW, d.DeviceCapFlags)
	}
	// The PD is busy while windows use it.
	if err := f.pd.Dealloc(); !errors.Is(err, EBUSY) {
		t.Fatalf("dealloc PD with windows: %v", err)
	}
	if err := w1.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := w1.Dealloc(); !errors.Is(err, EINVAL) {
		t.Fatalf("second dealloc: %v", err)
	}
}

func TestMWPostValidation(t *testing.T) {
	f := newMWFixture(t)
	w1, _ := f.pd.AllocMW(MWType1)
	w2, _ := f.pd.AllocMW(MWType2)
	for name, wr := range map[string]SendWR{
		"no window": {Opcode: WRBindMW},
	} {
		if err := f.qp.validateSend(&wr); !errors.Is(err, EINVAL) {
			t.Errorf("%s: %v, want EINVAL", name, err)
		}
	}
	// A window's access may hold bits that mean nothing to it (LOCAL_WRITE, MW_BIND):
	// rxe and mlx5 take them.
	for name, wr := range map[string]SendWR{
		"LOCAL_WRITE in a window": {Opcode: WRBindMW, Bind: MWBind{MW: w2, MR: f.mr, Length: 8, Access: AccessLocalWrite | AccessRemoteRead}},
		"MW_BIND in a window":     {Opcode: WRBindMW, Bind: MWBind{MW: w2, MR: f.mr, Length: 8, Access: AccessMWBind}},
		// rxe's ibv_bind_mw is this WR; the kernel binds a type 1 window from it.
		"type 1 by a WR": {Opcode: WRBindMW, Bind: MWBind{MW: w1, MR: f.mr, Length: 8}},
	} {
		if err := f.qp.validateSend(&wr); err != nil {
			t.Errorf("%s: %v, want it taken", name, err)
		}
	}
	if err := f.qp.validateSend(&SendWR{Opcode: WRBindMW, bindType1: true, Bind: MWBind{MW: w1, MR: f.mr, Addr: f.mr.Addr(), Length: 8, Access: AccessLocalWrite | AccessRemoteWrite}}); err != nil {
		t.Errorf("ibv_bind_mw with LOCAL_WRITE: %v, want it taken", err)
	}
	if _, err := f.qp.BindMW(w1, 0, 0, MWBind{MR: f.mr, Addr: f.mr.Addr(), Length: 8, Access: AccessZeroBased}); !errors.Is(err, EINVAL) {
		t.Errorf("ibv_bind_mw zero-based: %v, want EINVAL", err)
	}
	// IBA table 38: UC has no SEND with Invalidate.
	cq, _ := f.pd.Context().CreateCQ(4, nil)
	uc, err := f.pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeUC, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := uc.validateSend(&SendWR{Opcode: WRSendWithInv}); !errors.Is(err, EINVAL) {
		t.Errorf("SEND_WITH_INV on UC: %v, want EINVAL", err)
	}
	if _, err := f.qp.BindMW(w2, 0, 0, MWBind{}); !errors.Is(err, EINVAL) {
		t.Errorf("ibv_bind_mw of a type 2 window: %v", err)
	}
	if _, err := f.qp.BindMW(w1, 0, 0, MWBind{Addr: 8}); !errors.Is(err, EINVAL) {
		t.Errorf("ibv_bind_mw without MR but with an address: %v", err)
	}
	pd2, _ := f.pd.Context().AllocPD()
	other, _ := pd2.RegMR(make([]byte, 64), AccessLocalWrite|AccessMWBind)
	if _, err := f.qp.BindMW(w1, 0, 0, MWBind{MR: other, Addr: other.Addr(), Length: 8}); !errors.Is(err, EPERM) {
		t.Errorf("ibv_bind_mw with an MR of another PD: %v, want EPERM", err)
	}
}

// TestMWRules walks a type 2 window through its states and checks each rule of IBA
// 10.6.7.2 at the point it applies.
func TestMWRules(t *testing.T) {
	f := newMWFixture(t)
	w, _ := f.pd.AllocMW(MWType2)
	base := f.mr.Addr()
	roBind, err := f.pd.RegMR(make([]byte, 64), AccessRemoteRead|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	bind := func(b MWBind) WCStatus {
		b.MW = w
		if b.RKey == 0 {
			b.RKey = IncRKey(w.RKey())
		}
		return f.qp.ExecLocal(&SendWR{Opcode: WRBindMW, Bind: b})
	}
	for name, b := range map[string]MWBind{
		"region without MW_BIND":               {MR: f.noBind, Addr: f.noBind.Addr(), Length: 8, Access: AccessRemoteRead},
		"starts before the region":             {MR: f.mr, Addr: base - 1, Length: 8, Access: AccessRemoteRead},
		"ends after the region":                {MR: f.mr, Addr: base + 8190, Length: 8, Access: AccessRemoteRead},
		"zero length":                          {MR: f.mr, Addr: base, Access: AccessRemoteRead},
		"no region":                            {Length: 8},
		"R_Key of another window":              {RKey: w.RKey() + 0x100, MR: f.mr, Addr: base, Length: 8},
		"access bit rxe does not take":         {MR: f.mr, Addr: base, Length: 8, Access: AccessRemoteRead | AccessHugeTLB},
		"writable, region without local write": {MR: roBind, Addr: roBind.Addr(), Length: 8, Access: AccessRemoteWrite},
	} {
		if st := bind(b); st != WCMWBindErr {
			t.Errorf("%s: %s, want MW_BIND_ERR", name, st)
		}
	}
	if w.Bound() {
		t.Fatal("a failed bind bound the window")
	}
	if st := bind(MWBind{MR: f.mr, Addr: base + 100, Length: 100, Access: AccessRemoteRead}); st != WCSuccess {
		t.Fatal(st)
	}
	rkey := w.RKey()
	for name, c := range map[string]struct {
		va, n uint64
		acc   AccessFlags
		ok    bool
	}{
		"inside":          {base + 100, 100, AccessRemoteRead, true},
		"last byte":       {base + 199, 1, AccessRemoteRead, true},
		"one past":        {base + 199, 2, AccessRemoteRead, false},
		"before":          {base + 99, 1, AccessRemoteRead, false},
		"write":           {base + 100, 1, AccessRemoteWrite, false},
		"wrapping length": {base + 100, 1<<64 - 50, AccessRemoteRead, false},
	} {
		mr, at, ok := f.qp.RemoteAccess(rkey, c.va, c.n, c.acc)
		if ok != c.ok || ok && (mr != f.mr || at != c.va) {
			t.Errorf("%s: access %v at %#x, want %v", name, ok, at, c.ok)
		}
	}
	if _, _, ok := f.qp.RemoteAccess(rkey^1, base+100, 1, AccessRemoteRead); ok {
		t.Error("access with another key generation")
	}
	// o10-37.2.30: bound, it cannot be bound again until invalidated.
	if st := bind(MWBind{MR: f.mr, Addr: base, Length: 8, Access: AccessRemoteRead}); st != WCMWBindErr {
		t.Fatalf("second bind: %s", st)
	}
	if err := f.mr.Dereg(); !errors.Is(err, EINVAL) || f.d.LookupKey(f.mr.LKey()) != f.mr {
		t.Fatalf("dereg of a region with a window: %v (rxe_dereg_mr: EINVAL, the region stays)", err)
	}
	// Neither rxe nor mlx5 refuses ibv_rereg_mr of a region with windows: the window
	// stays bound, to the region's new handle.
	nmr, err := f.mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite|AccessRemoteRead|AccessMWBind)
	if err != nil {
		t.Fatalf("rereg of a region with a window: %v", err)
	}
	if mr, _, ok := f.qp.RemoteAccess(rkey, base+100, 1, AccessRemoteRead); !ok || mr != nmr {
		t.Fatalf("access through the window after rereg: %v", ok)
	}
	if err := nmr.Dereg(); !errors.Is(err, EINVAL) {
		t.Fatalf("dereg after rereg with the window bound: %v", err)
	}
	f.mr = nmr
	// LOCAL_INV: a wrong key fails; the right one frees the window.
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRLocalInv, InvalidateRKey: rkey ^ 1}); st != WCLocQPOpErr {
		t.Fatalf("LOCAL_INV of a stale key: %s", st)
	}
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRLocalInv, InvalidateRKey: f.mr.RKey()}); st != WCLocQPOpErr {
		t.Fatalf("LOCAL_INV of an ibv_reg_mr region: %s", st)
	}
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRLocalInv, InvalidateRKey: rkey}); st != WCSuccess {
		t.Fatalf("LOCAL_INV: %s", st)
	}
	if _, _, ok := f.qp.RemoteAccess(rkey, base+100, 1, AccessRemoteRead); ok {
		t.Fatal("access through an invalidated window")
	}
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRLocalInv, InvalidateRKey: rkey}); st != WCLocQPOpErr {
		t.Fatalf("second LOCAL_INV: %s", st)
	}
	if err := f.mr.Dereg(); err != nil {
		t.Fatalf("dereg once the window is free: %v", err)
	}
	// A window of another QP's binding cannot be invalidated remotely through this one.
	if f.qp.InvalidateRemote(rkey) {
		t.Fatal("remote invalidation of a free window")
	}
}

func TestMWZeroBasedAccess(t *testing.T) {
	f := newMWFixture(t)
	w, _ := f.pd.AllocMW(MWType2)
	b := MWBind{MW: w, RKey: IncRKey(w.RKey()), MR: f.mr, Addr: f.mr.Addr() + 64, Length: 32, Access: AccessRemoteWrite | AccessZeroBased}
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRBindMW, Bind: b}); st != WCSuccess {
		t.Fatal(st)
	}
	mr, at, ok := f.qp.RemoteAccess(b.RKey, 8, 24, AccessRemoteWrite)
	if !ok || mr != f.mr || at != f.mr.Addr()+72 {
		t.Fatalf("zero-based access: %v at %#x", ok, at)
	}
	if _, _, ok := f.qp.RemoteAccess(b.RKey, 8, 25, AccessRemoteWrite); ok {
		t.Fatal("access past a zero-based window")
	}
	// Type 1 windows are never zero-based (o10-36.2.2).
	w1, _ := f.pd.AllocMW(MWType1)
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRBindMW, bindType1: true, Bind: MWBind{MW: w1, RKey: IncRKey(w1.RKey()), MR: f.mr, Addr: f.mr.Addr(), Length: 8, Access: AccessZeroBased}}); st != WCMWBindErr {
		t.Fatalf("zero-based type 1 bind: %s", st)
	}
}

func TestReregMRRules(t *testing.T) {
	f := newMWFixture(t)
	for name, fl := range map[string]ReregFlags{"no flags": 0, "unknown flag": 8} {
		if _, err := f.mr.Rereg(fl, nil, nil, 0); !errors.Is(err, EINVAL) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := f.mr.Rereg(ReregChangePD, nil, nil, 0); !errors.Is(err, EINVAL) {
		t.Errorf("CHANGE_PD without a PD: %v", err)
	}
	if _, err := f.mr.Rereg(ReregChangeAccess, nil, nil, AccessRemoteWrite); !errors.Is(err, EINVAL) {
		t.Errorf("REMOTE_WRITE without LOCAL_WRITE: %v", err)
	}
	if _, err := f.mr.Rereg(ReregChangeTranslation, nil, nil, 0); !errors.Is(err, EINVAL) {
		t.Errorf("empty translation: %v", err)
	}
	pd2, _ := f.pd.Context().AllocPD()
	nmr, err := f.mr.Rereg(ReregChangePD, pd2, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The keys stay (rxe_rereg_user_mr, mlx5_ib_rereg_user_mr): programs keep the R_Key
	// they advertised.
	if nmr.PD() != pd2 || nmr.Addr() != f.mr.Addr() || nmr.Length() != f.mr.Length() || nmr.LKey() != f.mr.LKey() || nmr.RKey() != f.mr.RKey() {
		t.Fatalf("after CHANGE_PD: %+v (old key %#x)", nmr.Query(), f.mr.LKey())
	}
	if f.d.LookupKey(f.mr.LKey()) != nmr {
		t.Fatal("key lookup after rereg")
	}
	objs, _ := f.d.Inspect(KindMR)
	n := 0
	for _, o := range objs {
		if o.MR.LKey == nmr.LKey() {
			n++
		}
	}
	if len(objs) != 2 || n != 1 {
		t.Fatalf("inspected MRs %+v after rereg (key %#x)", objs, nmr.LKey())
	}
	if err := f.mr.Dereg(); !errors.Is(err, EINVAL) {
		t.Fatalf("dereg of the old handle: %v", err)
	}
	if err := pd2.Dealloc(); !errors.Is(err, EBUSY) {
		t.Fatalf("the new PD is not held: %v", err)
	}
	if err := nmr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatalf("dealloc of the new PD: %v", err)
	}
}

func TestQueryAH(t *testing.T) {
	d := newTestDevice(t, 1)
	pd, _ := d.Open().AllocPD()
	attr := AHAttr{DLID: 7, SL: 3, PortNum: 1}
	ah, err := pd.CreateAH(attr)
	if err != nil {
		t.Fatal(err)
	}
	if got := ah.Query(); got != attr {
		t.Fatalf("query_ah %+v, want %+v", got, attr)
	}
}

// TestInspectMWAndXRCD: windows and XRC domains are listed while they exist, a window
// with what it is bound to.
func TestInspectMWAndXRCD(t *testing.T) {
	f := newMWFixture(t)
	w, _ := f.pd.AllocMW(MWType2)
	b := MWBind{MW: w, RKey: IncRKey(w.RKey()), MR: f.mr, Addr: f.mr.Addr() + 8, Length: 16, Access: AccessRemoteRead}
	if st := f.qp.ExecLocal(&SendWR{Opcode: WRBindMW, Bind: b}); st != WCSuccess {
		t.Fatal(st)
	}
	x, err := f.pd.Context().OpenXRCD()
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := f.d.Inspect(KindMW)
	if len(objs) != 1 || objs[0].MW == nil || !objs[0].MW.Bound || objs[0].MW.RKey != b.RKey || objs[0].MW.MR != f.mr.LKey() ||
		objs[0].MW.QPN != f.qp.Num() || objs[0].MW.Length != 16 || objs[0].MW.Access != "REMOTE_READ" {
		t.Fatalf("inspected windows %+v", objs)
	}
	if objs, _ := f.d.Inspect(KindXRCD); len(objs) != 1 || objs[0].ID != x.ID() {
		t.Fatalf("inspected XRC domains %+v", objs)
	}
	w.Dealloc()
	x.Close()
	if objs, _ := f.d.Inspect(""); slices.ContainsFunc(objs, func(o ObjectInfo) bool { return o.Kind == KindMW || o.Kind == KindXRCD }) {
		t.Fatalf("freed window or domain still listed: %+v", objs)
	}
}

// TestRegMRIOVA: a region registered at an I/O virtual address is addressed by it
// (ibv_reg_mr_iova), which must keep the buffer's offset in its page (ib_uverbs_reg_mr).
func TestRegMRIOVA(t *testing.T) {
	f := newMWFixture(t)
	buf := make([]byte, 8192)
	iova := uint64(0x500000000000) + BufAddr(buf)&(pageSize-1)
	mr, err := f.pd.RegMRIOVA(buf, iova, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := mr.Slice(iova+100, 8); !ok || BufAddr(b) != BufAddr(buf)+100 {
		t.Fatalf("iova+100: %v", ok)
	}
	if _, ok := mr.Slice(BufAddr(buf), 8); ok {
		t.Fatal("the buffer's own address reaches an iova region")
	}
	if _, err := f.pd.RegMRIOVA(buf, iova+8, AccessLocalWrite); !errors.Is(err, EINVAL) {
		t.Fatalf("iova at another page offset: %v, want EINVAL", err)
	}
	nmr, err := mr.Rereg(ReregChangeAccess, nil, nil, AccessLocalWrite)
	if err != nil || nmr.Addr() != iova {
		t.Fatalf("rereg of access: %v, address %#x, want %#x", err, nmr.Addr(), iova)
	}
}

// TestRegMRAccessErrnos: ibv_reg_mr's access checks in ib_check_mr_access's order — a
// bit the kernel does not know is EINVAL, a FLUSH bit on a device without FLUSH
// EOPNOTSUPP, and REMOTE_WRITE without LOCAL_WRITE EINVAL before either.
func TestRegMRAccessErrnos(t *testing.T) {
	f := newMWFixture(t)
	buf := make([]byte, 64)
	for _, c := range []struct {
		access AccessFlags
		want   error
	}{
		{AccessLocalWrite | 1<<12, EINVAL},
		{AccessLocalWrite | AccessFlushGlobal, EOPNOTSUPP},
		{AccessLocalWrite | AccessFlushPersistent, EOPNOTSUPP},
		{AccessRemoteWrite | AccessFlushGlobal, EINVAL},
		{AccessLocalWrite | AccessZeroBased, EOPNOTSUPP},
	} {
		if _, err := f.pd.RegMR(buf, c.access); !errors.Is(err, c.want) {
			t.Errorf("access %#x: %v, want %v", uint32(c.access), err, c.want)
		}
	}
}

// TestQueryQPOnSRQ: ibv_query_qp of a QP on an SRQ reports no receive capabilities
// (rxe_qp_to_init fills them only without an SRQ; ib_query_qp zeroed them).
func TestQueryQPOnSRQ(t *testing.T) {
	f := newMWFixture(t)
	srq, err := f.pd.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	cq := f.qp.SendCQ()
	qp, err := f.pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: QPTypeRC, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ia := qp.Query(); ia.Cap.MaxRecvWR != 0 || ia.Cap.MaxRecvSGE != 0 || ia.Cap.MaxSendWR != 4 || ia.SRQ != srq {
		t.Fatalf("init_attr %+v", ia)
	}
}
