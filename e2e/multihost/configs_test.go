package multihost

import (
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

// TestE2EConfigsTwoHosts is issue 44's "two hosts on one machine": configs/switch.toml,
// host-a.toml and host-b.toml run as they are — with a key from `pibgw genkey` in the
// fabric.psk next to them, and only what must be the test's own changed (the control
// sockets' directory, the namespaces, the UDP port and the ibsim socket names, so that
// the test runs beside a pibgw already running) — and host A pings host B over ib0 and
// over the partition's children.
func TestE2EConfigsTwoHosts(t *testing.T) {
	e2etest.Require(t, "ping")
	bin := e2etest.BuildPibgw(t)
	dir := t.TempDir()
	key, err := exec.Command(bin, "genkey").Output()
	if err != nil {
		t.Fatalf("pibgw genkey: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fabric.psk"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	// A free UDP port for the switch.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()

	// sub replaces what the file must have, so the test fails when the configs change.
	sub := func(name, s, old, new string) string {
		t.Helper()
		if !strings.Contains(s, old) {
			t.Fatalf("configs/%s.toml has no %s", name, old)
		}
		return strings.ReplaceAll(s, old, new)
	}
	write := func(name string, subs ...string) (path, sock string) {
		t.Helper()
		b, err := os.ReadFile("../../configs/" + name + ".toml")
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for i := 0; i < len(subs); i += 2 {
			s = sub(name, s, subs[i], subs[i+1])
		}
		path = filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return path, filepath.Join(dir, name, "pibgw.sock")
	}
	swCfg, swSock := write("switch",
		`"/run/pibgw/switch/pibgw.sock"`, fmt.Sprintf("%q", filepath.Join(dir, "switch", "pibgw.sock")),
		`listen = "127.0.0.1:8432"`, fmt.Sprintf("listen = %q", addr))
	ns := map[string]string{"a": e2etest.NetNS("cfa"), "b": e2etest.NetNS("cfb")}
	hostCfg := func(h string) (string, string) {
		return write("host-"+h,
			fmt.Sprintf(`"/run/pibgw/host-%s/pibgw.sock"`, h), fmt.Sprintf("%q", filepath.Join(dir, "host-"+h, "pibgw.sock")),
			`switch = "127.0.0.1:8432"`, fmt.Sprintf("switch = %q", addr),
			fmt.Sprintf(`netns = "pibgw-%s"`, h), fmt.Sprintf("netns = %q", ns[h]),
			fmt.Sprintf(`socket_name = "pibgw-host-%s"`, h), fmt.Sprintf("socket_name = %q", ns[h]))
	}
	aCfg, aSock := hostCfg("a")
	bCfg, bSock := hostCfg("b")

	sw := e2etest.StartConfig(t, "switch", swCfg, swSock)
	a := e2etest.StartConfig(t, "up", aCfg, aSock, ns["a"])
	b := e2etest.StartConfig(t, "up", bCfg, bSock, ns["b"])

	// The switch's SM brings both hosts' ports up, then their interfaces; ping until it
	// answers (30 s) and then without loss.
	for _, to := range []string{"10.10.0.2", "10.20.0.2"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok, _ := e2etest.PingNS(ns["a"], to, 1)
			if ok {
				break
			}
			if time.Now().After(deadline) {
				_, bout, _ := b.Pibgw("show")
				t.Fatalf("host A does not reach %s in 30 s; host B:\n%s", to, bout)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if ok, out := e2etest.PingNS(ns["a"], to, 3); !ok {
			t.Errorf("host A → %s:\n%s", to, out)
		}
	}
	b.StopAndCheckClean(map[string]string{"ib0": ns["b"], "ib0.8001": ns["b"]})
	a.StopAndCheckClean(map[string]string{"ib0": ns["a"], "ib0.8001": ns["a"]})
	sw.Stop()
}
