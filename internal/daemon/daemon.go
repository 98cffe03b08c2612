package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/tun"
)

// Options configures a Daemon.
type Options struct {
	Config *config.Config
	Logger *slog.Logger
	// Backend makes TUN devices, namespaces and IPoIB interfaces; nil is DefaultBackend.
	Backend Backend
	// Adopt are namespaces a previous daemon created and could not delete (it was
	// killed): when the configuration uses one, the daemon takes it as its own and
	// deletes it at Close.
	Adopt []string
	// OnNetNS, if set, is called with the namespaces the daemon created (and will
	// delete) whenever that list changes, for the state file.
	OnNetNS func(created []string)
}

// Daemon is a running fabric with its interfaces.
type Daemon struct {
	cfg     *config.Config
	log     *slog.Logger
	backend Backend
	started time.Time
	adopt   []string
	onNetNS func([]string)

	Fabric *Fabric
	// Metrics is the Prometheus endpoint (daemon.metrics), nil when off.
	Metrics *metricsServer
	// RDMA is rdma_cm over the daemon's IPoIB interfaces (their addresses, neighbours
	// and paths, a CM per port).
	RDMA *rdmacm.IPoIBHost

	mu        sync.Mutex
	closed    bool
	clients   map[*hca.Port]*sa.Client
	ifaces    []*netif // in creation order: parents before their children
	createdNS []string // namespaces this daemon created (or adopted), for the state file
	nsHeld    []heldNS // the namespaces the daemon uses, in the order it took them
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

// heldNS is a namespace the daemon uses, and its hold on it.
type heldNS struct {
	name string
	lock NetNSLock
	gone bool // deleted from under the daemon (ip netns del): interfaces taken down
}

// netif is one running interface.
type netif struct {
	cfg    config.Interface
	dev    tun.Device
	ipo    IPoIB
	cancel context.CancelFunc
	done   chan struct{}
}

// Start builds the fabric and every configured interface. On error everything it made
// is taken down again.
func Start(ctx context.Context, opts Options) (_ *Daemon, err error) {
	if opts.Config == nil {
		opts.Config = config.Default()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Backend == nil {
		opts.Backend = DefaultBackend()
	}
	d := &Daemon{cfg: opts.Config, log: opts.Logger, backend: opts.Backend, started: time.Now(),
		adopt: opts.Adopt, onNetNS: opts.OnNetNS,
		clients: make(map[*hca.Port]*sa.Client), RDMA: rdmacm.NewIPoIBHost(nil)}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if d.Fabric, err = BuildFabric(ctx, d.cfg, d.log); err != nil {
		return nil, err
	}
	for _, ic := range d.cfg.Interfaces {
		if err := d.addInterface(ic); err != nil {
			return nil, err
		}
	}
	if addr := d.cfg.Daemon.Metrics; addr != "" {
		if d.Metrics, err = d.ServeMetrics(addr); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Config is the configuration the daemon runs.
func (d *Daemon) Config() *config.Config { return d.cfg }

// Started is when the daemon started.
func (d *Daemon) Started() time.Time { return d.started }

// Close removes every interface and TUN device, the namespaces the daemon created, and
// the fabric. It returns the first error but always does all of it.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	ifaces := d.ifaces
	d.ifaces = nil
	clients := d.clients
	d.clients = nil
	created := d.createdNS
	d.createdNS = nil
	held := d.nsHeld
	d.nsHeld = nil
	stopWatch, watchDone := d.stopWatch, d.watchDone
	d.mu.Unlock()
	if stopWatch != nil {
		stopWatch() // before the namespaces go: the daemon's own deletes are no news
		<-watchDone
	}

	var errs []error
	if d.Metrics != nil {
		d.Metrics.Close()
	}
	// Children first, then parents: reverse creation order.
	for i := len(ifaces) - 1; i >= 0; i-- {
		errs = append(errs, d.stopInterface(ifaces[i]))
	}
	d.RDMA.Close()
	for _, c := range clients {
		c.Close()
	}
	if d.Fabric != nil {
		d.Fabric.Close()
	}
	// The namespaces go last, and only those pibgw created that no other daemon uses
	// (tun.NetNSLock): the last daemon to let go of one deletes it.
	var left []string
	for i := len(held) - 1; i >= 0; i-- {
		h := held[i]
		res, err := h.lock.Release(true)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", h.name, err))
			if slices.Contains(created, h.name) {
				left = append(left, h.name)
			}
		case res == tun.NetNSDeleted:
			d.log.Info("namespace deleted", "netns", h.name)
		case res == tun.NetNSInUse:
			d.log.Info("namespace left to the other daemon that uses it", "netns", h.name)
		case res == tun.NetNSGone:
			// Removed from under the daemon (ip netns del): nothing to do, not an error.
			d.log.Warn("namespace was already removed", "netns", h.name)
		}
	}
	if d.onNetNS != nil {
		d.onNetNS(left)
	}
	return errors.Join(errs...)
}

// LinkLocal is the IPv6 link-local address of an IPoIB interface on the port with GUID
// guid, as a /64: fe80:: with the port GUID, U/L bit flipped, as interface identifier
// (RFC 4391 §8) — ipoib.LinkLocalFromGUID. The kernel adds none to a TUN
// device of link type infiniband, so the daemon configures it.
func LinkLocal(guid uint64) netip.Prefix {
	return netip.PrefixFrom(ipoib.LinkLocalFromGUID(guid), 64)
}

// deviceMTU is the MTU the TUN device starts with: the configured one, 65520 in
// connected mode, or the partition's broadcast-group MTU − 4 (datagram mode; ipoib
// adjusts it after joining).
func (d *Daemon) deviceMTU(ic config.Interface) int {
	if ic.MTU != 0 {
		return ic.MTU
	}
	if ic.Mode == config.ModeConnected {
		return ipoib.ConnectedMTU
	}
	mtu := config.DefaultPartitionMTU
	for _, p := range d.cfg.SM.Partitions {
		if p.PKey&0x7FFF == ic.PKey&0x7FFF {
			mtu = p.MTU
		}
	}
	return mtu - 4
}

// saClient returns the SA client of port, creating it on first use.
func (d *Daemon) saClient(p *hca.Port) (*sa.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.clients[p]; c != nil {
		return c, nil
	}
	c, err := sa.NewClient(p, sa.ClientOptions{Logger: d.log})
	if err != nil {
		return nil, err
	}
	d.clients[p] = c
	return c, nil
}

// watchNetNSLocked follows the deletion of named namespaces (ip netns del) once the
// daemon uses one: the interfaces in one it uses are taken down at once (netnsRemoved).
// d.mu is held.
func (d *Daemon) watchNetNSLocked() {
	if d.stopWatch != nil || d.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ready := make(chan struct{}), make(chan struct{})
	d.stopWatch, d.watchDone = cancel, done
	go func() {
		defer close(done)
		err := d.backend.WatchNetNSRemoved(ctx, func() { close(ready) }, d.netnsRemoved)
		if err != nil {
			d.log.Warn("not watching for namespaces deleted under the daemon", "err", err)
		}
	}()
	// In place before the namespace is used: a deletion right after is news.
	select {
	case <-ready:
	case <-done:
	}
}

// netnsRemoved takes down the interfaces of a namespace deleted from under the daemon:
// their TUN devices went with it (nothing can reach them), so each says why in
// `pibgw show` instead of reporting itself up.
func (d *Daemon) netnsRemoved(name string) {
	d.mu.Lock()
	used := false
	for k := range d.nsHeld {
		if d.nsHeld[k].name == name && !d.nsHeld[k].gone {
			d.nsHeld[k].gone, used = true, true
		}
	}
	var ifs []*netif
	for _, n := range d.ifaces {
		if n.cfg.Stack == config.StackKernel && n.cfg.NetNS == name {
			ifs = append(ifs, n)
		}
	}
	d.mu.Unlock()
	if !used {
		return
	}
	reason := fmt.Sprintf("network namespace %s was deleted", name)
	var names []string
	for _, n := range ifs {
		names = append(names, n.cfg.Name)
		if x, ok := n.ipo.(interface{ Detach(string) }); ok {
			x.Detach(reason)
		}
	}
	d.log.Error("namespace deleted under the daemon: its interfaces are down for good (restart the daemon to make them again)",
		"netns", name, "ifaces", names)
}

// ensureNetNS takes the daemon's hold on the namespace, and creates it unless it exists
// (recording that it did).
func (d *Daemon) ensureNetNS(name string) error {
	if name == "" {
		return nil
	}
	d.mu.Lock()
	held := slices.ContainsFunc(d.nsHeld, func(h heldNS) bool { return h.name == name })
	d.mu.Unlock()
	if held {
		return nil
	}
	lock, err := d.backend.LockNetNS(name)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	created := false
	ok, err := d.backend.NetNSExists(name)
	switch {
	case err != nil:
		lock.Release(false)
		return fmt.Errorf("namespace %s: %w", name, err)
	case ok && slices.Contains(d.adopt, name):
		d.log.Info("adopting namespace a killed daemon left", "netns", name)
		created = true
	case ok:
		d.log.Info("using existing namespace", "netns", name)
	default:
		if err := d.backend.CreateNetNS(name); err != nil {
			lock.Release(false)
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
		d.log.Info("namespace created", "netns", name)
		created = true
	}
	if created {
		if err := lock.MarkCreated(); err != nil {
			d.log.Warn("namespace not marked as pibgw's: it will be left at stop", "netns", name, "err", err)
		}
	}
	d.mu.Lock()
	d.nsHeld = append(d.nsHeld, heldNS{name: name, lock: lock})
	d.watchNetNSLocked()
	if !created {
		d.mu.Unlock()
		return nil
	}
	d.createdNS = append(d.createdNS, name)
	list := slices.Clone(d.createdNS)
	d.mu.Unlock()
	if d.onNetNS != nil {
		d.onNetNS(list)
	}
	return nil
}

// addInterface creates the IP side and the IPoIB interface of ic and runs it.
func (d *Daemon) addInterface(ic config.Interface) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errors.New("daemon stopping")
	}
	for _, n := range d.ifaces {
		if n.cfg.Name == ic.Name {
			d.mu.Unlock()
			return fmt.Errorf("interface %s already exists", ic.Name)
		}
	}
	d.mu.Unlock()
	dev := d.Fabric.Device(ic.HCA)
	if dev == nil || ic.Port < 1 || ic.Port > dev.NumPorts() {
		return fmt.Errorf("interface %s: no port %s/%d", ic.Name, ic.HCA, ic.Port)
	}
	port := dev.Port(ic.Port)
	client, err := d.saClient(port)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ic.Name, err)
	}
	if ic.Stack == config.StackKernel {
		if err := d.ensureNetNS(ic.NetNS); err != nil {
			return fmt.Errorf("interface %s: %w", ic.Name, err)
		}
	}
	addrs := append(slices.Clone(ic.Addrs), LinkLocal(port.GUID()))
	spec := DeviceSpec{Name: ic.Name, Stack: ic.Stack, NetNS: ic.NetNS, MTU: d.deviceMTU(ic), Addrs: addrs}
	if ic.Stack != config.StackKernel {
		spec.NetNS = ""
	}
	tdev, err := d.backend.OpenDevice(spec)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ic.Name, err)
	}
	carrier, _ := tdev.(interface{ SetCarrier(bool) error })
	ipo, err := d.backend.NewInterface(ipoib.Config{
		Name: ic.Name, Port: port, PKey: ic.PKey, SA: client, Device: tdev,
		Mode: modeOf(ic.Mode), CM: d.RDMA.CM(port), Addrs: addrs, Logger: d.log,
		MaxNeighbors: ic.MaxNeighbors, MaxGroups: ic.MaxGroups,
		OnState: func(st ipoib.State) {
			// An interface down for an IB reason (port not active, P_Key not in the
			// table, group not joined) has no carrier: NO-CARRIER in `ip link`, and
			// the kernel routes nothing into it, as with a real HCA's ipoib.
			if carrier != nil {
				if err := carrier.SetCarrier(st.Up); err != nil && !errors.Is(err, tun.ErrClosed) {
					d.log.Debug("carrier", "iface", ic.Name, "err", err)
				}
			}
		},
	})
	if err != nil {
		tdev.Close()
		return fmt.Errorf("interface %s: %w", ic.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &netif{cfg: ic, dev: tdev, ipo: ipo, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		if err := ipo.Run(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, tun.ErrClosed) {
			d.log.Error("interface stopped", "iface", ic.Name, "err", err)
		}
	}()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.stopInterface(n)
		return errors.New("daemon stopping")
	}
	d.ifaces = append(d.ifaces, n)
	d.mu.Unlock()
	if x, ok := ipo.(*ipoib.Interface); ok {
		d.RDMA.Add(x, client)
		if w, ok := tdev.(linkWatcher); ok {
			var v6 []netip.Prefix
			for _, p := range addrs {
				if p.Addr().Is6() {
					v6 = append(v6, p)
				}
			}
			go d.follow(ctx, n, w, x, v6)
		}
	}
	where := ic.NetNS
	if ic.Stack != config.StackKernel {
		where = "userspace"
	} else if where == "" {
		where = "host"
	}
	d.log.Info("interface created", "iface", ic.Name, "netns", where, "hca", ic.HCA, "port", ic.Port,
		"pkey", fmt.Sprintf("%#04x", ic.PKey), "addrs", addrs, "mtu", spec.MTU)
	return nil
}

