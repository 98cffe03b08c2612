package ibcm_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// TestLAPAPR loads an alternate path into an established connection (IBA 12.8): LAP with
// the path from the sender's view arrives as LAP_RECEIVED with it from the receiver's,
// the APR's status and private data come back; a lost APR is sent again when the LAP is
// resent; a LAP nobody answers ends in LAP_ERROR; the connection stays ESTABLISHED.
func TestLAPAPR(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	listen(t, r, pe)
	a, p := connect(t, r, ae, pe)
	alt := r.path(0, 1)
	alt.SLID, alt.DLID, alt.SL, alt.FlowLabel, alt.TClass = 0x41, 0x42, 5, 0x12345, 7
	if err := a.SendLAP(alt, []byte("lap")); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventLAPReceived)
	got := x.e.AltPath
	if got == nil || got.SLID != 0x42 || got.DLID != 0x41 || got.SL != 5 || got.FlowLabel != 0x12345 || got.TClass != 7 ||
		got.SGID != alt.DGID || got.DGID != alt.SGID || got.PacketLifeTime != alt.PacketLifeTime ||
		!bytes.HasPrefix(x.e.Private, []byte("lap")) || len(x.e.Private) != wire.CMLAPPrivateLen {
		t.Fatalf("LAP received as %+v, private %q", got, x.e.Private)
	}
	if err := a.SendLAP(alt, nil); err != ibcm.ErrState {
		t.Fatalf("second LAP while one is pending: %v", err)
	}
	if err := p.SendAPR(wire.APRSuccess, []byte{1, 2}, []byte("apr")); err != nil {
		t.Fatal(err)
	}
	y := ae.want(t, ibcm.EventAPRReceived)
	if y.e.APStatus != wire.APRSuccess || !bytes.Equal(y.e.Info, []byte{1, 2}) || !bytes.HasPrefix(y.e.Private, []byte("apr")) {
		t.Fatalf("APR received as status %d info %v private %q", y.e.APStatus, y.e.Info, y.e.Private)
	}

	// The APR is lost: the LAP goes again after the CM response timeout and the passive
	// side answers the duplicate with the same APR.
	r.dropNext(1, wire.AttrCMAPR, 1)
	if err := a.SendLAP(alt, nil); err != nil {
		t.Fatal(err)
	}
	pe.want(t, ibcm.EventLAPReceived)
	if err := p.SendAPR(wire.APRRejected, nil, nil); err != nil {
		t.Fatal(err)
	}
	r.advance(8*time.Second, 500*time.Millisecond) // 4.3 s + 2 × 1.07 s
	if y := ae.want(t, ibcm.EventAPRReceived); y.e.APStatus != wire.APRRejected {
		t.Fatalf("APR status %d after the resend, want %d", y.e.APStatus, wire.APRRejected)
	}
	pe.none(t)
	if n := r.count(0, wire.AttrCMLAP); n != 3 {
		t.Errorf("%d LAPs sent, want 3 (two LAPs, one resent)", n)
	}

	// Nobody answers: LAP_ERROR once the retries are spent.
	r.dropNext(0, wire.AttrCMLAP, 100)
	if err := a.SendLAP(alt, nil); err != nil {
		t.Fatal(err)
	}
	r.advance(120*time.Second, time.Second)
	ae.want(t, ibcm.EventLAPError)
	if a.State() != ibcm.Established || p.State() != ibcm.Established {
		t.Fatalf("states %v / %v after the LAPs, want ESTABLISHED", a.State(), p.State())
	}
	disconnect(t, r, a, p, ae, pe)
	r.checkCapture(t, "0x0019", "0x001a")
}
