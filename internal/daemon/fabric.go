// Package daemon is the running pibgw: the fabric a configuration describes (HCAs, a
// managed switch, cables, the built-in SM and SA), the IPoIB interfaces on it with their
// IP side (kernel TUN devices in network namespaces, or userspace netstacks), P_Key
// children, captures, and the control API's handler.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/udplink"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/ibsim"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/trace"
	"github.com/pibgw/pibgw/ud"
)

// SwitchGUID is the node GUID of the fabric's switch: the HCAs' base with 0x02 in the
// OUI's following byte (0002:c902:…, as sa/satest numbers switches).
func SwitchGUID(base uint64) uint64 { return base&^0xFF_0000_0000 | 0x02_0000_0000 | 0x100 }

// Fabric is an in-process fabric built from a configuration: HCAs pib_0… with their
// agents and transports, one managed switch, a cable from every HCA port to the next
// free switch port, and the subnet manager and SA on the configured port.
type Fabric struct {
	Devs   []*hca.Device
	Switch *fabric.Switch // nil when the switch is another process (fabric.switch)
	// Switches are every switch of the process (fabric.topology), Switch the first.
	Switches    []*fabric.Switch
	switchNames []string
	swCables    []namedCable     // cables between switches
	hcaSwPorts  []int            // the switch port each HCA port's cable plugs into (0: a UDP link), by cable
	hostSlots   map[int]hostSlot // a switch process's host ports by number
	uplinks     []uplink         // switch ports plugged into other switch processes
	Cables      []*fabric.Cable
	SM          *sa.SM // nil when the SM runs elsewhere (sm.mode = "external")
	SA          *sa.Agent
	// IBSim serves OFED ibsim's protocol to opensm and infiniband-diags (nil when off).
	IBSim *ibsim.Server

	// UDP links (udplink): a host's dialers, one per HCA port, or a switch process's
	// listener and the ports it hands out. Each link is joined to its port by a Jack,
	// whose cable is in Cables; remoteSide marks cables whose A end is a switch port.
	Dialers    []*udplink.Dialer
	dialPorts  []*hca.Port // the HCA port of each dialer
	Listener   *udplink.Listener
	Ports      *udplink.SwitchPorts
	remoteSide map[*fabric.Cable]bool
	psk        bool // the UDP links authenticate with a PSK

	log *slog.Logger

	capMu    sync.Mutex // guards captures and faults, and the cables' wrappers
	captures []*capture
	faults   map[*fabric.Cable]*cableFault // pibgw fault (debug.go)
	// capDropped counts what ended captures dropped for a slow writer (capture.go).
	capDropped atomic.Uint64

	// OnObserved, if set, is called after Observed's answer may have changed (the attach
	// server's Invalidate). Set it before the fabric is used.
	OnObserved func()
}

// Observed reports whether something observes or alters packets on the fabric's cables
// or ports: a capture, a cable fault, a trace, or a pulled cable (between two switches a
// packet may then be dropped on the way, which a direct ring would not do). Attached
// processes then send everything through the daemon rather than through direct rings
// (attach.Server.Observed).
func (f *Fabric) Observed() bool {
	f.capMu.Lock()
	defer f.capMu.Unlock()
	if len(f.captures) > 0 || len(f.faults) > 0 || trace.On() {
		return true
	}
	for _, c := range f.Cables {
		if !c.Up() && !f.remoteSide[c] {
			return true
		}
	}
	return false
}

// observedChanged calls OnObserved.
func (f *Fabric) observedChanged() {
	if f.OnObserved != nil {
		f.OnObserved()
	}
}

