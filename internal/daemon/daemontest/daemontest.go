// Package daemontest has an in-memory daemon.Backend for tests that need no root: named
// namespaces in a map, TUN devices that swallow packets, and IPoIB interfaces that report
// what a real one would (hardware address from the port's GID, the partition's broadcast
// address, up only while the P_Key is in the port's table) without moving packets.
package daemontest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/tun"
)

// Backend is a fake daemon.Backend. The zero value is not usable; call New.
type Backend struct {
	mu      sync.Mutex
	netns   map[string]bool
	devices map[string]*Device // by name, while open
	ifaces  map[string]*Interface
	created []string // every namespace created, in order
	deleted []string
	holders map[string]int  // daemons holding each namespace (LockNetNS)
	marked  map[string]bool // namespaces a daemon created (NetNSLock.MarkCreated)
	watches map[int]func(string)
	nextW   int
	nextQPN uint32
	// Neighbors, by interface name, is what Interface.Neighbors returns.
	Neighbors map[string][]ipoib.Neighbor
	// FailDevice, if set, makes OpenDevice fail for that interface name.
	FailDevice string
}

// New returns an empty fake backend; existing lists namespaces that exist already.
func New(existing ...string) *Backend {
	b := &Backend{netns: map[string]bool{}, devices: map[string]*Device{}, ifaces: map[string]*Interface{},
		holders: map[string]int{}, marked: map[string]bool{}, watches: map[int]func(string){},
		nextQPN: 0x48, Neighbors: map[string][]ipoib.Neighbor{}}
	for _, n := range existing {
		b.netns[n] = true
	}
	return b
}

var _ daemon.Backend = (*Backend)(nil)

func (b *Backend) NetNSExists(name string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.netns[name], nil
}

func (b *Backend) CreateNetNS(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.netns[name] {
		return fmt.Errorf("namespace %s exists", name)
	}
	b.netns[name] = true
	b.created = append(b.created, name)
	return nil
}

// DeleteNetNS deletes a namespace, as ip netns del: the daemons watching hear of it.
func (b *Backend) DeleteNetNS(name string) error {
	b.mu.Lock()
	if !b.netns[name] {
		b.mu.Unlock()
		return fmt.Errorf("namespace %s does not exist", name)
	}
	delete(b.netns, name)
	b.deleted = append(b.deleted, name)
	var ws []func(string)
	for _, w := range b.watches {
		ws = append(ws, w)
	}
	b.mu.Unlock()
	for _, w := range ws {
		w(name)
	}
	return nil
}

// WatchNetNSRemoved calls removed for each namespace DeleteNetNS deletes until ctx is
// done.
func (b *Backend) WatchNetNSRemoved(ctx context.Context, ready func(), removed func(string)) error {
	b.mu.Lock()
	id := b.nextW
	b.nextW++
	b.watches[id] = removed
	b.mu.Unlock()
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	b.mu.Lock()
	delete(b.watches, id)
	b.mu.Unlock()
	return nil
}

// LockNetNS is tun.LockNetNS's rule, in memory: daemons sharing one Backend share its
// namespaces' holds.
func (b *Backend) LockNetNS(name string) (daemon.NetNSLock, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holders[name]++
	return &netnsLock{b: b, name: name}, nil
}

type netnsLock struct {
	b        *Backend
	name     string
	released bool
}

func (l *netnsLock) MarkCreated() error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.b.marked[l.name] = true
	return nil
}

func (l *netnsLock) Release(del bool) (tun.NetNSRelease, error) {
	b := l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.released {
		return tun.NetNSKept, nil
	}
	l.released = true
	if b.holders[l.name]--; b.holders[l.name] > 0 {
		return tun.NetNSInUse, nil
	}
	delete(b.holders, l.name)
	marked := b.marked[l.name]
	delete(b.marked, l.name)
	switch {
	case !b.netns[l.name]:
		return tun.NetNSGone, nil
	case !del || !marked:
		return tun.NetNSKept, nil
	}
	delete(b.netns, l.name)
	b.deleted = append(b.deleted, l.name)
	return tun.NetNSDeleted, nil
}

// NetNS lists the namespaces that exist now.
func (b *Backend) NetNS() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for n := range b.netns {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Devices lists the open devices' names.
func (b *Backend) Devices() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for n := range b.devices {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Device returns the open device named name, or nil.
func (b *Backend) Device(name string) *Device {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.devices[name]
}

func (b *Backend) OpenDevice(spec daemon.DeviceSpec) (tun.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if spec.Name == b.FailDevice {
		return nil, fmt.Errorf("fake: cannot create %s", spec.Name)
	}
	if _, dup := b.devices[spec.Name]; dup {
		return nil, fmt.Errorf("fake: device %s exists", spec.Name)
	}
	if spec.NetNS != "" && !b.netns[spec.NetNS] {
		return nil, fmt.Errorf("fake: namespace %s does not exist", spec.NetNS)
	}
	d := &Device{b: b, Spec: spec, mtu: spec.MTU, closed: make(chan struct{})}
	b.devices[spec.Name] = d
	return d, nil
}

func (b *Backend) NewInterface(cfg ipoib.Config) (daemon.IPoIB, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := &Interface{b: b, cfg: cfg, qpn: b.nextQPN, stop: make(chan struct{})}
	b.nextQPN++
	b.ifaces[cfg.Name] = i
	return i, nil
}

// Device is a fake tun.Device: writes are counted and dropped, reads block until Close.
type Device struct {
	b      *Backend
	Spec   daemon.DeviceSpec
	mu     sync.Mutex
	mtu    int
	once   sync.Once
	closed chan struct{}
}

func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	<-d.closed
	return 0, tun.ErrClosed
}

func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	select {
	case <-d.closed:
		return 0, tun.ErrClosed
	default:
	}
	return len(bufs), nil
}

