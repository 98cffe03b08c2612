package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
)

// controlFlag is --control, which every verb that can talk to a daemon takes.
func controlFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "control",
		Value:   control.DefaultPath,
		Usage:   "the daemon's control socket `PATH`",
		EnvVars: []string{"PIBGW_CONTROL"},
	}
}

// client returns the control client for the verb's --control.
func client(c *cli.Context) *control.Client { return control.NewClient(c.String("control")) }

// inProcessFabric builds the default fabric — what `pibgw up` runs with no
// configuration: pib_0 and pib_1 on one managed switch, the built-in SM on pib_0 port 1 —
// and waits for the SM's first sweep.
func inProcessFabric(log *slog.Logger) (*daemon.Fabric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Default()
	cfg.IBSim.Enable = false // a running daemon may hold the ibsim socket name
	return daemon.BuildFabric(ctx, cfg, log)
}

// inprocFlag lets devinfo and stat, with no daemon running, show the default fabric
// built in this process; without it they fail, so that scripts can use them to check
// that the daemon is up.
func inprocFlag() cli.Flag {
	return &cli.BoolFlag{
		Name:    "inproc",
		Usage:   "with no daemon running, show the default fabric built in this process instead of failing",
		EnvVars: []string{"PIBGW_INPROC"},
	}
}

// devices returns the running daemon's HCAs, or, with no daemon running and inproc,
// those of an in-process default fabric.
func (e *env) devices(c *cli.Context, inproc bool) ([]control.Device, error) {
	var devs []control.Device
	err := client(c).Do(c.Context, control.Request{Verb: control.VerbDevinfo}, &devs)
	if err == nil {
		return devs, nil
	}
	if !control.IsNoDaemon(err) {
		return nil, err
	}
	if !inproc {
		return nil, fmt.Errorf("%w; --inproc shows the default fabric built in this process", err)
	}
	fmt.Fprintf(e.stderr, "pibgw: no daemon at %s; showing the default fabric built in process\n", c.String("control"))
	f, err := inProcessFabric(e.log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Devices(), nil
}
