package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// testHost is a Host over an hcatest fabric: HCA i has address 10.0.0.(i+1) on its
// port, neighbours resolve from that table, paths from the LIDs.
type testHost struct {
	f    *hcatest.Fabric
	devs []rdmacm.Device
}

func newTestHost(t *testing.T, n int) *testHost {
	return newTestHostWrap(t, n, nil)
}

func newTestHostWrap(t *testing.T, n int, wrap func(int, fabric.Direction, fabric.Link) fabric.Link) *testHost {
	return newTestHostClock(t, n, wrap, nil)
}

func newTestHostClock(t *testing.T, n int, wrap func(int, fabric.Direction, fabric.Link) fabric.Link, clk clock.Clock) *testHost {
	t.Helper()
	f := hcatest.NewFabric(t, n, hcatest.Options{Register: rc.Register, Wrap: wrap})
	h := &testHost{f: f}
	for _, d := range f.Devs {
		p := d.Port(1)
		p.SetPKeys([hca.PKeyTableLen]uint16{0xFFFF})
		cm := ibcm.New(ibcm.HCAPort(p), ibcm.Options{Clock: clk})
		t.Cleanup(cm.Close)
		h.devs = append(h.devs, rdmacm.Device{Port: p, PKey: 0xFFFF, CM: cm})
	}
	return h
}

func (h *testHost) addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}) }

func (h *testHost) index(a netip.Addr) int {
	if !a.Is4() {
		return -1
	}
	b := a.As4()
	if b[0] != 10 || b[1] != 0 || b[2] != 0 || int(b[3]) < 1 || int(b[3]) > len(h.devs) {
		return -1
	}
	return int(b[3]) - 1
}

func (h *testHost) LocalDevice(a netip.Addr) (rdmacm.Device, error) {
	if a.IsUnspecified() {
		return rdmacm.Device{}, rdmacm.ErrAnyAddress
	}
	i := h.index(a)
	if i < 0 {
		return rdmacm.Device{}, syscall.EADDRNOTAVAIL
	}
	return h.devs[i], nil
}

func (h *testHost) Devices() []rdmacm.Device { return h.devs }

func (h *testHost) Source(dst netip.Addr) (netip.Addr, error) {
	if h.index(dst) < 0 {
		return netip.Addr{}, syscall.ENETUNREACH
	}
	return h.addr(0), nil
}

func (h *testHost) Neighbor(ctx context.Context, src, dst netip.Addr) (wire.GID, error) {
	i := h.index(dst)
	if i < 0 {
		<-ctx.Done() // nobody answers the ARP
		return wire.GID{}, ctx.Err()
	}
	g, _ := h.devs[i].Port.GID(0)
	return g, nil
}

func (h *testHost) PathRecord(ctx context.Context, dev rdmacm.Device, dgid wire.GID) (sa.Path, error) {
	for _, d := range h.devs {
		if g, _ := d.Port.GID(0); g == dgid {
			sg, _ := dev.Port.GID(0)
			return sa.Path{SGID: sg, DGID: dgid, SLID: dev.Port.LID(), DLID: d.Port.LID(), PKey: 0xFFFF,
				MTU: uint8(hca.MTU4096), Rate: 3, PacketLifeTime: 14}, nil
		}
	}
	return sa.Path{}, fmt.Errorf("no path to %v", dgid)
}

func (h *testHost) JoinMulticast(context.Context, rdmacm.Device, wire.GID, uint32) (sa.MCGroup, error) {
	return sa.MCGroup{}, syscall.ENOSYS // no SM on this fabric
}

func (h *testHost) LeaveMulticast(context.Context, rdmacm.Device, wire.GID) error {
	return syscall.ENOSYS
}

func getEvent(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if e.Type != want {
		t.Fatalf("event %v (status %d), want %v", e.Type, e.Status, want)
	}
	return e
}

