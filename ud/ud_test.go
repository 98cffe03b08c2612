package ud_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
)

const testQKey = 0x11111111

// endpoint is one UD QP with its PD, CQs and a registered buffer.
type endpoint struct {
	ctx  *hca.Context
	pd   *hca.PD
	scq  *hca.CQ
	rcq  *hca.CQ
	qp   *hca.QP
	buf  []byte
	mr   *hca.MR
	port *hca.Port
}

func newEndpoint(t testing.TB, d *hca.Device, bufLen int, access hca.AccessFlags) *endpoint {
	t.Helper()
	e := &endpoint{ctx: d.Open(), port: d.Port(1)}
	var err error
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = e.ctx.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = e.ctx.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(hca.QPInitAttr{
		SendCQ: e.scq, RecvCQ: e.rcq, QPType: hca.QPTypeUD,
		Cap: hca.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: hca.MaxInline},
	})
	if err != nil {
		t.Fatal(err)
	}
	toRTS(t, e.qp, testQKey)
	e.buf = make([]byte, bufLen)
	if e.mr, err = e.pd.RegMR(e.buf, access); err != nil {
		t.Fatal(err)
	}
	return e
}

func toRTS(t testing.TB, qp *hca.QP, qkey uint32) {
	t.Helper()
	steps := []struct {
		a    hca.QPAttr
		mask hca.QPAttrMask
	}{
		{hca.QPAttr{QPState: hca.QPStateInit, PKeyIndex: 0, PortNum: 1, QKey: qkey}, hca.QPAttrState | hca.QPAttrPKeyIndex | hca.QPAttrPort | hca.QPAttrQKey},
		{hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState},
		{hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 0x123}, hca.QPAttrState | hca.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.mask); err != nil {
			t.Fatalf("modify to %s: %v", s.a.QPState, err)
		}
	}
}

