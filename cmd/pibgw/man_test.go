package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// TestManPagesCurrent: docs/man/ holds exactly the man pages the current CLI generates, so
// the checked-in command reference cannot drift from the commands' definitions.
func TestManPagesCurrent(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if rc := run([]string{"pibgw", "man", "--dir", dir}, &out, &out); rc != 0 {
		t.Fatalf("pibgw man --dir: status %d: %s", rc, out.String())
	}
	want := manFiles(t, dir)
	have := manFiles(t, filepath.Join("..", "..", "docs", "man"))
	const fix = "docs/man/ is not what the CLI generates: run scripts/gen-docs.sh and commit docs/man/"
	for name, w := range want {
		h, ok := have[name]
		switch {
		case !ok:
			t.Errorf("%s missing; %s", name, fix)
		case !bytes.Equal(h, w):
			t.Errorf("%s differs from the generated page; %s", name, fix)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is no longer generated (a command was removed?); %s", name, fix)
		}
	}
	if _, ok := want["pibgw.1"]; !ok || len(want) < 2 {
		t.Errorf("generated %d pages, want pibgw.1 and one per command", len(want))
	}
}

// TestManPrintsMainPage: `pibgw man` prints pibgw(1), which lists every visible command.
func TestManPrintsMainPage(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"pibgw", "man"}, &out, &errb); rc != 0 {
		t.Fatalf("pibgw man: status %d: %s", rc, errb.String())
	}
	for _, c := range newApp(&out, &errb).Commands {
		if c.Hidden || c.Name == "help" {
			continue
		}
		if !bytes.Contains(out.Bytes(), []byte(`\fBpibgw-`+c.Name+`\fP(1)`)) {
			t.Errorf("pibgw(1) does not name pibgw-%s(1)", c.Name)
		}
	}
	var help bytes.Buffer
	run([]string{"pibgw", "--help"}, &help, &help)
	if regexp.MustCompile(`(?m)^\s+man\s`).Match(help.Bytes()) {
		t.Errorf("pibgw --help lists the hidden man command:\n%s", help.String())
	}
}

func manFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	m := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(n)] = b
	}
	return m
}
