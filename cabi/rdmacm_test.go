package cabi

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// requireRDMACM skips unless librdmacm.so.1 was built (librdmacm-dev) and the programs
// (rdmacm-utils) are installed.
func requireRDMACM(t *testing.T, lib string, tools ...string) {
	t.Helper()
	if _, err := os.Stat(lib + "/librdmacm.so.1"); err != nil {
		t.Skip("librdmacm.so.1 was not built: rdma-core's <rdma/rdma_cma.h> is missing (Debian: librdmacm-dev; scripts/test.sh installs it as root)")
	}
	for _, tool := range tools {
		if _, err := lookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: rdmacm-utils, libfabric-bin; scripts/test.sh installs them as root)", tool)
		}
	}
}

// TestRping runs rdma-core's rping as server and client, two processes, with data
// verification (-v): 100 and then 10000 iterations, then 100 over 127.0.0.1.
func TestRping(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "rping")
	fb.timeout = 5 * time.Minute // 10000 verified iterations take about a minute on a busy machine
	for _, tc := range []struct{ addr, n string }{{"10.10.0.2", "100"}, {"10.10.0.2", "10000"}, {"127.0.0.1", "100"}} {
		// 127.0.0.1: both ends on the first device's port, through the HCA, as Linux's
		// rdma_cm binds and resolves a loopback address.
		n := tc.n
		sout, cout := fb.pair(t,
			[]string{"rping", "-s", "-a", tc.addr, "-v", "-C", n},
			[]string{"rping", "-c", "-a", tc.addr, "-v", "-C", n})
		el := fb.client
		t.Logf("rping -C %s -v: the client ran %v, %.0f iterations/s (its start and connection included)", n, el.Round(time.Millisecond), float64(atoi(t, n))/el.Seconds())
		// The client's event thread writes to stderr between its buffered stdout.
		cout = strings.ReplaceAll(cout, "client DISCONNECT EVENT...\n", "")
		lines := regexp.MustCompile(`ping data: rdma-ping-`).FindAllString(cout, -1)
		if want := atoi(t, n); len(lines) != want {
			t.Errorf("rping -C %s: the client printed %d pings\n%s", n, len(lines), tail(cout))
		}
		if !strings.Contains(sout, "server ping data: rdma-ping-") {
			t.Errorf("rping -C %s: the server printed no data\n%s", n, tail(sout))
		}
	}
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tail is the end of a long output, for failure messages.
func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// buildCMProgram compiles testdata/NAME.c against the system's librdmacm headers (the
// test runs it on pibgw's libraries), or skips the test without gcc or the headers.
func buildCMProgram(t *testing.T, name string) string {
	t.Helper()
	requireTools(t, "gcc")
	if _, err := os.Stat("/usr/include/rdma/rdma_cma.h"); err != nil {
		t.Skip("librdmacm's headers are missing (librdmacm-dev)")
	}
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-o", bin, "testdata/"+name+".c", "-lrdmacm", "-libverbs").CombinedOutput(); err != nil {
		t.Skipf("cannot build testdata/%s.c: %v\n%s", name, err, out)
	}
	return bin
}

// TestGetaddrinfoHints: a passive rdma_getaddrinfo with neither node nor service binds to
// the hints' source address, and the endpoint made from it has that address's device, as
// with rdma-core (it used to bind the wildcard: no device, and libfabric's verbs provider
// found none).
func TestGetaddrinfoHints(t *testing.T) {
	fb := startFabric(t)
	bin := buildCMProgram(t, "getaddrinfo_check")
	out := fb.run(t, bin, "10.10.0.2")
	if !strings.Contains(out, "source 10.10.0.2\n") || !strings.Contains(out, "device pib_1\n") {
		t.Errorf("getaddrinfo_check 10.10.0.2:\n%s", out)
	}
}

