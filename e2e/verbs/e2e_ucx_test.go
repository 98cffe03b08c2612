package verbs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EUCX runs UCX (Debian's ucx-utils, unmodified) on the daemon's HCAs through
// `pibgw exec`, as root: with the nodes `pibgw devnodes` makes, ucx_info lists pib_0 and
// pib_1 with the rc_verbs and ud_verbs transports, and ucx_perftest runs between two
// processes — UCT active messages over rc_verbs (whose endpoint flush is a zero-length
// RDMA WRITE to R_Key 0, IBA C9-88: it ended in REM_ACCESS_ERR before), UCT RDMA WRITEs
// of 64 KiB, and over rc_verbs (ud_verbs for the wire-up) UCP tagged messages of 1 MiB,
// synchronous sends and atomic adds.
func TestE2EUCX(t *testing.T) {
	d, libDir := startUCXDaemon(t, "ucx", "ucx_perftest")
	pexec := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.Command(d.Bin, append([]string{"exec", "--control", d.Sock, "--"}, args...)...)
		cmd.Env = append(append(os.Environ(), "PIBGW_LIBDIR="+libDir), env...)
		cmd.Dir = t.TempDir()
		return cmd
	}

	out, err := pexec(nil, "ucx_info", "-d").CombinedOutput()
	if err != nil {
		t.Fatalf("ucx_info -d: %v\n%s", err, out)
	}
	for _, dev := range []string{"pib_0:1", "pib_1:1"} {
		for _, tl := range []string{"rc_verbs", "ud_verbs"} {
			if !hasTransport(string(out), tl, dev) {
				t.Errorf("ucx_info -d lists no %s on %s:\n%s", tl, dev, out)
			}
		}
	}

	port := 19400 + os.Getpid()%500
	perf := func(env []string, args ...string) string {
		t.Helper()
		port++
		var sout, cout bytes.Buffer
		s := pexec(append(env, "UCX_NET_DEVICES=pib_1:1"), "ucx_perftest", "-p", strconv.Itoa(port))
		s.Stdout, s.Stderr = &sout, &sout
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer s.Process.Kill()
		var cerr error
		for try := 0; try < 50; try++ { // until the server listens
			time.Sleep(100 * time.Millisecond)
			cout.Reset()
			c := pexec(append(env, "UCX_NET_DEVICES=pib_0:1"), append([]string{"ucx_perftest", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...)
			c.Stdout, c.Stderr = &cout, &cout
			c.WaitDelay = time.Second
			done := make(chan error, 1)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- c.Wait() }()
			select {
			case cerr = <-done:
			case <-time.After(60 * time.Second):
				c.Process.Kill()
				cerr = <-done
			}
			if cerr == nil || !strings.Contains(cout.String(), "Connection refused") {
				break
			}
		}
		s.Wait()
		if cerr != nil || !strings.Contains(cout.String(), "Final:") {
			t.Fatalf("ucx_perftest %v: %v\nclient:\n%s\nserver:\n%s", args, cerr, cout.String(), sout.String())
		}
		return cout.String()
	}
	perf(nil, "-t", "am_lat", "-x", "rc_verbs", "-d", "pib_0:1", "-n", "2000")
	perf(nil, "-t", "put_bw", "-x", "rc_verbs", "-d", "pib_0:1", "-s", "65536", "-D", "zcopy", "-n", "500")
	perf(nil, "-t", "am_lat", "-x", "ud_verbs", "-d", "pib_0:1", "-n", "2000")
	rc := []string{"UCX_TLS=rc_verbs,ud_verbs,self"}
	perf(rc, "-t", "tag_bw", "-s", "1048576", "-n", "200")
	// Synchronous sends and atomics (emulated by UCP with active messages) mix short
	// messages, sent inline, with messages sent from UCX's buffers on one QP: a gathered
	// message used to go out with the bytes of an inline one before it.
	perf(rc, "-t", "tag_sync_lat", "-n", "2000")
	perf(rc, "-t", "ucp_add", "-n", "2000")
}

// hasTransport reports whether ucx_info -d's output has transport tl on device dev
// ("#      Transport: rc_verbs" followed by "#         Device: pib_0:1").
func hasTransport(out, tl, dev string) bool {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.TrimSpace(strings.TrimPrefix(l, "#")) == "Transport: "+tl && i+1 < len(lines) &&
			strings.TrimSpace(strings.TrimPrefix(lines[i+1], "#")) == "Device: "+dev {
			return true
		}
	}
	return false
}

