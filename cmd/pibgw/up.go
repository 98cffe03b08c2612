package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/lifecycle"
	"github.com/pibgw/pibgw/tun"
)

func upCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "up",
		Usage: "run the fabric and its IPoIB interfaces in the foreground",
		Description: "Builds the fabric (HCAs, a managed switch, the built-in SM and SA), creates the network\n" +
			"namespaces, TUN devices and IPoIB interfaces of the configuration, and serves the control\n" +
			"socket. With no --config it runs the default: pib_0 and pib_1, ib0 (10.10.0.1/24) in netns\n" +
			"pib0 and ib1 (10.10.0.2/24) in netns pib1. SIGINT, SIGTERM or SIGHUP removes every TUN\n" +
			"device and namespace it created, and the socket.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "configuration `FILE` (TOML; default: the built-in defaults)"},
			&cli.StringFlag{Name: "control", Usage: "control socket `PATH` (default: daemon.control, " + control.DefaultPath + ")", EnvVars: []string{"PIBGW_CONTROL"}},
			&cli.BoolFlag{Name: "userspace", Usage: "run every interface on a userspace netstack instead of a kernel TUN device (no root needed)"},
			&cli.BoolFlag{Name: "json", Usage: "log as JSON lines (log/slog's JSON handler) instead of text"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			cfg := config.Default()
			if path := c.String("config"); path != "" {
				var err error
				if cfg, err = config.Load(path); err != nil {
					return err
				}
			}
			if c.IsSet("control") {
				cfg.Daemon.Control = c.String("control")
			}
			if c.Bool("userspace") {
				for i := range cfg.Interfaces {
					cfg.Interfaces[i].Stack = config.StackUserspace
				}
			}
			level := cfg.Daemon.LogLevel
			if c.IsSet("log-level") {
				level = e.level
			}
			log := daemonLogger(e.stderr, level, c.Bool("json"))
			tun.SetNetstackLogger(log) // gVisor's own log lines in the same format
			setMaxProcs(cfg.Daemon.MaxProcs, log)
			return up(c.Context, cfg, log)
		},
	}
}

// setMaxProcs applies daemon.max_procs, unless the GOMAXPROCS environment variable
// already chose.
func setMaxProcs(n int, log *slog.Logger) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if n == 0 {
		n = config.AutoMaxProcs(runtime.NumCPU())
	}
	runtime.GOMAXPROCS(n)
	log.Debug("scheduler", "max_procs", n, "cpus", runtime.NumCPU())
}

// logWriteErrors counts the daemon's log lines that could not be written (stderr a pipe
// whose reader exited, a full disk): status reports it, and the last log line.
var logWriteErrors atomic.Uint64

// logWriter is the daemon's log output: a failed write is counted, not fatal.
type logWriter struct{ w io.Writer }

func (c logWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		logWriteErrors.Add(1)
	}
	return n, err
}

