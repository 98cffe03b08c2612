package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/ipoib"
)

// fakeDaemon runs a daemon with the fake backend (no root) and its control socket, and
// returns the socket's path.
func fakeDaemon(t *testing.T, cfg *config.Config, neigh map[string][]ipoib.Neighbor) (string, *daemon.Daemon) {
	t.Helper()
	b := daemontest.New()
	for k, v := range neigh {
		b.Neighbors[k] = v
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.Start(context.Background(), daemon.Options{Config: cfg, Logger: log, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pibgw.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &control.Server{Handler: &daemon.Handler{D: d, ControlPath: path}, Logger: log}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		d.Close()
	})
	return path, d
}

func TestNoDaemonVerbs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pibgw.sock")
	want := "pibgw: no daemon running at " + sock + " (start one with: sudo pibgw up)\n"
	for _, args := range [][]string{
		{"show"}, {"show", "ib0"}, {"neigh"}, {"neigh", "--json"}, {"child", "add", "ib0", "0x8001"},
		{"child", "del", "ib0", "8001"}, {"capture", "-w", filepath.Join(t.TempDir(), "x.pcap"), "-c", "3"},
	} {
		out, errs, code := pibgw(t, append(args, "--control", sock)...)
		if code != 1 || out != "" || errs != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out, errs, want)
		}
	}
	// capture made no file.
	if _, err := os.Stat(filepath.Join(t.TempDir(), "x.pcap")); err == nil {
		t.Error("capture created its file with no daemon")
	}
	// The environment variable names the socket too.
	t.Setenv("PIBGW_CONTROL", sock)
	if _, errs, _ := pibgw(t, "show"); errs != want {
		t.Errorf("PIBGW_CONTROL: stderr %q", errs)
	}
}

func TestBadArguments(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	const addHint = "\nRun 'pibgw child add --help' for usage."
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"child", "add", "ib0", "0"}, `pibgw: invalid P_Key "0": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "0x8000"}, `pibgw: invalid P_Key "0x8000": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "0x10000"}, `pibgw: invalid P_Key "0x10000": more than 16 bits (at most 0xffff)`},
		{[]string{"child", "add", "ib0", "0xzz"}, `pibgw: invalid P_Key "0xzz": want a hexadecimal number such as 0x8001`},
		{[]string{"child", "del", "ib0", "1g"}, `pibgw: invalid P_Key "1g": want a hexadecimal number such as 0x8001`},
		{[]string{"child", "add", "ib0", "8001", "--addr", "10.0.0.300/24"}, `pibgw: malformed address "10.0.0.300/24": want CIDR such as 10.20.0.1/24 or fd00::1/64`},
		{[]string{"child", "add", "ib0", "8001", "--addr", "10.0.0.3"}, `pibgw: address "10.0.0.3" has no prefix length: want CIDR such as 10.0.0.3/24`},
		{[]string{"child", "add", "ib0"}, `pibgw: child add: want IFACE PKEY (e.g. ib0 0x8001), got 1 arguments` + addHint},
		{[]string{"up", "--config", "/nonexistent.toml"}, `pibgw: open /nonexistent.toml: no such file or directory`},
		{[]string{"stat", "pib_9"}, `pibgw: 'pib_9' IB device can't be found`},
		{[]string{"stat", "pib_0", "2"}, `pibgw: CA: 'pib_0' has no port number 2 - max (1)`},
	} {
		out, errs, code := pibgw(t, append(tc.args, "--control", sock)...)
		wantCode := 1
		if strings.Contains(tc.want, "--help' for usage") {
			wantCode = 2 // a usage error: one line and the hint
		}
		if code != wantCode || out != "" || errs != tc.want+"\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, %q", tc.args, code, out, errs, wantCode, tc.want)
		}
	}
	// A bad configuration file: one line naming the file and the field.
	bad := filepath.Join(t.TempDir(), "x.toml")
	os.WriteFile(bad, []byte("[[fabric.hcas]]\n[[fabric.hcas]]\nports = 40\n"), 0o644)
	if _, errs, code := pibgw(t, "up", "--config", bad); code != 1 || errs != "pibgw: "+bad+": fabric.hcas[1].ports: 40 out of range 1..32\n" {
		t.Errorf("bad config: exit %d, stderr %q", code, errs)
	}
}