// TestInitQPAttr runs testdata/init_qp_attr.c: both sides make their own QPs and take
// them to RTS with rdma_init_qp_attr (ENOSYS before), with the masks Linux gives (INIT:
// state, access, P_Key index, port; RTR: address vector, path MTU, destination QP, RQ PSN,
// READ depth, RNR timer; RTS: SQ PSN, timeout, retries, READ depth), and a SEND goes each way.
func TestInitQPAttr(t *testing.T) {
	fb := startFabric(t)
	bin := buildCMProgram(t, "init_qp_attr")
	port := freePort(t)
	sout, cout := fb.pair(t, []string{bin, "-s", "10.10.0.2", port}, []string{bin, "10.10.0.2", port})
	for _, c := range []struct{ out, want string }{
		{sout, "INIT mask 0x39\n"}, {sout, "RTR mask 0x129181\n"}, {sout, "RTS mask 0x12e01\n"},
		{sout, "received hello server\n"}, {sout, "server done\n"},
		{sout, "RTS timeout 19\n"}, // the path's: packet lifetime 18, + 1
		{cout, "INIT (before the connection) mask 0x39\n"}, {cout, "RTR mask 0x129181\n"},
		{cout, "RTS timeout 12\n"}, // rdma_set_option's
		{cout, "received hello client\n"}, {cout, "client done\n"},
	} {
		if !strings.Contains(c.out, c.want) {
			t.Errorf("no %q in\nserver:\n%s\nclient:\n%s", c.want, sout, cout)
			break
		}
	}
}

// TestFiPingpong runs libfabric's fi_pingpong (libfabric-bin) on 127.0.0.1 with the verbs
// provider's message endpoints — its listening ID moves to the endpoint's event channel
// (rdma_migrate_id), the connection goes through the HCA — and with reliable datagram
// endpoints over them (ofi_rxm, large messages by RDMA READ): every size from 64 bytes to
// 1 MiB (rdm: 6 MiB) comes back intact (-c). The endpoints have AF_IB addresses (see
// TestFiPingpongDevices), over which ofi_rxm needs libfabric 1.21 or later.
func TestFiPingpong(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "fi_pingpong", "fi_info")
	fb.timeout = 3 * time.Minute
	cases := []struct{ prov, ep, last string }{{"verbs", "msg", "1m "}}
	if rxmOverAFIB(t, fb) {
		cases = append(cases, struct{ prov, ep, last string }{"verbs;ofi_rxm", "rdm", "6m "})
	}
	for _, tc := range cases {
		port := freePort(t)
		sout, cout := fb.pair(t,
			[]string{"fi_pingpong", "-p", tc.prov, "-e", tc.ep, "-B", port, "-c", "-I", "10", "-S", "all"},
			[]string{"fi_pingpong", "-p", tc.prov, "-e", tc.ep, "-P", port, "-c", "-I", "10", "-S", "all", "127.0.0.1"})
		for _, size := range []string{"64 ", "4k ", "64k ", tc.last} {
			if !regexp.MustCompile(`(?m)^` + size).MatchString(cout) {
				t.Errorf("fi_pingpong -e %s client: no line for %s\nclient:\n%s\nserver:\n%s", tc.ep, size, tail(cout), tail(sout))
			}
		}
	}
}

// rxmOverAFIB reports whether the installed libfabric runs ofi_rxm over verbs endpoints
// with AF_IB addresses: before 1.21 (its commit 50b8942cb) the verbs provider's
// fi_getinfo for a source address without a destination calls rdma_resolve_addr with no
// destination, which rdma-core's librdmacm refuses (EINVAL), so fi_domain fails with
// -61 — on a Linux host whose IPoIB addresses the program cannot see as here.
func rxmOverAFIB(t *testing.T, fb *fabric) bool {
	t.Helper()
	m := regexp.MustCompile(`(?m)^libfabric: (\d+)\.(\d+)`).FindStringSubmatch(fb.run(t, "fi_info", "--version"))
	if m == nil {
		t.Fatal("fi_info --version: no libfabric version")
	}
	if major, minor := atoi(t, m[1]), atoi(t, m[2]); major == 1 && minor < 21 {
		t.Logf("libfabric %s.%s: no ofi_rxm over AF_IB addresses (libfabric's 50b8942cb, 1.21); rdm not run", m[1], m[2])
		return false
	}
	return true
}