func (d *Device) MTU() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mtu
}

func (d *Device) SetMTU(mtu int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mtu = mtu
	return nil
}

func (d *Device) Name() string   { return d.Spec.Name }
func (d *Device) BatchSize() int { return 1 }

func (d *Device) Close() error {
	d.once.Do(func() {
		close(d.closed)
		d.b.mu.Lock()
		if d.b.devices[d.Spec.Name] == d {
			delete(d.b.devices, d.Spec.Name)
		}
		d.b.mu.Unlock()
	})
	return nil
}

// Interface is a fake IPoIB interface.
type Interface struct {
	b        *Backend
	cfg      ipoib.Config
	qpn      uint32
	once     sync.Once
	stop     chan struct{}
	detached string // under b.mu
}

func (i *Interface) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-i.stop:
	}
	return nil
}

func (i *Interface) Close() error {
	i.once.Do(func() { close(i.stop) })
	return nil
}

// Detach takes the interface down for good with reason, as ipoib's Detach.
func (i *Interface) Detach(reason string) {
	i.b.mu.Lock()
	defer i.b.mu.Unlock()
	if i.detached == "" {
		i.detached = reason
	}
}

// State is up while the interface's P_Key is in its port's table (IBA 10.9;
// as Linux's ipoib, a child stays down until the SM adds its P_Key).
func (i *Interface) State() ipoib.State {
	i.b.mu.Lock()
	detached := i.detached
	i.b.mu.Unlock()
	if detached != "" {
		return ipoib.State{Reason: detached}
	}
	if i.cfg.Port.FindPKey(i.cfg.PKey) < 0 {
		return ipoib.State{Reason: fmt.Sprintf("P_Key %#04x not in the port's table", i.cfg.PKey)}
	}
	return ipoib.State{Up: true}
}

// SetMode switches the mode and sets the device's MTU as ipoib does (65520 in
// connected mode, 2044 in datagram mode).
func (i *Interface) SetMode(m ipoib.Mode) error {
	i.b.mu.Lock()
	i.cfg.Mode = m
	i.b.mu.Unlock()
	mtu := 2044
	if m == ipoib.Connected {
		mtu = ipoib.ConnectedMTU
	}
	return i.cfg.Device.SetMTU(mtu)
}

func (i *Interface) Info() ipoib.Info {
	i.b.mu.Lock()
	mode := i.cfg.Mode
	i.b.mu.Unlock()
	var hw, brd ipoib.HWAddr
	binary.BigEndian.PutUint32(hw[0:], i.qpn)
	gid, _ := i.cfg.Port.GID(0)
	copy(hw[4:], gid[:])
	// Linux's default broadcast address (RFC 4391 §4, ipoib_main.c): QPN 0xFFFFFF, MGID
	// ff12:401b:PPPP::ffff:ffff.
	copy(brd[:], []byte{0x00, 0xff, 0xff, 0xff, 0xff, 0x12, 0x40, 0x1b, byte(i.cfg.PKey >> 8), byte(i.cfg.PKey)})
	copy(brd[16:], []byte{0xff, 0xff, 0xff, 0xff})
	return ipoib.Info{
		Name: i.cfg.Name, Mode: mode, MTU: i.cfg.Device.MTU(), HWAddr: hw, Broadcast: brd,
		PKey: i.cfg.PKey, QPN: i.qpn, QKey: 0x0B1B, State: i.State(), Addrs: slices.Clone(i.cfg.Addrs),
		Counters: map[string]uint64{"rx_packets": 0, "tx_packets": 0},
	}
}

func (i *Interface) Neighbors() []ipoib.Neighbor {
	i.b.mu.Lock()
	defer i.b.mu.Unlock()
	return slices.Clone(i.b.Neighbors[i.cfg.Name])
}

// Neighbor builds a neighbour entry for ip at the port with GID prefix fe80:: and GUID
// guid, QPN qpn.
func Neighbor(ip string, qpn uint32, guid uint64, state string) ipoib.Neighbor {
	var hw ipoib.HWAddr
	binary.BigEndian.PutUint32(hw[0:], qpn)
	hw[4], hw[5] = 0xfe, 0x80
	binary.BigEndian.PutUint64(hw[12:], guid)
	return ipoib.Neighbor{IP: netip.MustParseAddr(ip), HWAddr: hw, State: state, Age: 1500 * time.Millisecond}
}
