package daemon_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/tun"
)

// otherNames is the default configuration with other interface names: a second daemon
// on the same namespaces.
func otherNames() *config.Config {
	c := config.Default()
	for k := range c.Interfaces {
		c.Interfaces[k].Name = fmt.Sprintf("ib%d", 8+k)
	}
	return c
}

// Issue 43 item 10: two daemons configured with the same namespaces share them; the one
// that created them and stops first leaves them to the other, which deletes them when
// it stops.
func TestSharedNetNS(t *testing.T) {
	b := daemontest.New()
	a := start(t, config.Default(), b)
	o := start(t, otherNames(), b)
	if got := b.NetNS(); !reflect.DeepEqual(got, []string{"pib0", "pib1"}) {
		t.Fatalf("namespaces %v", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.NetNS(); !reflect.DeepEqual(got, []string{"pib0", "pib1"}) {
		t.Fatalf("namespaces after the first daemon stopped: %v, want pib0 and pib1 still (the other uses them)", got)
	}
	ifs, err := o.Show("")
	if err != nil || len(ifs) != 2 || !ifs[0].Up || !ifs[1].Up {
		t.Fatalf("the other daemon's interfaces: %+v %v", ifs, err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.NetNS(); len(got) != 0 {
		t.Errorf("namespaces after both stopped: %v, want none (pibgw created them)", got)
	}
}

// A namespace deleted from under the daemon (ip netns del) takes its interfaces down at
// once, logged, and `pibgw show` says why.
func TestNetNSDeletedUnderDaemon(t *testing.T) {
	b := daemontest.New()
	var logs syncBuffer
	d, err := daemon.Start(t.Context(), daemon.Options{Config: config.Default(), Backend: b,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	b.DeleteNetNS("pib1")
	ifs, err := d.Show("")
	if err != nil || len(ifs) != 2 {
		t.Fatalf("show: %v %v", ifs, err)
	}
	if !ifs[0].Up || ifs[1].Up || ifs[1].Reason != "network namespace pib1 was deleted" {
		t.Errorf("ib0 up %v; ib1 up %v, reason %q; want ib0 up, ib1 down for its namespace", ifs[0].Up, ifs[1].Up, ifs[1].Reason)
	}
	if !strings.Contains(logs.String(), `level=ERROR msg="namespace deleted under the daemon`) ||
		!strings.Contains(logs.String(), "netns=pib1 ifaces=[ib1]") {
		t.Errorf("not logged:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The same with real namespaces and TUN devices (root): two daemons on one namespace,
// the first to stop leaves it; ip netns del under a daemon is noticed at once.
func TestE2ESharedNetNS(t *testing.T) {
	ns := fmt.Sprintf("pibsh%d", os.Getpid())
	a := rootDaemon(t, ns, nil)
	o := rootDaemon(t, ns, func(c *config.Config) { c.Interfaces[0].Name = "ib9" })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !tun.NetNSExists(ns) {
		t.Fatalf("namespace %s deleted by the first daemon while the second uses it", ns)
	}
	ifs, err := o.Show("")
	if err != nil || len(ifs) != 1 || !ifs[0].Up {
		t.Fatalf("the second daemon's interface: %+v %v", ifs, err)
	}
	if out, err := exec.Command("ip", "-n", ns, "link", "show", "ib9").CombinedOutput(); err != nil {
		t.Fatalf("ib9 gone from %s: %v %s", ns, err, out)
	}
	// ip netns del under the second daemon: its interface goes down at once.
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ifs, err := o.Show("")
		if err == nil && len(ifs) == 1 && !ifs[0].Up && ifs[0].Reason == "network namespace "+ns+" was deleted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after ip netns del: %+v %v; want ib9 down for its namespace", ifs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := o.Close(); err != nil {
		t.Errorf("close after ip netns del: %v", err)
	}
}

// The last daemon to stop deletes the namespace pibgw created.
func TestE2ESharedNetNSLastDeletes(t *testing.T) {
	ns := fmt.Sprintf("pibsl%d", os.Getpid())
	a := rootDaemon(t, ns, nil)
	o := rootDaemon(t, ns, func(c *config.Config) { c.Interfaces[0].Name = "ib9" })
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if !tun.NetNSExists(ns) {
		t.Fatalf("namespace %s deleted by the daemon that did not create it while the other uses it", ns)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if tun.NetNSExists(ns) {
		t.Errorf("namespace %s left after both daemons stopped", ns)
	}
}
