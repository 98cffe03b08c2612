package fabrictest

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TsharkProblems is the display filter that selects frames tshark finds malformed or
// flags with an expert warning or error.
const TsharkProblems = `_ws.malformed || _ws.expert.severity >= "Warning"`

// Tshark runs tshark on a capture file, skipping the test when tshark is not installed
// (scripts/test.sh installs it).
func Tshark(t testing.TB, path string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: apt-get install tshark (scripts/test.sh does) to run this interop test")
	}
	cmd := exec.Command(bin, append([]string{"-n", "-r", path}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TsharkFields returns, per frame, the values of the named fields.
func TsharkFields(t testing.TB, path string, fields ...string) [][]string {
	t.Helper()
	return TsharkFieldsWith(t, path, nil, fields...)
}

// TsharkFieldsWith is TsharkFields with more tshark options (preferences, decode-as).
func TsharkFieldsWith(t testing.TB, path string, opts []string, fields ...string) [][]string {
	t.Helper()
	args := append(append([]string(nil), opts...), "-T", "fields", "-E", "separator=|", "-E", "occurrence=f")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out := strings.TrimSpace(Tshark(t, path, args...))
	if out == "" {
		return nil
	}
	var rows [][]string
	for _, line := range strings.Split(out, "\n") {
		rows = append(rows, strings.Split(line, "|"))
	}
	return rows
}

// RequireCleanDecode fails the test if tshark finds any frame malformed or flags an
// expert warning.
// Extra tshark arguments (e.g. --disable-heuristic) come before the filter.
func RequireCleanDecode(t testing.TB, path string, extra ...string) {
	t.Helper()
	args := append(append([]string(nil), extra...), "-Y", TsharkProblems)
	if bad := strings.TrimSpace(Tshark(t, path, args...)); bad != "" {
		t.Fatalf("tshark reports malformed frames or expert warnings:\n%s\n%s", bad, Tshark(t, path, append(extra, "-z", "expert", "-q")...))
	}
}

// NoEoIBHeuristic turns off Wireshark's Mellanox EoIB heuristic, which (in tshark 4.0)
// throws "Malformed Packet" on every UD or RC packet whose payload is empty, however
// correct the packet is.
var NoEoIBHeuristic = []string{"--disable-heuristic", "mellanox_eoib"}
