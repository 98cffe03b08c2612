// Package abuse holds issue 43's hostile-user run: every attack a local user without
// privileges can make on a running daemon, all at once, while an honest user's traffic
// goes on beside them. It takes minutes, so it runs only with PIBGW_ABUSE=1
// (bash scripts/abuse.sh); each attack also has its own quicker test in CI (attach,
// internal/ibsim, ipoib, sa, e2e/ipoib).
package abuse

import (
	"bufio"
	"context"
	"fmt"
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

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// attacker is one hostile process and what it printed.
type attacker struct {
	name  string
	cmd   *exec.Cmd
	out   e2etest.SyncBuffer
	lines chan string // what it printed, line by line
	exit  chan error
}

// start runs cmd as an attacker; the cleanup kills it.
func start(t *testing.T, name string, cmd *exec.Cmd) *attacker {
	t.Helper()
	a := &attacker{name: name, cmd: cmd, lines: make(chan string, 16), exit: make(chan error, 1)}
	cmd.Stderr = &a.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := sc.Text()
			a.out.Write([]byte(l + "\n"))
			select {
			case a.lines <- l:
			default:
			}
		}
		a.exit <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return a
}

// wait returns the attacker's first line that starts with one of prefixes; it fails the
// test if the attacker exits first or takes longer than timeout.
func (a *attacker) wait(t *testing.T, timeout time.Duration, prefixes ...string) string {
	t.Helper()
	end := time.After(timeout)
	for {
		select {
		case l := <-a.lines:
			for _, p := range prefixes {
				if strings.HasPrefix(l, p) {
					return l
				}
			}
		case err := <-a.exit:
			a.exit <- err
			for len(a.lines) > 0 { // printed before it exited
				l := <-a.lines
				for _, p := range prefixes {
					if strings.HasPrefix(l, p) {
						return l
					}
				}
			}
			t.Fatalf("attacker %s exited before it printed %q: %v\n%s", a.name, prefixes, err, a.out.String())
		case <-end:
			t.Fatalf("attacker %s did not print %q in %v\n%s", a.name, prefixes, timeout, a.out.String())
		}
	}
}

// rss is a process's resident set in MB.
func rss(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the daemon is gone: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb >> 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// pingLoss parses ping's summary: packets sent and the share lost, in percent.
func pingLoss(out string) (sent int, loss float64, ok bool) {
	m := pingStats.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, false
	}
	tx, _ := strconv.Atoi(m[1])
	rx, _ := strconv.Atoi(m[2])
	if tx == 0 {
		return 0, 0, false
	}
	return tx, 100 * float64(tx-rx) / float64(tx), true
}

