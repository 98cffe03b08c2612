package ipoib

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/e2etest"
	"github.com/pibgw/pibgw/internal/lifecycle"
)

// lifecycleConfig is one interface in a namespace of the test's.
func lifecycleConfig(ns string) string {
	return e2etest.InterfaceTOML("ib0", "pib_0", ns, "10.10.0.1/24")
}

// TestLifecycleKill9: a daemon killed with SIGKILL leaves its namespace, socket and
// state file; the next `pibgw up` recognises them as its own (the state file's record)
// and, at its SIGTERM, leaves nothing: no namespace, TUN device, socket or state file.
func TestLifecycleKill9(t *testing.T) {
	e2etest.Require(t)
	ns := e2etest.NetNS("k9")
	d := e2etest.StartDaemon(t, "", lifecycleConfig(ns), ns)
	oldPID := d.Cmd.Process.Pid
	d.Cmd.Process.Kill()
	<-d.Exited
	if out, _ := e2etest.RunCmd("ip", "netns", "list"); !strings.Contains(out, ns) {
		t.Fatalf("SIGKILL: the namespace went with the daemon?\n%s", out)
	}
	b, err := os.ReadFile(lifecycle.PathFor(d.Sock))
	var rec lifecycle.Record
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.PID != oldPID || !slices.Contains(rec.NetNS, ns) {
		t.Fatalf("state file after SIGKILL: %v\n%s", err, b)
	}

	d.Launch()
	d.WaitAlive()
	if !strings.Contains(d.Logs(), "adopting namespace a killed daemon left") {
		t.Errorf("the new daemon did not adopt %s:\n%s", ns, d.Logs())
	}
	if ib0, ok := d.Show()["ib0"]; !ok || ib0.NetNS != ns {
		t.Errorf("show after restart: %+v", d.Show())
	}
	d.StopAndCheckClean(map[string]string{"ib0": ns})
}

// TestLifecycleTermThenUp: `kill -TERM OLD; pibgw up` with no pause, 20 times in a row:
// every new daemon waits for the old one's cleanup (the state file's lock), then answers
// `pibgw show` with its interface in its namespace. Each old daemon exits within 0.3 s
// of its SIGTERM.
func TestLifecycleTermThenUp(t *testing.T) {
	e2etest.Require(t)
	ns := e2etest.NetNS("tu")
	d := e2etest.StartDaemon(t, "", lifecycleConfig(ns), ns)
	var exits []time.Duration
	for i := 0; i < 20; i++ {
		old, oldExited := d.Cmd, d.Exited
		errc := make(chan error, 1)
		var took time.Duration
		start := time.Now()
		old.Process.Signal(syscall.SIGTERM)
		go func() {
			err := <-oldExited
			took = time.Since(start)
			errc <- err
		}()
		d.Launch()
		d.WaitAlive()
		if err := <-errc; err != nil {
			t.Fatalf("round %d: the old daemon exited with %v", i, err)
		}
		exits = append(exits, took)
		show := d.Show()
		if ib0, ok := show["ib0"]; !ok || ib0.NetNS != ns {
			t.Fatalf("round %d: show %+v", i, show)
		}
		if out, err := e2etest.RunCmd("ip", "-n", ns, "link", "show", "ib0"); err != nil {
			t.Fatalf("round %d: ib0 missing from %s: %v\n%s", i, ns, err, out)
		}
	}
	d.StopAndCheckClean(map[string]string{"ib0": ns})
	sort.Slice(exits, func(i, j int) bool { return exits[i] < exits[j] })
	if len(exits) > 0 {
		med := exits[len(exits)/2]
		t.Logf("SIGTERM to exit: median %v, max %v over %d rounds", med, exits[len(exits)-1], len(exits))
		if med > 300*time.Millisecond {
			t.Errorf("daemon exits %v after SIGTERM (median), want ≤ 0.3 s", med)
		}
	}
}