// stopInterface closes n's IPoIB interface and its IP side (removing a kernel TUN
// device) and waits for its Run to return.
func (d *Daemon) stopInterface(n *netif) error {
	if x, ok := n.ipo.(*ipoib.Interface); ok {
		d.RDMA.Remove(x)
	}
	n.cancel()
	err := n.ipo.Close()
	if derr := n.dev.Close(); derr != nil && !errors.Is(derr, tun.ErrClosed) && !errors.Is(derr, os.ErrClosed) && err == nil {
		err = derr
	}
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		d.log.Warn("interface did not stop in 5 s", "iface", n.cfg.Name)
	}
	d.log.Info("interface removed", "iface", n.cfg.Name)
	if err != nil {
		return fmt.Errorf("removing %s: %w", n.cfg.Name, err)
	}
	return nil
}

// lookup returns the interface named name.
func (d *Daemon) lookup(name string) *netif {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.ifaces {
		if n.cfg.Name == name {
			return n
		}
	}
	return nil
}

// Device returns the IP side of the running interface name (a *tun.Netstack for a
// userspace interface), or nil.
func (d *Daemon) Device(name string) tun.Device {
	if n := d.lookup(name); n != nil {
		return n.dev
	}
	return nil
}

// interfaces returns the running interfaces in creation order.
func (d *Daemon) interfaces() []*netif {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ifaces)
}