func TestShowNeighChild(t *testing.T) {
	sock, _ := fakeDaemon(t, config.Default(), map[string][]ipoib.Neighbor{
		"ib0": {daemontest.Neighbor("10.10.0.2", 0x48, 0x0002_c903_0000_0401, "REACHABLE")},
	})
	out := mustRun(t, "show", "ib0", "--control", sock)
	for _, want := range []string{
		"ib0: netns pib0, datagram mode, mtu 2044, state UP\n",
		"    link/infiniband 00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:03:01\n",
		"    brd 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff\n",
		"    pkey 0xffff qpn 0x000048 qkey 0x00000b1b on pib_0 port 1\n",
		"    inet 10.10.0.1/24\n",
		"    inet6 fe80::202:c903:0:301/64\n",
		"    counters:\n      rx_packets 0  tx_packets 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show ib0 lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ib1") {
		t.Errorf("show ib0 printed ib1:\n%s", out)
	}
	var ifs []control.Interface
	if err := json.Unmarshal([]byte(mustRun(t, "show", "--json", "--control", sock)), &ifs); err != nil || len(ifs) != 2 || ifs[1].Name != "ib1" {
		t.Errorf("show --json: %v %+v", err, ifs)
	}

	out = mustRun(t, "neigh", "--control", sock)
	wantNeigh := "IFACE  ADDRESS    HWADDR                                                       QPN       GID                 STATE      CM\n" +
		"ib0    10.10.0.2  00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:04:01  0x000048  fe80::2:c903:0:401  REACHABLE  -\n"
	compareLines(t, out, wantNeigh)
	var ns []control.Neighbor
	if err := json.Unmarshal([]byte(mustRun(t, "neigh", "ib0", "--json", "--control", sock)), &ns); err != nil ||
		len(ns) != 1 || ns[0].QPN != 0x48 || ns[0].GID != "fe80::2:c903:0:401" || ns[0].IP != "10.10.0.2" {
		t.Errorf("neigh --json: %v %+v", err, ns)
	}
	if out := mustRun(t, "neigh", "ib1", "--control", sock); out != "IFACE  ADDRESS  HWADDR  QPN  GID  STATE  CM\n" {
		t.Errorf("neigh ib1: %q", out)
	}

	// mode: show, switch, switch back; a bad mode is a usage error.
	if out := mustRun(t, "mode", "ib0", "--control", sock); out != "ib0: datagram mode, mtu 2044\n" {
		t.Errorf("mode ib0: %q", out)
	}
	if out := mustRun(t, "mode", "ib0", "connected", "--control", sock); out != "ib0: connected mode, mtu 65520\n" {
		t.Errorf("mode ib0 connected: %q", out)
	}
	if out := mustRun(t, "show", "ib0", "--control", sock); !strings.Contains(out, "ib0: netns pib0, connected mode, mtu 65520") {
		t.Errorf("show after mode connected:\n%s", out)
	}
	if out := mustRun(t, "mode", "ib0", "datagram", "--control", sock); out != "ib0: datagram mode, mtu 2044\n" {
		t.Errorf("mode ib0 datagram: %q", out)
	}
	if _, stderr, code := pibgw(t, "mode", "ib0", "bonded", "--control", sock); code != 2 || !strings.Contains(stderr, `mode "bonded": want "datagram" or "connected"`) {
		t.Errorf("mode ib0 bonded: exit %d, %q", code, stderr)
	}
	if _, stderr, code := pibgw(t, "mode", "ib9", "connected", "--control", sock); code != 1 || !strings.Contains(stderr, "ib9") {
		t.Errorf("mode ib9: exit %d, %q", code, stderr)
	}

	// child add: flags after the arguments work, as documented; it prints one line (the
	// block is pibgw show's).
	out = mustRun(t, "child", "add", "ib0", "0x8001", "--addr", "10.20.0.1/24", "--control", sock)
	if out != "ib0.8001@ib0: netns pib0, datagram mode, mtu 2044, state DOWN (P_Key 0x8001 not in the port's table)\n" {
		t.Errorf("child add:\n%s", out)
	}
	if out := mustRun(t, "show", "ib0.8001", "--control", sock); !strings.Contains(out, "    inet 10.20.0.1/24\n") {
		t.Errorf("show ib0.8001 after child add --addr:\n%s", out)
	}
	_, errs, code := pibgw(t, "child", "add", "ib0", "8001", "--control", sock)
	if code != 1 || errs != "pibgw: child ib0.8001 already exists\n" {
		t.Errorf("duplicate child: exit %d, %q", code, errs)
	}
	_, errs, code = pibgw(t, "show", "ib7", "--control", sock)
	if code != 1 || errs != "pibgw: unknown interface \"ib7\" (have ib0, ib1, ib0.8001)\n" {
		t.Errorf("unknown interface: exit %d, %q", code, errs)
	}
	_, errs, code = pibgw(t, "child", "add", "ib7", "8001", "--control", sock)
	if code != 1 || !strings.HasPrefix(errs, "pibgw: unknown interface \"ib7\"") {
		t.Errorf("child of unknown: exit %d, %q", code, errs)
	}
	// child del by the child's name, as ip link del takes it.
	if out := mustRun(t, "child", "del", "ib0.8001", "--control", sock); out != "ib0.8001 deleted\n" {
		t.Errorf("child del: %q", out)
	}
	_, errs, code = pibgw(t, "child", "del", "ib0", "8001", "--control", sock)
	if code != 1 || errs != "pibgw: ib0 has no child for P_Key 0x8001 (no interface ib0.8001)\n" {
		t.Errorf("second del: exit %d, %q", code, errs)
	}
	if out := mustRun(t, "show", "--control", sock); !strings.Contains(out, "ib0: netns pib0") || strings.Contains(out, "ib0.8001") {
		t.Errorf("after del:\n%s", out)
	}
}

