package cabi

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rspreload is Debian's librspreload.so (librdmacm1), which runs a sockets program's TCP
// sockets as rsockets.
const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"

// TestRstream runs rdma-core's rstream over pibgw's rsockets, server and client in two
// processes: non-blocking calls (its default) at 64 bytes, 64 KiB and 6 MB, blocking calls
// and rpoll each with data verification, and addresses through rdma_getaddrinfo. Not its
// default run (-S all): 2 million round trips of two polling processes, 15 s on a quiet
// machine but more than 15 minutes beside two CPU-bound processes, where each round trip
// waits for a processor.
func TestRstream(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "rstream")
	gbps := regexp.MustCompile(`(?m)^\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s+([0-9.]+)\s+[0-9.]+$`)
	for _, args := range [][]string{
		{"-S", "64", "-C", "2000"},
		{"-S", "65536", "-C", "500"},
		{"-S", "6000000", "-C", "20"},
		{"-T", "b", "-T", "v", "-S", "1000000", "-C", "100"},
		{"-T", "a", "-T", "v", "-S", "100000", "-C", "1000"},
		{"-T", "r", "-S", "4096", "-C", "1000"},
	} {
		port := freePort(t)
		args = append(args, "-p", port)
		sout, cout := fb.pair(t, append([]string{"rstream"}, args...),
			append([]string{"rstream", "-s", "10.10.0.2"}, args...))
		t.Logf("rstream %s:\n%s", strings.Join(args, " "), cout)
		for _, out := range []string{sout, cout} {
			if strings.Contains(out, "pitfall") { // e.g. a QP destroyed with sends outstanding
				t.Errorf("rstream %s: the library warned\n%s", strings.Join(args, " "), out)
			}
			rows := gbps.FindAllStringSubmatch(out, -1)
			if len(rows) == 0 {
				t.Errorf("rstream %s: no result line\n%s", strings.Join(args, " "), tail(out))
			}
			for _, r := range rows {
				if r[1] == "0.00" {
					t.Errorf("rstream %s: a result of 0.00 Gb/s: %s", strings.Join(args, " "), r[0])
				}
			}
		}
	}
}

// TestRiostream runs rdma-core's riostream: each side maps its buffer (riomap) and the
// other writes into it directly (riowrite, RDMA WRITE), then waits for the last byte to
// change; 1 MB transfers verified, and 64-byte ones (inline) with rpoll.
func TestRiostream(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "riostream")
	for _, args := range [][]string{{"-S", "1000000", "-C", "100", "-T", "v"}, {"-S", "64", "-C", "200", "-T", "a"}} {
		args = append(args, "-p", freePort(t))
		sout, cout := fb.pair(t, append([]string{"riostream"}, args...),
			append([]string{"riostream", "-s", "10.10.0.2"}, args...))
		t.Logf("riostream %s:\n%s", strings.Join(args, " "), cout)
		for _, out := range []string{sout, cout} {
			if !strings.Contains(out, "custom ") || !strings.Contains(out, "Gb/sec") || strings.Contains(out, "pitfall") {
				t.Errorf("riostream %s:\n%s", strings.Join(args, " "), tail(out))
			}
		}
	}
}

// TestRsocketCheck runs testdata/rsocket_check.c: the calls one by one (errors as
// sockets give them, ECONNREFUSED, a non-blocking listener's EAGAIN, a listener closed
// with a request pending refusing it at once, MSG_PEEK, rpoll and
// rselect, 8 MiB checked byte by byte, 8 MiB each way at once from two threads per
// rsocket, SHUT_WR's end of file and EPIPE, rclose's end of
// file at the peer).
func TestRsocketCheck(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t))
	bin := buildCMProgram(t, "rsocket_check")
	out := fb.run(t, bin, "10.10.0.2", freePort(t))
	if strings.Contains(out, "pitfall") {
		t.Errorf("rsocket_check: the library warned\n%s", out)
	}
	// 16 MiB take well under 100 ms here; a thread that sleeps through the other's
	// progress (a lost wake-up, each up to the 1 s bound of a wait) made it 2–3 s.
	if m := regexp.MustCompile(`both_ways_ms (\d+)`).FindStringSubmatch(out); m == nil || atoi(t, m[1]) > 1500 {
		t.Errorf("rsocket_check: 8 MiB each way took too long (a lost wake-up?)\n%s", out)
	}
	for _, check := range []string{"bad_arguments", "refused_ECONNREFUSED", "listen_nonblocking_EAGAIN", "listener_closed_refuses", "connect", "recv_peek_poll", "send_8MiB", "both_ways_two_threads", "shutdown_and_close", "iomap_errors", "done"} {
		if !strings.Contains(out, "ok "+check+"\n") {
			t.Errorf("rsocket_check: no %q\n%s", check, out)
		}
	}
}

// TestRcopy copies a 3 MB file with rdma-core's rcopy (rsockets, its server writing
// what it receives to the named path); the copy must equal the original.
func TestRcopy(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "rcopy")
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 3_000_000)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	out := fb.withServer(t, []string{"rcopy", "-p", port}, "rcopy", src, "10.10.0.2:"+dst, "-p", port)
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("the copy: %d bytes (%v), want the %d bytes sent\nclient: %s", len(got), err, len(data), out)
	}
}

// TestRspreloadIperf3 runs an unmodified sockets program, iperf3, over rsockets with
// Debian's librspreload.so: its control connection and data stream are rsockets on the
// fabric (the server binds 10.10.0.2, an address only the fabric has here).
func TestRspreloadIperf3(t *testing.T) {
	fb := startFabric(t)
	requireRDMACM(t, buildLibs(t), "iperf3")
	if _, err := os.Stat(rspreload); err != nil {
		t.Skipf("%s is missing (Debian: librdmacm1)", rspreload)
	}
	fb.env = append(fb.env, "LD_PRELOAD="+rspreload)
	port := freePort(t)
	sout, cout := fb.pair(t, []string{"iperf3", "-s", "-1", "-B", "10.10.0.2", "-p", port},
		[]string{"iperf3", "-c", "10.10.0.2", "-p", port, "-t", "2", "-f", "g"})
	t.Logf("iperf3 over librspreload:\n%s", tail(cout))
	m := regexp.MustCompile(`([0-9.]+) Gbits/sec\s+\S*\s*receiver`).FindStringSubmatch(cout)
	if m == nil || m[1] == "0.00" {
		t.Errorf("iperf3: no receiver rate\nclient:\n%s\nserver:\n%s", cout, sout)
	}
}
