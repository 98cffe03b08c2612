package mgmt

import (
	"context"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EUmadDefaultConfig is issue 44's recipe 4: `pibgw exec --umad -- ibstat` works
// against daemons with no [ibsim] section (the server is on by default; it was off and
// exec --umad said to enable it), and two of them, each with its own control socket,
// serve the ibsim protocol under names of their own, derived from the control socket
// (with one name for all, the second did not start).
func TestE2EUmadDefaultConfig(t *testing.T) {
	e2etest.Require(t, "gcc", "ibstat")
	libDir := e2etest.UmadLibs(t)
	// No [ibsim] section; interfaces in the test's own namespaces (the default
	// configuration's pib0 and pib1 would be shared by the two daemons).
	ns1, ns2 := e2etest.NetNS("ud1"), e2etest.NetNS("ud2")
	d1 := e2etest.StartDaemon(t, "", e2etest.InterfaceTOML("ib0", "pib_0", ns1, "10.32.0.1/24"), ns1)
	d2 := e2etest.StartDaemon(t, "", e2etest.InterfaceTOML("ib0", "pib_0", ns2, "10.32.0.1/24"), ns2)
	var s1, s2 control.Status
	if err := control.NewClient(d1.Sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &s1); err != nil {
		t.Fatal(err)
	}
	if err := control.NewClient(d2.Sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &s2); err != nil {
		t.Fatal(err)
	}
	if s1.IBSim == "" || s1.IBSim == s2.IBSim {
		t.Errorf("ibsim socket names %q and %q: want one of its own for each daemon", s1.IBSim, s2.IBSim)
	}
	for _, d := range []*e2etest.Daemon{d1, d2} {
		u := &umadRunner{t: t, d: d, libDir: libDir, dir: "/"}
		st := u.out("--", "ibstat")
		if !strings.Contains(st, "CA 'pib_0'") || !strings.Contains(st, "State: Active") {
			t.Errorf("pibgw exec --umad -- ibstat on the default configuration:\n%s", st)
		}
	}
}