// TestE2EMPI runs an Open MPI program (Debian's openmpi-bin, its UCX point-to-point
// layer) as two ranks on the daemon's HCAs through `pibgw exec`, as root: messages of 8
// bytes to 1 MiB go back and forth over UCX's rc_verbs, every byte checked, and an
// allreduce sums the ranks.
func TestE2EMPI(t *testing.T) {
	e2etest.Require(t, "gcc", "mpicc", "mpirun")
	if err := mpiHeader("mpicc"); err != nil {
		t.Skipf("%v: install Open MPI's headers (Debian's libopenmpi-dev)", err)
	}
	d, libDir := startUCXDaemon(t, "mpi", "mpicc", "mpirun")
	prog := filepath.Join(t.TempDir(), "mpi_pingpong")
	if out, err := exec.Command("mpicc", "-O2", "-o", prog, "testdata/mpi_pingpong.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.Bin, "exec", "--control", d.Sock, "--",
		"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "pml", "ucx", "--mca", "btl", "^openib",
		"-x", "UCX_TLS=rc_verbs,ud_verbs,self", "-x", "UCX_NET_DEVICES=pib_0:1", "-x", "LD_LIBRARY_PATH", "-x", "PIBGW_ATTACH",
		prog)
	cmd.Env = append(os.Environ(), "PIBGW_LIBDIR="+libDir)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for _, n := range []string{"8", "4096", "65536", "1048576"} {
		if !strings.Contains(string(out), "size "+n+": ") {
			t.Errorf("no result for %s bytes:\n%s", n, out)
		}
	}
	if strings.Count(string(out), ", 0 bad bytes") != 4 || !strings.Contains(string(out), "allreduce 3 of 2 ranks") {
		t.Errorf("mpi_pingpong:\n%s", out)
	}
	t.Logf("%s", out)
}

// mpiHeader checks that the MPI compiler wrapper finds mpi.h: openmpi-bin gives mpicc
// without it (libopenmpi-dev has it, under /usr/lib/x86_64-linux-gnu/openmpi/include as
// `mpicc --showme:compile` says).
func mpiHeader(mpicc string) error {
	cmd := exec.Command(mpicc, "-E", "-x", "c", "-o", "/dev/null", "-")
	cmd.Stdin = strings.NewReader("#include <mpi.h>\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%s finds no mpi.h (%v: %s)", mpicc, err, msg)
	}
	return nil
}

// TestMPIHeaderCheck: TestE2EMPI skips, saying so, where mpicc is there without mpi.h
// (openmpi-bin without libopenmpi-dev: it failed with "mpi.h: No such file or
// directory"), and finds the header where it is.
func TestMPIHeaderCheck(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc")
	}
	dir := t.TempDir()
	inc := filepath.Join(dir, "include")
	if err := os.Mkdir(inc, 0o755); err != nil {
		t.Fatal(err)
	}
	// mpicc as Open MPI's wrapper: gcc with the include directory of its headers.
	fake := func(name, incDir string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexec gcc -I"+incDir+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	without := fake("mpicc-without", inc)
	if err := mpiHeader(without); err == nil || !strings.Contains(err.Error(), "mpi.h") {
		t.Errorf("mpicc without mpi.h: %v; want an error naming mpi.h", err)
	}
	if err := os.WriteFile(filepath.Join(inc, "mpi.h"), []byte("int MPI_Init(int *, char ***);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mpiHeader(without); err != nil {
		t.Errorf("mpicc with mpi.h: %v", err)
	}
}

// startUCXDaemon skips unless UCX (and tools) can run, builds pibgw's libraries into a
// temporary directory and starts `pibgw up` with one interface in namespace
// pibgwe2e-PID-name, with /dev/infiniband/uverbsN for UCX (made by `pibgw devnodes` and
// removed when the test ends, unless they were there).
func startUCXDaemon(t *testing.T, name string, tools ...string) (*e2etest.Daemon, string) {
	t.Helper()
	e2etest.Require(t, append([]string{"gcc", "ucx_info"}, tools...)...)
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("rdma-core's headers are missing (libibverbs-dev)")
	}
	if _, err := os.Stat(e2etest.KernelVerbsDir); err == nil {
		t.Skipf("the kernel has uverbs devices (%s): UCX would see those", e2etest.KernelVerbsDir)
	}
	libDir := t.TempDir()
	if out, err := exec.Command("bash", "../../scripts/build-libs.sh", libDir).CombinedOutput(); err != nil {
		t.Fatalf("build-libs.sh: %v\n%s", err, out)
	}
	ns := e2etest.NetNS(name)
	d := e2etest.StartDaemon(t, "", e2etest.InterfaceTOML("ib0", "pib_0", ns, "10.10.0.1/24"), ns)
	if _, err := os.Stat("/dev/infiniband/uverbs1"); err != nil {
		d.MustPibgw("devnodes")
		t.Cleanup(func() { d.Pibgw("devnodes", "--remove") })
	}
	return d, libDir
}
