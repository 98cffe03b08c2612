package hca

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
)

type nopTransport struct{}

func (nopTransport) PostSend(*QP, *SendWR) error    { return nil }
func (nopTransport) Receive(*QP, *Packet)           {}
func (nopTransport) Modified(*QP, QPState, QPState) {}

func newTestDevice(t *testing.T, ports int) *Device {
	t.Helper()
	d, err := NewDevice(Config{Name: "pib_0", NodeGUID: 0x0002c90300000300, NumPorts: ports,
		Transports: map[QPType]Transport{QPTypeUD: nopTransport{}}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func nextEvent(t *testing.T, c *Context) AsyncEvent {
	t.Helper()
	select {
	case ev := <-c.Events():
		return ev
	case <-time.After(time.Second):
		t.Fatal("no async event")
	}
	return AsyncEvent{}
}

func TestNewDeviceValidates(t *testing.T) {
	for _, c := range []Config{
		{NodeGUID: 1},
		{Name: "x"},
		{Name: "x", NodeGUID: 1, NumPorts: 33},
		{Name: "x", NodeGUID: 1, MaxMTU: 9},
	} {
		if _, err := NewDevice(c); err == nil {
			t.Errorf("NewDevice(%+v) succeeded", c)
		}
	}
	d := newTestDevice(t, 2)
	a := d.Query()
	if a.PhysPortCnt != 2 || a.SysImageGUID != 0x0002c90300000200 || a.MaxQPWR < 16351 || a.MaxInlineData < 2048 {
		t.Fatalf("device attr %+v", a)
	}
	p := d.Port(2)
	if p.GUID() != 0x0002c90300000302 {
		t.Fatalf("port 2 GUID %#x", p.GUID())
	}
	pa := p.Query()
	if pa.State != PortDown || pa.MaxMTU != MTU4096 || pa.ActiveMTU != MTU256 || pa.LinkLayer != "InfiniBand" {
		t.Fatalf("fresh port attr %+v", pa)
	}
	if k, _ := p.PKey(0); k != 0xFFFF {
		t.Fatalf("P_Key[0] = %#x, want 0xffff", k)
	}
	g, _ := p.GID(0)
	if g.String() != "fe80::2:c903:0:302" {
		t.Fatalf("GID[0] = %s", g)
	}
}

func TestPortEvents(t *testing.T) {
	d := newTestDevice(t, 1)
	c := d.Open()
	p := d.Port(1)
	p.SetState(PortActive)
	if ev := nextEvent(t, c); ev.Type != EventPortActive || ev.Port != 1 {
		t.Fatalf("event %v", ev)
	}
	p.SetLID(7, 0)
	if ev := nextEvent(t, c); ev.Type != EventLIDChange {
		t.Fatalf("event %v", ev.Type)
	}
	p.SetPKey(1, 0x8001)
	if ev := nextEvent(t, c); ev.Type != EventPKeyChange {
		t.Fatalf("event %v", ev.Type)
	}
	p.LinkStateChanged(false)
	if ev := nextEvent(t, c); ev.Type != EventPortErr {
		t.Fatalf("event %v", ev.Type)
	}
	if s := p.State(); s != PortDown {
		t.Fatalf("state after link down %s", s)
	}
}

func TestPKeyMatch(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		want bool
	}{
		{0xFFFF, 0xFFFF, true}, {0xFFFF, 0x7FFF, true}, {0x7FFF, 0x7FFF, false},
		{0x8001, 0x0001, true}, {0x0001, 0x0001, false}, {0x8001, 0x8002, false},
		{0x8000, 0x8000, false}, {0x0000, 0x8000, false},
	} {
		if got := PKeyMatch(tc.a, tc.b); got != tc.want {
			t.Errorf("PKeyMatch(%#04x, %#04x) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestRegMRChecks(t *testing.T) {
	d := newTestDevice(t, 1)
	pd, _ := d.Open().AllocPD()
	if _, err := pd.RegMR(nil, AccessLocalWrite); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("empty MR: %v", err)
	}
	if _, err := pd.RegMR(make([]byte, 8), AccessRemoteWrite); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("REMOTE_WRITE without LOCAL_WRITE: %v", err)
	}
	buf := make([]byte, 100)
	mr, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != BufAddr(buf) || mr.Length() != 100 || d.LookupKey(mr.LKey()) != mr {
		t.Fatal("MR attributes")
	}
	if _, ok := mr.Slice(mr.Addr()+90, 11); ok {
		t.Fatal("Slice past the end succeeded")
	}
	if b, ok := mr.Slice(mr.Addr()+90, 10); !ok || &b[0] != &buf[90] {
		t.Fatal("Slice inside failed")
	}
	if err := pd.Dealloc(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Dealloc with an MR: %v", err)
	}
	key := mr.LKey()
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if d.LookupKey(key) != nil {
		t.Fatal("deregistered key still found")
	}
	mr2, _ := pd.RegMR(buf, AccessLocalWrite)
	if mr2.LKey() == key || d.LookupKey(key) != nil {
		t.Fatal("a stale key finds a reused MR slot")
	}
	if err := mr2.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

func TestCQNotifyAndInject(t *testing.T) {
	d := newTestDevice(t, 1)
	c := d.Open()
	ch := c.CreateCompChannel()
	cq, err := c.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	cq.Push(&WC{WRID: 1}, false) // not armed: no event
	select {
	case <-ch.Events():
		t.Fatal("event without ReqNotify")
	default:
	}
	if err := cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	cq.Push(&WC{WRID: 2}, false) // armed for solicited only
	select {
	case <-ch.Events():
		t.Fatal("solicited-only CQ notified for an unsolicited completion")
	default:
	}
	cq.Push(&WC{WRID: 3}, true)
	select {
	case got := <-ch.Events():
		if got != cq {
			t.Fatal("event for another CQ")
		}
		cq.AckEvents(1)
	case <-time.After(time.Second):
		t.Fatal("no completion event")
	}
	var wcs [8]WC
	if n := cq.Poll(wcs[:]); n != 3 || wcs[2].WRID != 3 {
		t.Fatalf("poll %d %+v", n, wcs[:n])
	}
	if _, err := c.CreateCQ(0, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("CQ of 0 entries: %v", err)
	}
	cq.InjectError()
	if ev := nextEvent(t, c); ev.Type != EventCQErr || ev.CQ != cq {
		t.Fatalf("event %v", ev)
	}
}

// TestCompChannelNotify: with SetNotify, an armed CQ's event goes to the function on the
// goroutine that pushed the completion, before Push returns, and not to Events; nil goes
// back to Events.
func TestCompChannelNotify(t *testing.T) {
	d := newTestDevice(t, 1)
	c := d.Open()
	ch := c.CreateCompChannel()
	cq, err := c.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	var got []*CQ
	ch.SetNotify(func(x *CQ) { got = append(got, x) })
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cq.Push(&WC{WRID: 1}, false)
	if len(got) != 1 || got[0] != cq {
		t.Fatalf("notified %v, want the CQ once before Push returned", got)
	}
	select {
	case <-ch.Events():
		t.Fatal("event also on Events")
	default:
	}
	cq.AckEvents(1)
	ch.SetNotify(nil)
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cq.Push(&WC{WRID: 2}, false)
	select {
	case x := <-ch.Events():
		if x != cq || len(got) != 1 {
			t.Fatalf("event for %p, notified %d", x, len(got))
		}
	default:
		t.Fatal("no event on Events after SetNotify(nil)")
	}
	ch.Spin() // a device without a Remote: nothing to take in, no panic
	ch.SpinEnd()
}

func TestInjectQPFatal(t *testing.T) {
	d := newTestDevice(t, 1)
	c := d.Open()
	pd, _ := c.AllocPD()
	cq, _ := c.CreateCQ(8, nil)
	qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeUD, Cap: QPCap{MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 1}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 64), AccessLocalWrite)
	if _, err := qp.PostRecv([]RecvWR{{WRID: 5, SGL: []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	qp.InjectFatal()
	if qp.State() != QPStateErr {
		t.Fatalf("state %s", qp.State())
	}
	if ev := nextEvent(t, c); ev.Type != EventQPFatal || ev.QP != qp {
		t.Fatalf("event %v", ev)
	}
	var wcs [2]WC
	if n := cq.Poll(wcs[:]); n != 1 || wcs[0].Status != WCWRFlushErr || wcs[0].WRID != 5 {
		t.Fatalf("flush %d %+v", n, wcs[:n])
	}
	// Unsupported QP types are EOPNOTSUPP; a QP needs CQs.
	if _, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeRC}); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("RC without a transport: %v", err)
	}
	if _, err := pd.CreateQP(QPInitAttr{QPType: QPTypeUD}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("QP without CQs: %v", err)
	}
	if _, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeUD, Cap: QPCap{MaxInlineData: 4096}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("inline 4096: %v", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if d.LookupQP(qp.Num()) != nil {
		t.Fatal("destroyed QP still found")
	}
}

// TestCreateQPInlineCap: a send queue takes inline data up to its scatter/gather space
// (max_send_sge × 16 bytes) even when asked for less, as rxe's and mlx5's do, and
// ibv_create_qp reports what it got; a larger request is kept; a QP without a send
// queue has no inline capacity.
func TestCreateQPInlineCap(t *testing.T) {
	d := newTestDevice(t, 1)
	c := d.Open()
	pd, _ := c.AllocPD()
	cq, _ := c.CreateCQ(8, nil)
	for _, tc := range []struct {
		sge, inline, want uint32
	}{{0, 0, 16}, {1, 0, 16}, {4, 0, 64}, {4, 100, 100}, {2, 32, 32}, {MaxSGE, 0, min(MaxSGE*16, MaxInline)}} {
		qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: QPTypeUD,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: tc.sge, MaxInlineData: tc.inline}})
		if err != nil {
			t.Fatal(err)
		}
		if got := qp.Cap().MaxInlineData; got != tc.want {
			t.Errorf("max_send_sge %d, max_inline_data %d asked: got %d inline, want %d", tc.sge, tc.inline, got, tc.want)
		}
		qp.Destroy()
	}
}

