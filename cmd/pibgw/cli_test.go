package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/ipoib"
)

// TestHelp: `pibgw help VERB` and `pibgw VERB --help` print the verb's help, exit 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"help", "show"}, {"show", "--help"}, {"show", "-h"}, {"help", "child"}, {"child", "add", "--help"},
		{"capture", "--help"}, {"up", "--help"}, {"help"}, {"--help"},
	} {
		out, errs, code := pibgw(t, args...)
		if code != 0 || errs != "" || !strings.Contains(out, "USAGE:") {
			t.Errorf("%v: exit %d, stderr %q, stdout %q", args, code, errs, out)
		}
	}
	out, _, _ := pibgw(t, "help", "show")
	if !strings.Contains(out, "pibgw show - show the daemon's IPoIB interfaces") {
		t.Errorf("help show:\n%s", out)
	}
	out, _, _ = pibgw(t, "child", "add", "--help")
	if !strings.Contains(out, "pibgw child add - create IFACE's child") || !strings.Contains(out, "--addr") {
		t.Errorf("child add --help:\n%s", out)
	}
}

// TestHelpDefaultsOnce: every command's help names each flag's default once, in words
// where the zero value means something else ("(default: until Ctrl-C) (default: 0)" was
// capture's, "(default all) (default: 0)" its --snaplen's and devinfo's --ib-port's).
func TestHelpDefaultsOnce(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(slices.Clip(path), c.Name)
			out, _, code := pibgw(t, append(p, "--help")...)
			if code != 0 {
				t.Errorf("%v --help: exit %d", p, code)
			}
			for _, line := range strings.Split(out, "\n") {
				// "(default all)" in a usage text and urfave/cli's "(default: 0)" alike.
				if strings.Count(line, "(default") > 1 {
					t.Errorf("%v --help: %q", p, strings.TrimSpace(line))
				}
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp(io.Discard, io.Discard).Commands)
}

