package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the multicast sender and listener the end-to-end test runs
// inside the namespaces (`ip netns exec NS TESTBINARY`), so no extra tool is needed:
// PIBGW_E2E_HELPER selects the mode, the arguments say the rest.
const helperEnv = "PIBGW_E2E_HELPER"

func init() {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "mcast-send":
		os.Exit(mcastSend(os.Args[1:]))
	case "mcast-listen":
		os.Exit(mcastListen(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s mode %q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// mcastSend: IFACE PORT COUNT INTERVAL GROUP... sends COUNT rounds, INTERVAL apart, of
// one datagram "GROUP seq N" to each GROUP:PORT out of IFACE (IP_MULTICAST_IF: no route
// needed).
func mcastSend(args []string) int {
	if len(args) < 5 {
		fmt.Fprintln(os.Stderr, "mcast-send: want IFACE PORT COUNT INTERVAL GROUP...")
		return 2
	}
	ifi, err := net.InterfaceByName(args[0])
	port, err2 := strconv.Atoi(args[1])
	count, err3 := strconv.Atoi(args[2])
	interval, err4 := time.ParseDuration(args[3])
	if err := firstErr(err, err2, err3, err4); err != nil {
		fmt.Fprintln(os.Stderr, "mcast-send:", err)
		return 2
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptIPMreqn(int(fd), syscall.IPPROTO_IP, syscall.IP_MULTICAST_IF,
				&syscall.IPMreqn{Ifindex: int32(ifi.Index)})
		})
		return firstErr(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcast-send:", err)
		return 1
	}
	defer pc.Close()
	for i := range count {
		for _, g := range args[4:] {
			dst := &net.UDPAddr{IP: net.ParseIP(g), Port: port}
			if _, err := pc.WriteTo(fmt.Appendf(nil, "%s seq %d", g, i), dst); err != nil {
				fmt.Fprintln(os.Stderr, "mcast-send:", err)
			}
		}
		time.Sleep(interval)
	}
	return 0
}

// mcastListen: IFACE PORT WANT TIMEOUT GROUP... binds 0.0.0.0:PORT, joins each GROUP on
// IFACE, prints "ready", then "got PAYLOAD from SRC" per datagram, and exits after WANT
// datagrams or TIMEOUT.
func mcastListen(args []string) int {
	if len(args) < 5 {
		fmt.Fprintln(os.Stderr, "mcast-listen: want IFACE PORT WANT TIMEOUT GROUP...")
		return 2
	}
	ifi, err := net.InterfaceByName(args[0])
	port, err2 := strconv.Atoi(args[1])
	want, err3 := strconv.Atoi(args[2])
	timeout, err4 := time.ParseDuration(args[3])
	if err := firstErr(err, err2, err3, err4); err != nil {
		fmt.Fprintln(os.Stderr, "mcast-listen:", err)
		return 2
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, g := range args[4:] {
				m := syscall.IPMreqn{Ifindex: int32(ifi.Index)}
				copy(m.Multiaddr[:], net.ParseIP(g).To4())
				if serr = syscall.SetsockoptIPMreqn(int(fd), syscall.IPPROTO_IP, syscall.IP_ADD_MEMBERSHIP, &m); serr != nil {
					return
				}
			}
		})
		return firstErr(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcast-listen:", err)
		return 1
	}
	defer pc.Close()
	fmt.Println("ready")
	pc.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 2048)
	for got := 0; got < want; got++ {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			fmt.Println("timeout:", err)
			return 0
		}
		fmt.Printf("got %s from %v\n", buf[:n], from)
	}
	return 0
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// nsHelper starts the test binary in namespace ns in a helper mode, its stdout piped.
func nsHelper(t *testing.T, ns, mode string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, self}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // ip netns exec execs the helper: this is its pid
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout)
}