func (e *endpoint) ah(t testing.TB, dlid uint16, global bool, dgid [16]byte) *hca.AH {
	t.Helper()
	attr := hca.AHAttr{DLID: dlid, PortNum: 1, SL: 3}
	if global {
		attr.IsGlobal = true
		attr.GRH = hca.GlobalRoute{DGID: dgid, HopLimit: 1, FlowLabel: 0x12345, TrafficClass: 0x20}
	}
	ah, err := e.pd.CreateAH(attr)
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

func (e *endpoint) postRecv(t testing.TB, wrid uint64, off, n int) {
	t.Helper()
	sge := hca.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
	if _, err := e.qp.PostRecv([]hca.RecvWR{{WRID: wrid, SGL: []hca.SGE{sge}}}); err != nil {
		t.Fatal(err)
	}
}

// poll1 returns cq's next completion, failing if none comes (attached devices complete
// receives on the goroutines that read the rings: it waits) or if two are there.
func poll1(t testing.TB, cq *hca.CQ) hca.WC {
	t.Helper()
	var wc [2]hca.WC
	n := 0
	hcatest.Eventually(func() bool { n = cq.Poll(wc[:]); return n > 0 })
	if n != 1 {
		t.Fatalf("polled %d completions, want 1", n)
	}
	return wc[0]
}

// pollN returns cq's next n completions, failing if fewer come or, once nothing is in
// flight, more are there.
func pollN(t testing.TB, f *hcatest.Fabric, cq *hca.CQ, n int) []hca.WC {
	t.Helper()
	wcs := make([]hca.WC, n+1)
	got := 0
	hcatest.Eventually(func() bool { got += cq.Poll(wcs[got:]); return got >= n })
	f.Settle(t)
	got += cq.Poll(wcs[got:])
	if got != n {
		t.Fatalf("polled %d completions, want %d", got, n)
	}
	return wcs[:n]
}

// pollNone checks that cq has no completion once nothing is in flight any more.
func pollNone(t testing.TB, f *hcatest.Fabric, cq *hca.CQ) {
	t.Helper()
	f.Settle(t)
	var wc [1]hca.WC
	if n := cq.Poll(wc[:]); n != 0 {
		t.Fatalf("polled an unexpected completion %+v", wc[0])
	}
}

// counter returns counter c of port p once it has reached want (attached devices count
// what they receive on the goroutines that read the rings) and nothing is in flight any
// more, so that a count past want shows too.
func counter(t testing.TB, f *hcatest.Fabric, p *hca.Port, c hca.Counter, want uint64) uint64 {
	t.Helper()
	hcatest.Eventually(func() bool { return p.Counters().Get(c) >= want })
	f.Settle(t)
	return p.Counters().Get(c)
}

func gidOf(p *hca.Port) [16]byte { g, _ := p.GID(0); return g }

func TestUDSendReceive(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 3*8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 3*8192, hca.AccessLocalWrite)
	sizes := []int{0, 1, 64, 2048, 4096}
	wrid := uint64(0)
	for _, size := range sizes {
		for _, imm := range []bool{false, true} {
			for _, mode := range []string{"sge", "sgl3", "inline"} {
				for _, global := range []bool{false, true} {
					if mode == "inline" && size > hca.MaxInline {
						continue
					}
					name := fmt.Sprintf("%dB/imm=%v/%s/grh=%v", size, imm, mode, global)
					t.Run(name, func(t *testing.T) {
						wrid++
						payload := make([]byte, size)
						for i := range payload {
							payload[i] = byte(i*7 + int(wrid))
						}
						// Sender data lives in the MR at offset 0 (for inline: a plain slice).
						copy(a.buf, payload)
						var sgl []hca.SGE
						flags := hca.SendSignaled | hca.SendSolicited
						switch mode {
						case "sge":
							sgl = []hca.SGE{{Addr: a.mr.Addr(), Length: uint32(size), LKey: a.mr.LKey()}}
						case "sgl3":
							p1, p2 := size/3, 2*size/3
							sgl = []hca.SGE{
								{Addr: a.mr.Addr(), Length: uint32(p1), LKey: a.mr.LKey()},
								{Addr: a.mr.Addr() + uint64(p1), Length: uint32(p2 - p1), LKey: a.mr.LKey()},
								{Addr: a.mr.Addr() + uint64(p2), Length: uint32(size - p2), LKey: a.mr.LKey()},
							}
						case "inline":
							plain := append([]byte(nil), payload...)
							sgl = []hca.SGE{{Addr: hca.BufAddr(plain), Length: uint32(size)}}
							flags |= hca.SendInline
							defer func() { _ = plain[0:0] }()
						}
						// Receiver: two SGEs, GRH area then payload, at offset 8192.
						clear(b.buf)
						rsgl := []hca.SGE{
							{Addr: b.mr.Addr() + 8192, Length: 40, LKey: b.mr.LKey()},
							{Addr: b.mr.Addr() + 8192 + 40, Length: 4096, LKey: b.mr.LKey()},
						}
						if _, err := b.qp.PostRecv([]hca.RecvWR{{WRID: 1000 + wrid, SGL: rsgl}}); err != nil {
							t.Fatal(err)
						}
						op := hca.WRSend
						if imm {
							op = hca.WRSendWithImm
						}
						wr := hca.SendWR{WRID: wrid, SGL: sgl, Opcode: op, SendFlags: flags, ImmData: 0xdeadbeef,
							AH: a.ah(t, 2, global, gidOf(b.port)), RemoteQPN: b.qp.Num(), RemoteQKey: testQKey}
						if n, err := a.qp.PostSend([]hca.SendWR{wr}); n != 1 || err != nil {
							t.Fatalf("PostSend = %d, %v", n, err)
						}
						swc := poll1(t, a.scq)
						if swc.Status != hca.WCSuccess || swc.WRID != wrid || swc.Opcode != hca.WCSend || swc.QPNum != a.qp.Num() {
							t.Fatalf("send WC = %+v", swc)
						}
						wc := poll1(t, b.rcq)
						if wc.Status != hca.WCSuccess || wc.WRID != 1000+wrid || wc.Opcode != hca.WCRecv {
							t.Fatalf("recv WC = %+v", wc)
						}
						if wc.ByteLen != uint32(40+size) {
							t.Errorf("byte_len = %d, want %d (payload + 40-byte GRH area)", wc.ByteLen, 40+size)
						}
						if wc.SrcQP != a.qp.Num() || wc.SLID != 1 || wc.SL != 3 || wc.PKeyIndex != 0 || wc.QPNum != b.qp.Num() {
							t.Errorf("recv WC addressing = %+v", wc)
						}
						wantFlags := hca.WCFlags(0)
						if global {
							wantFlags |= hca.WCGRH
						}
						if imm {
							wantFlags |= hca.WCWithImm
							if wc.ImmData != 0xdeadbeef {
								t.Errorf("imm_data = %#x", wc.ImmData)
							}
						}
						if wc.WCFlags != wantFlags {
							t.Errorf("wc_flags = %#x, want %#x", wc.WCFlags, wantFlags)
						}
						got := b.buf[8192+40 : 8192+40+size]
						if !bytes.Equal(got, payload) {
							t.Fatalf("payload differs")
						}
						grh := b.buf[8192 : 8192+40]
						if global {
							// The GRH area holds the packet's GRH: version 6, SGID = sender's GID.
							if grh[0]>>4 != 6 || !bytes.Equal(grh[8:24], func() []byte { g := gidOf(a.port); return g[:] }()) {
								t.Errorf("GRH area = %x", grh)
							}
						} else if !bytes.Equal(grh, make([]byte, 40)) {
							t.Errorf("GRH area written without a GRH: %x", grh)
						}
					})
				}
			}
		}
	}
}

