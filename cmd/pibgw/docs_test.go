package main

// TestDocsQuotedOutputs runs the commands whose output README.md and docs/*.md quote, and
// fails when the program no longer prints what the documents say.
//
// A quoted output is marked by an HTML comment on the line before its fenced block:
//
//	<!-- check -->                     the block's first line is "$ pibgw ARGS", the rest its output
//	<!-- check: pibgw ARGS -->         the block is the output of pibgw ARGS
//	<!-- check-file: NAME -->          the block is written to NAME (e.g. a configuration) first
//
// Options go between "check" and the colon, separated by spaces:
//
//	exit=N     the exit status (default 0)
//	daemon     run against a daemon with the default configuration (fake network backend: no
//	           root, no namespaces), whose control socket the command is given
//	excerpt    the block's lines appear, in order and consecutively, somewhere in the output
//
// Commands run in process (the binary's run function) in a temporary directory that holds the
// check-file files, with stdout and stderr together. Normalisation before comparing:
//
//   - the control socket the test uses is written as /run/pibgw/pibgw.sock (with no daemon,
//     one that does not exist);
//   - a line that is only "…" stands for any number of lines, and "…" within a line for any
//     text (for counters, times, pids);
//   - trailing white space of each line, and blank lines at the end, are ignored.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/internal/config"
)

type docCheck struct {
	file    string // where, for messages: docs/x.md:12
	args    []string
	exit    int
	daemon  bool
	excerpt bool
	want    []string
}

type docFile struct {
	name string
	data []byte
}

const docControl = "/run/pibgw/pibgw.sock"

func TestDocsQuotedOutputs(t *testing.T) {
	root := filepath.Join("..", "..")
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	n := 0
	for _, p := range paths {
		checks, files, err := parseDocChecks(p, root)
		if err != nil {
			t.Fatal(err)
		}
		if len(checks) == 0 {
			continue
		}
		dir := t.TempDir()
		for _, f := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f.name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range checks {
			n++
			t.Run(c.file, func(t *testing.T) { runDocCheck(t, dir, c) })
		}
	}
	if n < 5 {
		t.Errorf("found %d checked outputs in README.md and docs/; the markers are missing", n)
	}
}

func runDocCheck(t *testing.T, dir string, c docCheck) {
	t.Chdir(dir)
	sock := filepath.Join(t.TempDir(), "pibgw.sock")
	if c.daemon {
		sock, _ = fakeDaemon(t, config.Default(), nil)
	}
	t.Setenv("PIBGW_CONTROL", sock)
	// The commands as a user runs them: TestMain's PIBGW_INPROC would make stat and devinfo
	// fall back to an in-process fabric.
	t.Setenv("PIBGW_INPROC", "")
	os.Unsetenv("PIBGW_INPROC")
	var out bytes.Buffer
	code := run(append([]string{"pibgw"}, c.args...), &out, &out)
	got := strings.ReplaceAll(out.String(), sock, docControl)
	if code != c.exit {
		t.Errorf("%s: pibgw %s: exit status %d, the document says %d; output:\n%s", c.file, strings.Join(c.args, " "), code, c.exit, got)
	}
	lines := docLines(got)
	ok := false
	if c.excerpt {
		for i := 0; i <= len(lines) && !ok; i++ {
			ok = matchLines(c.want, lines[i:], true)
		}
	} else {
		ok = matchLines(c.want, lines, false)
	}
	if !ok {
		t.Errorf("%s: pibgw %s prints what the document does not quote (update the document, or the program):\n--- document\n%s\n--- program\n%s",
			c.file, strings.Join(c.args, " "), strings.Join(c.want, "\n"), strings.Join(lines, "\n"))
	}
}

// docLines splits s into lines without trailing white space or trailing blank lines.
func docLines(s string) []string {
	var l []string
	for _, x := range strings.Split(s, "\n") {
		l = append(l, strings.TrimRight(x, " \t\r"))
	}
	for len(l) > 0 && l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}

// matchLines reports whether got matches the pattern want ("…" lines and "…" in lines);
// with prefix, got may have more lines after the match.
func matchLines(want, got []string, prefix bool) bool {
	if len(want) == 0 {
		return prefix || len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "…" {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:], prefix) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && matchLine(want[0], got[0]) && matchLines(want[1:], got[1:], prefix)
}

