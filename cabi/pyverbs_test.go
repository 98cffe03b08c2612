package cabi

import (
	"os"
	"strings"
	"testing"
)

// pyverbsInit is the file of Debian's python3-pyverbs that the pyverbs tests need.
const pyverbsInit = "/usr/lib/python3/dist-packages/pyverbs/__init__.py"

// TestPyverbsFork runs testdata/pyverbs_fork.py: rdma-core's Python bindings on pibgw's
// libraries, a process forked by multiprocessing after the parent used verbs and rdma_cm,
// and an RC SEND each way and an rdma_cm connection between objects the parent made before
// the fork and objects the child made after it.
func TestPyverbsFork(t *testing.T) {
	if _, err := os.Stat(pyverbsInit); err != nil {
		t.Skipf("pyverbs is not installed (%s; Debian: python3-pyverbs, which scripts/test.sh installs as root)", pyverbsInit)
	}
	fb := startFabric(t)
	out := fb.run(t, "/usr/bin/python3", "testdata/pyverbs_fork.py")
	for _, step := range []string{"parent_objects", "rc_send_recv_parent_child", "rdma_cm_parent_child"} {
		if !strings.Contains(out, "ok "+step+"\n") {
			t.Errorf("step %s did not pass:\n%s", step, out)
		}
	}
}
