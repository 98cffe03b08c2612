// Command pibgw is the pibgw binary: the daemon, the switch daemon and the CLI verbs.
//
// `pibgw up` runs the fabric and its IPoIB interfaces (internal/daemon) and serves the
// control socket (internal/control); show, neigh, child, capture, devinfo and stat talk
// to it. devinfo and stat build the default fabric in process when no daemon runs.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run executes the command line args (args[0] is the program name) and returns the
// process exit status. Errors go to stderr as one line.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	if err := app.Run(interspersed(app, args)); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(stderr, ue.hint())
			return 2
		}
		return 1
	}
	return 0
}

// env is what every verb gets: where to print and the logger the global flags chose.
type env struct {
	stdout, stderr io.Writer
	log            *slog.Logger
	level          slog.Level
}

func newApp(stdout, stderr io.Writer) *cli.App {
	e := &env{stdout: stdout, stderr: stderr}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintf(c.App.Writer, "pibgw %s\n", c.App.Version) }
	cmds := []*cli.Command{
		upCommand(e), showCommand(e), neighCommand(e), modeCommand(e), childCommand(e), captureCommand(e),
		devinfoCommand(e), statCommand(e), psCommand(e), execCommand(e), devnodesCommand(e), switchCommand(e), nodesCommand(e), countersCommand(e),
		inspectCommand(e), injectCommand(e), linkCommand(e), faultCommand(e), traceCommand(e), mannerCommand(e),
		genkeyCommand(e), partitionCommand(e),
	}
	cmds = append(cmds, manCommand(e)) // hidden: the man pages (man.go)
	setUsageHandlers(cmds, "")
	return &cli.App{
		Name:         "pibgw",
		Usage:        "a software InfiniBand fabric and IPoIB gateway",
		Version:      version(),
		Action:       unknownVerb(cmds, ""),
		OnUsageError: onUsageError,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "log-level",
				Value:   "warn",
				Usage:   "log level: debug, info, warn or error",
				EnvVars: []string{"PIBGW_LOG_LEVEL"},
			},
		},
		Before: func(c *cli.Context) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return usagef(c, "--log-level %q: want debug, info, warn or error", c.String("log-level"))
			}
			e.level = lvl
			e.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
			return nil
		},
		Commands:  cmds,
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by run; never let the library call os.Exit.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// interspersed moves a verb's flags in front of its arguments, so that
// `pibgw child add ib0 0x8001 --addr 10.20.0.1/24` works: urfave/cli stops reading flags
// at the first argument. Everything after "--" stays as it is.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// Global flags and the command path.
	cmds := app.Commands
	var cmd *cli.Command
	for len(rest) > 0 {
		a := rest[0]
		if strings.HasPrefix(a, "-") {
			if cmd == nil && !strings.Contains(a, "=") && takesValue(app.Flags, a) && len(rest) > 1 {
				out = append(out, a, rest[1])
				rest = rest[2:]
				continue
			}
			if cmd == nil {
				out = append(out, a)
				rest = rest[1:]
				continue
			}
			break
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd = next
		cmds = next.Subcommands
		out = append(out, a)
		rest = rest[1:]
	}
	if cmd == nil {
		return append(out, rest...)
	}
	var flags, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && takesValue(cmd.Flags, a) && i+1 < len(rest) {
				flags = append(flags, rest[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	out = append(out, flags...)
	return append(out, pos...)
}

// takesValue reports whether the flag arg names (-x, --xx) takes a value.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if df, ok := f.(cli.DocGenerationFlag); ok {
				return df.TakesValue()
			}
			return true
		}
	}
	return false
}