// TestAbuse is issue 43's acceptance 2. Against one `pibgw up` with ib0 and ib1 in two
// namespaces, user nobody holds 20,000 connections to the attach socket, asks for 30,000
// QP numbers, joins ib1's IPoIB broadcast group and exits (20 times), listens on IPoIB
// connected mode's service IDs, starves the ibsim server (clients that vanish, refused
// CONNECTs, one that never reads its replies), and sends to 20,000 IPv6 link-local
// destinations from ib0's namespace; root runs a capture whose reader never reads.
// Meanwhile `ping -f` from ib0 to ib1 loses less than 1 % and an honest ibv_rc_pingpong
// (root, through pibgw exec) completes; afterwards ARP and a fresh attach still work
// and the daemon's RSS is below 200 MB.
func TestAbuse(t *testing.T) {
	if os.Getenv("PIBGW_ABUSE") != "1" {
		t.Skip("the hostile-user run takes minutes: PIBGW_ABUSE=1, or bash scripts/abuse.sh")
	}
	e2etest.Require(t, "ping", "setpriv", "ibv_rc_pingpong")
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("building the C libraries needs rdma-core's headers (libibverbs-dev)")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("the attackers run as user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	asNobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}

	libDir := t.TempDir()
	if out, err := exec.Command("bash", "../../scripts/build-libs.sh", libDir).CombinedOutput(); err != nil {
		t.Fatalf("build-libs.sh: %v\n%s", err, out)
	}
	// The attackers are this test binary, which user nobody must be able to run.
	binDir := t.TempDir()
	e2etest.OpenToAll(t, binDir)
	self := filepath.Join(binDir, "abuse.test")
	if exe, err := os.Executable(); err != nil {
		t.Fatal(err)
	} else if b, err := os.ReadFile(exe); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(self, b, 0o755); err != nil {
		t.Fatal(err)
	}

	nsA, nsB := e2etest.NetNS("aba"), e2etest.NetNS("abb")
	ibsimBase := fmt.Sprintf("pibgwabuse-%d", os.Getpid())
	body := e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24") +
		e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24") +
		fmt.Sprintf("\n[ibsim]\nsocket_name = %q\n", ibsimBase)
	d := e2etest.StartDaemon(t, "", body, nsA, nsB)
	e2etest.OpenToAll(t, filepath.Dir(d.Sock))
	attachSock := filepath.Join(filepath.Dir(d.Sock), "attach.sock")
	pid := d.Cmd.Process.Pid
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Fatalf("ping before the attacks:\n%s", out)
	}
	idle := rss(t, pid)
	began := time.Now()

	// The operator's capture, its reader asleep: the pipe is never read.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	capture := exec.Command(d.Bin, "capture", "-w", "-", "--control", d.Sock)
	capture.Stdout = pw
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() { capture.Process.Kill(); capture.Wait() })

	nobodyRun := func(mode string, args ...string) *exec.Cmd {
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), helperEnv+"="+mode)
		cmd.SysProcAttr = asNobody
		cmd.Dir = "/"
		return cmd
	}
	// The honest user's ping -f, from ib0 to ib1 for a minute, all through the attacks.
	var pingOut e2etest.SyncBuffer
	pinger := exec.Command("ip", "netns", "exec", nsA, "ping", "-f", "-w", "60", "10.10.0.2")
	pinger.Stdout, pinger.Stderr = &pingOut, &pingOut
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	pinged := make(chan error, 1)
	go func() { pinged <- pinger.Wait() }()
	t.Cleanup(func() { pinger.Process.Kill() })

	// One user holds at most daemon.attach_max_per_user connections, so the attackers
	// that need a session attach before the flood takes the rest: the QPN hoarder and the
	// service-ID squatter (which then go on), and the broadcast joiner, whose 20 join-and-
	// exits are over in seconds.
	qpns := start(t, "qpns", nobodyRun("qpns", attachSock, "30000"))
	sid := start(t, "sid", nobodyRun("sid", attachSock))
	qpns.wait(t, time.Minute, "attached")
	sid.wait(t, time.Minute, "attached")
	bcast := start(t, "bcast", nobodyRun("bcast", attachSock, "10.10.0.2", "20"))
	attackers := []*attacker{qpns, sid, bcast}
	t.Logf("bcast: %s", bcast.wait(t, 2*time.Minute, "done"))
	// 20,000 connections from four processes (a process's descriptors are bounded too),
	// the ibsim server's starvers, and the IPv6 flood from ib0's namespace.
	for k := range 4 {
		attackers = append(attackers, start(t, fmt.Sprintf("conns%d", k), nobodyRun("conns", attachSock, "5000")))
	}
	attackers = append(attackers, start(t, "ibsim", nobodyRun("ibsim", ibsimBase, "pib_1")))
	flood := exec.Command("ip", "netns", "exec", nsA, "setpriv", "--reuid", nobody.Uid, "--regid", nobody.Gid,
		"--clear-groups", self, "ib0", "20000")
	flood.Env = append(os.Environ(), helperEnv+"=v6flood")
	attackers = append(attackers, start(t, "v6flood", flood))

	// Meanwhile, the honest user's pingpong (root: another user than the attackers').
	pexec := func(args ...string) *exec.Cmd {
		cmd := exec.Command(d.Bin, append([]string{"exec", "--control", d.Sock, "--"}, args...)...)
		cmd.Env = append(os.Environ(), "PIBGW_LIBDIR="+libDir)
		return cmd
	}
	port := strconv.Itoa(20000 + os.Getpid()%10000)
	var srvOut, cliOut e2etest.SyncBuffer
	srv := pexec("ibv_rc_pingpong", "-d", "pib_1", "-g", "0", "-p", port, "-n", "2000")
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill() })
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	var cliErr error
	for try := 0; try < 50; try++ { // until the server listens
		time.Sleep(200 * time.Millisecond)
		cliOut = e2etest.SyncBuffer{}
		cli := pexec("ibv_rc_pingpong", "-d", "pib_0", "-g", "0", "-p", port, "-n", "2000", "127.0.0.1")
		cli.Stdout, cli.Stderr = &cliOut, &cliOut
		if cliErr = cli.Run(); cliErr == nil || !strings.Contains(cliOut.String(), "Couldn't connect") {
			break
		}
	}
	if cliErr != nil || !strings.Contains(cliOut.String(), "2000 iters") {
		t.Errorf("honest ibv_rc_pingpong beside the attacks: %v\n%s\nserver:\n%s", cliErr, cliOut.String(), srvOut.String())
	} else {
		t.Logf("honest ibv_rc_pingpong: %s", strings.TrimSpace(lastLine(cliOut.String())))
	}
	select {
	case err := <-srvDone:
		if err != nil {
			t.Errorf("ibv_rc_pingpong server: %v\n%s", err, srvOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Errorf("ibv_rc_pingpong server still running 60 s after its client ended\n%s", srvOut.String())
	}

	// Every attack in place (measured: the slowest, 30,000 QPN requests, about 10 s).
	lines := map[string]string{}
	for _, a := range attackers {
		if a == bcast {
			continue
		}
		lines[a.name] = a.wait(t, 5*time.Minute, "ready", "done")
		t.Logf("%s: %s", a.name, lines[a.name])
	}
	if !strings.HasPrefix(lines["sid"], "ready 0 listens") {
		t.Errorf("nobody listens on the daemon's service IDs: %s", lines["sid"])
	}
	if n, _ := strconv.Atoi(strings.Fields(lines["qpns"] + " x x")[1]); n > 16384 {
		t.Errorf("one process holds %d QP numbers, past daemon.attach_max_qps (16384)", n)
	}
	t.Logf("attacks in place after %v", time.Since(began).Round(time.Millisecond))
	if err := <-pinged; err != nil {
		t.Errorf("ping -f: %v\n%s", err, lastLines(pingOut.String(), 3))
	}
	if sent, loss, ok := pingLoss(pingOut.String()); !ok {
		t.Errorf("ping -f printed no summary:\n%s", lastLines(pingOut.String(), 5))
	} else if t.Logf("ping -f beside the attacks: %d sent, %.2f %% lost", sent, loss); loss >= 1 {
		t.Errorf("ping -f lost %.2f %% (want < 1 %%)\n%s", loss, lastLines(pingOut.String(), 3))
	}

	// With every attacker still holding what it took: ARP from ib0 reaches ib1 (the
	// broadcast group is the daemon's still), a fresh process attaches, the daemon is
	// alive and small.
	exec.Command("ip", "netns", "exec", nsA, "ip", "neigh", "flush", "dev", "ib0").Run()
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Errorf("ping (a fresh ARP) with the attackers holding on:\n%s", out)
	}
	if out, err := pexec("ibv_devinfo", "-l").CombinedOutput(); err != nil || !strings.Contains(string(out), "pib_0") {
		t.Errorf("a fresh attach with the attackers holding on: %v\n%s", err, out)
	}
	var st control.Status
	if err := control.NewClient(d.Sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &st); err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.AttachConns == nil || st.Multicast == nil {
		t.Fatalf("status without attach_conns or multicast: %+v", st)
	}
	t.Logf("status: attach %+v, multicast %+v", *st.AttachConns, *st.Multicast)
	if st.AttachConns.RefusedUser == 0 {
		t.Errorf("no connection refused for its user's limit after 20,000 from nobody: %+v", *st.AttachConns)
	}
	held := rss(t, pid)

	// The attackers go; the daemon takes everything back and still answers.
	for _, a := range attackers {
		a.cmd.Process.Kill()
	}
	capture.Process.Signal(syscall.SIGINT)
	for _, a := range attackers {
		select {
		case err := <-a.exit:
			a.exit <- err
		case <-time.After(30 * time.Second):
			t.Errorf("attacker %s still running 30 s after SIGKILL", a.name)
		}
	}
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Errorf("ping after the attackers went:\n%s", out)
	}
	if out, err := pexec("ibv_devinfo", "-l").CombinedOutput(); err != nil {
		t.Errorf("attach after the attackers went: %v\n%s", err, out)
	}
	after := rss(t, pid)
	t.Logf("daemon RSS: idle %d MB, attackers holding on %d MB, after they went %d MB; %d log lines",
		idle, held, after, strings.Count(d.Logs(), "\n"))
	if held >= 200 || after >= 200 {
		t.Errorf("daemon RSS %d MB with the attackers, %d MB after: want below 200 MB", held, after)
	}
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB})
}

func lastLine(s string) string { return lastLines(s, 1) }

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
