package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/tun"
)

// DefaultSwitchControl is the switch process's control socket, next to a host daemon's.
var DefaultSwitchControl = filepath.Join(filepath.Dir(control.DefaultPath), "switch.sock")

func switchCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "switch",
		Usage: "run a switch that the pibgw up of other hosts plug into over UDP",
		Description: "Runs a managed switch whose ports hosts connect to over UDP (fabric.switch in their\n" +
			"configuration), one port per HCA port, given by port GUID: a host that comes back gets\n" +
			"its port again. The built-in SM and SA run here, on an HCA pib_0 cabled to switch port 1\n" +
			"(--no-sm leaves them to a host with sm.mode = \"internal\"); hosts get ports 2..N. A full\n" +
			"switch refuses the next host, which logs the reason and retries. --config reads a\n" +
			"configuration file in pibgw up's format ([daemon], [fabric], [sm] with its partitions);\n" +
			"the flags override it. --topology builds the switches and links of an ibsim net file\n" +
			"instead of one switch; --uplink plugs a switch port into another switch process, so\n" +
			"that switches of several processes make one fabric. The control socket answers stat,\n" +
			"devinfo, nodes, counters, link and capture.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Aliases: []string{"l"}, Value: fmt.Sprintf(":%d", config.DefaultSwitchUDPPort), Usage: "UDP `ADDR:PORT` to serve hosts on"},
			&cli.IntFlag{Name: "ports", Aliases: []string{"n"}, Value: config.MaxSwitchPorts, Usage: "switch ports `N` (1..254), port 1 for the SM's HCA"},
			&cli.StringFlag{Name: "psk", Usage: "pre-shared key `FILE`: authenticate every datagram (ChaCha20-Poly1305)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "without --psk, accept hosts from `PREFIX` (repeatable; default loopback only)"},
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration `FILE` (TOML)"},
			&cli.StringFlag{Name: "control", Usage: "control socket `PATH` (default " + DefaultSwitchControl + ")", EnvVars: []string{"PIBGW_SWITCH_CONTROL"}},
			&cli.StringFlag{Name: "topology", Aliases: []string{"t"}, Usage: "build the switches and links of an ibsim net `FILE` (fabric.topology); its HCA ports are the host ports"},
			&cli.StringSliceFlag{Name: "uplink", Usage: "`PORT=HOST:PORT`: plug switch port PORT into the switch process at HOST:PORT (repeatable; fabric.uplinks)"},
			&cli.BoolFlag{Name: "no-sm", Usage: "run no SM here (a host runs it: sm.mode = \"internal\" there)"},
			&cli.DurationFlag{Name: "sweep", Value: time.Second, Usage: "the SM's light-sweep `INTERVAL` (how soon it sees hosts come and go)"},
			&cli.BoolFlag{Name: "json", Usage: "log as JSON lines"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			cfg, err := switchConfig(c)
			if err != nil {
				return err
			}
			level := cfg.Daemon.LogLevel
			if c.IsSet("log-level") {
				level = e.level
			}
			log := daemonLogger(e.stderr, level, c.Bool("json"))
			tun.SetNetstackLogger(log)
			setMaxProcs(cfg.Daemon.MaxProcs, log)
			return up(c.Context, cfg, log)
		},
	}
}

// switchConfig is the configuration a switch process runs: the file's (or one HCA, no
// interfaces, no attach socket) with the flags applied.
func switchConfig(c *cli.Context) (*config.Config, error) {
	var cfg *config.Config
	if path := c.String("config"); path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
		if cfg.Fabric.Switch != "" {
			return nil, fmt.Errorf("switch: %s: fabric.switch is set; a switch does not plug into another switch that way", path)
		}
	} else {
		var err error
		cfg, err = config.Parse("", []byte("interfaces = []\n[fabric]\nhca_count = 1\n[daemon]\nattach = \"none\"\n"))
		if err != nil {
			return nil, err
		}
		cfg.Daemon.Control = DefaultSwitchControl
		cfg.SM.SweepInterval = c.Duration("sweep")
	}
	if c.IsSet("sweep") {
		cfg.SM.SweepInterval = c.Duration("sweep")
	}
	if c.IsSet("control") || c.String("control") != "" {
		cfg.Daemon.Control = c.String("control")
	}
	if c.IsSet("listen") || cfg.Fabric.Listen == "" {
		cfg.Fabric.Listen = c.String("listen")
	}
	if path := c.String("topology"); path != "" {
		t, err := config.LoadTopology(path)
		if err != nil {
			return nil, fmt.Errorf("switch: --topology: %w", err)
		}
		cfg.Fabric.Topology, cfg.Fabric.TopologyFile = t, path
	}
	if cfg.Fabric.Topology != nil {
		if c.IsSet("ports") {
			return nil, usagef(c, "--ports is not used with a topology (the file gives each switch its ports)")
		}
	} else if c.IsSet("ports") || c.String("config") == "" {
		n := c.Int("ports")
		if n < 1 || n > config.MaxSwitchPorts {
			return nil, usagef(c, "--ports %d out of range 1..%d", n, config.MaxSwitchPorts)
		}
		cfg.Fabric.SwitchPorts = n
	}
	if p := c.String("psk"); p != "" {
		k, err := config.ReadPSK(p)
		if err != nil {
			return nil, fmt.Errorf("switch: --psk: %w", err)
		}
		cfg.Fabric.PSK, cfg.Fabric.PSKFile = k, p
	}
	for _, s := range c.StringSlice("allow") {
		pf, err := config.ParsePrefixOrAddr(s)
		if err != nil {
			return nil, usagef(c, "--allow %q: want an address or a prefix such as 10.0.0.0/24", s)
		}
		cfg.Fabric.Allow = append(cfg.Fabric.Allow, pf)
	}
	for _, u := range c.StringSlice("uplink") {
		ps, addr, ok := strings.Cut(u, "=")
		port, err := strconv.Atoi(ps)
		if !ok || err != nil || port < 1 || port > cfg.Fabric.SwitchPorts || addr == "" {
			return nil, usagef(c, "--uplink %q: want PORT=HOST:PORT with PORT in 1..%d", u, cfg.Fabric.SwitchPorts)
		}
		if cfg.Fabric.Topology != nil {
			return nil, usagef(c, "--uplink is not used with a topology")
		}
		cfg.Fabric.Uplinks = append(cfg.Fabric.Uplinks, config.Uplink{Port: port, Switch: addr})
	}
	if c.Bool("no-sm") {
		cfg.SM.Mode = config.SMExternal
	}
	total := 0
	for _, h := range cfg.Fabric.HCAs {
		total += h.Ports
	}
	if t := cfg.Fabric.Topology; t != nil {
		if n := len(config.TopologyHCAPorts(t)); total >= n {
			return nil, fmt.Errorf("switch: %s has %d HCA ports: none left for hosts after the %d of the local HCAs", cfg.Fabric.TopologyFile, n, total)
		}
	} else if total >= cfg.Fabric.SwitchPorts {
		return nil, fmt.Errorf("switch: %d ports leave none for hosts after the %d of the local HCAs", cfg.Fabric.SwitchPorts, total)
	}
	return cfg, nil
}
