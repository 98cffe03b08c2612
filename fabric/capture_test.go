package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func TestCaptureRoundTrip(t *testing.T) {
	clk := clock.NewFake(t0)
	var buf bytes.Buffer
	cw := fabric.NewCaptureWriter(&buf, fabric.CaptureOptions{Clock: clk})
	p1, p2, p3 := udPkt(2, "one"), udPkt(3, "two, longer"), fabrictest.DRSMP(7, wire.AttrNodeInfo, 1)
	cw.WritePackets([][]byte{p1, p2})
	clk.Advance(1500 * time.Microsecond)
	cw.WritePacketsOn(1, [][]byte{p3})
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := fabric.ReadCapture(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("read %d records, want 3", len(recs))
	}
	for i, want := range [][]byte{p1, p2, p3} {
		r := recs[i]
		if r.Type != fabric.ERFTypeInfiniBand || r.Truncated() || r.WireLen != len(want)+wire.VCRCLen {
			t.Fatalf("record %d: %+v", i, r)
		}
		if !bytes.Equal(r.Packet(), want) {
			t.Fatalf("record %d packet differs", i)
		}
		if v, ok := r.VCRC(); !ok || v != wire.VCRC(want) || !wire.CheckVCRC(r.Data) {
			t.Fatalf("record %d VCRC %#x, want %#x", i, v, wire.VCRC(want))
		}
	}
	if !recs[0].Time.Equal(t0) || !recs[2].Time.Equal(t0.Add(1500*time.Microsecond)) {
		t.Fatalf("times %v %v", recs[0].Time, recs[2].Time)
	}
	if recs[0].Interface != 0 || recs[2].Interface != 1 {
		t.Fatalf("interfaces %d %d", recs[0].Interface, recs[2].Interface)
	}
	if s := cw.Stats(); s.Packets != 3 || s.Skipped != 0 {
		t.Fatalf("stats %+v", s)
	}
	cw.WritePackets([][]byte{p1})
	if s := cw.Stats(); s.Skipped != 1 {
		t.Fatal("write after Close was not skipped")
	}
	if err := cw.Flush(); !errors.Is(err, fabric.ErrCaptureClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
}

func TestCaptureSnaplenAndLimit(t *testing.T) {
	var buf bytes.Buffer
	cw := fabric.NewCaptureWriter(&buf, fabric.CaptureOptions{Snaplen: 32, Limit: 2})
	p := udPkt(2, strings.Repeat("x", 100))
	cw.WritePackets([][]byte{p, p, p})
	cw.Close()
	recs, err := fabric.ReadCapture(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("limit 2 recorded %d", len(recs))
	}
	r := recs[0]
	if len(r.Data) != 32 || !r.Truncated() || r.WireLen != len(p)+2 || r.Packet() != nil || !bytes.Equal(r.Data, p[:32]) {
		t.Fatalf("snapped record: %d bytes, wlen %d", len(r.Data), r.WireLen)
	}
	if s := cw.Stats(); s.Packets != 2 || s.Skipped != 1 || s.Bytes != 64 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCaptureLinkAndConcurrency(t *testing.T) {
	var buf bytes.Buffer
	cw := fabric.NewCaptureWriter(&buf, fabric.CaptureOptions{BufferSize: 512})
	a, b := fabrictest.NewRecorder(), fabrictest.NewRecorder()
	fabric.NewCable(a, b, fabric.WithDirectionWrapper(fabric.AtoB, fabric.CaptureWrapper(cw, 0)),
		fabric.WithDirectionWrapper(fabric.BtoA, fabric.CaptureWrapper(cw, 1)))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				a.Send(udPkt(2, fmt.Sprint("a", i)))
				b.Send(udPkt(1, fmt.Sprint("b", i)))
			}
		}()
	}
	wg.Wait()
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := fabric.ReadCapture(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var perIface [2]int
	for _, r := range recs {
		perIface[r.Interface]++
		if r.Packet() == nil || !wire.CheckICRC(r.Packet()) {
			t.Fatal("garbled record")
		}
	}
	if perIface != [2]int{400, 400} || a.Len() != 400 || b.Len() != 400 {
		t.Fatalf("records per interface %v, delivered %d/%d", perIface, a.Len(), b.Len())
	}
	// A plain NewCaptureLink records on interface 0 and passes packets on.
	var buf2 bytes.Buffer
	cw2 := fabric.NewCaptureWriter(&buf2, fabric.CaptureOptions{})
	out := &collect{}
	fabric.NewCaptureLink(out, cw2).Send([][]byte{udPkt(2, "x")})
	cw2.Close()
	if recs, _ := fabric.ReadCapture(&buf2); len(recs) != 1 || len(out.pkts) != 1 {
		t.Fatal("NewCaptureLink did not record and pass on")
	}
}

