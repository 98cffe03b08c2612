package rdmacm_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/rdmacm"
)

// holdLinks holds every packet sent on the wrapped links while on, and sends them when
// released: two DREQs sent while held cross on the wire.
type holdLinks struct {
	mu   sync.Mutex
	on   bool
	held []heldPkt
}

type heldPkt struct {
	l fabric.Link
	p []byte
}

func (h *holdLinks) wrap(_ int, _ fabric.Direction, l fabric.Link) fabric.Link {
	return fabric.LinkFunc(func(pkts [][]byte) {
		h.mu.Lock()
		if h.on {
			for _, p := range pkts {
				h.held = append(h.held, heldPkt{l, append([]byte(nil), p...)})
			}
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		l.Send(pkts)
	})
}

func (h *holdLinks) hold() { h.mu.Lock(); h.on = true; h.mu.Unlock() }

func (h *holdLinks) release() {
	h.mu.Lock()
	held := h.held
	h.on, h.held = false, nil
	h.mu.Unlock()
	for _, x := range held {
		x.l.Send([][]byte{x.p})
	}
}

// TestDisconnectCrossed: both sides call rdma_disconnect before either DREQ arrives
// (perftest's client and server end together; the daemon's DREQ for a process that
// exited can cross one too). Each CM then holds the other's DREQ (IBA 12.9.6: DREQ
// received in DREQ_SENT), no DREP will come, and each application still gets exactly one
// DISCONNECTED — the DREQ's event reports it, as in Linux's rdma_cm — instead of waiting
// for it forever; destroying the IDs sends the DREPs.
func TestDisconnectCrossed(t *testing.T) {
	var hl holdLinks
	h := newTestHostWrap(t, 2, hl.wrap)
	sch := rdmacm.CreateEventChannel()
	l, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err := l.BindAddr(netip.AddrPortFrom(h.addr(1), 7471)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(4); err != nil {
		t.Fatal(err)
	}
	id, ch := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7471))
	if err := id.Connect(rdmacm.ConnParam{QPNum: 0x77}); err != nil {
		t.Fatal(err)
	}
	r := getEvent(t, sch, rdmacm.EventConnectRequest)
	if err := r.ID.Accept(rdmacm.ConnParam{QPNum: 0x78}); err != nil {
		t.Fatal(err)
	}
	r.Ack()
	getEvent(t, ch, rdmacm.EventConnectResponse).Ack()
	if err := id.Establish(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, sch, rdmacm.EventEstablished).Ack()

	hl.hold()
	if err := id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := r.ID.Disconnect(); err != nil {
		t.Fatal(err)
	}
	hl.release()
	getEvent(t, ch, rdmacm.EventDisconnected).Ack()
	getEvent(t, sch, rdmacm.EventDisconnected).Ack()
	h.f.Settle(t)
	for _, c := range []*rdmacm.EventChannel{ch, sch} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if e, err := c.GetEvent(ctx); err == nil {
			t.Errorf("after DISCONNECTED: %v, want nothing more", e.Type)
		}
		cancel()
	}
	for _, x := range []*rdmacm.ID{id, r.ID, l} {
		if err := x.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}
