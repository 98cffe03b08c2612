package main

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// usageError is a mistake in the command line: run prints it on one line and a hint to
// the verb's help, not the whole help text.
type usageError struct {
	verb string // "child add"; "" for the program
	err  error
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// hint is the line printed after a usage error.
func (u *usageError) hint() string {
	if u.verb == "" {
		return "Run 'pibgw help' for usage."
	}
	return fmt.Sprintf("Run 'pibgw %s --help' for usage.", u.verb)
}

// verbName is the command path of c without the program name ("child add").
func verbName(c *cli.Context) string {
	if c.Command == nil {
		return ""
	}
	name := c.Command.HelpName
	if name == "" {
		name = c.Command.Name
	}
	return strings.TrimSpace(strings.TrimPrefix(name, "pibgw"))
}

// usagef makes a usage error for c's verb.
func usagef(c *cli.Context, format string, args ...any) error {
	verb := verbName(c)
	msg := fmt.Sprintf(format, args...)
	if verb != "" {
		msg = verb + ": " + msg
	}
	return &usageError{verb: verb, err: errors.New(msg)}
}

// onUsageError turns urfave/cli's flag errors into usage errors.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return usagef(c, "%v", err)
}

// unknownVerb answers a verb that does not exist with the nearest one.
func unknownVerb(cmds []*cli.Command, parent string) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			if parent == "" {
				return cli.ShowAppHelp(c)
			}
			return cli.ShowSubcommandHelp(c)
		}
		name := c.Args().First()
		var names []string
		for _, cmd := range cmds {
			if !cmd.Hidden {
				names = append(names, cmd.Names()...)
			}
		}
		what := "command"
		if parent != "" {
			what = parent + " command"
		}
		msg := fmt.Sprintf("unknown %s %q", what, name)
		if near := nearest(name, names); near != "" {
			msg += fmt.Sprintf("; did you mean %q?", near)
		}
		return &usageError{verb: parent, err: errors.New(msg)}
	}
}

// nearest is the name closest to s by edit distance, if it is close (at most a third of
// the longer word, and at least one letter matches).
func nearest(s string, names []string) string {
	best, bestD := "", 1<<30
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	if bestD > max(len(s), len(best))/3+1 || bestD >= max(len(s), len(best)) {
		return ""
	}
	return best
}

// editDistance is the Damerau–Levenshtein (optimal string alignment) distance: a swap of
// two neighbouring letters counts once ("shwo" → "show").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// revision is the source revision when the build says it (scripts/build.sh:
// go build -ldflags "-X main.revision=$(git describe --always --dirty)"); Go stamps it
// itself (vcs.revision) only when it builds a main package inside a git work tree with
// git on the PATH and -buildvcs not off.
var revision string

// version is the module version and VCS revision the binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " revision " + rev
		if modified {
			v += " (modified)"
		}
		if when != "" {
			v += " " + when
		}
	} else if revision != "" {
		v += " revision " + revision
	} else {
		v += " (revision unknown: built without VCS stamping; scripts/build.sh stamps it)"
	}
	return v + ", " + bi.GoVersion
}

// setUsageHandlers gives every command the one-line usage errors and unknown-subcommand
// answers.
func setUsageHandlers(cmds []*cli.Command, parent string) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		if len(c.Subcommands) > 0 {
			name := strings.TrimSpace(parent + " " + c.Name)
			if c.Action == nil {
				c.Action = unknownVerb(c.Subcommands, name)
			}
			setUsageHandlers(c.Subcommands, name)
		}
	}
}