// TestE2EMulticast is issue 5's acceptance point 3, as root: three hosts; an IPv4
// multicast UDP sender in A sends to 239.1.2.3:5000 and 239.1.2.4:5000 out of ib0; a
// listener in B that joined 239.1.2.3 on ib1 receives the datagrams to that group only,
// and a listener in C on the same port that joined only 239.1.2.4 on ib2 receives those
// and never one to 239.1.2.3. Joins take a moment (IGMP report → pibgw joins the MGID
// through the SA), so the sender repeats.
func TestE2EMulticast(t *testing.T) {
	requireE2E(t)
	nsA, nsB, nsC := e2eNetNS("ma"), e2eNetNS("mb"), e2eNetNS("mc")
	d := startDaemon(t, "", fmt.Sprintf(`
[fabric]
hca_count = 3

[[interfaces]]
name = "ib0"
hca = "pib_0"
netns = %q
addresses = ["10.10.0.1/24"]

[[interfaces]]
name = "ib1"
hca = "pib_1"
netns = %q
addresses = ["10.10.0.2/24"]

[[interfaces]]
name = "ib2"
hca = "pib_2"
netns = %q
addresses = ["10.10.0.3/24"]
`, nsA, nsB, nsC), nsA, nsB, nsC)

	const want = 5
	type result struct {
		lines []string
		err   error
	}
	listen := func(ns, iface, group string) chan result {
		_, sc := nsHelper(t, ns, "mcast-listen", iface, "5000", strconv.Itoa(want), "15s", group)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("listener in %s did not start: %q %v", ns, sc.Text(), sc.Err())
		}
		ch := make(chan result, 1)
		go func() {
			var r result
			for sc.Scan() {
				r.lines = append(r.lines, sc.Text())
			}
			r.err = sc.Err()
			ch <- r
		}()
		return ch
	}
	gotB := listen(nsB, "ib1", "239.1.2.3")
	gotC := listen(nsC, "ib2", "239.1.2.4")
	sender, _ := nsHelper(t, nsA, "mcast-send", "ib0", "5000", "150", "50ms", "239.1.2.3", "239.1.2.4")

	check := func(host string, ch chan result, group, other string) {
		t.Helper()
		var r result
		select {
		case r = <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("listener in %s did not finish", host)
		}
		n := 0
		for _, l := range r.lines {
			switch {
			case strings.HasPrefix(l, "got "+group+" seq ") && strings.Contains(l, " from 10.10.0.1:"):
				n++
			case strings.Contains(l, other):
				t.Errorf("%s, which did not join %s, received %q", host, other, l)
			default:
				t.Errorf("%s: unexpected %q", host, l)
			}
		}
		if n != want {
			t.Errorf("%s received %d datagrams to %s, want %d:\n%s", host, n, group, want, strings.Join(r.lines, "\n"))
		}
	}
	check("B", gotB, "239.1.2.3", "239.1.2.4")
	check("C", gotC, "239.1.2.4", "239.1.2.3")
	sender.Process.Kill()
	time.Sleep(200 * time.Millisecond) // what was in flight arrives

	// A sends nothing but these datagrams (its IGMP and MLD reports are taken by pibgw,
	// router solicitations find no group), so every packet it sent is multicast.
	show := d.Show()
	a, b, c := show["ib0"].Counters, show["ib1"].Counters, show["ib2"].Counters
	if b["rx_multicast"] < want || c["rx_multicast"] < want {
		t.Errorf("rx_multicast: ib1 %d, ib2 %d; want at least %d each", b["rx_multicast"], c["rx_multicast"], want)
	}
	if a["tx_packets"] < 2*want || a["tx_multicast"] != a["tx_packets"] {
		t.Errorf("ib0 tx_multicast %d, tx_packets %d; want equal and at least %d: "+
			"multicast packets that waited for their group's send-only join are sent uncounted "+
			"(ipoib/mcast.go joinGroup's flush does not count tx_multicast)",
			a["tx_multicast"], a["tx_packets"], 2*want)
	}
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB, "ib2": nsC})
}
