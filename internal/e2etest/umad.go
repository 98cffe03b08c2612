package e2etest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// UmadRun runs the program mk makes (attached through libumad2sim) with a 20 s limit and
// returns its combined output. A program attached through libumad2sim used to die of
// SIGSEGV now and then — its receive thread given a late response meant for the previous
// client in its slot (the server drops those now: ibsim's TestLateResponseAfterSlotReuse)
// — or, seen once in CI right after such a crash, hang once it had closed its socket to
// the server; such a run is still repeated, twice at most, should libumad2sim (which also
// reads 32 bytes past its receive buffer on every MAD) fail another way.
func UmadRun(t testing.TB, mk func(ctx context.Context) *exec.Cmd) ([]byte, error) {
	t.Helper()
	var out []byte
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c := mk(ctx)
		out, err = c.CombinedOutput()
		hung := ctx.Err() != nil
		cancel()
		if err == nil || !strings.Contains(err.Error(), "segmentation fault") && !hung {
			break
		}
		t.Logf("%s: %v (libumad2sim; hung: %v); running it again", strings.Join(c.Args, " "), err, hung)
	}
	return out, err
}

// DiagField returns the first value after "name:" and the dots that infiniband-diags
// print ("Lid:.......3"), after "name:" and blanks (ibstat's "Base lid: 3"), or after
// "name" and dots (saquery's "dlid.......4").
func DiagField(out, name string) string {
	re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `(?::[.\s]*|\.{2,})(\S+)`)
	if m := re.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// HexLID is a decimal LID as ibaddr prints it (0x3).
func HexLID(lid string) string {
	var n int
	fmt.Sscan(lid, &n)
	return fmt.Sprintf("%#x", n)
}

// UmadLibs builds pibgw's C libraries into a temporary directory for a test of the
// libibumad.so.3 among them, and skips the test without libibumad's header.
func UmadLibs(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/include/infiniband/umad.h"); err != nil {
		t.Skip("libibumad's header is missing (libibumad-dev)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("bash", filepath.Join(Root(t), "scripts", "build-libs.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("build-libs.sh: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "umad", "libibumad.so.3")); err != nil {
		t.Fatalf("build-libs.sh built no umad/libibumad.so.3: %v", err)
	}
	return dir
}
