package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/internal/control"
)

// attachProc is an example program running as its own process, attached to the test's
// daemon.
type attachProc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
}

// startAttached starts cmd (its environment pointing PIBGW_ATTACH at path) with its
// output in the returned attachProc; the cleanup kills it if it still runs.
func startAttached(t *testing.T, path string, cmd *exec.Cmd) *attachProc {
	t.Helper()
	p := &attachProc{cmd: cmd, done: make(chan struct{})}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "PIBGW_ATTACH="+path)
	if cmd.Stdout == nil {
		cmd.Stdout = &p.stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &p.stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			if t.Failed() {
				// A Go program prints its goroutines' stacks on SIGQUIT: where it hung.
				if p.quit() {
					t.Logf("%v, still running when the test failed; stderr:\n%s", cmd.Args, p.stderr.String())
				}
			}
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// quit sends SIGQUIT (a Go program writes its stacks to stderr and exits) and waits up to
// two seconds for the process to go; it reports whether it went.
func (p *attachProc) quit() bool {
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

// wait waits up to timeout for the process to exit and returns its exit error (a
// process still running then is killed and reported as failed).
func (p *attachProc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.quit()
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%v still running after %v", p.cmd.Args, timeout)
		return p.err
	}
}

// mustSucceed fails the test unless the process exits with status 0 within timeout.
func (p *attachProc) mustSucceed(t *testing.T, timeout time.Duration) {
	t.Helper()
	if err := p.wait(t, timeout); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, err, p.stdout.String(), p.stderr.String())
	}
}

func (p *attachProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitPS polls `pibgw ps --json` until cond holds for its sessions; it fails the test
// at the timeout or when p (if not nil) exits first.
func waitPS(t *testing.T, d *e2eDaemon, p *attachProc, what string, cond func([]attach.SessionInfo) bool) []attach.SessionInfo {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ss []attach.SessionInfo
		d.JSON(&ss, "ps")
		if cond(ss) {
			return ss
		}
		if p != nil && p.exited() {
			t.Fatalf("%v exited before pibgw ps showed %s: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, what, p.err, p.stdout.String(), p.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("pibgw ps did not show %s in 20 s: %+v", what, ss)
		}
	}
}

func sessionOf(ss []attach.SessionInfo, pid int) *attach.SessionInfo {
	for i := range ss {
		if ss[i].PID == pid {
			return &ss[i]
		}
	}
	return nil
}

// openToAll makes dir and its parents up to the system's temporary directory traversable
// by every user (t.TempDir makes them 0700), so that a process running as nobody reaches
// the attach socket and the example binaries in them.
func openToAll(t *testing.T, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); d != tmp && d != "/" && strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	rpingRateRE = regexp.MustCompile(`(\d+) iterations in \S+: (\d+)/s`)
	echoSumRE   = regexp.MustCompile(`SHA-256 ([0-9a-f]{64})`)
	rcReportRE  = regexp.MustCompile(`(?m)^(\d+) bytes in [\d.]+ seconds = [\d.]+ Mbit/sec
(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter$`)
	// tsReportRE is ibv_rc_pingpong -t's minimum of the clock cycles between receive
	// completions.
	tsReportRE = regexp.MustCompile(`(?m)^Min receive completion clock cycles = (\d+)$`)
	// latReportRE is a perftest latency test's result row for 2-byte messages and 2000
	// iterations (#bytes #iterations t_min t_max t_typical …): t_typical.
	latReportRE = regexp.MustCompile(`(?m)^\s*2\s+2000\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s`)
)

