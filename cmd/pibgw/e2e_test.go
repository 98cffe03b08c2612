package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/control"
)

// TestEndToEnd is issue 5's acceptance run, as root: the pibgw binary's `up` with kernel
// TUN devices in two namespaces of its own, ping and ping6 across the soft fabric, the
// neighbour table over the control socket, a P_Key child pair, and a SIGTERM that leaves
// no TUN device or namespace behind. Traffic stays inside the namespaces the test made.
func TestEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("end-to-end test needs root (TUN devices and network namespaces); run with sudo")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("end-to-end test needs /dev/net/tun: %v", err)
	}
	for _, tool := range []string{"ip", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("end-to-end test needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pibgw")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	nsA := fmt.Sprintf("pibgwe2e-%d-a", os.Getpid())
	nsB := fmt.Sprintf("pibgwe2e-%d-b", os.Getpid())
	sock := filepath.Join(dir, "run", "pibgw.sock")
	cfg := filepath.Join(dir, "e2e.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
[daemon]
control = %q
log_level = "debug"

[[sm.partitions]]
name = "e2e"
pkey = 0x8001
members = ["pib_0", "pib_1"]

[[interfaces]]
name = "ib0"
hca = "pib_0"
netns = %q
addresses = ["10.10.0.1/24"]

[[interfaces]]
name = "ib1"
hca = "pib_1"
netns = %q
addresses = ["10.10.0.2/24"]
`, sock, nsA, nsB)), 0o644)

	var logs bytes.Buffer
	cmd := exec.Command(bin, "up", "--config", cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	// TestMain's PIBGW_CONTROL would override the file's daemon.control.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIBGW_CONTROL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// Whatever happened: stop the daemon and remove what it may have left.
		select {
		case <-exited:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		for _, ns := range []string{nsA, nsB} {
			if exec.Command("ip", "netns", "pids", ns).Run() == nil {
				exec.Command("ip", "netns", "del", ns).Run()
			}
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !control.NewClient(sock).Alive(context.Background()) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("pibgw up exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pibgw up did not answer on %s in 30 s\n%s", sock, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	run := func(name string, args ...string) (string, error) {
		out, err := exec.Command(name, args...).CombinedOutput()
		return string(out), err
	}
	pibgwJSON := func(v any, args ...string) {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--json", "--control", sock)...).Output()
		if err != nil {
			t.Fatalf("pibgw %v: %v", args, err)
		}
		if err := json.Unmarshal(out, v); err != nil {
			t.Fatalf("pibgw %v: %v\n%s", args, err, out)
		}
	}

	// The kernel's view of ib0.
	out, err := run("ip", "-n", nsA, "-d", "link", "show", "ib0")
	if err != nil || !strings.Contains(out, "link/infiniband") || !strings.Contains(out, "mtu 2044") {
		t.Errorf("ip -n %s -d link show ib0: %v\n%s", nsA, err, out)
	}

	// IPv4 across the fabric: 20 pings, no loss.
	out, err = run("ip", "netns", "exec", nsA, "ping", "-c", "20", "-i", "0.2", "-W", "2", "10.10.0.2")
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping 10.10.0.2: %v\n%s", err, out)
	}

	// The neighbour table has B with its QPN and GID.
	var ns []control.Neighbor
	pibgwJSON(&ns, "neigh", "ib0")
	var show []control.Interface
	pibgwJSON(&show, "show", "ib1")
	found := false
	for _, n := range ns {
		if n.IP == "10.10.0.2" {
			found = true
			if n.QPN != show[0].QPN || n.QPN == 0 || n.GID != "fe80::2:c903:0:401" || n.HWAddr != show[0].HWAddr {
				t.Errorf("neighbour 10.10.0.2 = %+v; ib1 is %+v", n, show[0])
			}
		}
	}
	if !found {
		t.Errorf("pibgw neigh ib0 lacks 10.10.0.2: %+v", ns)
	}

	// IPv6 to B's link-local address (fe80:: + pib_1 port 1's GUID, U/L bit flipped).
	out, err = run("ip", "netns", "exec", nsA, "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fe80::202:c903:0:401%ib0")
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping6 fe80::202:c903:0:401%%ib0: %v\n%s", err, out)
	}

	// P_Key children on both sides carry partition 0x8001; deleting A's leaves ib0 alone.
	for _, c := range [][]string{{"ib0", "10.20.0.1/24"}, {"ib1", "10.20.0.2/24"}} {
		if out, err := run(bin, "child", "add", c[0], "0x8001", "--addr", c[1], "--control", sock); err != nil {
			t.Fatalf("child add %s: %v\n%s", c[0], err, out)
		}
	}
	out, err = run("ip", "-n", nsA, "-d", "link", "show", "ib0.8001")
	if err != nil || !strings.Contains(out, "link/infiniband") {
		t.Errorf("ib0.8001 in %s: %v\n%s", nsA, err, out)
	}
	out, err = run("ip", "netns", "exec", nsA, "ping", "-c", "5", "-i", "0.2", "-W", "2", "10.20.0.2")
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping 10.20.0.2 over ib0.8001: %v\n%s", err, out)
	}
	if out, err := run(bin, "child", "del", "ib0", "8001", "--control", sock); err != nil {
		t.Fatalf("child del: %v\n%s", err, out)
	}
	if out, err := run("ip", "netns", "exec", nsA, "ping", "-c", "1", "-W", "1", "10.20.0.2"); err == nil {
		t.Errorf("ping 10.20.0.2 after child del succeeded:\n%s", out)
	}
	out, err = run("ip", "netns", "exec", nsA, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.10.0.2")
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("parent ping after child del: %v\n%s", err, out)
	}

	// SIGTERM: exit 0, nothing left behind.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("pibgw up after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("pibgw up did not stop within 15 s of SIGTERM")
	}
	out, _ = run("ip", "netns", "list")
	if strings.Contains(out, nsA) || strings.Contains(out, nsB) {
		t.Errorf("namespaces left after SIGTERM:\n%s", out)
	}
	out, _ = run("ip", "-o", "link", "show")
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "link/infiniband") {
			t.Errorf("TUN device left after SIGTERM: %s", line)
		}
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left after SIGTERM: %v", err)
	}
}