// devinfo and stat report the daemon's fabric when one runs.
func TestDevinfoStatFromDaemon(t *testing.T) {
	cfg, err := config.Parse("", []byte("[fabric]\nhca_count = 3\n[[interfaces]]\nname = \"ib0\"\nhca = \"pib_2\"\nstack = \"userspace\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	sock, _ := fakeDaemon(t, cfg, nil)
	if out := mustRun(t, "devinfo", "-l", "--control", sock); out != "3 HCAs found:\n\tpib_0\n\tpib_1\n\tpib_2\n\n" {
		t.Errorf("devinfo -l: %q", out)
	}
	if out := mustRun(t, "stat", "-l", "--control", sock); out != "pib_0\npib_1\npib_2\n" {
		t.Errorf("stat -l: %q", out)
	}
	out := mustRun(t, "stat", "pib_2", "--control", sock)
	if !strings.Contains(out, "CA 'pib_2'\n") || !strings.Contains(out, "\t\tBase lid: 4\n") {
		t.Errorf("stat pib_2:\n%s", out)
	}
}

// wantStat is ibstat's output for the default fabric's pib_0 (ibstat.c ca_dump and
// port_dump), the SM's port: LID 1, IsSM in the capability mask.
const wantStat = "CA 'pib_0'\n" +
	"\tCA type: \n" +
	"\tNumber of ports: 1\n" +
	"\tFirmware version: 1.0.0\n" +
	"\tHardware version: 0\n" +
	"\tNode GUID: 0x0002c90300000300\n" +
	"\tSystem image GUID: 0x0002c90300000200\n" +
	"\tPort 1:\n" +
	"\t\tState: Active\n" +
	"\t\tPhysical state: LinkUp\n" +
	"\t\tRate: 120\n" +
	"\t\tBase lid: 1\n" +
	"\t\tLMC: 0\n" +
	"\t\tSM lid: 1\n" +
	"\t\tCapability mask: 0x0219084a\n" +
	"\t\tPort GUID: 0x0002c90300000301\n" +
	"\t\tLink layer: InfiniBand\n"

func TestStatInProcess(t *testing.T) {
	out := mustRun(t, "stat")
	want := wantStat + strings.NewReplacer("pib_0", "pib_1", "0000300", "0000400", "0000301", "0000401",
		"Base lid: 1", "Base lid: 3", "0x0219084a", "0x02190848").Replace(wantStat)
	compareLines(t, out, want)
	compareLines(t, mustRun(t, "stat", "-s", "pib_0"), wantStat[:strings.Index(wantStat, "\tPort 1")])
	compareLines(t, mustRun(t, "stat", "pib_0", "1"), "CA: 'pib_0'\nPort 1:\n"+
		strings.ReplaceAll(wantStat[strings.Index(wantStat, "\t\tState"):], "\t\t", ""))
	if out := mustRun(t, "stat", "-p"); out != "0x0002c90300000301\n0x0002c90300000401\n" {
		t.Errorf("stat -p: %q", out)
	}
	var js []statJSON
	if err := json.Unmarshal([]byte(mustRun(t, "stat", "--json", "pib_1")), &js); err != nil {
		t.Fatal(err)
	}
	want1 := []statJSON{{CA: "pib_1", NumPorts: 1, FirmwareVersion: "1.0.0", HardwareVersion: "0",
		NodeGUID: "0x0002c90300000400", SystemImageGUID: "0x0002c90300000200",
		Ports: []statPortJSON{{Port: 1, State: "Active", PhysicalState: "LinkUp", Rate: 120, BaseLID: 3,
			SMLID: 1, CapabilityMask: "0x02190848", PortGUID: "0x0002c90300000401", LinkLayer: "InfiniBand"}}}}
	if !reflect.DeepEqual(js, want1) {
		t.Errorf("stat --json pib_1\n got %+v\nwant %+v", js, want1)
	}
}

func TestIbstatRate(t *testing.T) {
	for _, tc := range []struct {
		width, speed uint8
		want         string
	}{{1, 1, "2.5"}, {2, 1, "10"}, {2, 4, "40"}, {8, 4, "120"}, {2, 16, "56"}, {2, 32, "100"}, {1, 4, "10"}} {
		if got := ibstatRate(tc.width, tc.speed); got != tc.want {
			t.Errorf("ibstatRate(%d, %d) = %s, want %s", tc.width, tc.speed, got, tc.want)
		}
	}
}

func TestCaptureVerb(t *testing.T) {
	sock, d := fakeDaemon(t, config.Default(), nil)
	file := filepath.Join(t.TempDir(), "fab.pcap")
	done := make(chan struct{})
	var errs string
	var code int
	go func() {
		defer close(done)
		_, errs, code = pibgw(t, "capture", "-w", file, "-c", "5", "--control", sock)
	}()
	for {
		d.Fabric.SM.Resweep() // SMPs on every cable
		select {
		case <-done:
			if code != 0 || errs != "5 packets captured to "+file+"\n" {
				t.Fatalf("capture: exit %d, stderr %q", code, errs)
			}
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			recs, err := fabric.ReadCapture(f)
			if err != nil || len(recs) != 5 {
				t.Errorf("capture file: %d records, %v", len(recs), err)
			}
			return
		default:
		}
	}
}

func TestInterspersed(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, tc := range []struct{ in, want string }{
		{"pibgw child add ib0 0x8001 --addr 10.20.0.1/24", "pibgw child add --addr 10.20.0.1/24 ib0 0x8001"},
		{"pibgw --log-level debug child add ib0 8001 --json --control /x", "pibgw --log-level debug child add --json --control /x ib0 8001"},
		{"pibgw show ib0 --json", "pibgw show --json ib0"},
		{"pibgw devinfo -vd pib_0", "pibgw devinfo -vd pib_0"},
		{"pibgw stat pib_0 1 -s", "pibgw stat -s pib_0 1"},
		{"pibgw capture -w - -c 3", "pibgw capture -w - -c 3"},
		{"pibgw show -- -x", "pibgw show -- -x"},
		{"pibgw nosuch a --b", "pibgw nosuch a --b"},
	} {
		if got := strings.Join(interspersed(app, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("%s\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}