// TestE2EAttach is the attach channel's acceptance point 1, as root: against a running
// `pibgw up` (its own control socket, so its own attach socket next to it, mode 0666),
// separate processes use the daemon's HCAs — the rping example for 10,000 validated
// iterations (the client as user nobody), the echo example streaming 64 MiB checked by
// SHA-256 on both sides, and rcpingpong (plain verbs, LID/QPN/PSN exchanged over pipes,
// then over loopback TCP). `pibgw ps --json` lists them while they run and none once they
// exited; an attached process learns when the daemon stops; the daemon removes the
// socket.
func TestE2EAttach(t *testing.T) {
	requireE2E(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("end-to-end attach test runs a client as user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)

	// The examples, where nobody may run them.
	binDir := t.TempDir()
	openToAll(t, binDir)
	build := exec.Command("go", "build", "-o", binDir+"/",
		"github.com/pibgw/pibgw/examples/rping", "github.com/pibgw/pibgw/examples/echo",
		"github.com/pibgw/pibgw/examples/rcpingpong")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples: %v\n%s", err, out)
	}
	bin := func(name string) string { return filepath.Join(binDir, name) }

	nsA, nsB := e2eNetNS("ata"), e2eNetNS("atb")
	body := interfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24") + interfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24")
	d := startDaemon(t, "", body, nsA, nsB)

	// The attach socket: attach.sock beside the control socket, in status, mode 0666.
	var st control.Status
	if err := control.NewClient(d.Sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &st); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(filepath.Dir(d.Sock), "attach.sock")
	if st.Attach != sock {
		t.Fatalf("status: attach %q, want %q", st.Attach, sock)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("attach socket %s: %v %v, want a socket with mode 0666", sock, fi.Mode(), err)
	}
	openToAll(t, filepath.Dir(sock))
	waitPS(t, d, nil, "no session", func(ss []attach.SessionInfo) bool { return len(ss) == 0 })

	t.Run("rping", func(t *testing.T) {
		// The server, by -attach; it waits for its client as `pibgw ps` shows.
		srv := startAttached(t, "", exec.Command(bin("rping"), "-s", "-a", "10.10.0.2", "-C", "10000", "-V", "-attach", sock))
		ss := waitPS(t, d, srv, "the rping server listening", func(ss []attach.SessionInfo) bool {
			s := sessionOf(ss, srv.cmd.Process.Pid)
			return s != nil && s.Listens == 1
		})
		if s := sessionOf(ss, srv.cmd.Process.Pid); s.User != "root" || s.UID != 0 {
			t.Errorf("ps: server session %+v, want user root", *s)
		}
		out, _, err := d.Pibgw("ps")
		if err != nil || !strings.HasPrefix(out, "SESSION  PID") || !strings.Contains(out, " "+strconv.Itoa(srv.cmd.Process.Pid)+" ") {
			t.Errorf("pibgw ps: %v\n%s", err, out)
		}
		t.Logf("pibgw ps, the server waiting:\n%s", out)

		// The client, as nobody (PIBGW_ATTACH): the socket is 0666.
		cmd := exec.Command(bin("rping"), "-c", "-a", "10.10.0.2", "-I", "10.10.0.1", "-C", "10000", "-V", "-d")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
		cli := startAttached(t, sock, cmd)
		waitPS(t, d, cli, "the rping client (nobody) with its QP", func(ss []attach.SessionInfo) bool {
			s := sessionOf(ss, cli.cmd.Process.Pid)
			return s != nil && s.User == "nobody" && s.UID == uid && len(s.QPs) > 0 && sessionOf(ss, srv.cmd.Process.Pid) != nil
		})
		cli.mustSucceed(t, 3*time.Minute)
		srv.mustSucceed(t, 30*time.Second)
		m := rpingRateRE.FindStringSubmatch(cli.stderr.String())
		if m == nil || m[1] != "10000" {
			t.Fatalf("rping client's report:\n%s", cli.stderr.String())
		}
		t.Logf("rping client (nobody): %s", m[0])
		// rping waits for every completion on its channel. The receive goroutine of each
		// process must take packets in as they come while it waits, not a poll grace
		// later: that made it 45 s for these 10,000 (≈ 220/s); it takes about 0.6 s.
		if rate, _ := strconv.Atoi(m[2]); rate < 500 {
			t.Errorf("rping between attached processes: %s, want at least 500 iterations/s", m[0])
		}
		waitPS(t, d, nil, "the rping sessions gone", func(ss []attach.SessionInfo) bool { return len(ss) == 0 })
	})

	t.Run("echo", func(t *testing.T) {
		srv := startAttached(t, sock, exec.Command(bin("echo"), "-s", "-a", "10.10.0.2:7471"))
		waitPS(t, d, srv, "the echo server listening", func(ss []attach.SessionInfo) bool {
			s := sessionOf(ss, srv.cmd.Process.Pid)
			return s != nil && s.Listens == 1
		})
		cli := startAttached(t, sock, exec.Command(bin("echo"), "-c", "-a", "10.10.0.2:7471", "-I", "10.10.0.1", "-n", "64M"))
		cli.mustSucceed(t, 3*time.Minute)
		out := cli.stdout.String()
		m := echoSumRE.FindStringSubmatch(out)
		if m == nil || !strings.Contains(out, "67108864 bytes echoed") || !strings.Contains(out, "matches") {
			t.Fatalf("echo client's report:\n%s", out)
		}
		t.Logf("echo client: %s", strings.TrimSpace(out))
		// The server's log line for the connection carries the same SHA-256.
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(srv.stderr.String(), "67108864 bytes echoed, SHA-256 "+m[1]); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("echo server's log:\n%s", srv.stderr.String())
			}
		}
		srv.cmd.Process.Signal(syscall.SIGTERM)
		srv.mustSucceed(t, 10*time.Second)
	})

	checkRC := func(t *testing.T, who, out string) {
		t.Helper()
		m := rcReportRE.FindStringSubmatch(out)
		if m == nil || m[1] != "8192000" || m[2] != "1000" || !strings.Contains(out, "  local address:  LID 0x") || !strings.Contains(out, "  remote address: LID 0x") {
			t.Fatalf("rcpingpong %s's report:\n%s", who, out)
		}
		t.Logf("rcpingpong %s: %s", who, strings.ReplaceAll(m[0], "\n", "; "))
	}

	t.Run("rcpingpong-pipe", func(t *testing.T) {
		// a's standard output is b's standard input and the other way round.
		aR, bW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		bR, aW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ca := exec.Command(bin("rcpingpong"), "-pipe", "-d", "pib_0")
		ca.Stdin, ca.Stdout = aR, aW
		cb := exec.Command(bin("rcpingpong"), "-pipe", "-d", "pib_1", "-e")
		cb.Stdin, cb.Stdout = bR, bW
		a, b := startAttached(t, sock, ca), startAttached(t, sock, cb)
		for _, f := range []*os.File{aR, aW, bR, bW} {
			f.Close()
		}
		a.mustSucceed(t, 2*time.Minute)
		b.mustSucceed(t, 30*time.Second)
		checkRC(t, "pib_0 (poll)", a.stderr.String())
		checkRC(t, "pib_1 (-e)", b.stderr.String())
	})

	t.Run("rcpingpong-tcp", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0") // a free loopback port
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		srv := startAttached(t, sock, exec.Command(bin("rcpingpong"), "-d", "pib_1", "-p", port))
		cli := startAttached(t, sock, exec.Command(bin("rcpingpong"), "-d", "pib_0", "-p", port, "localhost"))
		cli.mustSucceed(t, 2*time.Minute)
		srv.mustSucceed(t, 30*time.Second)
		checkRC(t, "server", srv.stdout.String())
		checkRC(t, "client", cli.stdout.String())
	})

	waitPS(t, d, nil, "no session left", func(ss []attach.SessionInfo) bool { return len(ss) == 0 })

	// An attached process hears of the daemon's end: the echo server exits with status 1.
	srv := startAttached(t, sock, exec.Command(bin("echo"), "-s", "-a", "10.10.0.2:7471"))
	waitPS(t, d, srv, "the echo server listening", func(ss []attach.SessionInfo) bool {
		s := sessionOf(ss, srv.cmd.Process.Pid)
		return s != nil && s.Listens == 1
	})
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB})
	if err := srv.wait(t, 10*time.Second); err == nil || !strings.Contains(srv.stderr.String(), "daemon went away") {
		t.Errorf("attached echo server after the daemon stopped: %v\n%s", err, srv.stderr.String())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("attach socket left after SIGTERM: %v", err)
	}
}
