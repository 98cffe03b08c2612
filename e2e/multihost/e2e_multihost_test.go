package multihost

import (
	"context"
	"encoding/json"
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

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EMultiHost is issue 15's acceptance run, as root: a `pibgw switch` in namespace
// fab and three hosts, each a `pibgw up` in its own namespace joined to fab by a veth
// pair, on UDP links authenticated with a PSK. It checks IPoIB ping and iperf3 across
// hosts, P_Key child isolation (A and B are members of 0x8001, C is not), the switch's
// `pibgw stat` listing the hosts' ports Active, a host with the wrong PSK dropped and
// counted, 100,000 random datagrams (0–9000 bytes) leaving the switch serving with its
// RSS bounded, kill -9 of a host (its port down at the switch within 5 s, A↔B traffic
// uninterrupted), and kill -9 of the switch and a restart (A↔B ping back within 5 s).
func TestE2EMultiHost(t *testing.T) {
	e2etest.Require(t, "ping", "iperf3")
	bin := e2etest.BuildPibgw(t)
	dir := t.TempDir()
	fab, hosts := multiHostNet(t, "m", 3)
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("e2e multi-host pre-shared key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	guid := func(i int) string { return fmt.Sprintf("0x0002c903%02x000301", i+1) }
	swSock := filepath.Join(dir, "sw.sock")
	swCfg := filepath.Join(dir, "switch.toml")
	writeFile(t, swCfg, fmt.Sprintf(`interfaces = []
[daemon]
control = %q
attach = "none"
log_level = "debug"
[fabric]
hca_count = 1
switch_ports = 16
listen = ":%d"
psk_file = %q
[sm]
sweep_interval = "1s"
[[sm.partitions]]
name = "e2e"
pkey = 0x8001
members = [%q, %q]
ipoib = true
`, swSock, config.DefaultSwitchUDPPort, psk, guid(0), guid(1)))
	sw := startNSProc(t, bin, fab, swSock, "switch", "--config", swCfg)

	attachSock := func(i int) string { return filepath.Join(dir, fmt.Sprintf("h%d.attach", i)) }
	ibsimSock := fmt.Sprintf("pibgwe2e-mh-%d", os.Getpid()) // abstract: in host A's namespace
	var hs []*nsProc
	for i, ns := range hosts {
		sock := filepath.Join(dir, fmt.Sprintf("h%d.sock", i))
		cfg := filepath.Join(dir, fmt.Sprintf("h%d.toml", i))
		// Host A serves the ibsim protocol too (infiniband-diags on a host, below).
		ibsimTOML := ""
		if i == 0 {
			ibsimTOML = "[ibsim]\nenable = true\nsocket_name = \"" + ibsimSock + "\"\n"
		}
		writeFile(t, cfg, fmt.Sprintf(`[daemon]
control = %q
attach = %q
log_level = "debug"
[fabric]
hca_count = 1
node_guid_base = "0x0002c903%02x000000"
switch = "10.77.%d.1:%d"
psk_file = %q
%s
[[interfaces]]
name = "ib0"
hca = "pib_0"
addresses = ["10.10.0.%d/24"]
[[interfaces]]
parent = "ib0"
pkey = 0x8001
addresses = ["10.20.0.%d/24"]
`, sock, attachSock(i), i+1, i+1, config.DefaultSwitchUDPPort, psk, ibsimTOML, i+1, i+1))
		hs = append(hs, startNSProc(t, bin, ns, sock, "up", "--config", cfg))
	}
	// Every host's ib0 up (the SM in the switch process brought the ports Active).
	for i, h := range hs {
		waitUntil(t, 20*time.Second, fmt.Sprintf("host %d's ib0 up", i), func() bool {
			var ifs []control.Interface
			return h.do(control.VerbShow, &ifs) == nil && len(ifs) > 0 && ifs[0].Up
		})
	}
	// The switch process captures its hosts' links: 20 packets of the pings, which
	// tshark decodes as IPoIB without a malformed frame.
	pcap := filepath.Join(dir, "switch.pcap")
	capture := exec.Command(bin, "capture", "-w", pcap, "-c", "20", "--control", swSock)
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	captured := make(chan error, 1)
	go func() { captured <- capture.Wait() }()
	t.Cleanup(func() { capture.Process.Kill() })
	waitUntil(t, 5*time.Second, "the capture started", func() bool {
		fi, err := os.Stat(pcap)
		return err == nil && fi.Size() >= 24
	})
	if ok, out := e2etest.PingNS(hosts[0], "10.10.0.2", 5); !ok {
		t.Fatalf("A → B:\n%s", out)
	}
	select {
	case err := <-captured:
		if err != nil {
			t.Fatalf("pibgw capture on the switch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pibgw capture on the switch did not get 20 packets")
	}
	if _, err := exec.LookPath("tshark"); err == nil {
		fabrictest.RequireCleanDecode(t, pcap, fabrictest.NoEoIBHeuristic...)
		rows := fabrictest.TsharkFieldsWith(t, pcap, fabrictest.NoEoIBHeuristic, "frame.protocols")
		icmp := 0
		for _, r := range rows {
			if strings.Contains(r[0], "infiniband") && strings.Contains(r[0], "icmp") {
				icmp++
			}
		}
		if len(rows) != 20 || icmp == 0 {
			t.Errorf("tshark: %d frames, %d ICMP over IPoIB: %v", len(rows), icmp, rows)
		}
	}
	if ok, out := e2etest.PingNS(hosts[2], "10.10.0.1", 3); !ok {
		t.Errorf("C → A:\n%s", out)
	}

	// The switch's stat: the three hosts' ports Active, and its nodes listing names them.
	var devs []control.Device
	if err := sw.do(control.VerbDevinfo, &devs); err != nil {
		t.Fatal(err)
	}
	out, _, err := sw.pibgw("stat", "switch")
	if err != nil || strings.Count(out, "State: Active") != 4 { // port 1: the SM's HCA
		t.Errorf("pibgw stat switch: %v\n%s", err, out)
	}
	var links []control.Link
	if err := sw.do(control.VerbNodes, &links); err != nil {
		t.Fatal(err)
	}
	portOf := map[string]int{}
	for _, l := range links {
		if !l.Up || l.State != "PORT_ACTIVE" || !l.Authenticated {
			t.Errorf("switch link %+v", l)
		}
		portOf[l.PortGUID] = l.SwitchPort
	}
	if len(portOf) != 3 {
		t.Fatalf("switch nodes: %+v", links)
	}
	// infiniband-diags on host A, through its ibsim server: the MADs cross the UDP link,
	// and ibnetdiscover finds the switch process's switch with the three hosts and the
	// SM's HCA on it.
	if u := e2etest.FindUmad2sim(); u != "" {
		if _, err := exec.LookPath("ibnetdiscover"); err == nil {
			dir := t.TempDir() // libumad2sim writes its sysfs tree here
			out, err := e2etest.UmadRun(t, func(ctx context.Context) *exec.Cmd {
				cmd := exec.CommandContext(ctx, "ip", "netns", "exec", hosts[0], "env", "LD_PRELOAD="+u, "IBSIM_SOCKNAME="+ibsimSock, "ibnetdiscover")
				cmd.Dir = dir
				return cmd
			})
			if err != nil || strings.Count(string(out), "\nCa\t") != 4 || strings.Count(string(out), "\nSwitch\t") != 1 {
				t.Errorf("ibnetdiscover on host A: %v\n%s", err, out)
			}
		}
	}

	// iperf3 A → B across the switch process, in datagram mode and then in connected
	// mode (RC SENDs whose completions are ACKs coming back through the switch).
	iperfAB := func(mode string) {
		t.Helper()
		srv := exec.Command("ip", "netns", "exec", hosts[1], "iperf3", "-s", "-1", "-B", "10.10.0.2", "-p", "5201")
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
		var res e2etest.IperfResult
		for try := 0; ; try++ { // until the server listens
			out, err := exec.Command("ip", "netns", "exec", hosts[0], "iperf3", "-c", "10.10.0.2", "-p", "5201", "-t", "2", "-J").Output()
			res = e2etest.IperfResult{}
			jerr := json.Unmarshal(out, &res)
			if err == nil && jerr == nil && res.Error == "" {
				break
			}
			if try == 100 { // 10 s for the server to listen, on a loaded machine
				t.Fatalf("iperf3 -c (%s mode): %v %v %s", mode, err, jerr, res.Error)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("iperf3 A→B across the UDP switch, %s mode, 2 s TCP: %.0f Mbit/s received", mode, res.End.SumReceived.BitsPerSecond/1e6)
		if res.End.SumReceived.Bytes <= 0 || res.End.SumReceived.BitsPerSecond < 1e6 {
			t.Errorf("iperf3 received nothing in %s mode", mode)
		}
	}
	iperfAB("datagram")
	for _, h := range hs[:2] {
		if out, stderr, err := h.pibgw("mode", "ib0", "connected"); err != nil {
			t.Fatalf("pibgw mode ib0 connected: %v\n%s%s", err, out, stderr)
		}
	}
	iperfAB("connected")
	// 32 MiB A → B in connected mode, SHA-256 on both ends: the kernel does not check a
	// received segment's TCP checksum (written CHECKSUM_PARTIAL, vouched for by the
	// ICRC), so only the bytes themselves tell that no message left a send-ring slot
	// that was reused while the message was in flight.
	_, sink := e2etest.NSHelper(t, hosts[1], "tcp-sink", "10.10.0.2:5202")
	if !sink.Scan() || sink.Text() != "ready" {
		t.Fatalf("tcp-sink did not start: %q", sink.Text())
	}
	_, source := e2etest.NSHelper(t, hosts[0], "tcp-source", "10.10.0.2:5202", fmt.Sprint(32<<20))
	source.Scan()
	sink.Scan()
	if sent, got := strings.TrimPrefix(source.Text(), "sent "), strings.TrimPrefix(sink.Text(), "got "); sent == "" ||
		sent != got || !strings.HasPrefix(sent, fmt.Sprint(32<<20)+" ") {
		t.Errorf("TCP stream A→B in connected mode: source %q, sink %q", source.Text(), sink.Text())
	}
	for _, h := range hs[:2] {
		if out, stderr, err := h.pibgw("mode", "ib0", "datagram"); err != nil {
			t.Fatalf("pibgw mode ib0 datagram: %v\n%s%s", err, out, stderr)
		}
	}

	// rdma_cm across hosts: the rping example, its server attached to B's daemon, its
	// client to A's, 1,000 validated iterations.
	binDir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", binDir+"/", "github.com/pibgw/pibgw/examples/rping").CombinedOutput(); err != nil {
		t.Fatalf("go build rping: %v\n%s", err, out)
	}
	rsrv := e2etest.StartAttached(t, attachSock(1), exec.Command(binDir+"/rping", "-s", "-a", "10.10.0.2", "-C", "1000", "-V"))
	waitUntil(t, 10*time.Second, "the rping server listening on B", func() bool {
		var ss []attach.SessionInfo
		return hs[1].do(control.VerbPS, &ss) == nil && len(ss) == 1 && ss[0].Listens == 1
	})
	rcli := e2etest.StartAttached(t, attachSock(0), exec.Command(binDir+"/rping", "-c", "-a", "10.10.0.2", "-I", "10.10.0.1", "-C", "1000", "-V", "-d"))
	rcli.MustSucceed(t, time.Minute)
	rsrv.MustSucceed(t, 30*time.Second)
	if m := rpingRateRE.FindStringSubmatch(rcli.Stderr.String()); m == nil || m[1] != "1000" {
		t.Errorf("rping client across hosts:\n%s", rcli.Stderr.String())
	} else {
		t.Logf("rping A → B across the switch process: %s", m[0])
	}

	// rsockets across hosts: rdma-core's rstream through pibgw's librdmacm, its server
	// attached to B's daemon, its client to A's, 1 MB transfers verified.
	if _, err := exec.LookPath("rstream"); err != nil {
		t.Logf("rstream across hosts not run: rstream is not installed (rdmacm-utils)")
	} else if _, err := os.Stat("/usr/include/rdma/rsocket.h"); err != nil {
		t.Logf("rstream across hosts not run: librdmacm-dev is missing")
	} else {
		libDir := t.TempDir()
		if out, err := exec.Command("bash", "../../scripts/build-libs.sh", libDir).CombinedOutput(); err != nil {
			t.Fatalf("build-libs.sh: %v\n%s", err, out)
		}
		args := []string{"-T", "b", "-T", "v", "-S", "1000000", "-C", "50", "-p", "7472"}
		withLibs := func(cmd *exec.Cmd) *exec.Cmd {
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir)
			return cmd
		}
		ssrv := e2etest.StartAttached(t, attachSock(1), withLibs(exec.Command("rstream", args...)))
		waitUntil(t, 10*time.Second, "the rstream server listening on B", func() bool {
			var ss []attach.SessionInfo
			return hs[1].do(control.VerbPS, &ss) == nil && len(ss) == 1 && ss[0].Listens == 1
		})
		scli := e2etest.StartAttached(t, attachSock(0), withLibs(exec.Command("rstream", append([]string{"-s", "10.10.0.2", "-b", "10.10.0.1"}, args...)...)))
		scli.MustSucceed(t, time.Minute)
		ssrv.MustSucceed(t, 30*time.Second)
		if !strings.Contains(scli.Stdout.String(), "Gb/sec") {
			t.Errorf("rstream across hosts:\n%s%s", scli.Stdout.String(), scli.Stderr.String())
		} else {
			t.Logf("rstream A → B across the switch process:\n%s", scli.Stdout.String())
		}
	}

	// P_Key 0x8001: A ↔ B over the children; C is no member, reaches neither.
	if ok, out := e2etest.PingNS(hosts[0], "10.20.0.2", 3); !ok {
		t.Errorf("A → B on 0x8001:\n%s", out)
	}
	if ok, out := e2etest.UnreachableNS(hosts[2], "10.20.0.1"); !ok {
		t.Errorf("C reached A on 0x8001:\n%s", out)
	}

	// A host with the wrong key: dropped and counted, never connected; the switch serves on.
	var before control.LinkCounters
	sw.do(control.VerbCounters, &before)
	_, sc := e2etest.NSHelper(t, hosts[2], "udp-dial", "10.77.3.1:8432", "another pre-shared key, wrong", "0x0002c903ff000301", "1s")
	if !sc.Scan() || sc.Text() != "down" {
		t.Errorf("a host with the wrong PSK: %q", sc.Text())
	}
	var after control.LinkCounters
	sw.do(control.VerbCounters, &after)
	if after["drop_auth"] <= before["drop_auth"] || after["connects"] != before["connects"] {
		t.Errorf("wrong PSK: drop_auth %d → %d, connects %d → %d", before["drop_auth"], after["drop_auth"], before["connects"], after["connects"])
	}

	// 100,000 random datagrams of 0–9000 bytes at the switch's port: it keeps serving.
	rss0 := rssKB(t, sw.Cmd.Process.Pid)
	_, fl := e2etest.NSHelper(t, hosts[2], "udp-flood", "10.77.3.1:8432", "100000", "9000")
	if !fl.Scan() || !strings.HasPrefix(fl.Text(), "sent 100000") {
		t.Fatalf("udp-flood: %q", fl.Text())
	}
	if ok, out := e2etest.PingNS(hosts[0], "10.10.0.3", 3); !ok {
		t.Errorf("A → C after the flood:\n%s", out)
	}
	rss1 := rssKB(t, sw.Cmd.Process.Pid)
	var flooded control.LinkCounters
	sw.do(control.VerbCounters, &flooded)
	t.Logf("switch RSS %d KiB before 100,000 random datagrams, %d KiB after; drops: auth %d, short %d, truncated %d",
		rss0, rss1, flooded["drop_auth"]-after["drop_auth"], flooded["drop_short"]-after["drop_short"],
		flooded["drop_truncated"]-after["drop_truncated"])
	if rss1 > rss0+32<<10 {
		t.Errorf("switch RSS grew from %d to %d KiB", rss0, rss1)
	}

	// kill -9 host C: its switch port is down within 5 s; A ↔ B does not notice.
	pinging := make(chan string, 1)
	go func() { _, out := e2etest.PingNS(hosts[0], "10.10.0.2", 25); pinging <- out }()
	killed := time.Now()
	hs[2].kill()
	cPort := portOf[guid(2)]
	waitUntil(t, 5*time.Second, "C's switch port down", func() bool {
		var ls []control.Link
		if sw.do(control.VerbNodes, &ls) != nil {
			return false
		}
		for _, l := range ls {
			if l.SwitchPort == cPort {
				return l.State != "PORT_ACTIVE"
			}
		}
		return false
	})
	t.Logf("C's port %d down at the switch %v after kill -9", cPort, time.Since(killed).Round(time.Millisecond))
	if out := <-pinging; !strings.Contains(out, " 0% packet loss") {
		t.Errorf("A → B while C died:\n%s", out)
	}

	// kill -9 the switch, start it again: A ↔ B is back within 5 s.
	sw.kill()
	restarted := time.Now()
	sw = startNSProc(t, bin, fab, swSock, "switch", "--config", swCfg)
	waitUntil(t, 5*time.Second, "A → B after the switch restart", func() bool {
		ok, _ := runPing(hosts[0], "10.10.0.2")
		return ok
	})
	t.Logf("A → B back %v after the switch restarted", time.Since(restarted).Round(time.Millisecond))
}

// multiHostNet makes namespace fab and n host namespaces, each host joined to fab by a
// veth pair: 10.77.X.1 in fab, 10.77.X.2 in host X (X from 1). The cleanup deletes them
// (and with them the veths).
func multiHostNet(t *testing.T, tag string, n int) (fab string, hosts []string) {
	t.Helper()
	fab = e2etest.NetNS(tag + "fab")
	for i := range n {
		hosts = append(hosts, e2etest.NetNS(fmt.Sprintf("%sh%d", tag, i)))
	}
	for _, ns := range append([]string{fab}, hosts...) {
		mustCmd(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		mustCmd(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	for i, ns := range hosts {
		a, b := fmt.Sprintf("p%s%d%ds", tag, os.Getpid()%100000, i), fmt.Sprintf("p%s%d%dh", tag, os.Getpid()%100000, i)
		mustCmd(t, "ip", "link", "add", a, "type", "veth", "peer", "name", b)
		mustCmd(t, "ip", "link", "set", a, "netns", fab)
		mustCmd(t, "ip", "link", "set", b, "netns", ns)
		mustCmd(t, "ip", "-n", fab, "addr", "add", fmt.Sprintf("10.77.%d.1/24", i+1), "dev", a)
		mustCmd(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("10.77.%d.2/24", i+1), "dev", b)
		mustCmd(t, "ip", "-n", fab, "link", "set", a, "up")
		mustCmd(t, "ip", "-n", ns, "link", "set", b, "up")
	}
	return fab, hosts
}

// TestE2ETopology is issue 15's acceptance point 3, as root: `pibgw switch --topology`
// with ../shared/data/topologies/2sw2path4hca.ibnd (two switches, two parallel links;
// the SM's HCA on Switch1, the first host on Switch2, the second on Switch1), two hosts
// over UDP links: ping crosses between the switches, and once the link carrying it is
// pulled (`pibgw link Switch1/N down`) the SM routes over the other within one sweep.
func TestE2ETopology(t *testing.T) {
	e2etest.Require(t, "ping")
	bin := e2etest.BuildPibgw(t)
	dir := t.TempDir()
	fab, hosts := multiHostNet(t, "t", 2)
	topo := filepath.Join(dir, "2sw.ibnd")
	ibnd, err := os.ReadFile("../../fabric/topology/testdata/2sw2path4hca.ibnd") // two switches, two parallel links
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, topo, string(ibnd))
	swSock := filepath.Join(dir, "sw.sock")
	sw := startNSProc(t, bin, fab, swSock, "switch", "--topology", topo, "--listen", ":8432",
		"--allow", "10.77.0.0/16", "--sweep", "500ms", "--control", swSock)
	var hs []*nsProc
	for i, ns := range hosts {
		sock := filepath.Join(dir, fmt.Sprintf("h%d.sock", i))
		cfg := filepath.Join(dir, fmt.Sprintf("h%d.toml", i))
		writeFile(t, cfg, fmt.Sprintf(`[daemon]
control = %q
attach = "none"
log_level = "debug"
[fabric]
hca_count = 1
node_guid_base = "0x0002c903%02x000000"
switch = "10.77.%d.1:8432"
[[interfaces]]
name = "ib0"
hca = "pib_0"
addresses = ["10.10.0.%d/24"]
`, sock, i+1, i+1, i+1))
		hs = append(hs, startNSProc(t, bin, ns, sock, "up", "--config", cfg))
		// One at a time, so that host i gets host port i+1: Hca2 on Switch2, then Hca3 on Switch1.
		waitUntil(t, 20*time.Second, fmt.Sprintf("host %d's ib0 up", i), func() bool {
			var ifs []control.Interface
			return hs[i].do(control.VerbShow, &ifs) == nil && len(ifs) > 0 && ifs[0].Up
		})
	}
	cables := func() map[string]uint64 { return cablePackets(t, sw) }
	before := cables()
	if ok, out := e2etest.PingNS(hosts[0], "10.10.0.2", 10); !ok {
		t.Fatalf("A (Switch2) → B (Switch1):\n%s", out)
	}
	after := cables()
	used := ""
	for name, n := range after {
		if strings.HasPrefix(name, "Switch1/") && n-before[name] >= 20 { // 10 echoes, 10 replies
			used = name
		}
	}
	if used == "" {
		t.Fatalf("no inter-switch cable carried the pings: before %v after %v", before, after)
	}
	if _, errs, err := sw.pibgw("link", used, "down"); err != nil {
		t.Fatalf("pibgw link %s down: %v %s", used, err, errs)
	}
	cut := time.Now()
	waitUntil(t, 5*time.Second, "A → B after "+used+" was cut", func() bool {
		ok, _ := runPing(hosts[0], "10.10.0.2")
		return ok
	})
	t.Logf("pings crossed %s; %v after it was cut they cross the other link", used, time.Since(cut).Round(time.Millisecond))
}

// nsProc is a pibgw process (up or switch) running in a namespace.
type nsProc struct {
	t      *testing.T
	bin    string
	sock   string
	Cmd    *exec.Cmd
	logs   *e2etest.SyncBuffer
	Exited chan error
}

// startNSProc runs `pibgw ARGS` in ns and waits until it answers on sock. The cleanup
// stops it (SIGTERM, then SIGKILL) and shows its log if the test failed.
// cablePackets is `pibgw link --json` of p: the packets each cable carried, both ways, by
// name.
func cablePackets(t *testing.T, p *nsProc) map[string]uint64 {
	t.Helper()
	out, _, err := p.pibgw("link", "--json")
	var cs []control.Cable
	if jerr := json.Unmarshal([]byte(out), &cs); err != nil || jerr != nil {
		t.Fatalf("pibgw link: %v %v\n%s", err, jerr, out)
	}
	m := map[string]uint64{}
	for _, c := range cs {
		m[c.Name] = c.Counters["tx_packets"] + c.Counters["rx_packets"]
	}
	return m
}

func startNSProc(t *testing.T, bin, ns, sock string, args ...string) *nsProc {
	t.Helper()
	p := &nsProc{t: t, bin: bin, sock: sock, logs: &e2etest.SyncBuffer{}, Exited: make(chan error, 1)}
	p.Cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.logs, p.logs
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIBGW_CONTROL=") {
			p.Cmd.Env = append(p.Cmd.Env, kv)
		}
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Exited <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-p.Exited:
			p.Exited <- err
		default:
			p.Cmd.Process.Signal(syscall.SIGTERM) // ip netns exec execs pibgw: this is its pid
			select {
			case <-p.Exited:
			case <-time.After(10 * time.Second):
				p.Cmd.Process.Kill()
				<-p.Exited
			}
		}
		if t.Failed() {
			t.Logf("pibgw %s in %s:\n%s", strings.Join(args, " "), ns, p.logs.String())
		}
	})
	waitUntil(t, 30*time.Second, "pibgw "+args[0]+" answering", func() bool {
		var st control.Status
		return p.do(control.VerbStatus, &st) == nil && st.PID == p.Cmd.Process.Pid
	})
	return p
}

// do asks the process's control socket.
func (p *nsProc) do(verb string, v any) error {
	return control.NewClient(p.sock).Do(context.Background(), control.Request{Verb: verb}, v)
}

// pibgw runs a CLI verb against the process.
func (p *nsProc) pibgw(args ...string) (string, string, error) {
	cmd := exec.Command(p.bin, append(args, "--control", p.sock)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *nsProc) kill() {
	p.Cmd.Process.Kill()
	err := <-p.Exited
	p.Exited <- err
}

func mustCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond (the processes it watches give no other signal) until it holds
// or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runPing sends one echo (one second to answer) from ns to addr.
func runPing(ns, addr string) (bool, string) {
	out, err := e2etest.RunCmd("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", addr)
	return err == nil, out
}

// rssKB is a process's resident set size (VmRSS).
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestE2EHostSM: the SM on a host instead of in the switch process (`pibgw switch
// --no-sm`): the built-in SM (sm.mode = "internal" on host A), which waits for its UDP
// link and sweeps the fabric through the remote switch; or opensm, attached to host A
// (sm.mode = "external") through A's ibsim server. Either way B comes up too: ping A → B.
func TestE2EHostSM(t *testing.T) {
	e2etest.Require(t, "ping")
	t.Run("builtin", func(t *testing.T) { hostSM(t, "s", false) })
	t.Run("opensm", func(t *testing.T) {
		if _, err := exec.LookPath("opensm"); err != nil || e2etest.FindUmad2sim() == "" {
			t.Skip("needs opensm and libumad2sim.so (Debian opensm, libumad2sim0)")
		}
		hostSM(t, "so", true)
	})
}

func hostSM(t *testing.T, tag string, opensm bool) {
	bin := e2etest.BuildPibgw(t)
	dir := t.TempDir()
	fab, hosts := multiHostNet(t, tag, 2)
	swSock := filepath.Join(dir, "sw.sock")
	sw := startNSProc(t, bin, fab, swSock, "switch", "--no-sm", "--ports", "8", "--listen", ":8432",
		"--allow", "10.77.0.0/16", "--control", swSock)
	ibsimSock := fmt.Sprintf("pibgwe2e-hostsm-%d", os.Getpid()) // abstract: in A's namespace
	var hs []*nsProc
	for i, ns := range hosts {
		sock := filepath.Join(dir, fmt.Sprintf("h%d.sock", i))
		cfg := filepath.Join(dir, fmt.Sprintf("h%d.toml", i))
		sm := ""
		switch {
		case i == 0 && opensm:
			sm = "[sm]\nmode = \"external\"\n[ibsim]\nenable = true\nsocket_name = \"" + ibsimSock + "\"\n"
		case i == 0:
			sm = "[sm]\nmode = \"internal\"\nsweep_interval = \"1s\"\n"
		}
		writeFile(t, cfg, fmt.Sprintf(`[daemon]
control = %q
attach = "none"
log_level = "debug"
[fabric]
hca_count = 1
node_guid_base = "0x0002c903%02x000000"
switch = "10.77.%d.1:8432"
[[interfaces]]
name = "ib0"
hca = "pib_0"
addresses = ["10.10.0.%d/24"]
%s`, sock, i+1, i+1, i+1, sm))
		hs = append(hs, startNSProc(t, bin, ns, sock, "up", "--config", cfg))
	}
	if opensm {
		// opensm in A's namespace (where A's ibsim server listens), preloaded with libumad2sim.
		osmDir := t.TempDir()
		osm := exec.Command("ip", "netns", "exec", hosts[0], "env", "LD_PRELOAD="+e2etest.FindUmad2sim(), "IBSIM_SOCKNAME="+ibsimSock,
			"OSM_CACHE_DIR="+osmDir, "OSM_TMP_DIR="+osmDir, "opensm", "-f", filepath.Join(osmDir, "opensm.log"))
		osm.Dir = osmDir
		osmOut := &e2etest.SyncBuffer{}
		osm.Stdout, osm.Stderr = osmOut, osmOut
		waitUntil(t, 10*time.Second, "host A's ibsim server", func() bool {
			var devs []control.Device
			return hs[0].do(control.VerbDevinfo, &devs) == nil
		})
		if err := osm.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			osm.Process.Kill()
			osm.Wait()
			if t.Failed() {
				log, _ := os.ReadFile(filepath.Join(osmDir, "opensm.log"))
				if len(log) > 20000 {
					log = log[len(log)-20000:]
				}
				t.Logf("opensm output:\n%s\nopensm.log (tail):\n%s", osmOut.String(), log)
			}
		})
	}
	for i, h := range hs {
		waitUntil(t, 20*time.Second, fmt.Sprintf("host %d's ib0 up", i), func() bool {
			var ifs []control.Interface
			return h.do(control.VerbShow, &ifs) == nil && len(ifs) > 0 && ifs[0].Up
		})
	}
	if ok, out := e2etest.PingNS(hosts[0], "10.10.0.2", 3); !ok {
		t.Fatalf("A → B with A's SM:\n%s", out)
	}
	// Port 1 has the switch process's own HCA (no SM on it), which A's SM brought up too.
	if out, _, err := sw.pibgw("stat", "switch"); err != nil || strings.Count(out, "State: Active") != 3 {
		t.Errorf("pibgw stat switch: %v\n%s", err, out)
	}
}