// daemonLogger is the log of `pibgw up` and `pibgw switch` on stderr (JSON lines or
// text). SIGPIPE is caught first, for the process's whole life, so a write to a stderr
// pipe whose reader exited fails with EPIPE (counted) instead of killing the daemon
// before it cleans up: the Go runtime kills a program that does not catch SIGPIPE when a
// write on descriptor 1 or 2 meets a broken pipe (os/signal, "SIGPIPE"). Caught, not
// ignored: an ignored SIGPIPE would be inherited by the programs the daemon starts.
func daemonLogger(stderr io.Writer, level slog.Leveler, json bool) *slog.Logger {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // never read: the signal is dropped
	w := logWriter{stderr}
	if json {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// stopSignals stop the daemon cleanly. SIGHUP (its terminal closed) is one, as for
// daemons without a configuration to reload (opensm, ...): the default action would kill
// it with its namespaces and sockets left behind.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// up runs the daemon until SIGINT, SIGTERM or SIGHUP.
func up(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	for _, it := range cfg.Interfaces {
		if it.Stack == config.StackKernel && os.Geteuid() != 0 {
			return fmt.Errorf("up: interface %s needs root for its kernel TUN device and namespace (run with sudo, or use --userspace for netstack interfaces)", it.Name)
		}
	}
	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()
	// PIBGW_CPUPROFILE=FILE profiles the daemon from start to stop (go tool pprof FILE).
	if f := os.Getenv("PIBGW_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			return fmt.Errorf("up: PIBGW_CPUPROFILE: %w", err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			return fmt.Errorf("up: PIBGW_CPUPROFILE: %w", err)
		}
		defer func() { pprof.StopCPUProfile(); out.Close() }()
	}
	path := cfg.Daemon.Control
	// The state file first: it is locked for the daemon's life, so a daemon started
	// while the previous one still cleans up waits for it instead of racing it.
	statePath := cfg.Daemon.State
	if statePath == "" {
		statePath = lifecycle.PathFor(path)
	}
	st, err := lifecycle.Acquire(ctx, statePath, stateWait, lifecycle.Record{PID: os.Getpid(), Control: path, Started: time.Now()},
		func(holder lifecycle.Record) error {
			// A holder that still answers on its socket runs; one that stops does not.
			cl := control.NewClient(holder.Control)
			cl.Timeout = 200 * time.Millisecond
			var st control.Status
			if holder.Control == "" || cl.Do(ctx, control.Request{Verb: control.VerbStatus}, &st) != nil {
				return nil
			}
			return fmt.Errorf("a daemon is already running at %s (pid %d); stop it first", holder.Control, st.PID)
		})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("up: %w", err)
	}
	defer func() {
		if err := st.Release(); err != nil {
			log.Warn("removing state file", "path", statePath, "err", err)
		}
	}()
	adopt := cleanPrevious(st, cfg, log)
	ln, err := listenControl(ctx, path)
	if err != nil {
		return err
	}
	defer removeSocket(path, ln, log)
	d, err := daemon.Start(ctx, daemon.Options{Config: cfg, Logger: log, Adopt: adopt,
		OnNetNS: func(created []string) {
			if err := st.SetNetNS(created); err != nil {
				log.Warn("state file", "err", err)
			}
		}})
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted during start-up: everything is cleaned up
		}
		return fmt.Errorf("up: %w", err)
	}
	h := &daemon.Handler{D: d, ControlPath: path, LogWriteErrors: logWriteErrors.Load}
	if ap := cfg.Daemon.AttachPath(); ap != "" {
		aln, err := attach.Listen(ap, cfg.Daemon.AttachMode)
		if err != nil {
			d.Close()
			return fmt.Errorf("up: %w (choose another with daemon.attach, or \"none\")", err)
		}
		// Every descriptor the hard limit allows: the attach server sizes its connection
		// limit from it and leaves a reserve (attach.FDReserve) to the control socket.
		if _, err := attach.RaiseFileLimit(); err != nil {
			log.Warn("raising RLIMIT_NOFILE", "err", err)
		}
		h.Attach = &attach.Server{Devices: d.Fabric.Devs, Host: d.RDMA, Logger: log, Observed: d.Fabric.Observed,
			Limits: attach.Limits{MaxProcesses: cfg.Daemon.AttachMaxProcesses, MaxPerUser: cfg.Daemon.AttachMaxPerUser,
				HelloTimeout: cfg.Daemon.AttachHelloTimeout, MaxQPs: cfg.Daemon.AttachMaxQPs}}
		d.Fabric.OnObserved = h.Attach.Invalidate
		h.AttachPath = ap
		go h.Attach.Serve(aln)
		defer os.Remove(ap)
	}
	srv := &control.Server{Handler: h, Logger: log}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	src := cfg.Source
	if src == "" {
		src = "defaults"
	}
	log.Info("pibgw up", "config", src, "control", path, "attach", h.AttachPath, "interfaces", len(cfg.Interfaces), "pid", os.Getpid())
	sdNotify("READY=1\nSTATUS=fabric up, control socket " + path)
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case serveErr = <-served:
		log.Error("control socket failed; shutting down", "err", serveErr)
	}
	sdNotify("STOPPING=1")
	srv.Close()
	if h.Attach != nil {
		h.Attach.Close() // attached processes see the channel close, then the fabric stops
	}
	if err := d.Close(); err != nil {
		log.Error("shutdown", "err", err)
	}
	if n := logWriteErrors.Load(); n > 0 {
		log.Info("pibgw down", "log_write_errors", n)
	} else {
		log.Info("pibgw down")
	}
	if serveErr != nil {
		return fmt.Errorf("up: control socket: %w", serveErr)
	}
	return nil
}

