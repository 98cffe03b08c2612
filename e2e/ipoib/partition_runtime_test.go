package ipoib

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EPartitionAtRunTime is issue 44's "partitions at run time": on a running daemon
// with no partition but the default, the quick start's `pibgw child add ib0 0x8001`
// makes a child that is down (0x8001 is in no P_Key table); `pibgw partition add 0x8001`
// has the SM program the tables, and the children come up and ping each other without a
// restart; `partition list` shows it; `partition del 0x8001` takes them down again.
func TestE2EPartitionAtRunTime(t *testing.T) {
	e2etest.Require(t, "ping")
	nsA, nsB := e2etest.NetNS("rpa"), e2etest.NetNS("rpb")
	d := e2etest.StartDaemon(t, "", e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24")+
		e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24"), nsA, nsB)
	out := d.MustPibgw("child", "add", "ib0", "0x8001", "--addr", "10.20.0.1/24")
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "ib0.8001") {
		t.Errorf("pibgw child add printed %d lines, want one naming ib0.8001:\n%s", n, out)
	}
	d.MustPibgw("child", "add", "ib1", "0x8001", "--addr", "10.20.0.2/24")
	waitUp := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ifs := d.Show()
			if ifs["ib0.8001"].Up == want && ifs["ib1.8001"].Up == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("children not up=%v in 20 s: %+v %+v", want, ifs["ib0.8001"], ifs["ib1.8001"])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitUp(false)

	out = d.MustPibgw("partition", "add", "0x8001")
	if out != "partition 0x8001 added: ALL=full\n" {
		t.Errorf("pibgw partition add 0x8001: %q", out)
	}
	waitUp(true)
	if ok, out := e2etest.PingNS(nsA, "10.20.0.2", 3); !ok {
		t.Errorf("ping over the new partition:\n%s", out)
	}
	var ps []control.Partition
	d.JSON(&ps, "partition", "list")
	if len(ps) != 2 || ps[0].PKey != 0x7fff || ps[1].PKey != 0x0001 || strings.Join(ps[1].Members, " ") != "ALL=full" {
		b, _ := json.Marshal(ps)
		t.Errorf("pibgw partition list --json: %s", b)
	}
	if _, errs, err := d.Pibgw("partition", "add", "8001"); err == nil || !strings.Contains(errs, "exists already") {
		t.Errorf("adding 0x8001 twice: %v %q", err, errs)
	}

	if out := d.MustPibgw("partition", "del", "0x8001"); out != "partition 0x8001 deleted\n" {
		t.Errorf("pibgw partition del 0x8001: %q", out)
	}
	waitUp(false)
	if ok, out := e2etest.UnreachableNS(nsA, "10.20.0.2"); !ok {
		t.Errorf("10.20.0.2 answers after partition del:\n%s", out)
	}
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 2); !ok {
		t.Errorf("the parents stopped working:\n%s", out)
	}
}