// AddChild creates parent's P_Key child (Linux's create_child): name parent.XXXX, the
// parent's port, namespace and stack, its own IP side and IPoIB interface.
func (d *Daemon) AddChild(parent string, pkey uint16, addrs []netip.Prefix) (string, error) {
	p := d.lookup(parent)
	if p == nil {
		return "", d.unknownInterface(parent)
	}
	if p.cfg.Parent != "" {
		return "", fmt.Errorf("%s is a child interface; create children of its parent %s", parent, p.cfg.Parent)
	}
	pkey |= 0x8000
	if pkey == p.cfg.PKey|0x8000 {
		return "", fmt.Errorf("%s already runs on P_Key %#04x", parent, pkey)
	}
	name := config.ChildName(parent, pkey)
	if !config.ValidIfName(name) {
		return "", fmt.Errorf("child name %q is too long for an interface name (15 characters)", name)
	}
	if d.lookup(name) != nil {
		return "", fmt.Errorf("child %s already exists", name)
	}
	if n, limit := d.children(), d.cfg.Daemon.MaxChildren; n >= limit {
		return "", fmt.Errorf("child %s not added: the daemon runs %d P_Key children, as many as daemon.max_children (%d) allows; delete one, or raise the limit in the configuration", name, n, limit)
	}
	ic := p.cfg
	ic.Name, ic.Parent, ic.PKey, ic.Addrs, ic.MTU = name, parent, pkey, addrs, 0
	if err := d.addInterface(ic); err != nil {
		return "", err
	}
	return name, nil
}