// TestCaptureTshark writes UD packets and a directed-route SMP and checks that tshark
// decodes every field and reports nothing malformed and no expert warning.
func TestCaptureTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: apt-get install tshark to run this interop test")
	}
	uds := []fabrictest.UD{
		{DLID: 0x0002, SLID: 0x0001, DestQP: 0x000048, SrcQP: 0x000049, QKey: 0x80010000, PSN: 5, Payload: []byte("hello, fabric!")},
		{DLID: 0x0011, SLID: 0x0003, SL: 2, DestQP: 0x123456, SrcQP: 0x000010, QKey: 0x0000B1B1, PSN: 0xABCDE, Payload: bytes.Repeat([]byte{0xA5}, 256)},
		{DLID: 0xC001, SLID: 0x0004, PKey: 0x8001, DestQP: 0xFFFFFF, SrcQP: 0x000002, QKey: 0x0000000B, Payload: []byte{1, 2, 3, 4}},
	}
	var pkts [][]byte
	for _, u := range uds {
		pkts = append(pkts, u.Build())
	}
	smp := fabrictest.DRSMP(0x1122334455667788, wire.AttrNodeInfo, 1, 3)
	pkts = append(pkts, smp)

	path := filepath.Join(t.TempDir(), "fabric.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := fabric.NewCaptureWriter(f, fabric.CaptureOptions{Clock: clock.NewFake(t0)})
	cw.WritePackets(pkts)
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(tshark, append([]string{"-n", "-r", path}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tshark %v: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}

	out := run("-T", "fields", "-E", "separator=,",
		"-e", "frame.protocols", "-e", "erf.types.type", "-e", "infiniband.lrh.vl", "-e", "infiniband.lrh.lnh",
		"-e", "infiniband.lrh.dlid", "-e", "infiniband.lrh.slid", "-e", "infiniband.lrh.pktlen",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.p_key", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.psn", "-e", "infiniband.deth.q_key", "-e", "infiniband.deth.srcqp",
		"-e", "infiniband.invariant.crc", "-e", "infiniband.variant.crc",
		"-e", "infiniband.mad.mgmtclass", "-e", "infiniband.mad.attributeid",
		"-e", "infiniband.smpdirected.hopcount", "-e", "frame.time_epoch")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark shows %d frames, want %d:\n%s", len(lines), len(pkts), out)
	}
	for i, line := range lines {
		p := pkts[i]
		fld := strings.Split(line, ",")
		lrh, bth := wire.LRH(p), wire.BTH(p[wire.LRHLen:])
		deth := wire.DETH(p[wire.LRHLen+wire.BTHLen:])
		icrc := p[len(p)-wire.ICRCLen:]
		vcrc := wire.VCRC(p)
		// Numbers are compared by value: tshark prints some fields in hex, some in
		// decimal. Wireshark shows both CRCs as big-endian numbers of the bytes on the
		// wire; the VCRC bytes follow wire.AppendVCRC (least significant first).
		want := []string{
			"", "21", fmt.Sprint(lrh.VL()), fmt.Sprint(uint8(lrh.LNH())),
			fmt.Sprint(lrh.DLID()), fmt.Sprint(lrh.SLID()), fmt.Sprint(lrh.PktLen()),
			fmt.Sprint(uint8(bth.OpCode())), fmt.Sprint(bth.PKey()), fmt.Sprint(bth.DestQP()),
			fmt.Sprint(bth.PSN()), fmt.Sprint(deth.QKey()), fmt.Sprint(deth.SrcQP()),
			fmt.Sprint(binary.BigEndian.Uint32(icrc)),
			fmt.Sprint(uint16(vcrc)<<8 | vcrc>>8),
			"", "", "", fmt.Sprintf("%d.%09d", t0.Unix(), t0.Nanosecond()),
		}
		if i == 3 {
			mad := wire.SMP(p[wire.LRHLen+wire.BTHLen+wire.DETHLen:])
			want[15] = fmt.Sprint(mad.MAD().MgmtClass())
			want[16] = fmt.Sprint(mad.MAD().AttrID())
			want[17] = fmt.Sprint(mad.HopCount())
		}
		if len(fld) != len(want) {
			t.Fatalf("frame %d: %d fields, want %d: %q", i+1, len(fld), len(want), line)
		}
		if !strings.Contains(fld[0], "erf:infiniband") {
			t.Errorf("frame %d protocols %q, want erf:infiniband...", i+1, fld[0])
		}
		for j := 1; j < len(want); j++ {
			if !sameValue(fld[j], want[j]) {
				t.Errorf("frame %d field %d = %q, want %q (line %q)", i+1, j, fld[j], want[j], line)
			}
		}
	}
	const problems = "_ws.malformed || _ws.expert.severity >= \"Warning\""
	if bad := strings.TrimSpace(run("-Y", problems)); bad != "" {
		t.Fatalf("tshark reports malformed frames or expert warnings:\n%s\n%s", bad, run("-z", "expert", "-q"))
	}

	// Control: the same filter does catch a malformed frame (an LRH and a cut BTH), so
	// the empty answer above means something.
	cf, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw = fabric.NewCaptureWriter(cf, fabric.CaptureOptions{})
	cw.WritePackets([][]byte{pkts[0][:12], pkts[0]})
	cw.Close()
	cf.Close()
	if bad := strings.Split(strings.TrimSpace(run("-Y", problems)), "\n"); len(bad) != 1 || !strings.Contains(bad[0], "Malformed") {
		t.Fatalf("control: the filter found %q, want the one malformed frame", bad)
	}
}

