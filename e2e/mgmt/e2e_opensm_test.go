package mgmt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/e2etest"
)

// osmEnv runs libibumad programs through libumad2sim against a test daemon's ibsim
// server (its own socket name) in a scratch directory, where libumad2sim writes its fake
// sysfs tree.
type osmEnv struct {
	t    *testing.T
	sock string // IBSIM_SOCKNAME
	dir  string
}

func (e *osmEnv) cmd(ctx context.Context, host string, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = e.dir
	// opensm keeps its caches (guid2lid…) and dumps in OSM_CACHE_DIR and OSM_TMP_DIR:
	// the test's directory, not /var/cache/opensm.
	c.Env = append(os.Environ(), "LD_PRELOAD="+e2etest.FindUmad2sim(), "IBSIM_SOCKNAME="+e.sock,
		"OSM_CACHE_DIR="+e.dir, "OSM_TMP_DIR="+e.dir)
	if host != "" {
		c.Env = append(c.Env, "SIM_HOST="+host)
	}
	return c
}

// diag runs an infiniband-diags program attached at host ("" = the default node) and
// returns its output; it fails the test if the program fails.
func (e *osmEnv) diag(host, name string, args ...string) string {
	e.t.Helper()
	out, err := e2etest.UmadRun(e.t, func(ctx context.Context) *exec.Cmd { return e.cmd(ctx, host, name, args...) })
	if err != nil {
		e.t.Fatalf("%s %s (SIM_HOST=%q): %v\n%s", name, strings.Join(args, " "), host, err, out)
	}
	return string(out)
}

