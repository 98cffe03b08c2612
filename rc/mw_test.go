package rc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/pibgw/pibgw/hca"
)

// mwAccess is the MR access of the memory-window tests: everything, and MW_BIND.
const mwAccess = hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic | hca.AccessMWBind

// bindType2 binds the side's type 2 window (allocated on first use) over [off, off+n) of
// its MR with a BIND_MW WR on its QP, checks the completion, and returns the new R_Key.
func (s *side) bindType2(t testing.TB, off, n int, acc hca.AccessFlags) uint32 {
	t.Helper()
	if s.mw2 == nil {
		mw, err := s.pd.AllocMW(hca.MWType2)
		if err != nil {
			t.Fatal(err)
		}
		s.mw2 = mw
	}
	rkey := hca.IncRKey(s.mw2.RKey())
	s.post(t, hca.SendWR{WRID: 0xb1d, Opcode: hca.WRBindMW, SendFlags: hca.SendSignaled,
		Bind: hca.MWBind{MW: s.mw2, RKey: rkey, MR: s.mr, Addr: s.mr.Addr() + uint64(off), Length: uint64(n), Access: acc}})
	if wc := waitWC(t, s.scq, nil); wc.Status != hca.WCSuccess || wc.Opcode != hca.WCBindMW || wc.WRID != 0xb1d {
		t.Fatalf("bind WC %+v", wc)
	}
	if got := s.mw2.RKey(); got != rkey || !s.mw2.Bound() {
		t.Fatalf("window R_Key %#x bound %v after the bind, want %#x", got, s.mw2.Bound(), rkey)
	}
	return rkey
}

// rdma posts one signaled WRITE, READ or atomic from a to b's R_Key and returns its
// completion.
func rdma(t *testing.T, a *side, op hca.WROpcode, off, n int, va uint64, rkey uint32) hca.WC {
	t.Helper()
	a.post(t, hca.SendWR{WRID: uint64(op) + 100, Opcode: op, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(off, n)},
		RemoteAddr: va, RKey: rkey, CompareAdd: 1})
	return waitWC(t, a.scq, nil)
}

