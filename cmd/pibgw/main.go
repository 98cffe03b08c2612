// Command pibgw is the pibgw binary: the daemon, the switch daemon and the CLI verbs.
//
// Today it has one verb, devinfo, which builds the default fabric in process and prints
// its HCAs as ibv_devinfo does.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run executes the command line args (args[0] is the program name) and returns the
// process exit status. Errors go to stderr as one line.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	if err := app.Run(args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
		return 1
	}
	return 0
}

// env is what every verb gets: where to print and the logger the global flags chose.
type env struct {
	stdout, stderr io.Writer
	log            *slog.Logger
}

func newApp(stdout, stderr io.Writer) *cli.App {
	e := &env{stdout: stdout, stderr: stderr}
	return &cli.App{
		Name:  "pibgw",
		Usage: "a software InfiniBand fabric and IPoIB gateway",
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
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
			}
			e.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
			return nil
		},
		Commands:        []*cli.Command{devinfoCommand(e)},
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Errors are printed once, by run; never let the library call os.Exit.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}
