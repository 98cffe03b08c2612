package rdmacm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm"
)

// TestAFIB: rdma_cm with AF_IB addresses, as libfabric's verbs provider uses them for a
// device whose IPoIB interface it cannot see (its addresses from the GID and P_Key
// tables): a listener bound to the second device's GID gets the port it asked none for
// in an RDMA_PS_IB service ID, a client resolving that address takes the first active
// port on the subnet (Linux's cma_resolve_ib_dev), the REQ carries the service ID and
// the user's private data alone (no IP CM header), both sides see AF_IB addresses, and a
// message crosses. rdma_bind_addr and rdma_resolve_addr refused AF_IB (EAFNOSUPPORT).
func TestAFIB(t *testing.T) {
	h := newTestHost(t, 2)
	g1, _ := h.devs[1].Port.GID(0)
	g0, _ := h.devs[0].Port.GID(0)
	const psIB = 0x00000000013F0000
	sch := rdmacm.CreateEventChannel()
	listen, err := rdmacm.CreateID(h, sch, nil, rdmacm.PSIB)
	if err != nil {
		t.Fatal(err)
	}
	if err := listen.BindIB(rdmacm.IBAddr{GID: g1, PKey: 0xFFFF, SID: psIB, SIDMask: ^uint64(0)}); err != nil {
		t.Fatal(err)
	}
	la := listen.LocalIB()
	if listen.Device().Port != h.devs[1].Port || !listen.IsIB() || la.SID&^0xFFFF != psIB || la.Port() == 0 || la.SIDMask != ^uint64(0) {
		t.Fatalf("bound to %+v on %v", la, listen.Device().Port)
	}
	if err := listen.Listen(8); err != nil {
		t.Fatal(err)
	}

	cch := rdmacm.CreateEventChannel()
	cid, err := rdmacm.CreateID(h, cch, nil, rdmacm.PSIB)
	if err != nil {
		t.Fatal(err)
	}
	if err := cid.ResolveIB(nil, la, time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventAddrResolved).Ack()
	if cid.Device().Port != h.devs[0].Port || cid.LocalIB().GID != g0 || cid.PeerIB().SID != la.SID {
		t.Fatalf("client on %v, local %+v, peer %+v", cid.Device().Port, cid.LocalIB(), cid.PeerIB())
	}
	if err := cid.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventRouteResolved).Ack()
	ce := newEndpoint(t, cid.Device())
	cqp, err := cid.CreateQP(ce.pd, ce.initAttr())
	if err != nil {
		t.Fatal(err)
	}
	// 92 bytes: a REQ's whole private data, the IP CM header's room too.
	priv := make([]byte, 92)
	copy(priv, "hello over AF_IB")
	if err := cid.Connect(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, Private: priv}); err != nil {
		t.Fatal(err)
	}
	req := getEvent(t, sch, rdmacm.EventConnectRequest)
	sid := req.ID
	if string(req.Param.Private) != string(priv) {
		t.Fatalf("private data %q, want the client's alone", req.Param.Private)
	}
	if !sid.IsIB() || sid.LocalIB().GID != g1 || sid.PeerIB().GID != g0 || sid.LocalIB().SID != la.SID {
		t.Fatalf("server sees %+v → %+v", sid.PeerIB(), sid.LocalIB())
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
	copy(ce.buf, "over AF_IB")
	if _, err := cqp.PostSend([]hca.SendWR{{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: ce.sge(0, 10)}}); err != nil {
		t.Fatal(err)
	}
	if wc := se.poll(t); wc.Status != hca.WCSuccess || string(se.buf[:wc.ByteLen]) != "over AF_IB" {
		t.Fatalf("recv: %v %q", wc.Status, se.buf[:wc.ByteLen])
	}

	// An IP listener does not take an AF_IB client's REQ (no IP CM header): rejected.
	ipl, err := rdmacm.CreateID(h, sch, nil, rdmacm.PSIB)
	if err != nil {
		t.Fatal(err)
	}
	if err := ipl.BindAddr(netip.AddrPortFrom(h.addr(1), 7481)); err != nil {
		t.Fatal(err)
	}
	if err := ipl.Listen(1); err != nil {
		t.Fatal(err)
	}
	c2, err := rdmacm.CreateID(h, cch, nil, rdmacm.PSIB)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.ResolveIB(nil, rdmacm.IBAddr{GID: g1, PKey: 0xFFFF, SID: psIB | 7481, SIDMask: ^uint64(0)}, time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventAddrResolved).Ack()
	if err := c2.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventRouteResolved).Ack()
	if err := c2.Connect(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventRejected).Ack()
}