// BuildFabric builds the fabric cfg describes and waits for the SM's first sweep, so that
// every cabled port is Active with its LID when it returns.
func BuildFabric(ctx context.Context, cfg *config.Config, log *slog.Logger) (_ *Fabric, err error) {
	if log == nil {
		log = slog.Default()
	}
	f := &Fabric{log: log}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fc := cfg.Fabric
	remote := fc.Switch != ""
	// slots are the switch ports HCA ports plug into, in order: the local HCAs' first,
	// then (fabric.listen) those handed to hosts.
	var slots []hostSlot
	switch {
	case fc.Topology != nil:
		slots = f.buildTopology(fc)
	case !remote:
		f.Switch = fabric.NewSwitch(fabric.SwitchConfig{
			Ports:    fc.SwitchPorts,
			NodeGUID: SwitchGUID(fc.NodeGUIDBase),
			NodeDesc: "pibgw switch-1",
			Managed:  true,
		})
		f.Switches = []*fabric.Switch{f.Switch}
		f.switchNames = []string{"switch"}
		for n := 1; n <= fc.SwitchPorts; n++ {
			slots = append(slots, hostSlot{f.Switch, n})
		}
	}
	lc := linkConfig(fc, log)
	f.psk = fc.PSK != nil
	next := 0
	hostname, _ := os.Hostname()
	for i, hc := range fc.HCAs {
		d, err := hca.NewDevice(hca.Config{
			Name:     hc.Name,
			NodeGUID: hc.NodeGUID,
			NumPorts: hc.Ports,
			NodeDesc: fc.NodeDescription(i, hostname),
			Logger:   log,
			Manner:   HCAManner(cfg.Manner),
		})
		if err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		ud.Register(d)
		rc.Register(d)
		d.StartAgents()
		f.Devs = append(f.Devs, d)
		for _, p := range d.Ports() {
			if remote {
				j := udplink.NewJack(p)
				f.Cables = append(f.Cables, j.Cable())
				f.hcaSwPorts = append(f.hcaSwPorts, 0)
				dl, err := udplink.Dial(fc.Switch, p.GUID(), j.UDP(), lc)
				if err != nil {
					return nil, fmt.Errorf("fabric.switch: %w", err)
				}
				f.Dialers = append(f.Dialers, dl)
				f.dialPorts = append(f.dialPorts, p)
				log.Debug("plugged into the switch process", "device", d.Name(), "port", p.Num(), "switch", fc.Switch)
				continue
			}
			if next == len(slots) {
				return nil, fmt.Errorf("fabric: no switch port left for %s port %d", d.Name(), p.Num())
			}
			sl := slots[next]
			next++
			f.Cables = append(f.Cables, fabric.NewCable(p, sl.sw.Port(sl.port)))
			f.hcaSwPorts = append(f.hcaSwPorts, sl.port)
			log.Debug("cabled", "device", d.Name(), "port", p.Num(), "switch_port", sl.port)
		}
	}
	// The switches' own links come after the HCAs' cables (debug.go names those by
	// position).
	for _, nc := range f.swCables {
		f.Cables = append(f.Cables, nc.c)
	}
	free := slots[next:]
	if len(fc.Uplinks) > 0 {
		if free, err = f.plugUplinks(fc, free, lc); err != nil {
			return nil, err
		}
	}
	if fc.Listen != "" && !remote {
		if err := f.listen(fc, free, lc); err != nil {
			return nil, err
		}
	}
	if cfg.Daemon.Capture != "" {
		// Started before the SM so that the capture holds the whole bring-up.
		if err := f.startFileCapture(cfg.Daemon.Capture); err != nil {
			return nil, err
		}
	}
	smDev := f.Device(cfg.SM.HCA)
	if smDev == nil {
		return nil, fmt.Errorf("sm: no HCA %q", cfg.SM.HCA)
	}
	if cfg.IBSim.Enable {
		var sws []*fabric.Switch
		if f.Switch != nil { // a host of a multi-host fabric has no switch of its own
			sws = append(sws, f.Switch)
		}
		f.IBSim, err = ibsim.New(ibsim.Config{
			SocketName: cfg.IBSim.Name(cfg.Daemon.Control),
			UDP:        cfg.IBSim.UDP,
			MaxClients: cfg.IBSim.MaxClients,
			Devices:    f.Devs,
			Switches:   sws,
			Default:    smDev.Port(cfg.SM.Port),
			ExternalSM: cfg.SM.Mode == config.SMExternal,
			Logger:     log,
		})
		if err != nil && cfg.IBSim.SocketName == "" && cfg.SM.Mode != config.SMExternal && errors.Is(err, syscall.EADDRINUSE) {
			// The server is on by default under a name derived from the control socket;
			// a fabric built in process with another's control path (tests) finds it
			// taken. Only a server asked for by name, or opensm's, must start.
			log.Warn("ibsim server not started: its socket name is taken (set ibsim.socket_name)",
				"socket_name", cfg.IBSim.Name(cfg.Daemon.Control), "err", err)
			f.IBSim, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	if cfg.SM.Mode == config.SMExternal {
		// The SM runs elsewhere (opensm through the ibsim server, or the switch process of
		// fabric.switch) and brings the ports up; ipoib waits for them.
		log.Info("fabric up without a subnet manager here: waiting for the external one (sm.mode = external)",
			"hcas", len(f.Devs), "switch_ports", fc.SwitchPorts, "switch", fc.Switch)
		return f, nil
	}
	if remote {
		// The SM on a host of a switch process: its first sweep must see the switch, or
		// it would know no switch to light-sweep afterwards.
		if err := f.waitPlugged(ctx, smDev.Port(cfg.SM.Port)); err != nil {
			return nil, err
		}
	}
	sweep := cfg.SM.SweepInterval
	if sweep == 0 {
		sweep = -1 // sa: negative disables periodic sweeps
	}
	f.SM, err = sa.New(sa.Config{
		Port:          smDev.Port(cfg.SM.Port),
		Logger:        log,
		Priority:      cfg.SM.Priority,
		SweepInterval: sweep,
		Partitions:    saPartitions(cfg.SM.Partitions),
	})
	if err != nil {
		return nil, fmt.Errorf("sm: %w", err)
	}
	start := time.Now()
	if err := f.SM.Start(); err != nil {
		return nil, fmt.Errorf("sm: %w", err)
	}
	if err := f.SM.WaitSweep(ctx); err != nil {
		return nil, fmt.Errorf("sm: first sweep: %w", err)
	}
	f.SA, err = sa.StartSA(f.SM, sa.AgentConfig{Logger: log, PacketLifeTime: cfg.SM.PacketLifeTime})
	if err != nil {
		return nil, fmt.Errorf("sa: %w", err)
	}
	st := f.SM.Stats()
	log.Info("subnet up", "hcas", len(f.Devs), "switch_ports", fc.SwitchPorts,
		"sm", fmt.Sprintf("%s/%d", cfg.SM.HCA, cfg.SM.Port), "smps", st.SMPsSent,
		"max_lid", st.LastSweepLID, "took", time.Since(start).Round(time.Microsecond))
	return f, nil
}

// smPlugWait bounds how long a host's SM waits for its port's UDP link before it
// sweeps anyway (the switch process may start later; the SM then finds it when the
// port's link comes up and the light sweep runs).
const smPlugWait = 10 * time.Second

// waitPlugged waits until port's UDP link is up, at most smPlugWait.
func (f *Fabric) waitPlugged(ctx context.Context, port *hca.Port) error {
	for i, p := range f.dialPorts {
		if p != port {
			continue
		}
		t := time.NewTimer(smPlugWait)
		defer t.Stop()
		select {
		case <-f.Dialers[i].FirstUp():
		case <-t.C:
			f.log.Warn("the SM's port is not plugged into the switch yet; sweeping without it", "switch", f.Dialers[i].Status().Remote)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// linkConfig is the UDP links' configuration.
func linkConfig(fc config.Fabric, log *slog.Logger) udplink.Config {
	return udplink.Config{PSK: fc.PSK, Allow: fc.Allow, Keepalive: fc.Keepalive, DeadAfter: fc.LinkTimeout, Logger: log}
}

// plugUplinks plugs the switch ports of fabric.uplinks into other switch processes: each
// gets a Jack whose UDP side dials there, as a host port would, with the port GUID
// SwitchGUID | port (a switch's ports share its node GUID; the far switch needs one per
// link). It returns the free ports less those.
func (f *Fabric) plugUplinks(fc config.Fabric, free []hostSlot, lc udplink.Config) ([]hostSlot, error) {
	taken := map[int]bool{}
	for _, u := range fc.Uplinks {
		if !slices.ContainsFunc(free, func(sl hostSlot) bool { return sl.port == u.Port }) {
			return nil, fmt.Errorf("fabric.uplinks: switch port %d is cabled to a local HCA", u.Port)
		}
		j := udplink.NewJack(f.Switch.Port(u.Port))
		f.Cables = append(f.Cables, j.Cable())
		if f.remoteSide == nil {
			f.remoteSide = map[*fabric.Cable]bool{}
		}
		f.remoteSide[j.Cable()] = true
		d, err := udplink.Dial(u.Switch, f.Switch.NodeGUID()|uint64(u.Port), j.UDP(), lc)
		if err != nil {
			return nil, fmt.Errorf("fabric.uplinks: %w", err)
		}
		f.uplinks = append(f.uplinks, uplink{port: u.Port, d: d})
		f.swCables = append(f.swCables, namedCable{fmt.Sprintf("%s/%d", f.switchNames[0], u.Port), j.Cable()})
		taken[u.Port] = true
		f.log.Info("uplink to another switch process", "switch_port", u.Port, "switch", u.Switch)
	}
	return slices.DeleteFunc(slices.Clone(free), func(sl hostSlot) bool { return taken[sl.port] }), nil
}

// uplink is a switch port plugged into another switch process.
type uplink struct {
	port int
	d    *udplink.Dialer
}

// hostSlot is a switch port an HCA port plugs into.
type hostSlot struct {
	sw   *fabric.Switch
	port int
}

// namedCable is a cable between two switches, named after its first end ("Switch1/3").
type namedCable struct {
	name string
	c    *fabric.Cable
}

// buildTopology builds the switches of fabric.topology and the cables between them, and
// returns the switch ports its HCA ports are linked to, in file order. Switch i's GUID is
// SwitchGUID's with i+1 in its second byte; its description is its name in the file.
func (f *Fabric) buildTopology(fc config.Fabric) []hostSlot {
	t := fc.Topology
	byID := map[string]*fabric.Switch{}
	for i, n := range t.Switches() {
		sw := fabric.NewSwitch(fabric.SwitchConfig{
			Ports:    n.Ports,
			NodeGUID: SwitchGUID(fc.NodeGUIDBase)&^0xFF00 | uint64(i+1)<<8,
			NodeDesc: n.ID,
			Managed:  true,
		})
		byID[n.ID] = sw
		f.Switches = append(f.Switches, sw)
		f.switchNames = append(f.switchNames, n.ID)
	}
	f.Switch = f.Switches[0]
	for _, n := range t.Switches() {
		for _, p := range slices.Sorted(maps.Keys(n.Links)) {
			e := n.Links[p]
			far := byID[e.Node]
			if far == nil || e.Node < n.ID || (e.Node == n.ID && e.Port < p) {
				continue // an HCA, or the link's other end, listed first
			}
			f.swCables = append(f.swCables, namedCable{fmt.Sprintf("%s/%d", n.ID, p),
				fabric.NewCable(byID[n.ID].Port(p), far.Port(e.Port))})
		}
	}
	var slots []hostSlot
	for _, e := range config.TopologyHCAPorts(t) {
		if sw := byID[e.Node]; sw != nil {
			slots = append(slots, hostSlot{sw, e.Port})
		}
	}
	return slots
}

// listen makes this fabric's switch ports in slots the switch ports of other processes:
// each gets a Jack, and hosts connecting to fabric.listen get them by port GUID,
// numbered 1, 2, … in slot order (with one switch, the numbers are the port numbers).
func (f *Fabric) listen(fc config.Fabric, slots []hostSlot, lc udplink.Config) error {
	jacks := map[int]*udplink.Jack{}
	var nums []int
	f.hostSlots = map[int]hostSlot{}
	for i, sl := range slots {
		n := i + 1
		if fc.Topology == nil {
			n = sl.port
		}
		j := udplink.NewJack(sl.sw.Port(sl.port))
		jacks[n] = j
		f.hostSlots[n] = sl
		nums = append(nums, n)
		f.Cables = append(f.Cables, j.Cable())
		if f.remoteSide == nil {
			f.remoteSide = map[*fabric.Cable]bool{}
		}
		f.remoteSide[j.Cable()] = true
	}
	if len(nums) == 0 {
		return fmt.Errorf("fabric.listen: no switch port left for hosts (the local HCAs take them all)")
	}
	f.Ports = udplink.NewSwitchPorts(nums, func(n int) fabric.Port { return jacks[n].UDP() })
	// The process's own ports keep their GUIDs: a host with one of them (its
	// node_guid_base left at the default this process's HCA has) is refused, not given a
	// port the SM cannot bring up.
	for _, d := range f.Devs {
		for _, p := range d.Ports() {
			f.Ports.Reserve(p.GUID(), fmt.Sprintf("%s port %d", d.Name(), p.Num()))
		}
	}
	for i, sw := range f.Switches {
		f.Ports.Reserve(sw.NodeGUID(), fmt.Sprintf("switch %s", f.switchNames[i]))
	}
	l, err := udplink.Listen(fc.Listen, f.Ports, lc)
	if err != nil {
		return fmt.Errorf("fabric.listen: %w", err)
	}
	f.Listener = l
	f.log.Info("switch listening", "addr", l.Addr(), "host_ports", len(nums), "psk", fc.PSK != nil)
	return nil
}

// saPartitions converts the configuration's partitions.
func saPartitions(ps []config.Partition) []sa.Partition {
	var out []sa.Partition
	for _, p := range ps {
		sp := sa.Partition{Name: p.Name, PKey: p.PKey & 0x7FFF, IPoIB: p.IPoIB,
			MTU: uint8(hca.MTUFromBytes(p.MTU)), QKey: p.QKey}
		for _, m := range p.Members {
			sp.Members = append(sp.Members, sa.Member{GUID: m.GUID, All: m.All, Full: m.Full})
		}
		out = append(out, sp)
	}
	return out
}

// Device returns the HCA named name, or nil.
func (f *Fabric) Device(name string) *hca.Device {
	for _, d := range f.Devs {
		if d.Name() == name {
			return d
		}
	}
	return nil
}

// Devices snapshots every HCA, and the switch of a switch process.
func (f *Fabric) Devices() []control.Device {
	out := make([]control.Device, 0, len(f.Devs))
	for _, d := range f.Devs {
		out = append(out, control.SnapshotDevice(d))
	}
	if f.Listener != nil {
		for i := range f.Switches {
			out = append(out, f.switchDevice(i))
		}
	}
	return out
}

// Close stops the SA and SM and unplugs every cable; captures are closed.
func (f *Fabric) Close() {
	if f.IBSim != nil {
		f.IBSim.Close()
	}
	for _, d := range f.Dialers {
		d.Close()
	}
	f.Dialers = nil
	for _, u := range f.uplinks {
		u.d.Close()
	}
	f.uplinks = nil
	if f.Listener != nil {
		f.Listener.Close()
		f.Listener = nil
	}
	if f.SA != nil {
		f.SA.Close()
	}
	if f.SM != nil {
		f.SM.Close()
	}
	f.capMu.Lock()
	caps := f.captures
	f.captures = nil
	f.rewrapLocked()
	f.capMu.Unlock()
	for _, c := range caps {
		c.finish()
	}
	for _, c := range f.Cables {
		c.Detach()
	}
	f.Cables = nil
}

// capture is one capture running on every cable.
type capture struct {
	cw     *fabric.CaptureWriter
	closer io.Closer // the file of a configured capture, nil for a control stream
	once   sync.Once
}

func (c *capture) finish() {
	c.once.Do(func() {
		c.cw.Close()
		if c.closer != nil {
			c.closer.Close()
		}
	})
}

// Capture interfaces: packets leaving an HCA port (toward the switch) are recorded on
// ERF interface 0, packets arriving at it on interface 1, so Wireshark tells the
// directions apart. A packet crossing the switch appears twice: leaving its source
// and arriving at its destination, as on a capture of every link.
const (
	captureIfaceFromHCA = 0
	captureIfaceToHCA   = 1
)

// StartCapture records every packet on every cable into a new CaptureWriter on w,
// until StopCapture (limit > 0 stops recording after that many packets).
func (f *Fabric) StartCapture(w io.Writer, opts fabric.CaptureOptions) *fabric.CaptureWriter {
	c := &capture{cw: fabric.NewCaptureWriter(w, opts)}
	f.capMu.Lock()
	f.captures = append(f.captures, c)
	for _, cb := range f.Cables {
		f.wrapCapture(cb, c)
	}
	f.capMu.Unlock()
	f.observedChanged()
	return c.cw
}

// StopCapture takes cw's wrappers off the cables and flushes and closes it.
func (f *Fabric) StopCapture(cw *fabric.CaptureWriter) {
	f.capMu.Lock()
	var found *capture
	for i, c := range f.captures {
		if c.cw == cw {
			found = c
			f.captures = append(f.captures[:i:i], f.captures[i+1:]...)
			break
		}
	}
	if found != nil {
		f.rewrapLocked()
	}
	f.capMu.Unlock()
	f.observedChanged()
	if found != nil {
		found.finish()
	}
}

// rewrapLocked rebuilds every cable's wrappers from f.faults and f.captures:
// Cable.Unwrap removes all of a direction's wrappers, so the ones that stay are wrapped
// again, faults innermost.
func (f *Fabric) rewrapLocked() {
	for _, cb := range f.Cables {
		cb.Unwrap(fabric.AtoB)
		cb.Unwrap(fabric.BtoA)
		if cf := f.faults[cb]; cf != nil {
			cb.Wrap(fabric.AtoB, cf.wrapper(fabric.AtoB))
			cb.Wrap(fabric.BtoA, cf.wrapper(fabric.BtoA))
		}
		for _, c := range f.captures {
			f.wrapCapture(cb, c)
		}
	}
}

// wrapCapture records both directions of cb: what comes from a host on interface 0,
// what goes to one on interface 1. A cable's A end is the HCA port, except on the
// Jacks of a switch process, whose A end is the switch port facing a remote host.
func (f *Fabric) wrapCapture(cb *fabric.Cable, c *capture) {
	from, to := fabric.AtoB, fabric.BtoA
	if f.remoteSide[cb] {
		from, to = to, from
	}
	cb.Wrap(from, fabric.CaptureWrapper(c.cw, captureIfaceFromHCA))
	cb.Wrap(to, fabric.CaptureWrapper(c.cw, captureIfaceToHCA))
}

// errNoFabric is returned by control calls before the fabric exists.
var errNoFabric = errors.New("the fabric is not up")
