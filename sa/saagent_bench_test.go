package sa_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
)

// BenchmarkSAPathRecord measures PathRecord queries per second from one client: each is
// a real SubnAdmGet round trip through the switch to the SA and back (no path cache).
func BenchmarkSAPathRecord(b *testing.B) {
	s := newSAFabric(b, satest.OneSwitch(b, 2, satest.Options{}), sa.Config{SweepInterval: -1}, sa.ClientOptions{PathTTL: -1})
	c := s.clients[1]
	q := sa.PathQuery{DGID: portGID(s.f.Ports()[0])}
	ctx := context.Background()
	if _, err := c.QueryPath(ctx, q); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.QueryPath(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
}

// TestSAPathRecordAllocs: the SA agent and client allocate nothing per PathRecord
// round trip in steady state. The MAD layer under them (hca.Port.receiveMAD) currently
// heap-allocates its GlobalRoute for every received MAD, one per direction: those two
// are allowed until it stops.
func TestSAPathRecordAllocs(t *testing.T) {
	if raceEnabledSA {
		t.Skip("allocation counts are meaningless under -race")
	}
	s := newSAFabric(t, satest.OneSwitch(t, 2, satest.Options{}), sa.Config{SweepInterval: -1}, sa.ClientOptions{PathTTL: -1})
	c := s.clients[1]
	q := sa.PathQuery{DGID: portGID(s.f.Ports()[0])}
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := c.QueryPath(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const madLayer = 0
	if n := testing.AllocsPerRun(200, func() { _, _ = c.QueryPath(ctx, q) }); n > madLayer {
		t.Fatalf("PathRecord round trip: %.1f allocations, want at most %d", n, madLayer)
	}
}

// TestSACaptureDecodesInTshark captures a client's SA traffic (PathRecord Get and
// answer, MCMemberRecord join and answer, an RMPP GetTable of NodeRecords with its ACKs)
// and checks that tshark decodes it as SA with no malformed frame or expert warning.
func TestSACaptureDecodesInTshark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sa.pcap")
	if p := os.Getenv("PIBGW_KEEP_CAPTURE"); p != "" {
		path = p
	}
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := fabric.NewCaptureWriter(file, fabric.CaptureOptions{})
	f := satest.OneSwitch(t, 3, satest.Options{})
	s := newSAFabric(t, f, sa.Config{SweepInterval: -1}, sa.ClientOptions{PathTTL: -1})
	f.HCACables[1].Wrap(fabric.AtoB, fabric.CaptureWrapper(cw, 0))
	f.HCACables[1].Wrap(fabric.BtoA, fabric.CaptureWrapper(cw, 0))
	ctx := saCtx(t)
	c := s.clients[1]
	if _, err := c.QueryPath(ctx, sa.PathQuery{DGID: portGID(f.Ports()[2])}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Join(ctx, wire.IPoIBBroadcastMGID(0xFFFF), wire.JoinFullMember, sa.JoinParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeRecords(ctx); err != nil {
		t.Fatal(err)
	}
	f.HCACables[1].Unwrap(fabric.AtoB)
	f.HCACables[1].Unwrap(fabric.BtoA)
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	file.Close()
	rows := fabrictest.TsharkFields(t, path, "infiniband.mad.mgmtclass", "infiniband.mad.method", "infiniband.mad.attributeid")
	var sawPR, sawMCR, sawNR int
	for _, r := range rows {
		if len(r) < 3 || r[0] != "0x03" {
			continue
		}
		switch r[2] {
		case "0x0035":
			sawPR++
		case "0x0038":
			sawMCR++
		case "0x0011":
			sawNR++
		}
	}
	if sawPR != 2 || sawMCR != 2 || sawNR < 3 {
		t.Fatalf("tshark saw %d PathRecord, %d MCMemberRecord, %d NodeRecord MADs:\n%v", sawPR, sawMCR, sawNR, rows)
	}
	fabrictest.RequireCleanDecode(t, path, fabrictest.NoEoIBHeuristic...)
}