// TestMWType2 binds a type 2 window over part of b's region, moves data through it with
// WRITE, READ and an atomic, invalidates it with a SEND_WITH_INV from the peer (IBA
// 10.6.7.2.2), and checks that the window's R_Key then fails with REM_ACCESS_ERR.
func TestMWType2(t *testing.T) {
	f, a, b := connect(t, connOpts{access: mwAccess})
	const woff, wlen = 8192, 4096
	rkey := b.bindType2(t, woff, wlen, hca.AccessRemoteRead|hca.AccessRemoteWrite|hca.AccessRemoteAtomic)
	if !hca.IsMWKey(rkey) || rkey>>8 == b.mr.RKey()>>8 {
		t.Fatalf("window R_Key %#x looks like a region's", rkey)
	}
	wva := b.mr.Addr() + woff

	fill(a.buf[:wlen], 1)
	f.Sync()
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, wlen, wva, rkey); wc.Status != hca.WCSuccess {
		t.Fatalf("WRITE through the window: %s", wc.Status)
	}
	f.Sync()
	if !bytes.Equal(b.buf[woff:woff+wlen], a.buf[:wlen]) {
		t.Fatal("WRITE through the window: data differs")
	}
	fill(b.buf[woff:woff+wlen], 2)
	f.Sync()
	if wc := rdma(t, a, hca.WRRDMARead, wlen, wlen, wva, rkey); wc.Status != hca.WCSuccess || wc.ByteLen != wlen {
		t.Fatalf("READ through the window: %+v", wc)
	}
	if !bytes.Equal(a.buf[wlen:2*wlen], b.buf[woff:woff+wlen]) {
		t.Fatal("READ through the window: data differs")
	}
	binary.LittleEndian.PutUint64(b.buf[woff+wlen-8:], 41)
	f.Sync()
	if wc := rdma(t, a, hca.WRAtomicFetchAndAdd, 0, 8, wva+wlen-8, rkey); wc.Status != hca.WCSuccess || binary.LittleEndian.Uint64(a.buf) != 41 {
		t.Fatalf("FETCH_ADD through the window: %+v, got %d", wc, binary.LittleEndian.Uint64(a.buf))
	}
	f.Sync()
	if v := binary.LittleEndian.Uint64(b.buf[woff+wlen-8:]); v != 42 {
		t.Fatalf("remote value %d after FETCH_ADD, want 42", v)
	}
	// The region cannot go while the window is bound to it (IBA 10.6.7.2.6; rxe_dereg_mr:
	// EINVAL).
	if err := b.mr.Dereg(); !errors.Is(err, hca.EINVAL) {
		t.Fatalf("dereg with a bound window: %v, want EINVAL", err)
	}

	// SEND_WITH_INV: the responder invalidates the window before the receive completes.
	b.postRecv(t, 7, 0, 64)
	a.post(t, hca.SendWR{WRID: 8, Opcode: hca.WRSendWithInv, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 16)}, InvalidateRKey: rkey})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
		t.Fatalf("SEND_WITH_INV: %s", wc.Status)
	}
	rwc := waitWC(t, b.rcq, nil)
	if rwc.Status != hca.WCSuccess || rwc.WCFlags&hca.WCWithInv == 0 || rwc.ImmData != rkey || rwc.ByteLen != 16 {
		t.Fatalf("recv WC %+v, want WITH_INV of %#x", rwc, rkey)
	}
	if b.mw2.Bound() {
		t.Fatal("window still bound after SEND_WITH_INV")
	}
	// Access through the invalidated window: REM_ACCESS_ERR, both QPs to ERR (class C).
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, 8, wva, rkey); wc.Status != hca.WCRemAccessErr {
		t.Fatalf("WRITE through an invalidated window: %s, want REM_ACCESS_ERR", wc.Status)
	}
	f.Sync()
	if err := b.mr.Dereg(); err != nil {
		t.Fatalf("dereg after the window's invalidation: %v", err)
	}
}