// sameValue compares a tshark field with a wanted value, as numbers when both parse.
func sameValue(got, want string) bool {
	g, err1 := strconv.ParseUint(got, 0, 64)
	w, err2 := strconv.ParseUint(want, 0, 64)
	if err1 == nil && err2 == nil {
		return g == w
	}
	return got == want
}

// gateWriter blocks every Write until open is closed, then appends to buf. entered
// receives when a Write begins.
type gateWriter struct {
	open    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// With a Backlog, recording never waits for the writer: while a Flush is stuck in a
// writer that takes nothing, packets are still recorded into memory up to the backlog,
// the rest dropped and counted, and the next record's ERF loss counter says how many.
func TestCaptureBacklogNeverBlocks(t *testing.T) {
	p := udPkt(2, strings.Repeat("x", 100))
	rec := 16 + fabric.ERFHeaderLen + len(p) + wire.VCRCLen
	g := &gateWriter{open: make(chan struct{}), entered: make(chan struct{}, 1)}
	cw := fabric.NewCaptureWriter(g, fabric.CaptureOptions{Backlog: 10 * rec})
	flushed := make(chan error, 1)
	go func() { flushed <- cw.Flush() }()
	<-g.entered // the Flush is stuck in the writer with the file header
	select {
	case <-cw.Full():
		t.Fatal("Full before anything was recorded")
	default:
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			cw.WritePackets([][]byte{p})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WritePackets waited for a writer that takes nothing")
	}
	select {
	case <-cw.Full():
	default:
		t.Error("Full did not signal a full backlog")
	}
	s := cw.Stats()
	if s.Packets != 10 || s.Dropped != 90 {
		t.Fatalf("stats %+v, want 10 recorded and 90 dropped", s)
	}
	close(g.open)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := cw.Flush(); err != nil {
		t.Fatal(err)
	}
	cw.WritePackets([][]byte{p})
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := fabric.ReadCapture(&g.buf)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(recs)) != s.Packets+1 {
		t.Fatalf("%d records, want %d", len(recs), s.Packets+1)
	}
	for i, r := range recs {
		want := 0
		if i == len(recs)-1 {
			want = int(s.Dropped)
		}
		if r.Loss != want || !bytes.Equal(r.Packet(), p) {
			t.Errorf("record %d: loss %d, want %d", i, r.Loss, want)
		}
	}
}