// children is how many P_Key children run.
func (d *Daemon) children() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, x := range d.ifaces {
		if x.cfg.Parent != "" {
			n++
		}
	}
	return n
}

// DelChild removes parent's child for pkey; the parent is untouched.
func (d *Daemon) DelChild(parent string, pkey uint16) (string, error) {
	p := d.lookup(parent)
	if p == nil {
		return "", d.unknownInterface(parent)
	}
	name := config.ChildName(parent, pkey|0x8000)
	d.mu.Lock()
	var n *netif
	for i, x := range d.ifaces {
		if x.cfg.Name == name && x.cfg.Parent == parent {
			n = x
			d.ifaces = slices.Delete(d.ifaces, i, i+1)
			break
		}
	}
	d.mu.Unlock()
	if n == nil {
		return "", fmt.Errorf("%s has no child for P_Key %#04x (no interface %s)", parent, pkey|0x8000, name)
	}
	return name, d.stopInterface(n)
}

func (d *Daemon) unknownInterface(name string) error {
	var names []string
	for _, n := range d.interfaces() {
		names = append(names, n.cfg.Name)
	}
	if len(names) == 0 {
		return fmt.Errorf("unknown interface %q (the daemon has none)", name)
	}
	return fmt.Errorf("unknown interface %q (have %s)", name, joinNames(names))
}

func joinNames(s []string) string {
	out := ""
	for i, n := range s {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// modeOf is the ipoib mode of a configuration's word.
func modeOf(m string) ipoib.Mode {
	if m == config.ModeConnected {
		return ipoib.Connected
	}
	return ipoib.Datagram
}

// SetMode switches an interface between datagram and connected mode (`pibgw mode`).
func (d *Daemon) SetMode(name, mode string) error {
	if mode != config.ModeDatagram && mode != config.ModeConnected {
		return fmt.Errorf("mode %q: want %q or %q", mode, config.ModeDatagram, config.ModeConnected)
	}
	n := d.lookup(name)
	if n == nil {
		return d.unknownInterface(name)
	}
	if err := n.ipo.SetMode(modeOf(mode)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
