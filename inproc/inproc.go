// Package inproc builds a whole pibgw fabric inside a Go program, from the same TOML
// configuration `pibgw up` reads: soft HCAs (pib_0 …), the managed switch, the built-in
// subnet manager and SA, and the IPoIB interfaces — each on a userspace netstack, so
// nothing needs root, a kernel module or cgo. It is the daemon's own code (pibgw up
// runs the same internal/daemon), minus TUN devices and the control socket.
//
// A Go test gets RDMA devices, IP connectivity over IPoIB and rdma_cm in a few lines:
//
//	f, err := inproc.Start(ctx, inproc.Options{})   // the default fabric: ib0 10.10.0.1, ib1 10.10.0.2
//	defer f.Close()
//	l, _ := rdmacm.Listen(f.RDMA(), "10.10.0.2:7471")
//	c, _ := rdmacm.DialFrom(ctx, f.RDMA(), netip.MustParseAddr("10.10.0.1"), "10.10.0.2:7471")
package inproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/tun"
)

// Options choose the configuration; with neither field set, the default fabric runs
// (pib_0 and pib_1, ib0 10.10.0.1/24 and ib1 10.10.0.2/24).
type Options struct {
	// ConfigFile is a pibgw configuration file (docs/configuration.md).
	ConfigFile string
	// Config is a configuration as TOML text, instead of a file.
	Config string
	// Logger receives the fabric's logs (default: discarded).
	Logger *slog.Logger
	// Attach, if set, is a path where the fabric serves the attach socket, so that other
	// processes use its HCAs (attach.Dial) as they would a daemon's — no root needed.
	Attach string
}

// Fabric is a running in-process fabric.
type Fabric struct {
	d      *daemon.Daemon
	attach *attach.Server
}

// Start builds the fabric and brings its interfaces up (every one on a userspace
// netstack, whatever the configuration says): when it returns, ports are Active and
// the interfaces have joined their broadcast groups.
func Start(ctx context.Context, o Options) (*Fabric, error) {
	cfg := config.Default()
	var err error
	switch {
	case o.ConfigFile != "" && o.Config != "":
		return nil, fmt.Errorf("inproc: Options.ConfigFile and Options.Config are both set")
	case o.ConfigFile != "":
		cfg, err = config.Load(o.ConfigFile)
	case o.Config != "":
		cfg, err = config.Parse("inproc.Options.Config", []byte(o.Config))
	}
	if err != nil {
		return nil, err
	}
	for i := range cfg.Interfaces {
		cfg.Interfaces[i].Stack = config.StackUserspace
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := daemon.Start(ctx, daemon.Options{Config: cfg, Logger: log})
	if err != nil {
		return nil, err
	}
	f := &Fabric{d: d}
	if o.Attach != "" {
		ln, err := attach.Listen(o.Attach, 0o600)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("inproc: %w", err)
		}
		f.attach = &attach.Server{Devices: d.Fabric.Devs, Host: d.RDMA, Logger: log, Observed: d.Fabric.Observed,
			Limits: attach.Limits{MaxProcesses: cfg.Daemon.AttachMaxProcesses, MaxPerUser: cfg.Daemon.AttachMaxPerUser,
				HelloTimeout: cfg.Daemon.AttachHelloTimeout, MaxQPs: cfg.Daemon.AttachMaxQPs}}
		d.Fabric.OnObserved = f.attach.Invalidate
		go f.attach.Serve(ln)
	}
	return f, nil
}

// Devices are the fabric's HCAs in order (pib_0, pib_1, …).
func (f *Fabric) Devices() []*hca.Device { return f.d.Fabric.Devs }

// Attached lists the processes attached through Options.Attach.
func (f *Fabric) Attached() []attach.SessionInfo {
	if f.attach == nil {
		return nil
	}
	return f.attach.Sessions()
}

// RDMA is rdma_cm over the fabric's IPoIB interfaces: pass it to rdmacm.CreateID,
// rdmacm.Dial and rdmacm.Listen.
func (f *Fabric) RDMA() *rdmacm.IPoIBHost { return f.d.RDMA }

// Netstack is the userspace IP stack of interface name ("ib0"): DialContext, Listen and
// ListenPacket reach the other interfaces' addresses over IPoIB.
func (f *Fabric) Netstack(name string) (*tun.Netstack, error) {
	ns, ok := f.d.Device(name).(*tun.Netstack)
	if !ok {
		return nil, fmt.Errorf("inproc: no interface %q", name)
	}
	return ns, nil
}

// Device is HCA name ("pib_0"), for verbs: Open, AllocPD, CreateCQ, CreateQP….
func (f *Fabric) Device(name string) *hca.Device { return f.d.Fabric.Device(name) }

// Fault injects loss, duplication, reordering, corruption and delay on the cable of HCA
// port cable ("pib_0/1"), both directions, as `pibgw fault` does; the same Seed gives the
// same faults. A zero cfg removes them. cfg.Clock is not used (the fabric's clock is).
func (f *Fabric) Fault(cable string, cfg fabric.FaultConfig) error {
	_, err := f.d.Fabric.SetFault(cable, control.Fault{Loss: cfg.Loss, Duplicate: cfg.Duplicate,
		Reorder: cfg.Reorder, Corrupt: cfg.Corrupt, Delay: cfg.Delay, Seed: cfg.Seed})
	return err
}

// Close takes the fabric down (attached processes first see their channel close).
func (f *Fabric) Close() error {
	if f.attach != nil {
		f.attach.Close()
	}
	return f.d.Close()
}

// Inspect lists the verbs objects of kind ("" for all: hca.Kinds) that the processes
// attached through Options.Attach own — the one with pid, or all (pid 0) — as `pibgw
// inspect` shows them.
func (f *Fabric) Inspect(ctx context.Context, pid int, kind string) ([]hca.ObjectInfo, error) {
	if f.attach == nil {
		return nil, fmt.Errorf("inproc: no attach socket (Options.Attach)")
	}
	return f.attach.Inspect(ctx, pid, kind)
}
