package mgmt

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EUmadLibrary: pibgw's own libibumad.so.3 (scripts/build-libs.sh, umad/) under
// `pibgw exec --umad`. infiniband-diags see the daemon's HCAs by their verbs names and
// whole SA tables — saquery's NodeRecords of all three nodes and PathRecords between all
// three LIDs, which libumad2sim cut to the first MAD (one record) — and perftest's -g,
// which joins its multicast group through libibumad under the verbs device's name,
// runs (libumad2sim: "failed to open UMAD port").
func TestE2EUmadLibrary(t *testing.T) {
	e2etest.Require(t, "gcc", "saquery", "ibstat")
	libDir := e2etest.UmadLibs(t)
	sock := fmt.Sprintf("pibgwe2e-umad-%d", os.Getpid())
	nsA, nsB := e2etest.NetNS("ua"), e2etest.NetNS("ub")
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0") // a free port for ibsim's UDP mode
	if err != nil {
		t.Fatal(err)
	}
	udpPort := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	d := e2etest.StartDaemon(t, "", fmt.Sprintf("[fabric]\nhca_count = 2\n\n[ibsim]\nenable = true\nsocket_name = %q\nudp = \"127.0.0.1:%d\"\n", sock, udpPort)+
		e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.31.0.1/24")+e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.31.0.2/24"), nsA, nsB)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.MustPibgw("stat", "pib_1"), "State: Active") {
		if time.Now().After(deadline) {
			t.Fatalf("pib_1 not Active under the built-in SM:\n%s", d.MustPibgw("stat"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	u := &umadRunner{t: t, d: d, libDir: libDir, dir: "/"} // libumad2sim would write ./sys-PID; nothing is written
	run, out := u.cmd, u.out

	// ibstat lists both HCAs as the verbs do, each Active at its LID.
	st := out("--", "ibstat")
	for _, dev := range []string{"pib_0", "pib_1"} {
		want := e2etest.DiagField(d.MustPibgw("stat", dev), "Base lid")
		if !strings.Contains(st, "CA '"+dev+"'") || !strings.Contains(st, "Base lid: "+want) {
			t.Errorf("ibstat: want CA '%s' with base lid %s\n%s", dev, want, st)
		}
	}
	if n := strings.Count(st, "State: Active"); n != 2 {
		t.Errorf("ibstat: %d Active ports, want 2\n%s", n, st)
	}

	// Whole tables through RMPP: three NodeRecords (two HCAs, the switch), nine
	// PathRecords (every LID to every LID).
	if nr := out("--", "saquery"); strings.Count(nr, "NodeRecord dump") != 3 ||
		!strings.Contains(nr, "pibgw HCA-1") || !strings.Contains(nr, "pibgw HCA-2") {
		t.Errorf("saquery: want the NodeRecords of the three nodes\n%s", nr)
	}
	if pr := out("--", "saquery", "PR"); strings.Count(pr, "PathRecord dump") != 9 {
		t.Errorf("saquery PR: %d PathRecords, want 9\n%s", strings.Count(pr, "PathRecord dump"), pr)
	}
	// The semantics programs rely on, call by call (testdata/umad_check.c).
	check := filepath.Join(t.TempDir(), "umad_check")
	if b, err := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-o", check, "testdata/umad_check.c", "-libumad").CombinedOutput(); err != nil {
		t.Fatalf("building testdata/umad_check.c: %v\n%s", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b, err := run(ctx, "--", check).CombinedOutput()
	cancel()
	for _, c := range []string{"cas", "get_ca", "open_unknown_ENODEV", "get_fd", "register", "register_twice_EINVAL",
		"poll_ETIMEDOUT", "recv_ETIMEDOUT", "recv_nonblocking_EWOULDBLOCK", "unroutable_ETIMEDOUT", "sa_classportinfo",
		"rmpp_ENOSPC", "rmpp_table", "unregister", "close"} {
		if !strings.Contains(string(b), "ok "+c+"\n") {
			t.Errorf("umad_check %s did not pass (%v):\n%s", c, err, b)
		}
	}

	// ibsim's UDP mode (IBSIM_SERVER_NAME, IBSIM_SERVER_PORT), the library loaded by hand.
	udpCtx, udpCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer udpCancel()
	uc := exec.CommandContext(udpCtx, "saquery")
	uc.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(libDir, "umad"), "PIBGW_UMAD_CAS=pib_0,pib_1",
		"IBSIM_SERVER_NAME=127.0.0.1", fmt.Sprintf("IBSIM_SERVER_PORT=%d", udpPort))
	if b, err := uc.CombinedOutput(); err != nil || strings.Count(string(b), "NodeRecord dump") != 3 {
		t.Errorf("saquery over ibsim's UDP mode: %v; want three NodeRecords\n%s", err, b)
	}
	// --node puts an HCA first: ibaddr there prints its LID.
	lid1 := e2etest.DiagField(d.MustPibgw("stat", "pib_1"), "Base lid")
	if a := out("--node", "pib_1", "--", "ibaddr"); !strings.Contains(a, "LID start "+e2etest.HexLID(lid1)) {
		t.Errorf("ibaddr with --node pib_1: want pib_1's LID %s\n%s", lid1, a)
	}

	umadPerftestMulticast(t, run)
}

// umadPerftestMulticast runs perftest's UD multicast (-g), which joins its group through
// libibumad at the verbs device's name, between pib_1 and pib_0.
func umadPerftestMulticast(t *testing.T, run func(ctx context.Context, args ...string) *exec.Cmd) {
	if _, err := exec.LookPath("ib_send_bw"); err != nil {
		t.Log("perftest not installed: ib_send_bw -g not run")
		return
	}
	port := fmt.Sprint(20000 + os.Getpid()%10000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := run(ctx, "--", "ib_send_bw", "-c", "UD", "-g", "-n", "200", "-d", "pib_1", "-p", port)
	var srvOut e2etest.SyncBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	var cl []byte
	var err error
	for try := 0; try < 50; try++ { // the server's TCP port comes up after its setup
		time.Sleep(200 * time.Millisecond)
		cl, err = run(ctx, "--", "ib_send_bw", "-c", "UD", "-g", "-n", "200", "-d", "pib_0", "-p", port, "localhost").CombinedOutput()
		if err == nil || !strings.Contains(string(cl), "Couldn't connect") {
			break
		}
	}
	serr := srv.Wait()
	if err != nil || serr != nil || !strings.Contains(string(cl), "BW average") {
		t.Errorf("ib_send_bw -c UD -g: client %v, server %v\nclient:\n%s\nserver:\n%s", err, serr, cl, srvOut.String())
	}
}

// TestE2EUmadLibraryOpenSM: the real opensm through pibgw's libibumad.so.3 is the
// subnet manager (sm.mode = "external"): its SM agent makes its port the SM's, it brings
// both ports up, and its SA's answers — GetTable responses sent in RMPP segments by the
// library under opensm, reassembled by the one under saquery — are whole tables.
func TestE2EUmadLibraryOpenSM(t *testing.T) {
	e2etest.Require(t, "gcc", "opensm", "saquery", "sminfo")
	libDir := e2etest.UmadLibs(t)
	sock := fmt.Sprintf("pibgwe2e-umadsm-%d", os.Getpid())
	nsA, nsB := e2etest.NetNS("usa"), e2etest.NetNS("usb")
	d := e2etest.StartDaemon(t, "", fmt.Sprintf("[fabric]\nhca_count = 2\n\n[sm]\nmode = \"external\"\n\n[ibsim]\nenable = true\nsocket_name = %q\n", sock)+
		e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.32.0.1/24")+e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.32.0.2/24"), nsA, nsB)
	dir := t.TempDir()
	u := &umadRunner{t: t, d: d, libDir: libDir, dir: dir, env: []string{"OSM_CACHE_DIR=" + dir, "OSM_TMP_DIR=" + dir}}
	run, out := u.cmd, u.out
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	osm := run(ctx, "--", "opensm", "-f", filepath.Join(dir, "opensm.log"))
	var osmOut e2etest.SyncBuffer
	osm.Stdout, osm.Stderr = &osmOut, &osmOut
	if err := osm.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		osm.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { osm.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			osm.Process.Kill()
			<-done
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.MustPibgw("stat", "pib_1"), "State: Active") {
		if time.Now().After(deadline) {
			t.Fatalf("pib_1 not Active under opensm:\n%s\nopensm:\n%s", d.MustPibgw("stat"), osmOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	u.context = func() string { return "opensm:\n" + osmOut.String() }
	lid0 := e2etest.DiagField(d.MustPibgw("stat", "pib_0"), "Base lid")
	if sm := out("--", "sminfo"); !strings.Contains(sm, "sm lid "+lid0+" ") || !strings.Contains(sm, "SMINFO_MASTER") {
		t.Errorf("sminfo: want opensm MASTER at pib_0's LID %s\n%s", lid0, sm)
	}
	if nr := out("--", "saquery"); strings.Count(nr, "NodeRecord dump") != 3 {
		t.Errorf("saquery (opensm's SA): want three NodeRecords\n%s", nr)
	}
	if pr := out("--", "saquery", "PR"); strings.Count(pr, "PathRecord dump") != 9 {
		t.Errorf("saquery PR (opensm's SA): %d PathRecords, want 9\n%s", strings.Count(pr, "PathRecord dump"), pr)
	}
	if s := out("--", "saquery", "-s"); strings.Count(s, "PortInfoRecord dump") != 1 || e2etest.DiagField(s, "base_lid") != lid0 {
		t.Errorf("saquery -s (opensm's SA): want the one SM port, LID %s\n%s", lid0, s)
	}
}

// umadRunner runs programs with `pibgw exec --umad` against a test daemon, with the
// libraries of libDir, in dir, with env added.
type umadRunner struct {
	t           *testing.T
	d           *e2etest.Daemon
	libDir, dir string
	env         []string
	context     func() string // more to show when a program fails
}

func (u *umadRunner) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, u.d.Bin, append([]string{"exec", "--control", u.d.Sock, "--umad"}, args...)...)
	c.Env = append(append(os.Environ(), "PIBGW_LIBDIR="+u.libDir), u.env...)
	c.Dir = u.dir
	return c
}

// out runs args (pibgw exec --umad's) and returns the output; it fails the test when
// the program fails.
func (u *umadRunner) out(args ...string) string {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := u.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		more := ""
		if u.context != nil {
			more = u.context()
		}
		u.t.Fatalf("pibgw exec --umad %s: %v\n%s\n%s", strings.Join(args, " "), err, b, more)
	}
	return string(b)
}