// listenControl creates the control socket: its directory, no live daemon on it (a
// stale socket is removed), mode 0600.
func listenControl(ctx context.Context, path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("up: control socket %s: %w (choose another with --control)", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("up: %s exists and is not a socket; remove it or choose another --control", path)
		}
		cl := control.NewClient(path)
		cl.Timeout = 2 * time.Second
		var st control.Status
		err := cl.Do(ctx, control.Request{Verb: control.VerbStatus}, &st)
		switch {
		case err == nil:
			return nil, fmt.Errorf("up: a daemon is already running at %s (pid %d); stop it first", path, st.PID)
		case control.IsNoDaemon(err):
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("up: removing stale control socket: %w", err)
			}
		default:
			return nil, fmt.Errorf("up: %s exists and does not answer as a pibgw daemon (%v); remove it or choose another --control", path, err)
		}
	}
	old := syscall.Umask(0o177) // the socket is born 0600
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("up: control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("up: control socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

func removeSocket(path string, ln net.Listener, log *slog.Logger) {
	ln.Close()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("removing control socket", "path", path, "err", err)
	}
}

// stateWait bounds how long `pibgw up` waits for a previous daemon on the same state
// file to finish its cleanup.
const stateWait = 10 * time.Second

// cleanPrevious handles what a killed daemon left (its state file's record): the
// namespaces this configuration uses again are adopted (the daemon deletes them at its
// exit), the others are deleted now. It returns the namespaces to adopt.
func cleanPrevious(st *lifecycle.State, cfg *config.Config, log *slog.Logger) []string {
	prev := st.Prev
	if prev == nil || len(prev.NetNS) == 0 {
		return nil
	}
	log.Warn("a previous daemon exited without cleaning up", "pid", prev.PID, "netns", prev.NetNS, "state", st.Path())
	var adopt, left []string
	for _, ns := range prev.NetNS {
		used := false
		for _, it := range cfg.Interfaces {
			used = used || (it.Stack == config.StackKernel && it.NetNS == ns)
		}
		switch {
		case used:
			adopt = append(adopt, ns)
			left = append(left, ns)
		case !tun.NetNSExists(ns):
		default:
			// Through its lock: another daemon may use it (it then deletes it last).
			res, err := releasePrevious(ns)
			switch {
			case err != nil:
				log.Error("deleting a previous daemon's namespace", "netns", ns, "err", err)
				left = append(left, ns)
			case res == tun.NetNSDeleted:
				log.Info("namespace deleted", "netns", ns, "created_by_pid", prev.PID)
			case res == tun.NetNSInUse:
				log.Info("a previous daemon's namespace is left to the daemon that uses it", "netns", ns, "created_by_pid", prev.PID)
			}
		}
	}
	if err := st.SetNetNS(left); err != nil {
		log.Warn("state file", "err", err)
	}
	return adopt
}

// releasePrevious deletes a namespace a killed daemon created unless another daemon
// uses it (tun.NetNSLock).
func releasePrevious(ns string) (tun.NetNSRelease, error) {
	l, err := tun.LockNetNS(tun.NetNSLockDir, ns)
	if err != nil {
		return tun.NetNSKept, err
	}
	if err := l.MarkCreated(); err != nil {
		l.Release(false)
		return tun.NetNSKept, err
	}
	return l.Release(true)
}

// sdNotify tells systemd (Type=notify units) about the daemon's state: READY=1 once
// the fabric and the control socket are up, STOPPING=1 at shutdown (sd_notify(3)).
// Without $NOTIFY_SOCKET it does nothing.
func sdNotify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(state))
}