// TestMWType2Errors: access outside the window or beyond its rights fails remotely, the
// window of one QP is not usable through another, and bad binds complete with
// MW_BIND_ERR (IBA 10.6.7.2: C10-72..75, o10-37.2.30/40).
func TestMWType2Errors(t *testing.T) {
	remote := []struct {
		name string
		op   hca.WROpcode
		off  int // from the window's start
		n    int
		acc  hca.AccessFlags
	}{
		{"WRITE past the window's end", hca.WRRDMAWrite, 4096 - 8, 16, hca.AccessRemoteWrite},
		{"READ before the window", hca.WRRDMARead, -8, 8, hca.AccessRemoteRead},
		{"WRITE to a read-only window", hca.WRRDMAWrite, 0, 8, hca.AccessRemoteRead},
		{"atomic without atomic access", hca.WRAtomicCmpAndSwp, 0, 8, hca.AccessRemoteRead | hca.AccessRemoteWrite},
	}
	for _, tc := range remote {
		t.Run(tc.name, func(t *testing.T) {
			_, a, b := connect(t, connOpts{access: mwAccess})
			rkey := b.bindType2(t, 4096, 4096, tc.acc)
			va := b.mr.Addr() + uint64(4096+tc.off)
			if wc := rdma(t, a, tc.op, 0, tc.n, va, rkey); wc.Status != hca.WCRemAccessErr {
				t.Fatalf("%s: %s, want REM_ACCESS_ERR", tc.op, wc.Status)
			}
		})
	}
	t.Run("stale R_Key after a rebind", func(t *testing.T) {
		_, a, b := connect(t, connOpts{access: mwAccess})
		old := b.bindType2(t, 0, 64, hca.AccessRemoteWrite)
		b.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRLocalInv, SendFlags: hca.SendSignaled, InvalidateRKey: old})
		if wc := waitWC(t, b.scq, nil); wc.Status != hca.WCSuccess || wc.Opcode != hca.WCLocalInv {
			t.Fatalf("LOCAL_INV WC %+v", wc)
		}
		if nk := b.bindType2(t, 0, 64, hca.AccessRemoteWrite); nk == old {
			t.Fatalf("rebind kept R_Key %#x", nk)
		}
		if wc := rdma(t, a, hca.WRRDMAWrite, 0, 8, b.mr.Addr(), old); wc.Status != hca.WCRemAccessErr {
			t.Fatalf("WRITE with the old R_Key: %s, want REM_ACCESS_ERR", wc.Status)
		}
	})
	t.Run("window of another QP", func(t *testing.T) {
		// A type 2 window is reachable only through the QP that bound it (IBA
		// 10.6.7.2.2, type 2B): b binds it with a second QP of the same PD.
		_, a, b := connect(t, connOpts{access: mwAccess})
		qp2, err := b.pd.CreateQP(hca.QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, QPType: hca.QPTypeRC, Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		other := &side{ctx: b.ctx, pd: b.pd, scq: b.scq, rcq: b.rcq, qp: qp2, buf: b.buf, mr: b.mr, port: b.port}
		peer := &side{qp: a.qp, port: a.port}
		bring(t, other, peer, connOpts{typ: hca.QPTypeRC, mtu: hca.MTU4096, qpAccess: hca.AccessRemoteWrite, timeout: 14, rdAtomic: 1})
		rkey := other.bindType2(t, 0, 64, hca.AccessRemoteWrite)
		if wc := rdma(t, a, hca.WRRDMAWrite, 0, 8, b.mr.Addr(), rkey); wc.Status != hca.WCRemAccessErr {
			t.Fatalf("WRITE through another QP's window: %s, want REM_ACCESS_ERR", wc.Status)
		}
	})

	bind := []struct {
		name string
		bind func(b *side, mw *hca.MW, mr *hca.MR) hca.MWBind
	}{
		{"region without MW_BIND", func(b *side, mw *hca.MW, mr *hca.MR) hca.MWBind {
			return hca.MWBind{MR: mr, Addr: mr.Addr(), Length: 64, Access: hca.AccessRemoteRead}
		}},
		{"window beyond the region", func(b *side, mw *hca.MW, _ *hca.MR) hca.MWBind {
			return hca.MWBind{MR: b.mr, Addr: b.mr.Addr() + uint64(len(b.buf)) - 32, Length: 64, Access: hca.AccessRemoteRead}
		}},
		{"zero length", func(b *side, mw *hca.MW, _ *hca.MR) hca.MWBind {
			return hca.MWBind{MR: b.mr, Addr: b.mr.Addr(), Access: hca.AccessRemoteRead}
		}},
		{"R_Key of another window", func(b *side, mw *hca.MW, _ *hca.MR) hca.MWBind {
			return hca.MWBind{RKey: b.mr.RKey() | 1<<31 + 0x100, MR: b.mr, Addr: b.mr.Addr(), Length: 64, Access: hca.AccessRemoteRead}
		}},
		{"bound twice without invalidation", func(b *side, mw *hca.MW, _ *hca.MR) hca.MWBind {
			return hca.MWBind{MR: b.mr, Addr: b.mr.Addr(), Length: 64, Access: hca.AccessRemoteRead}
		}},
	}
	for _, tc := range bind {
		t.Run(tc.name, func(t *testing.T) {
			f, _, b := connect(t, connOpts{access: mwAccess})
			noBind, err := b.pd.RegMR(make([]byte, 4096), hca.AccessLocalWrite|hca.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			mw, err := b.pd.AllocMW(hca.MWType2)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "bound twice without invalidation" {
				b.mw2 = mw
				b.bindType2(t, 0, 64, hca.AccessRemoteRead)
			}
			bd := tc.bind(b, mw, noBind)
			bd.MW = mw
			if bd.RKey == 0 {
				bd.RKey = hca.IncRKey(mw.RKey())
			}
			b.post(t, hca.SendWR{WRID: 5, Opcode: hca.WRBindMW, Bind: bd})
			b.post(t, hca.SendWR{WRID: 6, Opcode: hca.WRSend, SGL: []hca.SGE{b.sge(0, 8)}})
			wcs := drain(t, f, b.scq, 2)
			if len(wcs) != 2 || wcs[0].Status != hca.WCMWBindErr || wcs[0].WRID != 5 || wcs[0].Opcode != hca.WCBindMW || wcs[1].Status != hca.WCWRFlushErr {
				t.Fatalf("completions %+v, want MW_BIND_ERR then WR_FLUSH_ERR", wcs)
			}
			if b.qp.State() != hca.QPStateErr {
				t.Fatalf("QP state %s after a bind error, want ERR", b.qp.State())
			}
		})
	}
}

// TestMWType1 binds a type 1 window with ibv_bind_mw's verb, uses it, rebinds it (the old
// R_Key stops working), and checks that neither LOCAL_INV nor SEND_WITH_INV can
// invalidate it (o10-37.2.26): the first completes with LOC_QP_OP_ERR, the second is the
// responder's class J error, REM_INV_REQ_ERR on both sides.
func TestMWType1(t *testing.T) {
	bind := func(t *testing.T, b *side, mw *hca.MW, off, n int, acc hca.AccessFlags) uint32 {
		t.Helper()
		rkey, err := b.qp.BindMW(mw, 0x1b, hca.SendSignaled, hca.MWBind{MR: b.mr, Addr: b.mr.Addr() + uint64(off), Length: uint64(n), Access: acc})
		if err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, b.scq, nil); wc.Status != hca.WCSuccess || wc.Opcode != hca.WCBindMW || wc.WRID != 0x1b {
			t.Fatalf("bind WC %+v", wc)
		}
		if mw.RKey() != rkey {
			t.Fatalf("window R_Key %#x, bind returned %#x", mw.RKey(), rkey)
		}
		return rkey
	}
	newMW := func(t *testing.T, b *side) *hca.MW {
		mw, err := b.pd.AllocMW(hca.MWType1)
		if err != nil {
			t.Fatal(err)
		}
		return mw
	}
	t.Run("bind, use, rebind", func(t *testing.T) {
		f, a, b := connect(t, connOpts{access: mwAccess})
		mw := newMW(t, b)
		k1 := bind(t, b, mw, 0, 256, hca.AccessRemoteRead)
		fill(b.buf[:256], 3)
		f.Sync()
		if wc := rdma(t, a, hca.WRRDMARead, 0, 256, b.mr.Addr(), k1); wc.Status != hca.WCSuccess || !bytes.Equal(a.buf[:256], b.buf[:256]) {
			t.Fatalf("READ through a type 1 window: %s", wc.Status)
		}
		k2 := bind(t, b, mw, 256, 256, hca.AccessRemoteRead)
		if k2 == k1 {
			t.Fatal("rebind kept the R_Key")
		}
		if wc := rdma(t, a, hca.WRRDMARead, 0, 8, b.mr.Addr(), k1); wc.Status != hca.WCRemAccessErr {
			t.Fatalf("READ with the R_Key of the previous bind: %s, want REM_ACCESS_ERR", wc.Status)
		}
	})
	t.Run("unbind with length 0", func(t *testing.T) {
		_, a, b := connect(t, connOpts{access: mwAccess})
		mw := newMW(t, b)
		bind(t, b, mw, 0, 64, hca.AccessRemoteWrite)
		if _, err := b.qp.BindMW(mw, 2, 0, hca.MWBind{}); err != nil {
			t.Fatal(err)
		}
		if mw.Bound() {
			t.Fatal("bound after a zero-length bind")
		}
		if err := b.mr.Dereg(); err != nil {
			t.Fatalf("dereg after the unbind: %v", err)
		}
		_ = a
	})
	t.Run("LOCAL_INV", func(t *testing.T) {
		_, _, b := connect(t, connOpts{access: mwAccess})
		mw := newMW(t, b)
		k := bind(t, b, mw, 0, 64, hca.AccessRemoteWrite)
		b.post(t, hca.SendWR{WRID: 3, Opcode: hca.WRLocalInv, SendFlags: hca.SendSignaled, InvalidateRKey: k})
		if wc := waitWC(t, b.scq, nil); wc.Status != hca.WCLocQPOpErr || wc.Opcode != hca.WCLocalInv {
			t.Fatalf("LOCAL_INV of a type 1 window: %+v, want LOC_QP_OP_ERR", wc)
		}
		if !mw.Bound() {
			t.Fatal("type 1 window invalidated")
		}
	})
	t.Run("SEND_WITH_INV", func(t *testing.T) {
		f, a, b := connect(t, connOpts{access: mwAccess})
		mw := newMW(t, b)
		k := bind(t, b, mw, 0, 64, hca.AccessRemoteWrite)
		b.postRecv(t, 9, 0, 64)
		a.post(t, hca.SendWR{WRID: 4, Opcode: hca.WRSendWithInv, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}, InvalidateRKey: k})
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemInvReqErr {
			t.Fatalf("SEND_WITH_INV of a type 1 window: %s, want REM_INV_REQ_ERR", wc.Status)
		}
		if r := drain(t, f, b.rcq, 1); len(r) != 1 || r[0].Status != hca.WCRemInvReqErr || r[0].WRID != 9 {
			t.Fatalf("responder completions %+v, want REM_INV_REQ_ERR", r)
		}
		if !mw.Bound() {
			t.Fatal("type 1 window invalidated")
		}
		if a.qp.State() != hca.QPStateErr || b.qp.State() != hca.QPStateErr {
			t.Fatalf("states %s/%s, want ERR on both sides", a.qp.State(), b.qp.State())
		}
	})
}

