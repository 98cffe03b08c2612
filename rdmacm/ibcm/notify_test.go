package ibcm_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// TestEstablishedWithoutRTU: a passive ID whose RTU is lost is established by its QP's
// first packet (ib_cm_notify with IB_EVENT_COMM_EST → cm_establish): USER_ESTABLISHED, no
// more REP resends; again EISCONN; an ID that sent no REP gets ErrState (-EINVAL).
func TestEstablishedWithoutRTU(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	l := listen(t, r, pe)
	if err := l.Established(); !errors.Is(err, ibcm.ErrState) {
		t.Fatalf("Established on a listening ID: %v, want ErrState", err)
	}
	r.dropNext(0, wire.AttrCMRTU, 1)
	a := r.cm[0].NewID(ae.handler, nil)
	if err := a.SendReq(r.req("")); err != nil {
		t.Fatal(err)
	}
	p := pe.want(t, ibcm.EventReqReceived).id
	if err := p.SendRep(ibcm.RepParam{QPN: 0x456, StartingPSN: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ae.want(t, ibcm.EventRepReceived)
	if err := a.SendRTU(nil); err != nil {
		t.Fatal(err)
	}
	pe.none(t)
	if p.State() == ibcm.Established {
		t.Fatal("established with its RTU lost")
	}
	if err := p.Established(); err != nil {
		t.Fatalf("Established: %v", err)
	}
	pe.want(t, ibcm.EventUserEstablished)
	if p.State() != ibcm.Established {
		t.Fatalf("state %v", p.State())
	}
	if err := p.Established(); !errors.Is(err, syscall.EISCONN) {
		t.Fatalf("Established again: %v, want EISCONN", err)
	}
	sent := r.count(1, wire.AttrCMRep)
	r.advance(5e9, 1e9)
	if n := r.count(1, wire.AttrCMRep); n != sent {
		t.Fatalf("the REP was resent %d times after the ID was established", n-sent)
	}
	pe.none(t)
}