// endpoint is a verbs side for a test connection.
type endpoint struct {
	pd  *hca.PD
	cq  *hca.CQ
	buf []byte
	mr  *hca.MR
}

func newEndpoint(t *testing.T, d rdmacm.Device) *endpoint {
	t.Helper()
	ctx := d.Port.Device().Open()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(256, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, hca.AccessLocalWrite|hca.AccessRemoteWrite|hca.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	return &endpoint{pd: pd, cq: cq, buf: buf, mr: mr}
}

func (e *endpoint) initAttr() hca.QPInitAttr {
	return hca.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

func (e *endpoint) sge(off, n int) []hca.SGE {
	return []hca.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

func (e *endpoint) poll(t *testing.T) hca.WC {
	t.Helper()
	wcs := make([]hca.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if e.cq.Poll(wcs) == 1 {
			return wcs[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return hca.WC{}
}

// TestConnectSendDisconnect: librdmacm's flow on both sides, a SEND and an RDMA WRITE
// over the connection, and the disconnect with its events.
func TestConnectSendDisconnect(t *testing.T) {
	h := newTestHost(t, 2)
	sch, cch := rdmacm.CreateEventChannel(), rdmacm.CreateEventChannel()
	listen, err := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := listen.BindAddr(netip.AddrPortFrom(h.addr(1), 7471)); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(8); err != nil {
		t.Fatal(err)
	}

	cid, _ := rdmacm.CreateID(h, cch, nil, rdmacm.PSTCP)
	if err := cid.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(h.addr(1), 7471), time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventAddrResolved).Ack()
	if err := cid.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventRouteResolved).Ack()
	ce := newEndpoint(t, cid.Device())
	cqp, err := cid.CreateQP(ce.pd, ce.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(rdmacm.ConnParam{Private: []byte("hi server"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}

	req := getEvent(t, sch, rdmacm.EventConnectRequest)
	sid := req.ID
	if req.ListenID != listen || !bytes.HasPrefix(req.Param.Private, []byte("hi server")) {
		t.Fatalf("CONNECT_REQUEST private %q listen %v", req.Param.Private, req.ListenID == listen)
	}
	if got := sid.PeerAddr(); got.Addr() != h.addr(0) || got.Port() != cid.LocalAddr().Port() {
		t.Fatalf("server sees peer %v, client is %v", got, cid.LocalAddr())
	}
	if got := sid.LocalAddr(); got != netip.AddrPortFrom(h.addr(1), 7471) {
		t.Fatalf("server's local address %v", got)
	}
	req.Ack()
	se := newEndpoint(t, sid.Device())
	sqp, err := sid.CreateQP(se.pd, se.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqp.PostRecv([]hca.RecvWR{{WRID: 1, SGL: se.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := sid.Accept(rdmacm.ConnParam{Private: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	est := getEvent(t, cch, rdmacm.EventEstablished)
	if !bytes.HasPrefix(est.Param.Private, []byte("welcome")) {
		t.Fatalf("ESTABLISHED private %q", est.Param.Private)
	}
	est.Ack()
	getEvent(t, sch, rdmacm.EventEstablished).Ack()
	if cqp.State() != hca.QPStateRTS || sqp.State() != hca.QPStateRTS {
		t.Fatalf("QP states %v / %v", cqp.State(), sqp.State())
	}

	copy(ce.buf, "ping over rdma_cm")
	if _, err := cqp.PostSend([]hca.SendWR{{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: ce.sge(0, 17)}}); err != nil {
		t.Fatal(err)
	}
	if wc := ce.poll(t); wc.Status != hca.WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
	if wc := se.poll(t); wc.Status != hca.WCSuccess || string(se.buf[:wc.ByteLen]) != "ping over rdma_cm" {
		t.Fatalf("recv: %v %q", wc.Status, se.buf[:wc.ByteLen])
	}
	copy(ce.buf[100:], "written")
	if _, err := cqp.PostSend([]hca.SendWR{{WRID: 3, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: ce.sge(100, 7),
		RemoteAddr: se.mr.Addr() + 200, RKey: se.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := ce.poll(t); wc.Status != hca.WCSuccess || string(se.buf[200:207]) != "written" {
		t.Fatalf("write: %v %q", wc.Status, se.buf[200:207])
	}

	if err := cid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, sch, rdmacm.EventDisconnected).Ack()
	// The peer's DREQ leaves the QP to its consumer, as Linux's rdma_cm and librdmacm
	// do: only rdma_disconnect moves it to ERR (a SEND whose ACK is still on its way
	// completes rather than being flushed).
	if st := sqp.State(); st != hca.QPStateRTS {
		t.Fatalf("server QP at DISCONNECTED, before its rdma_disconnect: %v, want RTS", st)
	}
	if err := sid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if st := sqp.State(); st != hca.QPStateErr {
		t.Fatalf("server QP after its rdma_disconnect: %v, want ERR", st)
	}
	getEvent(t, cch, rdmacm.EventDisconnected).Ack()
	getEvent(t, cch, rdmacm.EventTimewaitExit).Ack()
	getEvent(t, sch, rdmacm.EventTimewaitExit).Ack()
	if cqp.State() != hca.QPStateErr {
		t.Fatalf("client QP after disconnect: %v", cqp.State())
	}
	for _, id := range []*rdmacm.ID{cid, sid, listen} {
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

func resolve(t *testing.T, h *testHost, ps rdmacm.PortSpace, dst netip.AddrPort) (*rdmacm.ID, *rdmacm.EventChannel) {
	t.Helper()
	ch := rdmacm.CreateEventChannel()
	id, err := rdmacm.CreateID(h, ch, nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.Addr{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, ch, rdmacm.EventAddrResolved).Ack()
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, ch, rdmacm.EventRouteResolved).Ack()
	return id, ch
}

func TestRejectAndNoListener(t *testing.T) {
	h := newTestHost(t, 2)
	// Nobody listens on 7000: REJECTED with status 8, and the QP in the error state with
	// its posted receive flushed, as Linux's rdma_cm and librdmacm leave it.
	id, ch := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7000))
	e0 := newEndpoint(t, id.Device())
	qp, err := id.CreateQP(e0.pd, e0.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]hca.RecvWR{{WRID: 5, SGL: e0.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(rdmacm.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if e := getEvent(t, ch, rdmacm.EventRejected); e.Status != wire.RejInvalidServiceID {
		t.Fatalf("status %d, want 8", e.Status)
	}
	if st := qp.State(); st != hca.QPStateErr {
		t.Fatalf("QP after REJECTED: %v, want ERR", st)
	}
	if wc := e0.poll(t); wc.WRID != 5 || wc.Status != hca.WCWRFlushErr {
		t.Fatalf("posted receive after REJECTED: %+v, want WR 5 flushed", wc)
	}
	// A listener that rejects with private data: status 28, data delivered.
	sch := rdmacm.CreateEventChannel()
	l, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err := l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 7001)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	id2, ch2 := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7001))
	if err := id2.Connect(rdmacm.ConnParam{QPNum: 0x98}); err != nil {
		t.Fatal(err)
	}
	r := getEvent(t, sch, rdmacm.EventConnectRequest)
	if err := r.ID.Reject([]byte("busy")); err != nil {
		t.Fatal(err)
	}
	r.Ack()
	e := getEvent(t, ch2, rdmacm.EventRejected)
	if e.Status != wire.RejConsumerReject || !bytes.HasPrefix(e.Param.Private, []byte("busy")) {
		t.Fatalf("REJECTED status %d private %q", e.Status, e.Param.Private[:4])
	}
	// The port is taken while l listens.
	l2, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err := l2.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 7001)); err == nil {
		t.Fatal("second bind to port 7001 succeeded")
	}
}

func TestAddrErrorForNobody(t *testing.T) {
	h := newTestHost(t, 2)
	ch := rdmacm.CreateEventChannel()
	id, _ := rdmacm.CreateID(h, ch, nil, rdmacm.PSTCP)
	if err := id.ResolveAddr(h.addr(0), netip.AddrPortFrom(netip.MustParseAddr("10.0.0.77"), 1), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if e := getEvent(t, ch, rdmacm.EventAddrError); e.Status != -int(syscall.ETIMEDOUT) {
		t.Fatalf("status %d", e.Status)
	}
}

// TestUDThroughSIDR: udaddy's flow — the client's Connect is a SIDR_REQ, the server's
// Accept answers with its QPN and the UDP Q_Key, and a datagram goes through.
func TestUDThroughSIDR(t *testing.T) {
	h := newTestHost(t, 2)
	sch := rdmacm.CreateEventChannel()
	l, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSUDP)
	if err := l.BindAddr(netip.AddrPortFrom(h.addr(1), 7174)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	id, ch := resolve(t, h, rdmacm.PSUDP, netip.AddrPortFrom(h.addr(1), 7174))
	ce := newEndpoint(t, id.Device())
	cqp, err := id.CreateQP(ce.pd, ce.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(rdmacm.ConnParam{Private: []byte("ud?")}); err != nil {
		t.Fatal(err)
	}
	r := getEvent(t, sch, rdmacm.EventConnectRequest)
	if !bytes.HasPrefix(r.UD.Private, []byte("ud?")) {
		t.Fatalf("UD private %q", r.UD.Private)
	}
	se := newEndpoint(t, r.ID.Device())
	sqp, err := r.ID.CreateQP(se.pd, se.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqp.PostRecv([]hca.RecvWR{{WRID: 1, SGL: se.sge(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	if err := r.ID.Accept(rdmacm.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	r.Ack()
	est := getEvent(t, ch, rdmacm.EventEstablished)
	if est.UD.QPNum != sqp.Num() || est.UD.QKey != rdmacm.UDPQKey {
		t.Fatalf("UD param %+v, server QP %#x", est.UD, sqp.Num())
	}
	ah, err := ce.pd.CreateAH(est.UD.AHAttr)
	if err != nil {
		t.Fatal(err)
	}
	copy(ce.buf, "datagram")
	if _, err := cqp.PostSend([]hca.SendWR{{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: ce.sge(0, 8),
		AH: ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := se.poll(t); wc.Status != hca.WCSuccess || string(se.buf[40:48]) != "datagram" {
		t.Fatalf("UD recv %v %q", wc.Status, se.buf[40:48])
	}
}

// TestUnreachable: a peer whose CM never answers — the REQ is resent every 4.3 s + 2 ×
// the packet lifetime for rdma_cm's 15 retries, then UNREACHABLE (-ETIMEDOUT), on fake
// time.
func TestUnreachable(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	h := newTestHostClock(t, 2, nil, clk)
	h.devs[1].CM.Close() // nobody home: the port drops the CM's MADs
	id, ch := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7471))
	if err := id.Connect(rdmacm.ConnParam{QPNum: 0x55}); err != nil {
		t.Fatal(err)
	}
	for range 16 * 5 {
		clk.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	if e := getEvent(t, ch, rdmacm.EventUnreachable); e.Status != -int(syscall.ETIMEDOUT) {
		t.Fatalf("status %d", e.Status)
	}
}

// TestDialer: the net.Dialer-shaped entry point refuses unknown networks.
func TestDialer(t *testing.T) {
	h := newTestHost(t, 2)
	d := &rdmacm.Dialer{Host: h}
	if _, err := d.DialContext(context.Background(), "udp", "10.0.0.2:1"); err == nil {
		t.Fatal("udp accepted")
	}
	if _, err := d.DialContext(context.Background(), "rdma", "10.0.0.2:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to nobody: %v", err)
	}
}
