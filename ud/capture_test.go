package ud_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
)

// TestCaptureUDTrafficDecodesInTshark captures real UD traffic between two HCAs (as it
// leaves each HCA) and checks that tshark decodes every frame as InfiniBand with the
// LRH/BTH/DETH values the verbs calls asked for, with nothing malformed.
func TestCaptureUDTrafficDecodesInTshark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ud.pcap")
	if p := os.Getenv("PIBGW_KEEP_CAPTURE"); p != "" {
		path = p
	}
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := fabric.NewCaptureWriter(file, fabric.CaptureOptions{})
	f := hcatest.NewFabric(t, 2, hcatest.Options{Wrap: func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if d == fabric.AtoB { // HCA → switch
			return fabric.NewCaptureLink(l, cw)
		}
		return l
	}})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	mgid := [16]byte{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 0x01}
	f.Switch.SetMFT(0xC000, fabric.MakePortMask(1, 2))
	if err := b.qp.AttachMcast(mgid, 0xC000); err != nil {
		t.Fatal(err)
	}

	type sent struct {
		dlid        uint16
		slid        uint16
		opcode      int
		destQP      uint32
		srcQP       uint32
		global, imm bool
		size        int
	}
	var want []sent
	send := func(from, to *endpoint, dlid uint16, destQP uint32, size int, global, imm bool, dgid [16]byte) {
		t.Helper()
		to.postRecv(t, 1, 0, 8192)
		op, opcode := hca.WRSend, 0x64
		if imm {
			op, opcode = hca.WRSendWithImm, 0x65
		}
		wr := hca.SendWR{WRID: 1, Opcode: op, SendFlags: hca.SendSignaled, ImmData: 42,
			SGL: []hca.SGE{{Addr: from.mr.Addr(), Length: uint32(size), LKey: from.mr.LKey()}},
			AH:  from.ah(t, dlid, global, dgid), RemoteQPN: destQP, RemoteQKey: testQKey}
		if _, err := from.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := poll1(t, from.scq); wc.Status != hca.WCSuccess {
			t.Fatal(wc.Status)
		}
		if wc := poll1(t, to.rcq); wc.Status != hca.WCSuccess {
			t.Fatal(wc.Status)
		}
		want = append(want, sent{dlid, from.port.LID(), opcode, destQP, from.qp.Num(), global, imm, size})
	}
	send(a, b, 2, b.qp.Num(), 64, false, false, [16]byte{})
	send(a, b, 2, b.qp.Num(), 0, false, true, [16]byte{})
	send(b, a, 1, a.qp.Num(), 4096, true, false, gidOf(a.port))
	send(b, a, 1, a.qp.Num(), 333, true, true, gidOf(a.port))
	send(a, b, 0xC000, 0xFFFFFF, 100, true, false, mgid)
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	file.Close()

	rows := fabrictest.TsharkFields(t, path, "frame.protocols", "infiniband.lrh.dlid", "infiniband.lrh.slid",
		"infiniband.lrh.lnh", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.deth.q_key",
		"infiniband.deth.srcqp", "infiniband.grh.dgid", "infiniband.immdt", "infiniband.lrh.pktlen")
	if len(rows) != len(want) {
		t.Fatalf("tshark shows %d frames, want %d: %q", len(rows), len(want), rows)
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("tshark field %q is not a number", s)
		}
		return v
	}
	for i, r := range rows {
		w := want[i]
		lnh := uint64(2)
		if w.global {
			lnh = 3
		}
		checks := []struct {
			name      string
			got, want uint64
		}{
			{"dlid", num(r[1]), uint64(w.dlid)}, {"slid", num(r[2]), uint64(w.slid)},
			{"lnh", num(r[3]), lnh}, {"opcode", num(r[4]), uint64(w.opcode)},
			{"destqp", num(r[5]), uint64(w.destQP)}, {"q_key", num(r[6]), testQKey},
			{"srcqp", num(r[7]), uint64(w.srcQP)},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("frame %d %s = %#x, want %#x (%q)", i+1, c.name, c.got, c.want, r)
			}
		}
		if w.global != (r[8] != "") {
			t.Errorf("frame %d: GRH present in tshark = %v, want %v", i+1, r[8] != "", w.global)
		}
		if w.imm != (r[9] != "") {
			t.Errorf("frame %d: ImmDt present in tshark = %v, want %v", i+1, r[9] != "", w.imm)
		}
		if !strings.Contains(r[0], "infiniband") {
			t.Errorf("frame %d protocols %q", i+1, r[0])
		}
	}
	fabrictest.RequireCleanDecode(t, path, fabrictest.NoEoIBHeuristic...)
	// With Wireshark's defaults, the only complaint is its EoIB heuristic choking on the
	// empty payload of frame 2 (a 0-byte SEND with immediate).
	bad := strings.Split(strings.TrimSpace(fabrictest.Tshark(t, path, "-Y", fabrictest.TsharkProblems, "-T", "fields", "-e", "frame.number", "-e", "_ws.malformed")), "\n")
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "2\t") {
		t.Fatalf("default decode problems %q, want only frame 2 (the empty payload)", bad)
	}
}