// TestMWZeroBased: a zero-based type 2 window maps remote address 0 to its bind address.
func TestMWZeroBased(t *testing.T) {
	f, a, b := connect(t, connOpts{access: mwAccess})
	rkey := b.bindType2(t, 1000, 100, hca.AccessRemoteWrite|hca.AccessZeroBased)
	copy(a.buf, "zero-based")
	f.Sync()
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, 10, 20, rkey); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	f.Sync()
	if got := string(b.buf[1020:1030]); got != "zero-based" {
		t.Fatalf("window byte 20 holds %q", got)
	}
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, 10, 95, rkey); wc.Status != hca.WCRemAccessErr {
		t.Fatalf("WRITE past a zero-based window: %s, want REM_ACCESS_ERR", wc.Status)
	}
}

// TestReregMR changes a region's translation and access while a peer uses it: the R_Key
// stays (as with rxe and mlx5) and reaches the new buffer with the new rights.
func TestReregMR(t *testing.T) {
	f, a, b := connect(t, connOpts{access: mwAccess})
	old := b.mr
	nbuf := make([]byte, 4096)
	mr, err := old.Rereg(hca.ReregChangeTranslation, nil, nbuf, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.mr = mr
	if q := mr.Query(); q.Addr != hca.BufAddr(nbuf) || q.Length != 4096 || q.Access != mwAccess || q.RKey != old.RKey() || q.LKey != old.LKey() || q.PD != b.pd {
		t.Fatalf("query after rereg %+v (old R_Key %#x)", q, old.RKey())
	}
	copy(a.buf, "rereg")
	f.Sync()
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, 5, mr.Addr()+10, mr.RKey()); wc.Status != hca.WCSuccess {
		t.Fatalf("WRITE to the new translation: %s", wc.Status)
	}
	f.Sync()
	if string(nbuf[10:15]) != "rereg" {
		t.Fatalf("new buffer holds %q", nbuf[10:15])
	}
	if mr, err = mr.Rereg(hca.ReregChangeAccess, nil, nil, hca.AccessLocalWrite|hca.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if wc := rdma(t, a, hca.WRRDMAWrite, 0, 5, mr.Addr(), mr.RKey()); wc.Status != hca.WCRemAccessErr {
		t.Fatalf("WRITE after access lost REMOTE_WRITE: %s, want REM_ACCESS_ERR", wc.Status)
	}
}
