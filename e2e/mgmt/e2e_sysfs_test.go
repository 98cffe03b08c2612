package mgmt

import (
	"bytes"
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

	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2ESysfsView: `pibgw exec` gives its command the daemon's HCAs in
// /sys/class/infiniband*, as the kernel would: ibstatus lists both ports ACTIVE, ibstat
// shows a CA type (and the same as under --umad, whose libibumad asks the daemon),
// ibv_devinfo a board_id, and device/net/ of pib_0 holds its IPoIB interface with the
// port's dev_port and dev_id; a port taken down shows DOWN to a command already running;
// the command keeps exec's PID; a user who can reach the control socket gets the view
// in a user namespace, one who cannot one line saying so, and the command runs; the
// host's mounts and /sys/class are as before.
func TestE2ESysfsView(t *testing.T) {
	e2etest.Require(t, "gcc", "ibstatus", "ibstat", "ibv_devinfo", "sh")
	libDir := os.Getenv("PIBGW_E2E_LIBDIR") // libraries built already (scripts/build-libs.sh)
	if libDir == "" {
		libDir = e2etest.UmadLibs(t)
		e2etest.OpenToAll(t, libDir)
	}
	mountsBefore := hostMounts(t)
	classBefore := sysClass(t)

	nsA, nsB := e2etest.NetNS("sfa"), e2etest.NetNS("sfb")
	ifA, ifB := fmt.Sprintf("sv%da", os.Getpid()), fmt.Sprintf("sv%db", os.Getpid())
	simSock := fmt.Sprintf("pibgwe2e-sysfs-%d", os.Getpid())
	d := e2etest.StartDaemon(t, "", fmt.Sprintf("[ibsim]\nenable = true\nsocket_name = %q\n", simSock)+
		e2etest.InterfaceTOML(ifA, "pib_0", nsA, "10.32.0.1/24")+e2etest.InterfaceTOML(ifB, "pib_1", nsB, "10.32.0.2/24"), nsA, nsB)
	e2etest.OpenToAll(t, filepath.Dir(d.Bin))
	e2etest.OpenToAll(t, filepath.Dir(d.Sock))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.MustPibgw("stat", "pib_1"), "State: Active") {
		if time.Now().After(deadline) {
			t.Fatalf("pib_1 not Active under the built-in SM:\n%s", d.MustPibgw("stat"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	pexec := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, d.Bin, append([]string{"exec", "--control", d.Sock}, args...)...)
		cmd.Env = append(os.Environ(), "PIBGW_LIBDIR="+libDir)
		cmd.Dir = "/"
		return cmd
	}
	out := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := pexec(ctx, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("pibgw exec %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
		}
		if stderr.Len() > 0 {
			t.Errorf("pibgw exec %v: stderr %q", args, stderr.String())
		}
		return stdout.String()
	}

	// ibstatus (a shell script over /sys/class/infiniband): both ports ACTIVE, LinkUp.
	st := out("--", "ibstatus")
	for _, dev := range []string{"pib_0", "pib_1"} {
		if !strings.Contains(st, "Infiniband device '"+dev+"' port 1 status:") {
			t.Errorf("ibstatus: no %s port 1\n%s", dev, st)
		}
	}
	if n := strings.Count(st, "state:\t\t 4: ACTIVE\n"); n != 2 {
		t.Errorf("ibstatus: %d ports 4: ACTIVE, want 2\n%s", n, st)
	}
	if n := strings.Count(st, "phys state:\t 5: LinkUp\n"); n != 2 {
		t.Errorf("ibstatus: %d ports 5: LinkUp, want 2\n%s", n, st)
	}
	if lid := e2etest.DiagField(d.MustPibgw("stat", "pib_1"), "Base lid"); !strings.Contains(st, "base lid:\t "+e2etest.HexLID(lid)+"\n") {
		t.Errorf("ibstatus: want pib_1's base lid %s\n%s", e2etest.HexLID(lid), st)
	}

	// ibstat (libibumad's umad_get_ca reads sysfs): a CA type; --umad (pibgw's
	// libibumad asks the daemon) prints the same.
	ibstat := out("--", "ibstat")
	if m := regexp.MustCompile(`(?m)^\tCA type: (\S+)$`).FindAllStringSubmatch(ibstat, -1); len(m) != 2 || m[0][1] != "PIB1" {
		t.Errorf("ibstat: want CA type PIB1 for both CAs\n%s", ibstat)
	}
	if n := strings.Count(ibstat, "State: Active"); n != 2 {
		t.Errorf("ibstat: %d Active ports, want 2\n%s", n, ibstat)
	}
	if umad := out("--umad", "--", "ibstat"); umad != ibstat {
		t.Errorf("ibstat under --umad differs from ibstat reading sysfs:\n%s\nsysfs:\n%s", umad, ibstat)
	}

	// ibv_devinfo reads board_id from the device's sysfs directory.
	if dv := out("--", "ibv_devinfo", "-v"); strings.Count(dv, "\tboard_id:\t\t\tPIB_0000000001\n") != 2 {
		t.Errorf("ibv_devinfo -v: want a board_id for each HCA\n%s", dv)
	}

	// The device's IPoIB interface, as a harness maps a device to its netdev: listed in the
	// interface's own namespace (ip netns exec remounts /sys there), and, as the kernel's
	// sysfs lists only the reading namespace's netdevs, not in the host's.
	listNet := `for n in /sys/class/infiniband/pib_0/device/net/*; do [ -e "$n" ] || continue; ` +
		`echo "${n##*/} $(cat $n/dev_port) $(cat $n/dev_id) $(cat $n/type) $(cat $n/address)"; done`
	nsCtx, nsCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer nsCancel()
	nsCmd := exec.CommandContext(nsCtx, "ip", "netns", "exec", nsA, d.Bin, "exec", "--control", d.Sock, "--", "sh", "-c", listNet)
	nsCmd.Env = append(os.Environ(), "PIBGW_LIBDIR="+libDir)
	ndOut, err := nsCmd.CombinedOutput()
	hw := d.Show()[ifA].HWAddr
	if want := fmt.Sprintf("%s 0 0x0 32 %s\n", ifA, hw); err != nil || string(ndOut) != want {
		t.Errorf("pib_0's device/net in %s: %v %q, want %q", nsA, err, ndOut, want)
	}
	if nd := out("--", "sh", "-c", listNet); nd != "" {
		t.Errorf("pib_0's device/net in the host's namespace, where %s is not: %q, want nothing", ifA, nd)
	}

	// Live: a command running sees pib_1's port go down.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var watch e2etest.SyncBuffer
	w := pexec(ctx, "--", "sh", "-c", `f=/sys/class/infiniband/pib_1/ports/1/state; cat $f; `+
		`i=0; while ! grep -q DOWN $f; do sleep 0.1; i=$((i+1)); [ $i -gt 150 ] && exit 3; done; cat $f`)
	w.Stdout, w.Stderr = &watch, &watch
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(watch.String(), "ACTIVE"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watcher did not start: %q", watch.String())
		}
	}
	d.MustPibgw("link", "pib_1/1", "down")
	err = w.Wait()
	d.MustPibgw("link", "pib_1/1", "up")
	if err != nil || watch.String() != "4: ACTIVE\n1: DOWN\n" {
		t.Errorf("a running command did not see the port go down: %v\n%s", err, watch.String())
	}

	// As root the command is exec's process, as without the view.
	var pid bytes.Buffer
	pc := pexec(ctx, "--", "sh", "-c", "echo $$")
	pc.Stdout = &pid
	if err := pc.Run(); err != nil || pid.String() != fmt.Sprintf("%d\n", pc.Process.Pid) {
		t.Errorf("the command's PID %q, exec's %d: %v", pid.String(), pc.Process.Pid, err)
	}

	if nobody, err := user.Lookup("nobody"); err == nil {
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		asNobody := func(script string) (string, string, error) {
			cmd := pexec(ctx, "--", "sh", "-c", script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			return stdout.String(), stderr.String(), err
		}
		// A user who can reach the control socket: the view in a user namespace, the
		// command still the user's.
		if err := os.Chmod(d.Sock, 0o666); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat("/proc/sys/user/max_user_namespaces"); err == nil {
			o, e, err := asNobody("id -u; cat /sys/class/infiniband/pib_0/ports/1/state")
			if err != nil || e != "" && !strings.Contains(e, "no /sys/class/infiniband view") {
				t.Errorf("as nobody with the control socket: %v\n%s%s", err, o, e)
			} else if e == "" && o != fmt.Sprintf("%d\n4: ACTIVE\n", uid) {
				t.Errorf("as nobody with the control socket: %q, want its uid and 4: ACTIVE", o)
			} else if e != "" {
				t.Logf("no user namespace for nobody here: %s", e)
			}
		}
		// One who cannot reach the (root's) control socket: one line, and the command runs.
		if err := os.Chmod(d.Sock, 0o600); err != nil {
			t.Fatal(err)
		}
		o, e, err := asNobody("echo ran")
		if err != nil || o != "ran\n" || strings.Count(e, "\n") != 1 || !strings.Contains(e, "no /sys/class/infiniband view") {
			t.Errorf("as nobody: %v\nstdout %q\nstderr %q", err, o, e)
		}
	}

	if after := hostMounts(t); after != mountsBefore {
		t.Errorf("the host's mounts under /sys changed:\nbefore\n%s\nafter\n%s", mountsBefore, after)
	}
	if after := sysClass(t); after != classBefore {
		t.Errorf("/sys/class changed: before %s, after %s", classBefore, after)
	}
}

// hostMounts is the part of this process's mount table under /sys: roots and mount
// points (the daemon's namespaces come and go under /run/netns).
func hostMounts(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], "/sys") {
			out = append(out, f[3]+" "+f[4])
		}
	}
	return strings.Join(out, "\n")
}

// sysClass lists /sys/class.
func sysClass(t *testing.T) string {
	ents, err := os.ReadDir("/sys/class")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}