func matchLine(want, got string) bool {
	if !strings.Contains(want, "…") {
		return want == got
	}
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got)
}

var checkMarker = regexp.MustCompile(`^<!--\s*(check(?:-file)?)\b([^:]*?)(?::\s*(.*?))?\s*-->$`)

// parseDocChecks reads the markers of one markdown file.
func parseDocChecks(path, root string) ([]docCheck, []docFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	rel, _ := filepath.Rel(root, path)
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	var checks []docCheck
	var files []docFile
	for i := 0; i < len(lines); i++ {
		m := checkMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		where := rel + ":" + strconv.Itoa(i+1)
		// The fenced block follows, after blank lines at most.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j >= len(lines) || !strings.HasPrefix(lines[j], "```") {
			return nil, nil, fmt.Errorf("%s: a %s marker must be followed by a fenced block", where, m[1])
		}
		var block []string
		k := j + 1
		for ; k < len(lines) && !strings.HasPrefix(lines[k], "```"); k++ {
			block = append(block, lines[k])
		}
		if k >= len(lines) {
			return nil, nil, fmt.Errorf("%s: the fenced block is not closed", where)
		}
		i = k
		if m[1] == "check-file" {
			name := strings.TrimSpace(m[2] + m[3])
			if name == "" {
				return nil, nil, fmt.Errorf("%s: check-file needs a file name", where)
			}
			files = append(files, docFile{name, []byte(strings.Join(block, "\n") + "\n")})
			continue
		}
		c := docCheck{file: where}
		for _, o := range strings.Fields(m[2]) {
			switch {
			case o == "daemon":
				c.daemon = true
			case o == "excerpt":
				c.excerpt = true
			case strings.HasPrefix(o, "exit="):
				if c.exit, err = strconv.Atoi(strings.TrimPrefix(o, "exit=")); err != nil {
					return nil, nil, fmt.Errorf("%s: bad option %q", where, o)
				}
			default:
				return nil, nil, fmt.Errorf("%s: unknown check option %q", where, o)
			}
		}
		cmd := strings.TrimSpace(m[3])
		if cmd == "" {
			if len(block) == 0 || !strings.HasPrefix(block[0], "$ ") {
				return nil, nil, fmt.Errorf("%s: <!-- check --> needs a block whose first line is \"$ pibgw ARGS\"", where)
			}
			cmd, block = strings.TrimPrefix(block[0], "$ "), block[1:]
		}
		args := strings.Fields(cmd)
		if len(args) == 0 || args[0] != "pibgw" {
			return nil, nil, fmt.Errorf("%s: the checked command must start with pibgw: %q", where, cmd)
		}
		c.args = args[1:]
		c.want = docLines(strings.Join(block, "\n"))
		checks = append(checks, c)
	}
	return checks, files, nil
}

// TestREADMEShort: the README says what pibgw is, the quick start, one example per use, the
// status and links, in at most 300 lines; the rest belongs in docs/ (issue 44).
func TestREADMEShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the details into a guide under docs/", n)
	}
	if !bytes.Contains(b, []byte("bash scripts/test.sh")) {
		t.Errorf("README.md does not name the test command, bash scripts/test.sh")
	}
}

// TestDocsLinks: every relative link in README.md and docs/*.md names a file of the
// repository (and, for a markdown file, a heading of it when the link has an anchor).
func TestDocsLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	paths, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	link := regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]+)?\)`)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, anchor := m[1], m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file := p
			if target != "" {
				file = filepath.Join(filepath.Dir(p), target)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link to %s: no such file", rel, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(t, file, anchor[1:]) {
				t.Errorf("%s: link to %s%s: no such heading", rel, target, anchor)
			}
		}
	}
}

// hasAnchor reports whether the markdown file has a heading whose GitHub anchor is a.
func hasAnchor(t *testing.T, file, a string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile("[^a-z0-9 _-]")
	for _, l := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && strings.HasPrefix(l, "#") {
			if strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-") == a {
				return true
			}
		}
	}
	return false
}