// TestE2EOpenSM is issue 16's acceptance point 1: the real opensm, through libumad2sim
// and pibgw's ibsim server, is the subnet manager of a three-HCA fabric whose built-in SM
// is off. It brings every port Active; IPoIB works under opensm's SA (joins, path
// queries); the partition opensm's partitions.conf gives hosts A and B isolates their
// P_Key children from C's; and infiniband-diags read the fabric consistently with
// `pibgw stat`: ibnetdiscover, ibstat, smpquery, perfquery (counters move with
// traffic), saquery, ibroute, sminfo.
func TestE2EOpenSM(t *testing.T) {
	e2etest.Require(t, "ping", "opensm", "ibnetdiscover", "ibstat", "smpquery", "perfquery", "saquery", "ibroute", "sminfo")
	if e2etest.FindUmad2sim() == "" {
		t.Skip("needs libumad2sim.so (Debian libumad2sim0, with ibsim-utils) in /usr/lib/*/umad2sim/")
	}
	nsA, nsB, nsC := e2etest.NetNS("oa"), e2etest.NetNS("ob"), e2etest.NetNS("oc")
	sock := fmt.Sprintf("pibgwe2e-%d", os.Getpid())
	body := fmt.Sprintf(`
[fabric]
hca_count = 3

[sm]
mode = "external"

[ibsim]
enable = true
socket_name = %q
`, sock) +
		e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24") + "[[interfaces]]\nparent = \"ib0\"\npkey = 0x8001\naddresses = [\"10.20.0.1/24\"]\n" +
		e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24") + "[[interfaces]]\nparent = \"ib1\"\npkey = 0x8001\naddresses = [\"10.20.0.2/24\"]\n" +
		e2etest.InterfaceTOML("ib2", "pib_2", nsC, "10.10.0.3/24") + "[[interfaces]]\nparent = \"ib2\"\npkey = 0x8001\naddresses = [\"10.20.0.3/24\"]\n"
	d := e2etest.StartDaemon(t, "", body, nsA, nsB, nsC)
	e := &osmEnv{t: t, sock: sock, dir: t.TempDir()}

	// opensm on pib_0 port 1 (the default node), with partition 0x8001 for A and B only.
	parts := filepath.Join(e.dir, "partitions.conf")
	if err := os.WriteFile(parts, []byte("Default=0x7fff, ipoib : ALL=full ;\n"+
		"storage=0x8001, ipoib : 0x0002c90300000301=full, 0x0002c90300000401=full ;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	osmLog := filepath.Join(e.dir, "opensm.log")
	osm := e.cmd(context.Background(), "", "opensm", "-f", osmLog, "-P", parts)
	osmOut := &e2etest.SyncBuffer{}
	osm.Stdout, osm.Stderr = osmOut, osmOut
	start := time.Now()
	if err := osm.Start(); err != nil {
		t.Fatal(err)
	}
	osmDone := make(chan struct{})
	go func() { osm.Wait(); close(osmDone) }()
	t.Cleanup(func() {
		osm.Process.Signal(syscall.SIGTERM)
		select {
		case <-osmDone:
		case <-time.After(10 * time.Second):
			osm.Process.Kill()
			<-osmDone
		}
		if t.Failed() {
			log, _ := os.ReadFile(osmLog)
			if len(log) > 20000 {
				log = log[len(log)-20000:]
			}
			t.Logf("opensm output:\n%s\nopensm.log (tail):\n%s", osmOut.String(), log)
		}
	})

	// Every HCA port Active with a LID and opensm's LID as SM LID, as pibgw stat says.
	var stat string
	deadline := time.Now().Add(30 * time.Second)
	for {
		stat = d.MustPibgw("stat")
		if strings.Count(stat, "State: Active") == 3 && !strings.Contains(stat, "SM lid: 0\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ports not Active under opensm 30 s after it started:\n%s", stat)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("every port Active %v after opensm started", time.Since(start).Round(time.Millisecond))
	type port struct{ lid, smLID, guid string }
	ports := map[string]port{}
	for _, h := range []string{"pib_0", "pib_1", "pib_2"} {
		s := d.MustPibgw("stat", h)
		ports[h] = port{lid: e2etest.DiagField(s, "Base lid"), smLID: e2etest.DiagField(s, "SM lid"), guid: e2etest.DiagField(s, "Port GUID")}
	}
	smLID := ports["pib_0"].lid
	if ports["pib_1"].smLID != smLID || ports["pib_2"].smLID != smLID {
		t.Errorf("SM LIDs %+v: want opensm's port's LID %s everywhere", ports, smLID)
	}

	// IPoIB under opensm's SA: joins to its broadcast groups, path records from it.
	for {
		show, down := d.Show(), []string{}
		for _, n := range []string{"ib0", "ib1", "ib2", "ib0.8001", "ib1.8001"} {
			if !show[n].Up {
				down = append(down, n+": "+show[n].Reason)
			}
		}
		if len(down) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("interfaces down under opensm: %v", down)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("interfaces up (joined through opensm's SA) %v after opensm started", time.Since(start).Round(time.Millisecond))
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Errorf("A → B on ib0:\n%s", out)
	}
	if ok, out := e2etest.PingNS(nsC, "10.10.0.1", 3); !ok {
		t.Errorf("C → A on ib2:\n%s", out)
	}
	// opensm's partition 0x8001 (A and B): the children of A and B talk, C's stays out.
	if ok, out := e2etest.PingNS(nsA, "10.20.0.2", 3); !ok {
		t.Errorf("A → B on ib0.8001 (opensm's partition):\n%s", out)
	}
	if c := d.Show()["ib2.8001"]; c.Up || !strings.Contains(c.Reason, "0x8001") {
		t.Errorf("ib2.8001 (C is no member of opensm's 0x8001) = %+v; want down for want of the P_Key", c)
	}
	if ok, out := e2etest.UnreachableNS(nsC, "10.20.0.1"); !ok {
		t.Errorf("C reached A's child on 0x8001:\n%s", out)
	}

	// ibstat from each node agrees with pibgw stat.
	for h, p := range ports {
		s := e.diag(h, "ibstat")
		if e2etest.DiagField(s, "Base lid") != p.lid || e2etest.DiagField(s, "SM lid") != p.smLID || e2etest.DiagField(s, "Port GUID") != p.guid || e2etest.DiagField(s, "State") != "Active" {
			t.Errorf("ibstat at %s:\n%s\nwant lid %s, SM lid %s, port GUID %s, Active", h, s, p.lid, p.smLID, p.guid)
		}
	}

	// ibnetdiscover: one switch, three CAs, each cabled to its switch port.
	topo := e.diag("", "ibnetdiscover")
	if n := strings.Count(topo, "\nSwitch\t"); n != 1 {
		t.Errorf("ibnetdiscover: %d switches, want 1:\n%s", n, topo)
	}
	if n := strings.Count(topo, "\nCa\t"); n != 3 {
		t.Errorf("ibnetdiscover: %d CAs, want 3:\n%s", n, topo)
	}
	swLID := ""
	if m := regexp.MustCompile(`Switch\t8 "S-0002c90200000100".*base port 0 lid (\d+)`).FindStringSubmatch(topo); m != nil {
		swLID = m[1]
	} else {
		t.Errorf("ibnetdiscover: no 8-port switch 0002c90200000100:\n%s", topo)
	}
	for i, h := range []string{"pib_0", "pib_1", "pib_2"} {
		link := fmt.Sprintf("[%d]\t\"H-0002c90300000%d00\"[1](2c90300000%d01)", i+1, i+3, i+3)
		if !strings.Contains(topo, link) {
			t.Errorf("ibnetdiscover: no link %s for %s:\n%s", link, h, topo)
		}
		if !strings.Contains(topo, fmt.Sprintf("# lid %s lmc 0 \"pibgw switch-1\"", ports[h].lid)) {
			t.Errorf("ibnetdiscover: %s's lid %s missing:\n%s", h, ports[h].lid, topo)
		}
	}

	// The same topology seen from the switch's port 0 (SIM_HOST = its NodeDescription).
	if sw := e.diag("pibgw switch-1", "ibnetdiscover"); strings.Count(sw, "\nCa\t") != 3 || strings.Count(sw, "\nSwitch\t") != 1 ||
		!strings.Contains(sw, "Initiated from node 0002c90200000100") {
		t.Errorf("ibnetdiscover from the switch:\n%s", sw)
	}

	// smpquery by LID and by directed route.
	for h, p := range ports {
		ni := e.diag("", "smpquery", "nodeinfo", p.lid)
		if g := e2etest.DiagField(ni, "PortGuid"); !strings.EqualFold(strings.TrimPrefix(g, "0x"), strings.TrimPrefix(p.guid, "0x")) {
			t.Errorf("smpquery nodeinfo %s (%s): PortGuid %s, want %s\n%s", p.lid, h, g, p.guid, ni)
		}
		pi := e.diag("", "smpquery", "portinfo", p.lid)
		if e2etest.DiagField(pi, "Lid") != p.lid || e2etest.DiagField(pi, "SMLid") != smLID || e2etest.DiagField(pi, "LinkState") != "Active" {
			t.Errorf("smpquery portinfo %s (%s):\n%s", p.lid, h, pi)
		}
	}
	for port := 1; port <= 3; port++ {
		// The switch's ports to the HCAs: Active; only port 0 of a switch has a LID.
		if pi := e.diag("", "smpquery", "-D", "portinfo", "0,1", fmt.Sprint(port)); e2etest.DiagField(pi, "LinkState") != "Active" || e2etest.DiagField(pi, "Lid") != "0" {
			t.Errorf("smpquery -D portinfo 0,1 %d:\n%s", port, pi)
		}
	}

	// perfquery: pib_1's PortXmitPkts/PortRcvPkts move with a ping to it.
	pc := func() (xmit, rcv int) {
		out := e.diag("", "perfquery", ports["pib_1"].lid, "1")
		xmit, _ = strconv.Atoi(e2etest.DiagField(out, "PortXmitPkts"))
		rcv, _ = strconv.Atoi(e2etest.DiagField(out, "PortRcvPkts"))
		return
	}
	x0, r0 := pc()
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 5); !ok {
		t.Errorf("A → B on ib0:\n%s", out)
	}
	x1, r1 := pc()
	// Five echo requests in and five replies out, plus the perfquery MADs themselves.
	if x1-x0 < 5 || r1-r0 < 5 {
		t.Errorf("perfquery %s 1: PortXmitPkts %d → %d, PortRcvPkts %d → %d across 5 pings", ports["pib_1"].lid, x0, x1, r0, r1)
	}
	// pibgw counters prints what perfquery reads, field by field in its format; the error
	// counters agree (the packet counters move with the queries themselves).
	pq, ours := e.diag("", "perfquery", ports["pib_1"].lid, "1"), d.MustPibgw("counters", "pib_1", "1")
	fieldRE := regexp.MustCompile(`(?m)^([A-Za-z0-9]+):\.+(\S+)$`)
	want, got := fieldRE.FindAllStringSubmatch(pq, -1), fieldRE.FindAllStringSubmatch(ours, -1)
	if len(want) == 0 || len(got) < len(want) {
		t.Errorf("perfquery:\n%s\npibgw counters pib_1 1:\n%s", pq, ours)
	} else {
		for i, w := range want {
			if got[i][1] != w[1] || (strings.Contains(w[1], "Error") || strings.Contains(w[1], "Select") || strings.Contains(w[1], "Dropped")) && got[i][2] != w[2] {
				t.Errorf("field %d: perfquery %s %s, pibgw counters %s %s", i, w[1], w[2], got[i][1], got[i][2])
			}
		}
	}
	if sw := e.diag("", "perfquery", swLID, "2"); e2etest.DiagField(sw, "PortXmitPkts") == "" {
		t.Errorf("perfquery of the switch's port 2:\n%s", sw)
	}

	// saquery: opensm's SA answers for the fabric it manages.
	if nr := e.diag("pib_2", "saquery", "NR", ports["pib_1"].lid); e2etest.DiagField(nr, "node_guid") != "0x0002c90300000400" ||
		e2etest.DiagField(nr, "NodeDescription") != "pibgw" {
		t.Errorf("saquery NR %s (pib_1's NodeRecord):\n%s", ports["pib_1"].lid, nr)
	}
	pr := e.diag("pib_1", "saquery", "-p", "--slid", ports["pib_1"].lid, "--dlid", ports["pib_2"].lid)
	if e2etest.DiagField(pr, "dlid") != ports["pib_2"].lid || e2etest.DiagField(pr, "slid") != ports["pib_1"].lid || e2etest.DiagField(pr, "pkey") != "0xFFFF" {
		t.Errorf("saquery -p --slid %s --dlid %s:\n%s", ports["pib_1"].lid, ports["pib_2"].lid, pr)
	}
	if sm := e.diag("", "saquery", "-s"); e2etest.DiagField(sm, "base_lid") != smLID {
		t.Errorf("saquery -s (IsSM ports):\n%s", sm)
	}

	// ibroute: the switch's LFT sends every CA's LID out of its cable's port.
	lft := e.diag("", "ibroute", swLID)
	for i, h := range []string{"pib_0", "pib_1", "pib_2"} {
		lid, _ := strconv.Atoi(ports[h].lid)
		row := fmt.Sprintf("0x%04x %03d : (Channel Adapter portguid %s: 'pibgw HCA-%d')", lid, i+1, ports[h].guid, i+1)
		if !strings.Contains(lft, row) {
			t.Errorf("ibroute %s: no row %q:\n%s", swLID, row, lft)
		}
	}

	// sminfo: opensm's port is the master.
	if si := e.diag("pib_2", "sminfo"); !strings.Contains(si, "sm lid "+smLID+" sm guid "+strings.Replace(ports["pib_0"].guid, "0x000", "0x", 1)) ||
		!strings.Contains(si, "SMINFO_MASTER") {
		t.Errorf("sminfo: %s (want sm lid %s, guid %s, MASTER)", si, smLID, ports["pib_0"].guid)
	}
}
