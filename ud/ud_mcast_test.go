package ud_test

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
)

func TestUDMulticastAttachDetach(t *testing.T) {
	f := hcatest.NewFabric(t, 3, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	c := newEndpoint(t, f.Devs[2], 8192, hca.AccessLocalWrite)
	a2 := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite) // a member on the sender's HCA
	mgid := [16]byte{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 14: 0x01, 15: 0x02}
	const mlid = 0xC001
	f.Switch.SetMFT(mlid, fabric.MakePortMask(1, 2, 3))
	for _, e := range []*endpoint{b, c, a2} {
		if err := e.qp.AttachMcast(mgid, mlid); err != nil {
			t.Fatal(err)
		}
		// Two buffers: the second message must not land where the test reads the first
		// (attached, the race detector cannot see that it arrives after that read).
		e.postRecv(t, 1, 0, 4096)
		e.postRecv(t, 2, 4096, 4096)
	}
	send := func() {
		t.Helper()
		copy(a.buf, "mcast!")
		wr := hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
			SGL: []hca.SGE{{Addr: a.mr.Addr(), Length: 6, LKey: a.mr.LKey()}},
			AH:  a.ah(t, mlid, true, mgid), RemoteQPN: 0xFFFFFF, RemoteQKey: testQKey}
		if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		poll1(t, a.scq)
	}
	send()
	for name, e := range map[string]*endpoint{"b": b, "c": c, "a2 (loopback)": a2} {
		wc := poll1(t, e.rcq)
		if wc.Status != hca.WCSuccess || wc.WCFlags&hca.WCGRH == 0 || wc.SrcQP != a.qp.Num() || string(e.buf[40:46]) != "mcast!" {
			t.Fatalf("%s: WC %+v data %q", name, wc, e.buf[40:46])
		}
	}
	pollNone(t, f, a.rcq) // the sender itself does not hear its own multicast
	if err := c.qp.DetachMcast(mgid, mlid); err != nil {
		t.Fatal(err)
	}
	send()
	poll1(t, b.rcq)
	poll1(t, a2.rcq)
	pollNone(t, f, c.rcq)
	// The port at the end of c's cable drops it: attached, the daemon's, which forwards a
	// group's packets only to the processes attached to it.
	if got := counter(t, f, f.OnSwitch(2).Port(1), hca.CntDropMcastNoGroup, 1); got != 1 {
		t.Fatalf("c drop_mcast_no_group = %d, want 1", got)
	}
	// Only UD QPs attach, and only to multicast GIDs.
	if err := b.qp.AttachMcast([16]byte{0xfe, 0x80}, mlid); err == nil {
		t.Fatal("attaching a unicast GID succeeded")
	}
}