// TestCQTimestamps: a CQ with SetTimestamps stamps each completion with the device clock
// as it is made (ibv_wc_read_completion_ts), which counts nanoseconds from the device's
// making; others leave it 0. WallClock turns a reading into Unix nanoseconds.
func TestCQTimestamps(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	d, err := NewDevice(Config{Name: "pib_0", NodeGUID: 0x0002c90300000300, NumPorts: 1, Clock: clk,
		Transports: map[QPType]Transport{QPTypeUD: nopTransport{}}})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Open()
	plain, _ := c.CreateCQ(4, nil)
	stamped, _ := c.CreateCQ(4, nil)
	stamped.SetTimestamps(true)
	clk.Advance(1500 * time.Nanosecond)
	stamped.Push(&WC{WRID: 1}, false)
	plain.Push(&WC{WRID: 1}, false)
	clk.Advance(2 * time.Millisecond)
	stamped.Push(&WC{WRID: 2}, false)
	var wcs [4]WC
	if n := stamped.Poll(wcs[:]); n != 2 || wcs[0].Timestamp != 1500 || wcs[1].Timestamp != 2_001_500 {
		t.Errorf("stamped CQ: %d completions, timestamps %d and %d; want 1500 and 2001500", n, wcs[0].Timestamp, wcs[1].Timestamp)
	}
	if n := plain.Poll(wcs[:]); n != 1 || wcs[0].Timestamp != 0 {
		t.Errorf("plain CQ: timestamp %d, want 0", wcs[0].Timestamp)
	}
	if now := d.CoreClock(); now != 2_001_500 {
		t.Errorf("CoreClock %d, want 2001500", now)
	}
	if w := d.WallClock(1500); w != 1_700_000_000_000_001_500 {
		t.Errorf("WallClock(1500) = %d", w)
	}
}