// TestVersion: the module version and the Go toolchain (and the VCS revision when the
// build recorded one).
func TestVersion(t *testing.T) {
	out, errs, code := pibgw(t, "--version")
	if code != 0 || errs != "" || !strings.HasPrefix(out, "pibgw ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A test binary has no VCS stamp, as go build outside a git work tree or with
	// -buildvcs=false: the revision -ldflags set is printed, else why there is none.
	if !strings.Contains(out, "revision unknown: built without VCS stamping") {
		t.Errorf("--version without a revision: %q; want it to say why", out)
	}
	defer func(r string) { revision = r }(revision)
	revision = "v0.1-42-gabcdef1"
	if out, _, _ := pibgw(t, "--version"); !strings.HasPrefix(out, "pibgw (devel) revision v0.1-42-gabcdef1, go1.") {
		t.Errorf("--version with -X main.revision: %q", out)
	}
}

// TestUnknownVerb: the nearest verb is suggested, in one line and a hint, exit 2.
func TestUnknownVerb(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"shwo", "pibgw: unknown command \"shwo\"; did you mean \"show\"?\nRun 'pibgw help' for usage.\n"},
		{"chlid add ib0 8001", "pibgw: unknown command \"chlid\"; did you mean \"child\"?\nRun 'pibgw help' for usage.\n"},
		{"stats", "pibgw: unknown command \"stats\"; did you mean \"stat\"?\nRun 'pibgw help' for usage.\n"},
		{"xyzzy", "pibgw: unknown command \"xyzzy\"\nRun 'pibgw help' for usage.\n"},
		{"child dle ib0 8001", "pibgw: unknown child command \"dle\"; did you mean \"del\"?\nRun 'pibgw child --help' for usage.\n"},
	} {
		out, errs, code := pibgw(t, strings.Fields(tc.args)...)
		if code != 2 || out != "" || errs != tc.want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// TestUsageErrorOneLine: a bad flag or missing argument prints one line and the hint,
// never the whole help.
func TestUsageErrorOneLine(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"show --bogus", "pibgw: show: flag provided but not defined: -bogus\nRun 'pibgw show --help' for usage.\n"},
		{"--bogus show", "pibgw: flag provided but not defined: -bogus\nRun 'pibgw help' for usage.\n"},
		{"capture", "pibgw: capture: -w FILE is required (- for stdout)\nRun 'pibgw capture --help' for usage.\n"},
		{"neigh ib0 ib1", "pibgw: neigh: unexpected argument \"ib1\"\nRun 'pibgw neigh --help' for usage.\n"},
		{"child del ib0", "pibgw: child del: want IFACE PKEY (e.g. ib0 0x8001), got 1 arguments\nRun 'pibgw child del --help' for usage.\n"},
		{"exec --node pib_1 -- ibaddr", "pibgw: exec: --node chooses the node of a --umad program\nRun 'pibgw exec --help' for usage.\n"},
	} {
		out, errs, code := pibgw(t, strings.Fields(tc.args)...)
		if code != 2 || out != "" || errs != tc.want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// TestJSONEverywhere: every verb takes --json; numbers are numbers (pkey, qpn, rate) as
// ip -j prints them; -l is honoured with --json.
func TestJSONEverywhere(t *testing.T) {
	sock, d := fakeDaemon(t, config.Default(), map[string][]ipoib.Neighbor{
		"ib0": {daemontest.Neighbor("10.10.0.2", 0x48, 0x0002_c903_0000_0401, "REACHABLE")},
	})
	decode := func(args ...string) any {
		t.Helper()
		var v any
		out := mustRun(t, args...)
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: not JSON: %v\n%s", args, err, out)
		}
		return v
	}
	show := decode("show", "ib0", "--json", "--control", sock).([]any)[0].(map[string]any)
	if pk, ok := show["pkey"].(float64); !ok || pk != 0xffff {
		t.Errorf("show --json pkey %v (%T), want the number 65535", show["pkey"], show["pkey"])
	}
	if _, ok := show["qpn"].(float64); !ok {
		t.Errorf("show --json qpn %T", show["qpn"])
	}
	neigh := decode("neigh", "--json", "--control", sock).([]any)[0].(map[string]any)
	if neigh["qpn"] != float64(0x48) {
		t.Errorf("neigh --json qpn %v", neigh["qpn"])
	}
	add := decode("child", "add", "ib0", "0x8001", "--json", "--control", sock).(map[string]any)
	if add["name"] != "ib0.8001" || add["pkey"] != float64(0x8001) {
		t.Errorf("child add --json: %v", add)
	}
	del := decode("child", "del", "ib0", "0x8001", "--json", "--control", sock).(map[string]any)
	if del["name"] != "ib0.8001" || del["deleted"] != true || del["pkey"] != float64(0x8001) {
		t.Errorf("child del --json: %v", del)
	}
	pcap := filepath.Join(t.TempDir(), "c.pcap")
	var capOut, capErr string
	var capCode int
	done := make(chan struct{})
	go func() {
		defer close(done)
		capOut, capErr, capCode = pibgw(t, "capture", "-w", pcap, "-c", "2", "--json", "--control", sock)
	}()
	for waiting := true; waiting; {
		d.Fabric.SM.Resweep() // SMPs on every cable
		select {
		case <-done:
			waiting = false
		case <-time.After(time.Millisecond):
		}
	}
	var capt map[string]any
	if err := json.Unmarshal([]byte(capOut), &capt); capCode != 0 || err != nil {
		t.Fatalf("capture --json: exit %d, %v, stdout %q, stderr %q", capCode, err, capOut, capErr)
	}
	if capt["file"] != pcap || capt["packets"] != float64(2) {
		t.Errorf("capture --json: %v", capt)
	}
	stat := decode("stat", "--json", "--control", sock).([]any)[0].(map[string]any)
	port := stat["ports"].([]any)[0].(map[string]any)
	if port["rate"] != float64(120) || port["base_lid"] != float64(1) {
		t.Errorf("stat --json port %v", port)
	}
	if v := decode("stat", "-l", "--json", "--control", sock); !sameJSON(v, []any{"pib_0", "pib_1"}) {
		t.Errorf("stat -l --json: %v", v)
	}
	if v := decode("devinfo", "-l", "--json", "--control", sock); !sameJSON(v, []any{"pib_0", "pib_1"}) {
		t.Errorf("devinfo -l --json: %v", v)
	}
	if v := decode("stat", "-p", "--json", "--control", sock); !sameJSON(v, []any{"0x0002c90300000301", "0x0002c90300000401"}) {
		t.Errorf("stat -p --json: %v", v)
	}
	// up takes it too: JSON log lines (the bad file is reported before any logging).
	if _, errs, code := pibgw(t, "up", "--json", "--config", "/nonexistent.toml"); code != 1 || strings.Contains(errs, "flag provided") {
		t.Errorf("up --json: exit %d, %q", code, errs)
	}
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestInProcessNote: devinfo and stat with no daemon fail, saying so, unless --inproc,
// and then say on stderr what they show.
func TestInProcessNote(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	defer os.Setenv("PIBGW_INPROC", os.Getenv("PIBGW_INPROC"))
	os.Unsetenv("PIBGW_INPROC")
	for _, verb := range []string{"devinfo", "stat"} {
		out, errs, code := pibgwRaw(verb, "--control", sock, "--inproc")
		want := "pibgw: no daemon at " + sock + "; showing the default fabric built in process\n"
		if code != 0 || errs != want || !strings.Contains(out, "pib_0") {
			t.Errorf("%s --inproc: exit %d, stderr %q; want %q", verb, code, errs, want)
		}
		// Without --inproc, no daemon is an error: scripts check that the daemon is up so.
		out, errs, code = pibgwRaw(verb, "--control", sock)
		want = "pibgw: no daemon running at " + sock + " (start one with: sudo pibgw up); --inproc shows the default fabric built in this process\n"
		if code != 1 || out != "" || errs != want {
			t.Errorf("%s with no daemon: exit %d, stdout %q, stderr %q; want exit 1 and %q", verb, code, out, errs, want)
		}
	}
}