// TestFiPingpongDevices: libfabric's verbs provider lists the same endpoint types for
// both devices, and fi_pingpong's server on pib_1 (-d) talks with a client on pib_0. The
// provider binds 127.0.0.1 to learn a device and keeps that device's MSG endpoints alone;
// pibgw bound the loopback address to pib_0 (Linux's rdma_bind_addr takes no device for
// it: cma_any_addr), so pib_1 had no MSG endpoint and its server failed with -61
// (ENODATA). With no IPoIB interface in the program's view (getifaddrs), the provider
// addresses the endpoints by GID and P_Key (AF_IB), which pibgw's rdma_cm now takes as
// Linux's does (it was EAFNOSUPPORT).
func TestFiPingpongDevices(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "fi_pingpong", "fi_info")
	out := fb.run(t, "fi_info", "-p", "verbs")
	types := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^    domain: (pib_\d)\S*\n(?:.*\n)*?    type: (\S+)`).FindAllStringSubmatch(out, -1) {
		types[m[1]] = append(types[m[1]], m[2])
	}
	if a, b := strings.Join(types["pib_0"], " "), strings.Join(types["pib_1"], " "); a != b || !strings.Contains(a, "FI_EP_MSG") {
		t.Errorf("fi_info -p verbs: pib_0 has %s, pib_1 %s\n%s", a, b, tail(out))
	}
	fb.timeout = 2 * time.Minute
	port := freePort(t)
	sout, cout := fb.pair(t,
		[]string{"fi_pingpong", "-p", "verbs", "-e", "msg", "-d", "pib_1", "-B", port, "-c", "-I", "10", "-S", "all"},
		[]string{"fi_pingpong", "-p", "verbs", "-e", "msg", "-d", "pib_0", "-P", port, "-c", "-I", "10", "-S", "all", "127.0.0.1"})
	for _, size := range []string{"64 ", "4k ", "64k ", "1m "} {
		if !regexp.MustCompile(`(?m)^` + size).MatchString(cout) {
			t.Errorf("fi_pingpong -d pib_1 / -d pib_0: no line for %s\nclient:\n%s\nserver:\n%s", size, tail(cout), tail(sout))
		}
	}
}

// TestAFIBCheck runs testdata/afib_check.c: rdma_bind_addr, rdma_listen, rdma_resolve_addr
// and a connection with AF_IB addresses, and rdma_get_src_port/rdma_get_dst_port read their
// service IDs' ports (librdmacm's ucma_get_port; they read sib_pkey as a port).
func TestAFIBCheck(t *testing.T) {
	fb := startFabric(t)
	bin := buildCMProgram(t, "afib_check")
	if out := fb.run(t, bin); !strings.HasSuffix(out, "done\n") {
		t.Errorf("afib_check:\n%s", out)
	}
}

// TestUcmatose runs rdma-core's ucmatose: 16 connections, 100 messages each way on each.
func TestUcmatose(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "ucmatose")
	sout, cout := fb.pair(t,
		[]string{"ucmatose", "-c", "16", "-C", "100"},
		[]string{"ucmatose", "-s", "10.10.0.2", "-c", "16", "-C", "100"})
	el := fb.client
	t.Logf("ucmatose -c 16 -C 100: the client ran %v, %.0f connections/s with their data (its start and attach included)", el.Round(time.Millisecond), 16/el.Seconds())
	for _, out := range []string{sout, cout} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Errorf("ucmatose:\n%s", tail(out))
		}
	}
}

// withServer starts a server that serves until killed (cmtime, rcopy), runs the client to
// the end once the server listens, kills the server and returns the client's output; the
// client must exit 0.
func (fb *fabric) withServer(t *testing.T, server []string, client ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var sout syncBuffer
	s := fb.command(ctx, server[0], server[1:]...)
	s.Stdout, s.Stderr = &sout, &sout
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { s.Process.Kill(); s.Wait() }()
	fb.waitListening(t, s.Process.Pid)
	out, err := fb.command(ctx, client[0], client[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s\nserver:\n%s", strings.Join(client, " "), err, out, sout.String())
	}
	return string(out)
}

// TestCmtime runs rdma-core's cmtime: 50 connections made and torn down step by step
// (create ID, resolve address and route, create QP, connect, disconnect, destroy), each
// step's time printed by the client.
func TestCmtime(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "cmtime")
	port := freePort(t)
	cout := fb.withServer(t, []string{"cmtime", "-c", "50", "-p", port}, "cmtime", "-s", "10.10.0.2", "-c", "50", "-p", port)
	t.Logf("cmtime -c 50:\n%s", cout)
	for _, step := range []string{"create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"} {
		if !regexp.MustCompile(`(?m)^` + step + ` *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`).MatchString(cout) {
			t.Errorf("cmtime: no %q row\n%s", step, cout)
		}
	}
}

// TestUdaddy runs rdma-core's udaddy (UD, port space UDP): address, route, SIDR and
// messages each way.
func TestUdaddy(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "udaddy")
	sout, cout := fb.pair(t, []string{"udaddy"}, []string{"udaddy", "-s", "10.10.0.2"})
	for _, out := range []string{sout, cout} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Errorf("udaddy:\n%s", tail(out))
		}
	}
}

// TestRdmaServerClient runs rdma-core's rdma_server and rdma_client: the synchronous
// API (rdma_getaddrinfo, rdma_create_ep, rdma_get_request, rdma_reg_msgs,
// rdma_post_send/recv, rdma_get_send/recv_comp).
func TestRdmaServerClient(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "rdma_server", "rdma_client")
	sout, cout := fb.pair(t, []string{"rdma_server"}, []string{"rdma_client", "-s", "10.10.0.2"})
	if !strings.Contains(sout, "rdma_server: end 0") || !strings.Contains(cout, "rdma_client: end 0") {
		t.Errorf("server:\n%s\nclient:\n%s", sout, cout)
	}
}

// runFail runs a program that must fail, and returns its output.
func (fb *fabric) runFail(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := fb.command(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no end in 60 s\n%s", name, strings.Join(args, " "), tail(string(out)))
	}
	if err == nil {
		t.Errorf("%s %s: exit 0, want a failure\n%s", name, strings.Join(args, " "), out)
	}
	return string(out)
}

// TestRdmacmFailures: failures as librdmacm reports them — REJECTED with status 8 (no
// listener) for a port nobody listens on, ADDR_ERROR for an address nobody has — and a
// server killed with SIGKILL mid-run does not leave its client hanging.
func TestRdmacmFailures(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "rping", "ucmatose")
	port := freePort(t)
	t.Run("rejected", func(t *testing.T) {
		out := fb.runFail(t, "ucmatose", "-s", "10.10.0.2", "-p", port)
		if !strings.Contains(out, "event: RDMA_CM_EVENT_REJECTED, error: 8\n") {
			t.Errorf("ucmatose to port %s:\n%s", port, out)
		}
		out = fb.runFail(t, "rping", "-c", "-a", "10.10.0.2", "-p", port, "-C", "1")
		if !strings.Contains(out, "cma event RDMA_CM_EVENT_REJECTED, error 8\n") {
			t.Errorf("rping to port %s:\n%s", port, out)
		}
	})
	t.Run("addr_error", func(t *testing.T) {
		out := fb.runFail(t, "ucmatose", "-s", "10.10.0.99")
		if !strings.Contains(out, "event: RDMA_CM_EVENT_ADDR_ERROR, error: ") {
			t.Errorf("ucmatose to 10.10.0.99:\n%s", out)
		}
		out = fb.runFail(t, "rping", "-c", "-a", "10.10.0.99", "-C", "1")
		if !strings.Contains(out, "cma event RDMA_CM_EVENT_ADDR_ERROR, error ") {
			t.Errorf("rping to 10.10.0.99:\n%s", out)
		}
	})
	t.Run("server_killed", func(t *testing.T) {
		// A client that waits on its peer with nothing of its own in flight (rping's
		// client after its SEND was acknowledged) learns of the peer's end only from a CM
		// message: as the kernel does for a killed process, the daemon sends a DREQ for
		// each connection the dead process had (attach/cmtrack.go), and the client sees
		// RDMA_CM_EVENT_DISCONNECTED.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var sout, cout syncBuffer
		s := fb.command(ctx, "rping", "-s", "-a", "10.10.0.2", "-C", "1000000")
		s.Stdout, s.Stderr = &sout, &sout
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer s.Process.Kill()
		fb.waitListening(t, s.Process.Pid)
		c := fb.command(ctx, "rping", "-c", "-a", "10.10.0.2", "-v", "-C", "1000000")
		c.Stdout, c.Stderr = &cout, &cout
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		for strings.Count(cout.String(), "ping data: ") < 100 {
			select {
			case err := <-done:
				t.Fatalf("the client ended before the kill: %v\n%s\nserver:\n%s", err, tail(cout.String()), sout.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
		s.Process.Kill()
		s.Wait()
		killed := time.Now()
		select {
		case err := <-done:
			out := cout.String()
			t.Logf("the client ended %v after the server's kill: %v; %s", time.Since(killed).Round(time.Millisecond), err,
				strings.TrimSpace(out[strings.LastIndex(out, "rdma-ping-"):]))
			// rping's client reports the DISCONNECTED event and leaves its loop
			// (librdmacm's behaviour when the kernel disconnects a dead peer).
			if !strings.Contains(out, "DISCONNECT EVENT") && err == nil {
				t.Errorf("the client exited 0 without a DISCONNECT EVENT:\n%s", tail(out))
			}
		case <-time.After(60 * time.Second):
			c.Process.Kill()
			t.Fatalf("the client hangs 60 s after its server was killed\n%s", tail(cout.String()))
		}
	})
}

// syncBuffer is a bytes.Buffer for a process's output read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
