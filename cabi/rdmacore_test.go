package cabi

import (
	"compress/gzip"
	"context"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// rdmaCoreSuite is rdma-core's own test suite (tests/ of its source: run_tests.py,
// test_*.py, some gzipped), as Debian's python3-pyverbs installs it: the conformance check
// rdma-core runs against its providers (rxe, mlx5, efa).
const rdmaCoreSuite = "/usr/share/doc/rdma-core/tests"

// rdmaCoreModules are the suite's generic modules (not mlx5, efa or cuda), all run in one
// process. What they take on a 2-core machine under load (python3 and pyverbs start in
// about 1 s more): test_rdmacm 6-15 s (ten connections or groups, each between two forked
// processes), test_pd 0.7 s, test_cqex, test_mr, test_odp 0.5 s, test_qpex 0.4 s,
// test_flow, test_cq, test_cq_events, test_atomic 0.3 s, every other one under 0.2 s:
// 170 tests in 10-20 s altogether.
var rdmaCoreModules = []string{
	"test_addr", "test_atomic", "test_cq", "test_cq_events", "test_cqex", "test_device",
	"test_fork", "test_mr", "test_odp", "test_parent_domain", "test_pd", "test_qp",
	"test_qpex", "test_rdmacm", "test_relaxed_ordering", "test_shared_pd",
	"test_tag_matching", "test_flow", "test_rss_traffic",
}

// rdmaCoreKnown are the suite's tests that fail on pibgw, each with why. The issue wants
// this list empty: remove an entry when its test passes (the test says so).
var rdmaCoreKnown = map[string]string{
	"tests.test_device.DeviceTest.test_query_port": "pibgw's ports are 12X QDR like pib's (active_width 8, IBA 14.2.5.6); pyverbs' width_to_str knows 1X, 2X, 4X, 8X only",
}

// rdmaCoreNoSkip are skip reasons that mean the suite did not run on the fabric at all
// (no active port, no address for rdma_cm): a test skipped with one fails. Other skips are
// optional features pibgw lacks as rxe does (device memory, parent domains, tag
// matching, implicit ODP, importing a context) or need what the machine or an InfiniBand
// link does not have (Ethernet raw packets and flows, RoCE, dma-buf, huge pages); the
// test logs them. One is a difference from rxe: test_qp_ex_rc_atomic_write skips
// ("Extended QP is not supported") because pibgw has no RDMA ATOMIC WRITE
// (IBV_QP_EX_WITH_ATOMIC_WRITE), which rxe has.
var rdmaCoreNoSkip = []string{"No supported port is up", "doesn't have net interface"}

// TestRdmaCoreSuite runs rdma-core's test suite (rdmaCoreModules) on the test's fabric with
// pibgw's libraries, on pib_0 (test_rdmacm with pib_0's IPoIB address), and fails on every
// failure or error that rdmaCoreKnown does not list.
func TestRdmaCoreSuite(t *testing.T) {
	if _, err := os.Stat(filepath.Join(rdmaCoreSuite, "run_tests.py")); err != nil {
		t.Skipf("rdma-core's test suite is not installed (%s; Debian: python3-pyverbs, which scripts/test.sh installs as root)", rdmaCoreSuite)
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import pyverbs.device").CombinedOutput(); err != nil {
		t.Skipf("/usr/bin/python3 has no pyverbs (%s; Debian: python3-pyverbs, which scripts/test.sh installs as root): %v %s",
			pyverbsInit, err, out)
	}
	dir := filepath.Join(t.TempDir(), "tests")
	unpackSuite(t, dir)
	fb := startFabric(t)
	addr := netip.MustParseAddr("10.10.0.1") // ib0's on the default fabric (inproc)
	if d, err := fb.f.RDMA().LocalDevice(addr); err != nil || d.Port.Device().Name() != "pib_0" {
		t.Fatalf("%v is not pib_0's IPoIB address: %v", addr, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	args := append([]string{"rdmacore_run.py", "--dev", "pib_0", "-v"}, rdmaCoreModules...)
	cmd := fb.command(ctx, "/usr/bin/python3", args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, "PIBGW_SUITE_ADDRS=pib_0="+addr.String())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	text := string(out)
	t.Logf("rdma-core's suite took %v", time.Since(start).Round(time.Millisecond))
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindStringSubmatch(text)
	if ran == nil || !regexp.MustCompile(`(?m)^(OK|FAILED)\b`).MatchString(text) {
		t.Fatalf("the suite did not finish (%v):\n%s", err, text)
	}
	t.Logf("%s tests", ran[1])

	failed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(FAIL|ERROR): (\S+) \(([^)]+)\)`).FindAllStringSubmatchIndex(text, -1) {
		kind, name, id := text[m[2]:m[3]], text[m[4]:m[5]], text[m[6]:m[7]]
		if !strings.HasSuffix(id, "."+name) {
			id += "." + name // Python before 3.11 names the class only
		}
		failed[id] = true
		if why, ok := rdmaCoreKnown[id]; ok {
			t.Logf("known %s: %s (%s)", kind, id, why)
			continue
		}
		// The report: the header and its traceback, to the next report or the summary.
		end := len(text)
		for _, next := range []string{"\n=====", "\nRan "} {
			if i := strings.Index(text[m[1]:], next); i >= 0 && m[1]+i < end {
				end = m[1] + i
			}
		}
		t.Errorf("%s", text[m[0]:end])
	}
	for id := range rdmaCoreKnown {
		if !failed[id] && strings.Contains(text, "("+id+")") {
			t.Errorf("%s passes now: remove it from rdmaCoreKnown", id)
		}
	}
	skips := map[string]int{}
	for _, m := range regexp.MustCompile(`skipped ['"](.*)['"]\n`).FindAllStringSubmatch(text, -1) {
		skips[m[1]]++
	}
	for _, reason := range slices.Sorted(maps.Keys(skips)) {
		n := skips[reason]
		t.Logf("skipped %d: %s", n, reason)
		for _, bad := range rdmaCoreNoSkip {
			if strings.Contains(reason, bad) {
				t.Errorf("%d tests skipped: %s", n, reason)
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

// unpackSuite copies rdma-core's suite into dir, gunzips its *.py.gz (Debian compresses
// the larger files) and adds testdata/rdmacore_run.py.
func unpackSuite(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(rdmaCoreSuite)
	if err != nil {
		t.Fatal(err)
	}
	copyFile := func(src, dst string, gz bool) error {
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		var r io.Reader = in
		if gz {
			z, err := gzip.NewReader(in)
			if err != nil {
				return err
			}
			defer z.Close()
			r = z
		}
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, r); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		gz := strings.HasSuffix(name, ".gz")
		if err := copyFile(filepath.Join(rdmaCoreSuite, name), filepath.Join(dir, strings.TrimSuffix(name, ".gz")), gz); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile("testdata/rdmacore_run.py", filepath.Join(dir, "rdmacore_run.py"), false); err != nil {
		t.Fatal(err)
	}
}
