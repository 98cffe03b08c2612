package cabi

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
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
			t.Skipf("%s is not installed (Debian: rdmacm-utils; scripts/test.sh installs it as root)", tool)
		}
	}
}

// TestRping runs rdma-core's rping as server and client, two processes, with data
// verification (-v): 100 and then 10000 iterations.
func TestRping(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "rping")
	fb.timeout = 5 * time.Minute // 10000 verified iterations take about a minute on a busy machine
	for _, n := range []string{"100", "10000"} {
		sout, cout := fb.pair(t,
			[]string{"rping", "-s", "-a", "10.10.0.2", "-v", "-C", n},
			[]string{"rping", "-c", "-a", "10.10.0.2", "-v", "-C", n})
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
