package sa_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
)

// TestSMSweepCaptureDecodes captures the SM's sweep of the two-level tree on the SM's
// cable and on a leaf–spine link (both directions) and checks that tshark decodes every
// SMP (issue 3, acceptance 4) as a directed-route SMP with nothing malformed.
func TestSMSweepCaptureDecodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.pcap")
	if p := os.Getenv("PIBGW_KEEP_CAPTURE"); p != "" {
		path = p
	}
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := fabric.NewCaptureWriter(file, fabric.CaptureOptions{})
	f := satest.SmallTree(t, satest.Options{})
	for _, c := range []*fabric.Cable{f.HCACables[0], f.Links[0].Cable} {
		for _, d := range []fabric.Direction{fabric.AtoB, fabric.BtoA} {
			c.Wrap(d, func(l fabric.Link) fabric.Link { return fabric.NewCaptureLink(l, cw) })
		}
	}
	sm := f.StartSM(t, sa.Config{})
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if n := cw.Stats().Packets; n < 2*sm.Stats().SMPsSent/3 {
		t.Fatalf("captured %d packets for %d SMPs", n, sm.Stats().SMPsSent)
	}
	fabrictest.RequireCleanDecode(t, path, fabrictest.NoEoIBHeuristic...)
	rows := fabrictest.TsharkFields(t, path, "infiniband.mad.mgmtclass", "infiniband.mad.attributeid")
	attrs := make(map[string]bool)
	for _, r := range rows {
		if len(r) < 2 || r[0] != "0x81" {
			t.Fatalf("frame decoded as class %q, want directed-route SMP (0x81): %v", r[0], r)
		}
		attrs[strings.ToLower(r[1])] = true
	}
	for _, a := range []string{"0x0011", "0x0010", "0x0015", "0x0012", "0x0019"} {
		if !attrs[a] {
			t.Errorf("no SMP with attribute %s in the capture (saw %v)", a, attrs)
		}
	}
}