// TestE2ESwitchUplinks: switches in two processes joined by two UDP links (switch 2's
// ports 7 and 8 are uplinks into switch 1, `pibgw switch --uplink`), host A on switch 1,
// host B on switch 2: ping crosses; pulling out the uplink that carries it, the SM (in
// switch 1's process) routes over the other.
func TestE2ESwitchUplinks(t *testing.T) {
	e2etest.Require(t, "ping")
	bin := e2etest.BuildPibgw(t)
	dir := t.TempDir()
	fab, hosts := multiHostNet(t, "u", 2)
	sock1, sock2 := filepath.Join(dir, "sw1.sock"), filepath.Join(dir, "sw2.sock")
	startNSProc(t, bin, fab, sock1, "switch", "--ports", "8", "--listen", ":8432", "--allow", "10.77.0.0/16",
		"--allow", "127.0.0.0/8", "--sweep", "500ms", "--control", sock1) // hosts, and switch 2's uplinks
	cfg2 := filepath.Join(dir, "sw2.toml")
	// Its own node_guid_base (the switch GUID takes the base's bytes but the OUI's next).
	writeFile(t, cfg2, fmt.Sprintf("interfaces = []\n[daemon]\ncontrol = %q\nattach = \"none\"\n[fabric]\nhca_count = 1\n"+
		"node_guid_base = 0x0002c90310000000\nswitch_ports = 8\nlisten = \":8433\"\nallow = [\"10.77.0.0/16\"]\n[sm]\nmode = \"external\"\n", sock2))
	sw2 := startNSProc(t, bin, fab, sock2, "switch", "--config", cfg2, "--uplink", "7=127.0.0.1:8432", "--uplink", "8=127.0.0.1:8432")
	var hs []*nsProc
	for i, ns := range hosts {
		sock := filepath.Join(dir, fmt.Sprintf("h%d.sock", i))
		cfg := filepath.Join(dir, fmt.Sprintf("h%d.toml", i))
		writeFile(t, cfg, fmt.Sprintf(`[daemon]
control = %q
attach = "none"
log_level = "debug"
[fabric]
hca_count = 1
node_guid_base = "0x0002c903%02x000000"
switch = "10.77.%d.1:%d"
[[interfaces]]
name = "ib0"
hca = "pib_0"
addresses = ["10.10.0.%d/24"]
`, sock, i+1, i+1, 8432+i, i+1))
		hs = append(hs, startNSProc(t, bin, ns, sock, "up", "--config", cfg))
	}
	for i, h := range hs {
		waitUntil(t, 20*time.Second, fmt.Sprintf("host %d's ib0 up", i), func() bool {
			var ifs []control.Interface
			return h.do(control.VerbShow, &ifs) == nil && len(ifs) > 0 && ifs[0].Up
		})
	}
	uplinks := func() map[string]uint64 { return cablePackets(t, sw2) }
	before := uplinks()
	if ok, out := e2etest.PingNS(hosts[0], "10.10.0.2", 10); !ok {
		t.Fatalf("A (switch 1) → B (switch 2):\n%s", out)
	}
	after := uplinks()
	used := ""
	for _, name := range []string{"switch/7", "switch/8"} {
		if after[name]-before[name] >= 20 {
			used = name
		}
	}
	if used == "" {
		t.Fatalf("no uplink carried the pings: before %v after %v", before, after)
	}
	if _, errs, err := sw2.pibgw("link", used, "down"); err != nil {
		t.Fatalf("pibgw link %s down: %v %s", used, err, errs)
	}
	cut := time.Now()
	waitUntil(t, 5*time.Second, "A → B after "+used+" was cut", func() bool {
		ok, _ := runPing(hosts[0], "10.10.0.2")
		return ok
	})
	t.Logf("pings crossed uplink %s; %v after it was cut they cross the other", used, time.Since(cut).Round(time.Millisecond))
}

// rpingRateRE is rping -v's iteration rate (the example programs' output).
var rpingRateRE = regexp.MustCompile(`(\d+) iterations in \S+: (\d+)/s`)
