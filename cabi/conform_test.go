package cabi

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// conformMinChecks is how many distinct checks the conformance test must run at least.
const conformMinChecks = 150

// TestConform builds testdata/conform (every .c there: one program, an area a file) against
// rdma-core's headers and libraries, as any program is built, and runs it on pibgw's
// libraries with two devices: each check prints "ok NAME" or "not ok NAME: why", and every
// one must pass.
func TestConform(t *testing.T) {
	requireTools(t, "gcc")
	fb := startFabric(t)
	srcs, _ := filepath.Glob("testdata/conform/*.c")
	bin := filepath.Join(t.TempDir(), "conform")
	args := append([]string{"-O1", "-Wall", "-Werror", "-o", bin}, srcs...)
	args = append(args, "-libverbs", "-lrdmacm")
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Skipf("cannot build testdata/conform against rdma-core's libraries: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 110*time.Second)
	defer cancel()
	out, err := fb.command(ctx, bin).CombinedOutput()
	text := string(out)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "not ok ") {
			t.Error(line)
		}
	}
	if err != nil {
		t.Errorf("conform: %v\n%s", err, text)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^ok (\S+)$`).FindAllStringSubmatch(text, -1) {
		if names[m[1]] {
			t.Errorf("check %s is named twice", m[1])
		}
		names[m[1]] = true
	}
	if len(names) < conformMinChecks {
		t.Errorf("%d distinct checks passed; the conformance test must cover at least %d", len(names), conformMinChecks)
	}
	t.Logf("%d checks passed", len(names))
}
