package verbs

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/internal/e2etest"
	"github.com/pibgw/pibgw/internal/proctest"
)

// TestE2EIbverbs runs unmodified rdma-core and perftest programs through `pibgw exec`
// against `pibgw up`, as root: ibv_devinfo prints what `pibgw devinfo` prints;
// ibv_rc_pingpong, ib_write_bw and ib_send_lat run server (root) and client (user
// nobody) as two processes; none is left attached afterwards.
func TestE2EIbverbs(t *testing.T) {
	e2etest.Require(t, "gcc", "ibv_devinfo", "ibv_rc_pingpong", "ib_write_bw", "ib_send_lat")
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("rdma-core's headers are missing (libibverbs-dev)")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("the test runs clients as user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)

	libDir := t.TempDir()
	e2etest.OpenToAll(t, libDir)
	if out, err := exec.Command("bash", "../../scripts/build-libs.sh", libDir).CombinedOutput(); err != nil {
		t.Fatalf("build-libs.sh: %v\n%s", err, out)
	}
	nsA, nsB := e2etest.NetNS("iva"), e2etest.NetNS("ivb")
	body := e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24") + e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24")
	d := e2etest.StartDaemon(t, "", body, nsA, nsB)
	e2etest.OpenToAll(t, filepath.Dir(d.Bin))
	e2etest.OpenToAll(t, filepath.Dir(d.Sock))

	pexec := func(asNobody bool, args ...string) *exec.Cmd {
		cmd := exec.Command(d.Bin, append([]string{"exec", "--control", d.Sock, "--"}, args...)...)
		cmd.Env = append(os.Environ(), "PIBGW_LIBDIR="+libDir)
		cmd.Dir = "/"
		if asNobody {
			// The control socket is root's: no sysfs view (and no line saying so).
			cmd.Args = slices.Insert(cmd.Args, 2, "--no-sysfs")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
		}
		return cmd
	}

	// ibv_devinfo against the daemon: tab for tab what pibgw devinfo prints.
	want := d.MustPibgw("devinfo")
	for _, nob := range []bool{false, true} {
		out, err := pexec(nob, "ibv_devinfo").CombinedOutput()
		if err != nil {
			t.Fatalf("pibgw exec -- ibv_devinfo (nobody %v): %v\n%s", nob, err, out)
		}
		w := want
		if nob { // without the view ibv_devinfo reads no board_id
			w = regexp.MustCompile(`\tboard_id:.*\n`).ReplaceAllString(w, "")
		}
		if string(out) != w {
			t.Errorf("ibv_devinfo (nobody %v):\n%s\npibgw devinfo:\n%s", nob, out, w)
		}
	}

	// pyverbs (Debian's python3-pyverbs) through pibgw exec, forking with multiprocessing
	// after verbs and rdma_cm: the child's objects talk to the parent's (cabi/testdata).
	if _, err := os.Stat("/usr/lib/python3/dist-packages/pyverbs/__init__.py"); err != nil {
		t.Logf("not running pyverbs_fork.py: pyverbs is not installed (Debian: python3-pyverbs)")
	} else {
		script, _ := filepath.Abs("../../cabi/testdata/pyverbs_fork.py")
		out, err := pexec(false, "/usr/bin/python3", script).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok rdma_cm_parent_child\n") {
			t.Errorf("pibgw exec -- python3 pyverbs_fork.py: %v\n%s", err, out)
		}
	}

	// run starts server, and client headStart later; pair runs them.
	var run func(server, client []string, headStart time.Duration) string
	pair := func(server, client []string) string {
		t.Helper()
		return run(server, client, 500*time.Millisecond)
	}
	run = func(server, client []string, headStart time.Duration) string {
		t.Helper()
		// Standard error apart, appended after standard output: the library's warnings (a
		// pitfall check on rping's unacknowledged CQ event) must not split a line counted.
		var sout, serrBuf, cout, cerrBuf bytes.Buffer
		s := pexec(false, server...)
		s.Stdout, s.Stderr = &sout, &serrBuf
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(headStart)
		if headStart >= 3*time.Second {
			// Once more after a refusal: wait until the server listens — a TCP socket
			// (the pingpongs', perftest's exchange) or an rdma_cm listen at the daemon
			// (pibgw exec runs the program in its own process) — up to 10 s more.
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				var ss []attach.SessionInfo
				d.JSON(&ss, "ps")
				if x := e2etest.SessionOf(ss, s.Process.Pid); x != nil && x.Listens > 0 || proctest.TCPListening(s.Process.Pid) {
					break
				}
			}
		}
		c := pexec(true, client...)
		c.Stdout, c.Stderr = &cout, &cerrBuf
		done := make(chan error, 1)
		if err := c.Start(); err != nil { // here: the timeout below reads c.Process
			s.Process.Kill()
			s.Wait()
			t.Fatal(err)
		}
		go func() { done <- c.Wait() }()
		var cerr error
		select {
		case cerr = <-done:
		case <-time.After(90 * time.Second):
			c.Process.Kill()
			cerr = <-done
		}
		if cerr != nil {
			s.Process.Kill()
		}
		serr := s.Wait()
		if cerr != nil && headStart < 3*time.Second && notListening(cout.String()+cerrBuf.String()) {
			// The server was not listening within its head start on a loaded machine (as
			// on Linux, a connect before the listen is refused). Once more with a longer one.
			t.Logf("%s: the client was refused before the server listened; again once it listens", client[0])
			return run(server, client, 3*time.Second)
		}
		if cerr != nil || serr != nil {
			t.Fatalf("%v: server: %v, client (nobody): %v\nserver:\n%s\nclient:\n%s", server, serr, cerr, sout.String()+serrBuf.String(), cout.String()+cerrBuf.String())
		}
		return cout.String() + cerrBuf.String()
	}
	out := pair([]string{"ibv_rc_pingpong", "-d", "pib_1", "-p", "18631", "-g", "0"},
		[]string{"ibv_rc_pingpong", "-d", "pib_0", "-p", "18631", "-g", "0", "127.0.0.1"})
	if m := rcReportRE.FindStringSubmatch(out); m == nil || m[2] != "1000" {
		t.Errorf("ibv_rc_pingpong client: no report of 1000 iterations:\n%s", out)
	}
	// On-demand paging (-o), with each side's region prefetched (-P, ibv_advise_mr), and
	// completion timestamps (-t: ibv_cq_ex, the device clock in nanoseconds).
	out = pair([]string{"ibv_rc_pingpong", "-d", "pib_1", "-p", "18630", "-o", "-P", "-t", "-n", "200"},
		[]string{"ibv_rc_pingpong", "-d", "pib_0", "-p", "18630", "-o", "-P", "-t", "-n", "200", "127.0.0.1"})
	if m := rcReportRE.FindStringSubmatch(out); m == nil || m[2] != "200" {
		t.Errorf("ibv_rc_pingpong -o -P -t client: no report of 200 iterations:\n%s", out)
	}
	if m := tsReportRE.FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("ibv_rc_pingpong -t client: no receive completion clock cycles between completions:\n%s", out)
	}
	if _, err := exec.LookPath("ibv_xsrq_pingpong"); err == nil {
		// XRC (issue 18): the domain file the program creates goes with the test.
		if _, err := os.Stat("/tmp/xrc_domain"); err != nil {
			t.Cleanup(func() { os.Remove("/tmp/xrc_domain") })
		}
		out := pair([]string{"ibv_xsrq_pingpong", "-d", "pib_1", "-p", "18633", "-n", "200"},
			[]string{"ibv_xsrq_pingpong", "-d", "pib_0", "-p", "18633", "-n", "200", "127.0.0.1"})
		if !strings.Contains(out, "success") {
			t.Errorf("ibv_xsrq_pingpong client did not succeed:\n%s", out)
		}
	}
	for _, prog := range []string{"ib_write_bw", "ib_send_lat"} {
		out := pair([]string{prog, "-d", "pib_1", "-p", "18632", "-n", "500"},
			[]string{prog, "-d", "pib_0", "-p", "18632", "-n", "500", "127.0.0.1"})
		if !strings.Contains(out, " 500 ") {
			t.Errorf("%s client: no result for 500 iterations:\n%s", prog, out)
		}
	}
	// ib_write_lat: each side spins on its buffer, polling no CQ, until the other's RDMA
	// WRITE lands there. The library must take the write in while the program spins; it
	// used to leave its packets to the program's CQ polls for 200 µs after the last one,
	// and the typical latency was 540 µs (ib_send_lat's: 2 µs).
	// Over UC a write completes at once, so neither side polls while it waits: both
	// spin on their buffers, and the receive goroutine that takes a write in must not
	// yield its core to such a spinner for a time slice (1.5 ms typical before).
	// Spinning programs are at the mercy of a shared machine's scheduler: a run over
	// 300 µs is run again, and only three in a row fail (the defects above were slow in
	// every run). RC runs also landed at 440–530 µs now and then (3 of 16 CI runs on
	// 2026-11-27/28; 8 of 60 runs by hand): the receive goroutine's grace settled at its
	// longest while the program alternated CQ polls and spins on memory, until a write
	// waiting at the grace's end ended it (attach's takeSilent; 1 of 60 runs by hand).
	// Beside CPU-bound processes every spinning program waits for a processor (ib_write_lat
	// UC typical 298–560 µs beside two, by a correct library): the bound is then 30 times
	// ib_send_lat's typical latency, measured just before in the same conditions (on a
	// quiet machine 2 µs, so 300 µs stays the bound there).
	const tries = 3
	typical := func(out string) (float64, bool) {
		m := latReportRE.FindStringSubmatch(out)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		return v, err == nil
	}
	for i, qp := range []string{"RC", "UC"} {
		for try := 0; try < tries; try++ {
			port := strconv.Itoa(18635 + 10*i + try)
			bound := 300.0
			out = pair([]string{"ib_send_lat", "-d", "pib_1", "-p", port, "-n", "2000"},
				[]string{"ib_send_lat", "-d", "pib_0", "-p", port, "-n", "2000", "127.0.0.1"})
			if send, ok := typical(out); ok {
				bound = max(bound, 30*send)
			}
			out = pair([]string{"ib_write_lat", "-c", qp, "-d", "pib_1", "-p", port, "-n", "2000"},
				[]string{"ib_write_lat", "-c", qp, "-d", "pib_0", "-p", port, "-n", "2000", "127.0.0.1"})
			typ, ok := typical(out)
			if !ok {
				t.Errorf("ib_write_lat -c %s client: no result for 2000 iterations:\n%s", qp, out)
				break
			}
			if typ <= bound {
				t.Logf("ib_write_lat -c %s: typical %.2f µs (bound %.0f)", qp, typ, bound)
				break
			}
			if try < tries-1 {
				t.Logf("ib_write_lat -c %s: typical %.2f µs, over %.0f: once more", qp, typ, bound)
				continue
			}
			t.Errorf("ib_write_lat -c %s: typical latency %.2f µs %d times in a row, want < %.0f (the write waited):\n%s", qp, typ, tries, bound, out)
		}
	}
	// librdmacm's programs (issue 14's commands), server as root, client as nobody.
	if _, err := os.Stat(filepath.Join(libDir, "librdmacm.so.1")); err != nil {
		t.Logf("librdmacm.so.1 not built (no librdmacm-dev): rdma_cm programs not run")
	} else if _, err := exec.LookPath("rping"); err != nil {
		t.Logf("rdmacm-utils not installed: rdma_cm programs not run")
	} else {
		// 3,000 pings: beside two CPU-bound processes they go at about 90 a second, and
		// 10,000 outlasted the pair's 90 s.
		out := pair([]string{"rping", "-s", "-a", "10.10.0.2", "-v", "-C", "3000"},
			[]string{"rping", "-c", "-a", "10.10.0.2", "-v", "-C", "3000"})
		// The client's event thread writes to stderr between its buffered stdout.
		out = strings.ReplaceAll(out, "client DISCONNECT EVENT...\n", "")
		if n := strings.Count(out, "ping data: rdma-ping-"); n != 3000 {
			t.Errorf("rping client: %d pings, want 3000:\n%s", n, out[max(0, len(out)-500):])
		}
		for _, pr := range [][2][]string{
			{{"ucmatose", "-c", "16", "-C", "100"}, {"ucmatose", "-s", "10.10.0.2", "-c", "16", "-C", "100"}},
			{{"udaddy"}, {"udaddy", "-s", "10.10.0.2"}},
			{{"rdma_server"}, {"rdma_client", "-s", "10.10.0.2"}},
			// rdma_xclient posts 16 bytes inline from a QP made with max_inline_data 0:
			// the QP's inline capacity is its SGE space, as rxe's and mlx5's.
			{{"rdma_xserver"}, {"rdma_xclient", "-s", "10.10.0.2"}},
			// Multicast over rdma_cm: both resolve the group's address (no ARP for a
			// group), join, and the receiver exits 0 once it has the sender's 10 messages.
			{{"mckey", "-m", "239.1.1.1", "-b", "10.10.0.2"}, {"mckey", "-m", "239.1.1.1", "-s", "-b", "10.10.0.1", "-C", "10"}},
		} {
			out := pair(pr[0], pr[1])
			t.Logf("%s: %s", pr[1][0], strings.TrimSpace(out[max(0, len(out)-200):]))
		}
		// perftest with its connections made by rdma_cm (-R). Both sides disconnect
		// as they end, so DREQs can cross (and the daemon's DREQ for a server that
		// already exited can meet the client's disconnect); each side must still get
		// its DISCONNECTED and exit. ib_send_bw hung there 1 time in 3 to 10 before.
		// ib_atomic_lat's server exits as soon as its last atomic is answered, so the
		// client's DREQ reaches a gone process: the daemon answers it (it hung before).
		for i, prog := range []string{"ib_send_bw", "ib_write_bw", "ib_read_lat", "ib_send_bw", "ib_send_bw", "ib_atomic_lat"} {
			port := strconv.Itoa(18650 + i)
			out := pair([]string{prog, "-R", "-p", port, "-n", "1000"},
				[]string{prog, "-R", "-p", port, "-n", "1000", "10.10.0.2"})
			if !strings.Contains(out, "rdma_cm") || !regexp.MustCompile(`(?m)^\s*\d+\s+1000\s`).MatchString(out) {
				t.Errorf("%s -R client: no rdma_cm connection or no result for 1000 iterations:\n%s", prog, out)
			}
		}
	}
	e2etest.WaitPS(t, d, nil, "no attached process", func(ss []attach.SessionInfo) bool { return len(ss) == 0 })
}

// notListening says whether a client's output shows it came before its server listened:
// REJ reason 8 (invalid service ID) for an rdma_cm client, a refused TCP connection for
// the pingpong examples' and perftest's exchange of QP numbers ("Couldn't connect to
// HOST:PORT"; not "... to remote QP", a real failure).
func notListening(out string) bool {
	return strings.Contains(out, "RDMA_CM_EVENT_REJECTED; error: 8") || tcpRefusedRE.MatchString(out)
}

var tcpRefusedRE = regexp.MustCompile(`Couldn't connect to \S+:\d+`)
