package rdmacm_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/rdmacm"
)

// TestCaptureDecodes: a connection with private data, a reject, a SIDR exchange and a
// disconnect, captured on the wire: tshark decodes every frame without a warning, the
// IP CM header (IBA Annex A11) of the REQ and SIDR_REQ included.
func TestCaptureDecodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rdmacm.pcap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	cw := fabric.NewCaptureWriter(file, fabric.CaptureOptions{})
	capture := fabric.CaptureWrapper(cw, 0)
	h := newTestHostWrap(t, 2, func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if d != fabric.AtoB {
			return l
		}
		return capture(l)
	})
	sch := rdmacm.CreateEventChannel()
	l, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err := l.BindAddr(netip.AddrPortFrom(h.addr(1), 7471)); err != nil {
		t.Fatal(err)
	}
	l.Listen(4)
	u, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSUDP)
	if err := u.BindAddr(netip.AddrPortFrom(h.addr(1), 7174)); err != nil {
		t.Fatal(err)
	}
	u.Listen(4)

	// Accepted and disconnected.
	id, ch := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7471))
	id.Connect(rdmacm.ConnParam{QPNum: 0x77, Private: []byte("user data")})
	r := getEvent(t, sch, rdmacm.EventConnectRequest)
	r.ID.Accept(rdmacm.ConnParam{QPNum: 0x78, Private: []byte("accepted")})
	r.Ack()
	getEvent(t, ch, rdmacm.EventConnectResponse).Ack()
	id.Establish()
	getEvent(t, sch, rdmacm.EventEstablished).Ack()
	id.Disconnect()
	getEvent(t, sch, rdmacm.EventDisconnected).Ack()
	r.ID.Disconnect()
	getEvent(t, ch, rdmacm.EventDisconnected).Ack()
	// Rejected.
	id2, ch2 := resolve(t, h, rdmacm.PSTCP, netip.AddrPortFrom(h.addr(1), 7471))
	id2.Connect(rdmacm.ConnParam{QPNum: 0x79})
	r = getEvent(t, sch, rdmacm.EventConnectRequest)
	r.ID.Reject([]byte("no"))
	r.Ack()
	getEvent(t, ch2, rdmacm.EventRejected).Ack()
	// SIDR.
	id3, ch3 := resolve(t, h, rdmacm.PSUDP, netip.AddrPortFrom(h.addr(1), 7174))
	id3.Connect(rdmacm.ConnParam{Private: []byte("ud")})
	r = getEvent(t, sch, rdmacm.EventConnectRequest)
	r.ID.Accept(rdmacm.ConnParam{QPNum: 0x80})
	r.Ack()
	getEvent(t, ch3, rdmacm.EventEstablished).Ack()

	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	fabrictest.RequireCleanDecode(t, path, fabrictest.NoEoIBHeuristic...)
	attrs := map[string]int{}
	for _, row := range fabrictest.TsharkFields(t, path, "infiniband.mad.attributeid") {
		attrs[row[0]]++
	}
	for _, a := range []string{"0x0010", "0x0012", "0x0013", "0x0014", "0x0015", "0x0016", "0x0017", "0x0018"} {
		if attrs[a] == 0 {
			t.Errorf("no CM attribute %s in the capture (%v)", a, attrs)
		}
	}
	var ipcm int
	for _, row := range fabrictest.TsharkFields(t, path, "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
		"infiniband.cm.req.serviceid.dport") {
		if row[0] == "10.0.0.1" && row[1] == "10.0.0.2" && row[2] == "0x1d2f" {
			ipcm++
		}
	}
	if ipcm != 2 {
		t.Errorf("tshark shows the IP CM header in %d REQs, want 2", ipcm)
	}
}
