package rc_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
)

// side is one end of a connection: a QP with its PD, CQs and a registered buffer.
type side struct {
	ctx  *hca.Context
	pd   *hca.PD
	scq  *hca.CQ
	rcq  *hca.CQ
	qp   *hca.QP
	buf  []byte
	mr   *hca.MR
	port *hca.Port
	mw2  *hca.MW // a type 2 window (bindType2)
}

type connOpts struct {
	typ      hca.QPType
	mtu      hca.MTU
	bufLen   int
	access   hca.AccessFlags // MR access
	qpAccess hca.AccessFlags
	timeout  uint8
	retry    uint8
	rnrRetry uint8
	minRNR   uint8
	depth    uint32
	rdAtomic uint8
	clk      clock.Clock
	wrap     func(i int, d fabric.Direction, l fabric.Link) fabric.Link
	cqe      int
	// csumPartial creates the QPs with IPCsumPartial.
	csumPartial bool
	// rqSkew is added to the rq_psn bring gives: the QP expects PSNs its peer does not send.
	rqSkew uint32
	// staticRate is the address vector's static rate (IBA 9.11; enum ibv_rate).
	staticRate uint8
}

func (o *connOpts) defaults() {
	if o.typ == 0 {
		o.typ = hca.QPTypeRC
	}
	if o.mtu == 0 {
		o.mtu = hca.MTU4096
	}
	if o.bufLen == 0 {
		o.bufLen = 1 << 20
	}
	if o.access == 0 {
		o.access = hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
	}
	if o.qpAccess == 0 {
		o.qpAccess = hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic
	}
	if o.timeout == 0 {
		o.timeout = 14
	}
	if o.depth == 0 {
		o.depth = 256
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
	if o.cqe == 0 {
		o.cqe = 4096
	}
}

// connect builds a two-HCA fabric and an RC (or UC) connection between them.
func connect(t testing.TB, o connOpts) (*hcatest.Fabric, *side, *side) {
	t.Helper()
	o.defaults()
	f := hcatest.NewFabric(t, 2, hcatest.Options{Register: rc.Register, Clock: o.clk, Wrap: o.wrap})
	if c, ok := o.clk.(*fakeClock); ok {
		c.settle = func() { f.Settle(t) }
	}
	a := newSide(t, f.Devs[0], o)
	b := newSide(t, f.Devs[1], o)
	bring(t, a, b, o)
	bring(t, b, a, o)
	return f, a, b
}

func newSide(t testing.TB, d *hca.Device, o connOpts) *side {
	t.Helper()
	s := &side{ctx: d.Open(), port: d.Port(1)}
	var err error
	if s.pd, err = s.ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.scq, err = s.ctx.CreateCQ(o.cqe, nil); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = s.ctx.CreateCQ(o.cqe, nil); err != nil {
		t.Fatal(err)
	}
	s.qp, err = s.pd.CreateQP(hca.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, QPType: o.typ,
		Cap:           hca.QPCap{MaxSendWR: o.depth, MaxRecvWR: o.depth, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 512},
		IPCsumPartial: o.csumPartial})
	if err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, o.bufLen)
	if s.mr, err = s.pd.RegMR(s.buf, o.access); err != nil {
		t.Fatal(err)
	}
	return s
}

// bring moves s's QP to RTS, connected to peer.
func bring(t testing.TB, s, peer *side, o connOpts) {
	t.Helper()
	a := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: o.qpAccess}
	if err := s.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: o.mtu, DestQPNum: peer.qp.Num(), RQPSN: (0x100 + peer.qp.Num() + o.rqSkew) & 0xFFFFFF,
		AHAttr: hca.AHAttr{DLID: peer.port.LID(), PortNum: 1, StaticRate: o.staticRate}, MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR}
	mask := hca.QPAttrState | hca.QPAttrAV | hca.QPAttrPathMTU | hca.QPAttrDestQPN | hca.QPAttrRQPSN
	if o.typ == hca.QPTypeRC {
		mask |= hca.QPAttrMaxDestRdAtomic | hca.QPAttrMinRNRTimer
	}
	if err := s.qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 0x100 + s.qp.Num(), Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic}
	mask = hca.QPAttrState | hca.QPAttrSQPSN
	if o.typ == hca.QPTypeRC {
		mask |= hca.QPAttrTimeout | hca.QPAttrRetryCnt | hca.QPAttrRNRRetry | hca.QPAttrMaxQPRdAtomic
	}
	if err := s.qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
}

