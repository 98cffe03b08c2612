package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm"
)

// TestLoopback: as Linux's rdma_cm, an ID bound to 127.0.0.1 takes no device (rdma_bind_addr
// acquires none for cma_any_addr, which the loopback address is) and listens on every
// device; one resolving 127.0.0.1 takes the first device with an active port and finds
// its own GID (cma_resolve_loopback, cma_bind_loopback): a client and a listener on
// 127.0.0.1 connect through the HCA (rping -a 127.0.0.1), and a message crosses.
func TestLoopback(t *testing.T) {
	h := newTestHost(t, 2)
	lo := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 7480)
	sch := rdmacm.CreateEventChannel()
	listen, err := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := listen.BindAddr(lo); err != nil {
		t.Fatal(err)
	}
	if p := listen.Device().Port; p != nil {
		// libfabric's verbs provider binds 127.0.0.1 and keeps the MSG endpoints of
		// the device it gets alone: pib_1 had none.
		t.Fatalf("127.0.0.1 bound to %v, want no device", p.Device().Name())
	}
	if err := listen.Listen(8); err != nil {
		t.Fatal(err)
	}
	cid, cch := resolve(t, h, rdmacm.PSTCP, lo)
	if cid.Device().Port != h.devs[0].Port || cid.LocalAddr().Addr() != lo.Addr() {
		t.Fatalf("client on %v from %v, want the first device from 127.0.0.1", cid.Device().Port, cid.LocalAddr())
	}
	if r, ok := cid.Route(); !ok || r.DLID != r.SLID {
		t.Fatalf("route %+v (ok %v), want a path to the port itself", r, ok)
	}
	ce := newEndpoint(t, cid.Device())
	cqp, err := cid.CreateQP(ce.pd, ce.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	req := getEvent(t, sch, rdmacm.EventConnectRequest)
	sid := req.ID
	if sid.PeerAddr() != cid.LocalAddr() || sid.LocalAddr() != lo {
		t.Fatalf("server sees %v → %v", sid.PeerAddr(), sid.LocalAddr())
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
	if err := sid.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventEstablished).Ack()
	getEvent(t, sch, rdmacm.EventEstablished).Ack()
	copy(ce.buf, "over loopback")
	if _, err := cqp.PostSend([]hca.SendWR{{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: ce.sge(0, 13)}}); err != nil {
		t.Fatal(err)
	}
	if wc := se.poll(t); wc.Status != hca.WCSuccess || string(se.buf[:wc.ByteLen]) != "over loopback" {
		t.Fatalf("recv: %v %q", wc.Status, se.buf[:wc.ByteLen])
	}
}

// TestMigrate: rdma_migrate_id moves an ID's queued events and all later ones to the new
// channel, and a listener's connection requests follow it (libfabric's verbs provider
// moves its listening ID to the endpoint's channel so).
func TestMigrate(t *testing.T) {
	h := newTestHost(t, 2)
	lo := netip.AddrPortFrom(h.addr(1), 7482)
	old, ch := rdmacm.CreateEventChannel(), rdmacm.CreateEventChannel()
	listen, err := rdmacm.CreateID(h, old, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := listen.BindAddr(lo); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(8); err != nil {
		t.Fatal(err)
	}
	if err := listen.Migrate(ch); err != nil {
		t.Fatal(err)
	}
	cold, cch := rdmacm.CreateEventChannel(), rdmacm.CreateEventChannel()
	cid, err := rdmacm.CreateID(h, cold, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := cid.ResolveAddr(netip.Addr{}, lo, time.Second); err != nil {
		t.Fatal(err)
	}
	// ADDR_RESOLVED may be queued on the old channel already: it moves with the ID.
	time.Sleep(10 * time.Millisecond)
	if err := cid.Migrate(cch); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventAddrResolved).Ack()
	if err := cid.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventRouteResolved).Ack()
	ce := newEndpoint(t, cid.Device())
	if _, err := cid.CreateQP(ce.pd, ce.initAttr()); err != nil {
		t.Fatal(err)
	}
	if err := cid.Connect(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	req := getEvent(t, ch, rdmacm.EventConnectRequest)
	if req.ListenID != listen {
		t.Fatalf("request for %v", req.ListenID)
	}
	for _, c := range []*rdmacm.EventChannel{old, cold} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if e, err := c.GetEvent(ctx); err == nil {
			t.Errorf("an event stayed on the old channel: %v", e.Type)
		}
		cancel()
	}
	req.Ack()
}
