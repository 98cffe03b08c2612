package main

import (
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/examples/internal/extest"
)

var reportRE = regexp.MustCompile(`(?m)^  local address:  LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID \S+
  remote address: LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID \S+
(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec
(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter
$`)

// checkReport checks ibv_rc_pingpong's lines for n iterations of size bytes.
func checkReport(t *testing.T, who, out string, n, size int) {
	t.Helper()
	m := reportRE.FindStringSubmatch(out)
	if m == nil || m[1] != strconv.Itoa(2*n*size) || m[2] != strconv.Itoa(n) {
		t.Errorf("%s's report:\n%s", who, out)
		return
	}
	t.Logf("%s: %s", who, strings.ReplaceAll(strings.TrimSpace(out), "\n", " | "))
}

// freePort returns a loopback TCP port nobody listens on now.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestRCPingpongTCP runs server and client as two processes attached to an in-process
// fabric, the server on pib_1 and the client on pib_0, exchanging addresses over loopback
// TCP as ibv_rc_pingpong does: polling, then sleeping on completion events, then with
// GRHs (-g 0).
func TestRCPingpongTCP(t *testing.T) {
	_, path := extest.Fabric(t)
	bin := extest.Build(t)
	for _, opts := range [][]string{{}, {"-e"}, {"-g", "0", "-s", "1000", "-m", "2048"}} {
		t.Run(strings.Join(append([]string{"opts"}, opts...), ""), func(t *testing.T) {
			port := freePort(t)
			srv := extest.Start(t, path, bin, append([]string{"-d", "pib_1", "-p", port, "-n", "1000"}, opts...)...)
			cli := extest.Start(t, path, bin, append([]string{"-d", "pib_0", "-p", port, "-n", "1000"}, append(opts, "localhost")...)...)
			cli.MustSucceed(t, 60*time.Second)
			srv.MustSucceed(t, 10*time.Second)
			size := 4096
			if len(opts) > 2 {
				size = 1000
			}
			checkReport(t, "server", srv.Stdout.String(), 1000, size)
			checkReport(t, "client", cli.Stdout.String(), 1000, size)
		})
	}
}

// TestRCPingpongPipe runs two processes whose standard input and output are joined by
// pipes (-pipe), one polling on pib_0 and one sleeping on completion events on pib_0
// too: both QPs on one port, the packets looped back by the daemon.
func TestRCPingpongPipe(t *testing.T) {
	_, path := extest.Fabric(t)
	bin := extest.Build(t)
	aR, bW, err := os.Pipe() // b → a
	if err != nil {
		t.Fatal(err)
	}
	bR, aW, err := os.Pipe() // a → b
	if err != nil {
		t.Fatal(err)
	}
	cmd := func(stdin, stdout *os.File, args ...string) *exec.Cmd {
		c := exec.Command(bin, append([]string{"-pipe", "-n", "1000"}, args...)...)
		c.Env = append(os.Environ(), "PIBGW_ATTACH="+path)
		c.Stdin, c.Stdout = stdin, stdout
		return c
	}
	a := extest.StartCmd(t, cmd(aR, aW, "-d", "pib_0"))
	b := extest.StartCmd(t, cmd(bR, bW, "-d", "pib_0", "-e"))
	// The children hold their ends now.
	for _, f := range []*os.File{aR, aW, bR, bW} {
		f.Close()
	}
	a.MustSucceed(t, 60*time.Second)
	b.MustSucceed(t, 10*time.Second)
	checkReport(t, "a", a.Stderr.String(), 1000, 4096)
	checkReport(t, "b", b.Stderr.String(), 1000, 4096)
}

// A size that is not a whole number of packets; a wrong device name; sizes that differ, so
// the first message overruns the server's receive buffer: both sides exit with status
// 1 on the error completions (IBV_WC_LOC_LEN_ERR at the server, the NAK's
// IBV_WC_REM_INV_REQ_ERR at the client).
func TestRCPingpongOddSizeAndErrors(t *testing.T) {
	_, path := extest.Fabric(t)
	bin := extest.Build(t)
	port := freePort(t)
	srv := extest.Start(t, path, bin, "-p", port, "-n", "200", "-s", "4097", "-m", "4096")
	cli := extest.Start(t, path, bin, "-p", port, "-n", "200", "-s", "4097", "-m", "4096", "-d", "pib_1", "localhost")
	cli.MustSucceed(t, 60*time.Second)
	srv.MustSucceed(t, 10*time.Second)
	checkReport(t, "server", srv.Stdout.String(), 200, 4097)

	bad := extest.Start(t, path, bin, "-d", "pib_9")
	if err := bad.Wait(t, 10*time.Second); err == nil || !strings.Contains(bad.Stderr.String(), "IB device pib_9 not found") {
		t.Errorf("-d pib_9: %v\n%s", err, bad.Stderr.String())
	}

	port = freePort(t)
	srv = extest.Start(t, path, bin, "-p", port, "-s", "1000")
	cli = extest.Start(t, path, bin, "-p", port, "-s", "4096", "localhost")
	for _, p := range []struct {
		p    *extest.Proc
		want string
	}{{srv, "Failed status IBV_WC_LOC_LEN_ERR"}, {cli, "Failed status IBV_WC_REM_INV_REQ_ERR"}} {
		if err := p.p.Wait(t, 30*time.Second); err == nil || !strings.Contains(p.p.Stderr.String(), p.want) {
			t.Errorf("%v: %v, want exit status 1 and %q:\n%s", p.p.Cmd.Args, err, p.want, p.p.Stderr.String())
		}
	}
}

func TestDestMessage(t *testing.T) {
	d := dest{lid: 0x12, qpn: 0xabcdef, psn: 0x123456, gid: [16]byte{0xfe, 0x80, 15: 1}}
	m := d.message()
	if len(m) != msgLen || string(m) != "0012:abcdef:123456:fe800000000000000000000000000001\x00" {
		t.Fatalf("message %q", m)
	}
	got, err := parseDest(m)
	if err != nil || got != d {
		t.Fatalf("parseDest: %+v, %v", got, err)
	}
	if _, err := parseDest([]byte("0012:abcdef:123456:fe80")); err == nil {
		t.Error("short message parsed")
	}
}
