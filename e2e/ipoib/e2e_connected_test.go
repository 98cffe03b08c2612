package ipoib

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EConnectedMode is issue 11's acceptance point 1, as root: ib0 and ib1 in
// connected mode (one by `pibgw mode`, one by the config) have MTU 65520 in `ip link`;
// `ping -s 60000` works; iperf3 runs 10 s and a 64 MiB TCP stream arrives intact
// (SHA-256); ib2, left in datagram mode, is reached from ib0 at the UD MTU once the
// kernel learned the path MTU from pibgw's ICMP (`ip route get` shows it); switching ib0
// back to datagram mode while iperf3 runs, the transfer completes; the capture decodes in
// tshark with the CM's REQ/REP/RTU (IPoIB-CM private data) and RC data, nothing
// malformed.
func TestE2EConnectedMode(t *testing.T) {
	e2etest.Require(t, "ping", "iperf3", "ss")
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed: apt-get install tshark (scripts/test.sh does) to run this interop test")
	}
	nsA, nsB, nsC := e2etest.NetNS("ca"), e2etest.NetNS("cb"), e2etest.NetNS("cc")
	body := "[fabric]\nhca_count = 3\n" +
		e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24") +
		e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24") + "mode = \"connected\"\n" +
		e2etest.InterfaceTOML("ib2", "pib_2", nsC, "10.10.0.3/24")
	d := e2etest.StartDaemon(t, "", body, nsA, nsB, nsC)

	const captureCount = 2000
	capture := e2etest.StartCapture(t, d, "cm.pcap", captureCount)
	pcap := capture.Path

	if out := d.MustPibgw("mode", "ib0", "connected"); out != "ib0: connected mode, mtu 65520\n" {
		t.Fatalf("pibgw mode ib0 connected: %q", out)
	}
	for ns, dev := range map[string]string{nsA: "ib0", nsB: "ib1"} {
		out, err := e2etest.RunCmd("ip", "-n", ns, "link", "show", dev)
		if err != nil || !strings.Contains(out, "mtu 65520") {
			t.Fatalf("ip link show %s: %v\n%s", dev, err, out)
		}
	}
	if out, err := e2etest.RunCmd("ip", "-n", nsC, "link", "show", "ib2"); err != nil || !strings.Contains(out, "mtu 2044") {
		t.Fatalf("ip link show ib2: %v\n%s", err, out)
	}
	if it := d.Show()["ib1"]; it.Mode != "connected" || it.MTU != 65520 {
		t.Fatalf("show ib1: mode %s, mtu %d", it.Mode, it.MTU)
	}
	// ipoib_set_mode turns TSO off in connected mode; checksums stay partial (the RC
	// transport finishes them per message, and not at all for a peer in this process).
	checkOffloads(t, nsA, "ib0", "on", "off")

	// ping -s 60000: whole 60,028-byte packets over the connection.
	if out, err := e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-c", "3", "-s", "60000", "-W", "2", "10.10.0.2"); err != nil ||
		!strings.Contains(out, " 0% packet loss") {
		t.Fatalf("ping -s 60000 10.10.0.2: %v\n%s", err, out)
	}
	var ns []control.Neighbor
	d.JSON(&ns, "neigh", "ib0")
	var nb control.Neighbor
	for _, n := range ns {
		if n.IP == "10.10.0.2" {
			nb = n
		}
	}
	if nb.CM != "connected" || nb.CMQPN == 0 || nb.CMRemoteQ == 0 || !strings.HasPrefix(nb.HWAddr, "80:") {
		t.Fatalf("neigh ib0 10.10.0.2: %+v", nb)
	}

	// iperf3 10 s, then 64 MiB with SHA-256 on both ends.
	res := e2etest.IperfIn(t, nsA, nsB, "10.10.0.2", "5301", 10, nil)
	t.Logf("iperf3 connected mode A→B 10 s: %.2f Gbit/s, %d retransmits",
		res.End.SumReceived.BitsPerSecond/1e9, res.End.SumSent.Retransmits)
	if sent, recv := res.End.SumSent.Bytes, res.End.SumReceived.Bytes; recv <= 0 || recv > sent || sent-recv > 32<<20 {
		t.Errorf("iperf3: sender sent %d bytes, receiver received %d", sent, recv)
	}
	_, sink := e2etest.NSHelper(t, nsB, "tcp-sink", "10.10.0.2:5302")
	if !sink.Scan() || sink.Text() != "ready" {
		t.Fatalf("tcp-sink did not start: %q", sink.Text())
	}
	_, source := e2etest.NSHelper(t, nsA, "tcp-source", "10.10.0.2:5302", fmt.Sprint(64<<20))
	source.Scan()
	sink.Scan()
	sentLine, gotLine := strings.TrimPrefix(source.Text(), "sent "), strings.TrimPrefix(sink.Text(), "got ")
	if sentLine == "" || sentLine != gotLine || !strings.HasPrefix(sentLine, fmt.Sprint(64<<20)+" ") {
		t.Errorf("TCP stream A→B: source %q, sink %q", source.Text(), sink.Text())
	}

	// ib2 is in datagram mode (no 0x80 flag): reached over UD; a 3000-byte ping first
	// gets "Frag needed" from pibgw, then the kernel fragments at the learned MTU.
	if ok, out := e2etest.PingNS(nsA, "10.10.0.3", 2); !ok {
		t.Fatalf("ping 10.10.0.3:\n%s", out)
	}
	e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-c", "1", "-s", "3000", "-W", "1", "10.10.0.3")
	out, err := e2etest.RunCmd("ip", "-n", nsA, "route", "get", "10.10.0.3")
	if err != nil || !strings.Contains(out, "mtu 2044") {
		t.Fatalf("ip route get 10.10.0.3 has no cached MTU 2044: %v\n%s", err, out)
	}
	if out, err := e2etest.RunCmd("ip", "netns", "exec", nsA, "ping", "-c", "3", "-s", "3000", "-W", "2", "10.10.0.3"); err != nil ||
		!strings.Contains(out, " 0% packet loss") {
		t.Fatalf("ping -s 3000 10.10.0.3 after the PMTU was learned: %v\n%s", err, out)
	}
	if c := d.Show()["ib0"].Counters; c["tx_icmp_too_big"] == 0 || c["cm_tx_connections"] == 0 {
		t.Errorf("ib0 counters: %v", c)
	}

	// Back to datagram mode while iperf3 runs: the transfer completes.
	res = e2etest.IperfIn(t, nsA, nsB, "10.10.0.2", "5303", 6, func() {
		time.Sleep(2 * time.Second)
		if out := d.MustPibgw("mode", "ib0", "datagram"); out != "ib0: datagram mode, mtu 2044\n" {
			t.Errorf("pibgw mode ib0 datagram: %q", out)
		}
	})
	t.Logf("iperf3 across the switch to datagram mode: %.2f Gbit/s", res.End.SumReceived.BitsPerSecond/1e9)
	if res.End.SumReceived.Bytes <= 0 {
		t.Errorf("iperf3 across the mode switch received nothing")
	}
	if out, err := e2etest.RunCmd("ip", "-n", nsA, "link", "show", "ib0"); err != nil || !strings.Contains(out, "mtu 2044") {
		t.Errorf("ip link show ib0 after datagram: %v\n%s", err, out)
	}
	checkOffloads(t, nsA, "ib0", "on", "on")
	if !strings.Contains(d.Logs(), "enabling connected mode will cause multicast packet drops") {
		t.Error("no multicast warning in the log")
	}

	if _, ended := capture.Wait(5 * time.Second); !ended {
		t.Fatalf("pibgw capture did not reach %d packets: %s", captureCount, capture.Err.String())
	}
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB, "ib2": nsC})

	args := append([]string{"-o", "tcp.analyze_sequence_numbers:FALSE"}, fabrictest.NoEoIBHeuristic...)
	if bad := strings.TrimSpace(fabrictest.Tshark(t, pcap, append(args, "-Y", "_ws.malformed")...)); bad != "" {
		t.Fatalf("tshark reports malformed frames:\n%s", bad)
	}
	// The TCP checksums the kernel left partial were finished by the RC transport before
	// the capture saw the packets: every one Wireshark can verify is good. It can in a
	// SEND Only (opcode 4); in a SEND First it sums the part of the segment the packet
	// holds and calls it bad, as it would on any IPoIB-CM capture (rc.TestSendIPCsum
	// checks those against the whole message).
	ck := append([]string{"-o", "tcp.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"}, args...)
	if bad := strings.TrimSpace(fabrictest.Tshark(t, pcap, append(ck, "-Y",
		"(tcp.checksum.status == 0 || udp.checksum.status == 0) && infiniband.bth.opcode == 4")...)); bad != "" {
		t.Fatalf("tshark finds bad TCP/UDP checksums:\n%s", bad)
	}
	good := strings.Count(fabrictest.Tshark(t, pcap, append(ck, "-Y", "tcp.checksum.status == 1 && infiniband.bth.opcode == 4")...), "\n")
	t.Logf("capture: %d TCP segments with a verified checksum", good)
	if good == 0 {
		t.Error("capture has no TCP segment whose checksum tshark could verify")
	}
	rows := fabrictest.TsharkFieldsWith(t, pcap, args, "infiniband.cm.req.serviceid", "infiniband.cm.req.private",
		"infiniband.cm.rep.localqpn", "infiniband.bth.opcode", "frame.protocols")
	var req, rep, rtu, rc int
	for _, r := range rows {
		if len(r) < 5 {
			continue
		}
		switch {
		case r[0] != "":
			req++
			// Service ID 0x10000000_00xxxxxx (Linux's form) and private data: the UD
			// QPN, then the receive MTU 65524 (0x0000fff4).
			if !strings.HasPrefix(r[0], "0x10000000") || !strings.Contains(strings.ReplaceAll(r[1], ":", ""), "0000fff4") {
				t.Errorf("CM REQ: service ID %s, private data %s", r[0], r[1])
			}
		case r[2] != "":
			rep++
		case strings.Contains(r[4], "infiniband") && (r[3] == "0" || r[3] == "1" || r[3] == "2" || r[3] == "4"):
			rc++ // RC SEND first/middle/last/only
		}
		if strings.Contains(r[4], "cm") && strings.Contains(strings.ToLower(r[4]), "rtu") {
			rtu++
		}
	}
	t.Logf("capture: %d frames, %d REQ, %d REP, %d RC SEND", len(rows), req, rep, rc)
	if req == 0 || rep == 0 || rc == 0 {
		t.Errorf("capture lacks the connection set-up or RC data: %d REQ, %d REP, %d RC SEND", req, rep, rc)
	}
	if n := strings.TrimSpace(fabrictest.Tshark(t, pcap, append(args, "-Y", "infiniband.mad.attributeid == 0x0014")...)); n == "" {
		t.Error("capture has no CM RTU")
	}
}

// checkOffloads checks with `ethtool -k` that dev's checksum and TCP segmentation
// offloads are on or off, as Linux's IPoIB sets them per mode; without ethtool it says so.
func checkOffloads(t *testing.T, ns, dev, csum, tso string) {
	t.Helper()
	if _, err := exec.LookPath("ethtool"); err != nil {
		t.Logf("ethtool is not installed: not checking %s's offloads (scripts/test.sh installs it)", dev)
		return
	}
	out, err := e2etest.RunCmd("ip", "netns", "exec", ns, "ethtool", "-k", dev)
	if err != nil {
		t.Fatalf("ethtool -k %s: %v\n%s", dev, err, out)
	}
	for f, want := range map[string]string{"tx-checksumming": csum, "tcp-segmentation-offload": tso} {
		if !strings.Contains(out, f+": "+want) {
			t.Errorf("ethtool -k %s: %s is not %s\n%s", dev, f, want, out)
		}
	}
}