func TestUDQKeyHighBitUsesQPQKey(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 4096, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 4096, hca.AccessLocalWrite)
	// a's QP Q_Key is testQKey, the same as b's: a WR Q_Key with the top bit set means
	// "the QP's Q_Key" (IBA 10.2.5), so this delivers.
	b.postRecv(t, 1, 0, 4096)
	wr := hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}},
		AH:  a.ah(t, 2, false, [16]byte{}), RemoteQPN: b.qp.Num(), RemoteQKey: 0x80000000}
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	poll1(t, a.scq)
	if wc := poll1(t, b.rcq); wc.Status != hca.WCSuccess {
		t.Fatalf("WC %+v", wc)
	}
}

func TestUDLoopbackToOwnLID(t *testing.T) {
	f := hcatest.NewFabric(t, 1, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 4096, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[0], 4096, hca.AccessLocalWrite)
	b.postRecv(t, 9, 0, 4096)
	copy(a.buf, "hello")
	wr := hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: 5, LKey: a.mr.LKey()}},
		AH:  a.ah(t, 1, false, [16]byte{}), RemoteQPN: b.qp.Num(), RemoteQKey: testQKey}
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	poll1(t, a.scq)
	wc := poll1(t, b.rcq)
	if wc.Status != hca.WCSuccess || string(b.buf[40:45]) != "hello" {
		t.Fatalf("loopback WC %+v, data %q", wc, b.buf[40:45])
	}
	if got := f.Switch.Counters(1).RcvPkts; got != 0 {
		t.Errorf("switch saw %d packets of a loopback send", got)
	}
}

var _ = errors.Is

// TestCompHandlerRunsOncePerBatch posts eight sends in one call: they cross the switch as
// one batch, and the receiver's completion handler runs once, on the sender's goroutine,
// with all eight completions queued.
func TestCompHandlerRunsOncePerBatch(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8*4096, hca.AccessLocalWrite)
	for i := 0; i < 8; i++ {
		b.postRecv(t, uint64(i), i*4096, 4096)
	}
	// Atomics: attached, the handler runs on the goroutine that reads the ring.
	var calls, seen, empty atomic.Int32
	b.rcq.SetCompHandler(func(cq *hca.CQ) {
		calls.Add(1)
		var wcs [16]hca.WC
		n := cq.Poll(wcs[:])
		seen.Add(int32(n))
		if n == 0 {
			empty.Add(1)
		}
	})
	ah := a.ah(t, 2, false, [16]byte{})
	wrs := make([]hca.SendWR, 8)
	for i := range wrs {
		wrs[i] = hca.SendWR{WRID: uint64(i), Opcode: hca.WRSend, SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: 100, LKey: a.mr.LKey()}},
			AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: testQKey}
	}
	if n, err := a.qp.PostSend(wrs); n != 8 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	if f.Attached() {
		// The daemon forwards the batch into the process's ring packet by packet, and
		// the process may take it in several reads: the handler runs once per read, and
		// each time finds that read's completions queued.
		hcatest.Eventually(func() bool { return seen.Load() == 8 })
		f.Settle(t)
		if c := calls.Load(); c < 1 || c > 8 || seen.Load() != 8 || empty.Load() != 0 {
			t.Fatalf("handler ran %d times (%d without a completion) and saw %d completions; want 1 to 8 times, each with some, 8", c, empty.Load(), seen.Load())
		}
	} else if calls.Load() != 1 || seen.Load() != 8 {
		t.Fatalf("handler ran %d times and saw %d completions; want once, 8", calls.Load(), seen.Load())
	}
	before := calls.Load()
	b.rcq.SetCompHandler(nil)
	b.postRecv(t, 9, 0, 4096)
	if _, err := a.qp.PostSend(wrs[:1]); err != nil {
		t.Fatal(err)
	}
	poll1(t, b.rcq) // the completion arrived (it stays queued)
	if calls.Load() != before {
		t.Fatal("handler ran after it was removed")
	}
}
