package ipoib

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2ESigtermExistingNetNS, as root: a namespace that existed before the daemon is
// used and left in place at SIGTERM, with no TUN device in it (`ip link` there before and
// after); the one the daemon created is gone.
func TestE2ESigtermExistingNetNS(t *testing.T) {
	e2etest.Require(t, "ping")
	nsA, nsB := e2etest.NetNS("sa"), e2etest.NetNS("sb")
	if out, err := e2etest.RunCmd("ip", "netns", "add", nsA); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", nsA, err, out)
	}
	t.Cleanup(func() { e2etest.RunCmd("ip", "netns", "del", nsA) })
	d := e2etest.StartDaemon(t, "", fmt.Sprintf(`
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
`, nsA, nsB), nsB) // the cleanup deletes only nsB: nsA is the test's
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 2); !ok {
		t.Errorf("ping 10.10.0.2:\n%s", out)
	}
	d.MustPibgw("child", "add", "ib0", "0x8001")
	for _, name := range []string{"ib0", "ib0.8001"} {
		if out, err := e2etest.RunCmd("ip", "-n", nsA, "-d", "link", "show", name); err != nil || !strings.Contains(out, "link/infiniband") {
			t.Errorf("ip -n %s link show %s: %v\n%s", nsA, name, err, out)
		}
	}
	d.StopAndCheckClean(map[string]string{"ib1": nsB})
	out, err := e2etest.RunCmd("ip", "-n", nsA, "-o", "link", "show")
	if err != nil {
		t.Fatalf("namespace %s, which existed before the daemon, is gone: %v\n%s", nsA, err, out)
	}
	if strings.Contains(out, "link/infiniband") || strings.Contains(out, "ib0") {
		t.Errorf("TUN devices left in %s after SIGTERM:\n%s", nsA, out)
	}
}
