package rdmacm_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm"
)

// TestNotify: rdma_notify as the kernel's (rdma_notify → ib_cm_notify): COMM_EST on an
// established ID is EISCONN, on a listening or unconnected one EINVAL; LID_CHANGE is
// accepted; other events are EINVAL. (The RTU-lost path is ibcm's
// TestEstablishedWithoutRTU.)
func TestNotify(t *testing.T) {
	h := newTestHost(t, 2)
	sch, cch := rdmacm.CreateEventChannel(), rdmacm.CreateEventChannel()
	listen, err := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := listen.BindAddr(netip.AddrPortFrom(h.addr(1), 7480)); err != nil {
		t.Fatal(err)
	}
	if err := listen.Listen(8); err != nil {
		t.Fatal(err)
	}
	if err := listen.Notify(hca.EventCommEst); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("notify on a listening ID: %v, want EINVAL", err)
	}
	cid, _ := rdmacm.CreateID(h, cch, nil, rdmacm.PSTCP)
	if err := cid.Notify(hca.EventCommEst); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("notify on a new ID: %v, want EINVAL", err)
	}
	if err := cid.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(h.addr(1), 7480), time.Second); err != nil {
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
	req := getEvent(t, sch, rdmacm.EventConnectRequest)
	sid := req.ID
	req.Ack()
	se := newEndpoint(t, sid.Device())
	if _, err := sid.CreateQP(se.pd, se.initAttr()); err != nil {
		t.Fatal(err)
	}
	if err := sid.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cch, rdmacm.EventEstablished).Ack()
	getEvent(t, sch, rdmacm.EventEstablished).Ack()
	for _, id := range []*rdmacm.ID{sid, cid} {
		if err := id.Notify(hca.EventCommEst); !errors.Is(err, syscall.EISCONN) {
			t.Fatalf("COMM_EST on an established ID: %v, want EISCONN", err)
		}
		if err := id.Notify(hca.EventLIDChange); err != nil {
			t.Fatalf("LID_CHANGE: %v", err)
		}
		if err := id.Notify(hca.EventPathMig); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("PATH_MIG: %v, want EINVAL", err)
		}
	}
}