func (s *side) sge(off, n int) hca.SGE {
	return hca.SGE{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
}

func (s *side) postRecv(t testing.TB, wrid uint64, off, n int) {
	t.Helper()
	if _, err := s.qp.PostRecv([]hca.RecvWR{{WRID: wrid, SGL: []hca.SGE{s.sge(off, n)}}}); err != nil {
		t.Fatal(err)
	}
}

func (s *side) post(t testing.TB, wr hca.SendWR) {
	t.Helper()
	if _, err := s.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatalf("post %s: %v", wr.Opcode, err)
	}
}

// fakeClock is a fake clock for a fabric whose delivery may be asynchronous (attached
// devices): before time moves, and after every timer that fires, it lets the fabric settle
// (hcatest.Fabric.Settle), so that the packets in flight arrive before the next timer
// fires, as in process, where they arrive inside the call that sent them. Without that,
// a retransmit timer would fire on an ACK that is merely on its way.
type fakeClock struct {
	*clock.Fake
	settle func() // set by connect
}

func newFakeClock() *fakeClock { return &fakeClock{Fake: clock.NewFake(time.Unix(0, 0))} }

// Settle waits until nothing is in flight.
func (c *fakeClock) Settle() {
	if c.settle != nil {
		c.settle()
	}
}

// Advance settles, then moves time forward.
func (c *fakeClock) Advance(d time.Duration) {
	c.Settle()
	c.Fake.Advance(d)
}

// AfterFunc arms a timer whose function, run inside Advance, is followed by a Settle.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.Fake.AfterFunc(d, func() {
		f()
		c.Settle()
	})
}

// waitWC polls cq until a completion arrives, advancing a fake clock if given.
func waitWC(t testing.TB, cq *hca.CQ, clk *fakeClock) hca.WC {
	t.Helper()
	var wc [1]hca.WC
	// Bounded by count on a fake clock; by time on a real one, where completions may come
	// from another goroutine (attached devices: PIBGW_TEST_ATTACHED=1).
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 1_000_000 || clk == nil && time.Now().Before(deadline); i++ {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if clk != nil {
			// Time moves only if nothing in flight brings the completion.
			clk.Settle()
			if cq.Poll(wc[:]) == 1 {
				return wc[0]
			}
			clk.Advance(50 * time.Millisecond)
		} else if i > 1000 {
			runtime.Gosched()
		}
	}
	t.Fatal("no completion")
	return hca.WC{}
}

// noWC checks that cq has no completion once nothing is in flight any more.
func noWC(t testing.TB, f *hcatest.Fabric, cq *hca.CQ) {
	t.Helper()
	f.Settle(t)
	var wc [1]hca.WC
	if cq.Poll(wc[:]) != 0 {
		t.Fatalf("unexpected completion %+v", wc[0])
	}
}

// drain returns every completion in cq: waiting (attached devices complete on the
// goroutines that read the rings) until there are at least want, then, once nothing is in
// flight, the rest, so that the caller sees extra completions too.
func drain(t testing.TB, f *hcatest.Fabric, cq *hca.CQ, want int) []hca.WC {
	t.Helper()
	var out []hca.WC
	var wcs [16]hca.WC
	poll := func() {
		for n := cq.Poll(wcs[:]); n > 0; n = cq.Poll(wcs[:]) {
			out = append(out, wcs[:n]...)
		}
	}
	hcatest.Eventually(func() bool { poll(); return len(out) >= want })
	f.Settle(t)
	poll()
	return out
}
