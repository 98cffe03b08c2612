package tun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// virtioNetHdrLen is the head-room wireguard's TUN needs in Write for the virtio-net
// header it puts in front of each (possibly coalesced) packet.
const virtioNetHdrLen = 10

// The kernel TUN's Write uses the head-room; MinOffset must cover it.
var _ [MinOffset - virtioNetHdrLen]struct{}

// Kernel is a Linux TUN device (IFF_TUN, no packet information, virtio-net header with
// TCP and UDP segmentation offloads), created by CreateKernel. Reads split the kernel's
// large segments into packets of at most MTU bytes; writes coalesce consecutive TCP and
// UDP segments of one flow, so the kernel takes fewer, larger packets.
//
// One goroutine may Read while another Writes.
type Kernel struct {
	name  string
	netns string
	index int
	h     *netlink.Handle
	log   *slog.Logger

	mtu    atomic.Int32
	closed atomic.Bool
	vnet   bool            // the file carries virtio-net headers (offloads are on)
	file   *os.File        // the TUN file (non-blocking, in Go's poller)
	raw    syscall.RawConn // the file's, for ReadGSO and WriteGSO (rawIO); nil if the file blocks
	// gbuf gathers a segment written with a tail (WriteGSO), under wmu; it grows on the
	// first such write, so that an idle device holds none.
	gbuf []byte
	offl atomic.Int32 // the Offloads SetOffloads last set

	// wg is wireguard's device on a duplicate of file, made on the first Read or Write
	// (its GRO tables are 1.8 MB; the offload path, ReadGSO and WriteGSO, needs none).
	wg   atomic.Pointer[wgDevice]
	wgMu sync.Mutex
	mon  *nlSocket // link notifications in the device's namespace: MTU changes

	wmu  sync.Mutex
	wbuf [][]byte // the caller's slice headers, which wireguard's GRO reorders

	closeOnce sync.Once
	closeErr  error
	events    chan struct{} // closed when the event drain ends
}

var _ Device = (*Kernel)(nil)

// CreateKernel creates and configures a kernel TUN device as cfg says. On error nothing
// is left behind. Close removes the device.
func CreateKernel(cfg KernelConfig) (*Kernel, error) {
	if err := checkKernelConfig(&cfg); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	what := describe(cfg.Name, cfg.NetNS)

	var ns netns.NsHandle = -1
	if cfg.NetNS != "" {
		var err error
		if ns, err = openNetNS(cfg.NetNS); err != nil {
			return nil, err
		}
		defer ns.Close()
	}

	// Create the device on a thread inside the namespace, so it never exists (nor
	// collides by name) in ours.
	var file *os.File
	create := func() error {
		var err error
		file, err = createTUN(cfg.Name)
		return err
	}
	var err error
	if ns >= 0 {
		err = inNetNS(ns, create)
	} else {
		err = create()
	}
	if err != nil {
		return nil, devError("create", what, err)
	}
	k := &Kernel{file: file, netns: cfg.NetNS, log: log, events: make(chan struct{})}
	k.offl.Store(int32(OffloadsAll))
	if err := k.open(ns, cfg.MTU); err != nil {
		file.Close()
		if k.mon != nil {
			k.mon.close()
		}
		if k.h != nil {
			k.h.Close()
		}
		return nil, devError("open", what, err)
	}
	go k.monitor()
	what = describe(k.name, cfg.NetNS)
	if err := k.configure(cfg); err != nil {
		k.Close()
		return nil, devError("configure", what, err)
	}
	if cfg.IgnoreRoutesWithLinkDown {
		set := func() error { return k.ignoreRoutesWithLinkDown() }
		if ns >= 0 {
			err = inNetNS(ns, set)
		} else {
			err = set()
		}
		if err != nil {
			k.Close()
			return nil, devError("configure", what, err)
		}
	}
	k.log.Debug("tun: created", "dev", k.name, "netns", k.netns, "index", k.index, "mtu", cfg.MTU,
		"infiniband", cfg.Infiniband, "batch", k.BatchSize())
	return k, nil
}

// open finds the new device's name and index, through a netlink handle in its namespace,
// subscribes to its link notifications, sets its MTU and, with virtio-net headers, the
// offloads wireguard-go's CreateTUNFromFile sets.
func (k *Kernel) open(ns netns.NsHandle, mtu int) error {
	var err error
	if k.name, err = tunName(k.file); err != nil {
		return err
	}
	if ns >= 0 {
		k.h, err = netlink.NewHandleAt(ns)
	} else {
		k.h, err = netlink.NewHandle()
	}
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	link, err := k.h.LinkByName(k.name)
	if err != nil {
		return fmt.Errorf("netlink: find link %q: %w", k.name, err)
	}
	k.index = link.Attrs().Index
	// Subscribed before the MTU is read and set: no change falls between.
	if k.mon, err = subscribeNetlink(ns, unix.RTNLGRP_LINK); err != nil {
		return fmt.Errorf("netlink: subscribe: %w", err)
	}
	if link.Attrs().MTU != mtu {
		if err := k.h.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("netlink: set MTU %d: %w", mtu, err)
		}
	}
	k.mtu.Store(int32(mtu))
	k.raw = nonBlockingRawConn(k.file)
	k.vnet = k.hasVnetHdr()
	if k.vnet {
		if err := k.SetOffloads(OffloadsAll); err != nil {
			return err
		}
	}
	return nil
}

// nonBlockingRawConn returns f's RawConn if its descriptor is non-blocking (as
// wireguard-go opens TUN files), for rawIO; nil otherwise.
func nonBlockingRawConn(f *os.File) syscall.RawConn {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var flags int
	ferr := rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if ferr != nil || err != nil || flags&unix.O_NONBLOCK == 0 {
		return nil
	}
	return rc
}

// hasVnetHdr asks the kernel (TUNGETIFF) whether the device carries virtio-net headers,
// which wireguard-go turns on when the kernel supports segmentation offload.
func (k *Kernel) hasVnetHdr() bool {
	sc, err := k.file.SyscallConn()
	if err != nil {
		return false
	}
	var ifr [unix.IFNAMSIZ + 24]byte
	var ierr error
	if err := sc.Control(func(fd uintptr) {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.TUNGETIFF, uintptr(unsafe.Pointer(&ifr[0])))
		if e != 0 {
			ierr = e
		}
	}); err != nil || ierr != nil {
		return false
	}
	flags := binary.NativeEndian.Uint16(ifr[unix.IFNAMSIZ:])
	return flags&unix.IFF_VNET_HDR != 0
}

var _ Offloader = (*Kernel)(nil)

// Offloads reports whether the device exchanges offloaded segments (the kernel and
// wireguard-go agreed on virtio-net headers).
func (k *Kernel) Offloads() bool { return k.vnet }

// SetOffloads sets what the kernel may hand the device unfinished (TUNSETOFFLOAD, what
// `ethtool -K DEV tx off tso off` does to a NIC): with OffloadsNone it completes every
// checksum itself and hands over nothing larger than the MTU, as Linux's IPoIB does in
// connected mode; with OffloadsCsum it leaves checksums partial. Reads and writes keep
// their virtio-net header.
func (k *Kernel) SetOffloads(o Offloads) error {
	if !k.vnet {
		return fmt.Errorf("tun: %s has no offloads to switch", k.name)
	}
	sc, err := k.file.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := sc.Control(func(fd uintptr) {
		switch o {
		case OffloadsNone:
			ierr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, 0)
		case OffloadsCsum:
			ierr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, unix.TUN_F_CSUM)
		default:
			// wireguard-go's set: TCP always, UDP segmentation where the kernel has it (6.2+).
			const tcp = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
			if unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tcp|unix.TUN_F_USO4|unix.TUN_F_USO6) != nil {
				ierr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tcp)
			}
		}
	}); err != nil {
		return err
	}
	if ierr != nil {
		return fmt.Errorf("tun: %s: TUNSETOFFLOAD: %w", k.name, ierr)
	}
	k.offl.Store(int32(o))
	return nil
}

// ReadGSO reads one segment as the kernel queued it: up to 64 KiB of TCP or UDP to be
// segmented, or one packet, with its virtio-net header decoded. Do not mix with Read.
func (k *Kernel) ReadGSO(buf []byte, offset int) (int, GSO, error) {
	if k.closed.Load() {
		return 0, GSO{}, ErrClosed
	}
	if !k.vnet || offset < virtioNetHdrLen {
		return 0, GSO{}, fmt.Errorf("tun: read %s: no offloads, or offset %d below %d", k.name, offset, virtioNetHdrLen)
	}
	b := buf[offset-virtioNetHdrLen:]
	n, err := k.rawIO(false, b)
	if err != nil {
		return 0, GSO{}, k.ioErr("read", err)
	}
	if n < virtioNetHdrLen {
		return 0, GSO{}, fmt.Errorf("tun: read %s: %d bytes, shorter than the virtio-net header", k.name, n)
	}
	return n - virtioNetHdrLen, decodeVnetHdr(b), nil
}

// WriteGSO writes buf[offset:] and then the pieces of tail, with the virtio-net header
// g describes in the head-room, as one segment: the kernel segments it if it must, and
// takes a CHECKSUM_PARTIAL segment's checksum as done (what veth does for its peer). Do
// not mix with Write.
func (k *Kernel) WriteGSO(buf []byte, offset int, g GSO, tail [][]byte) error {
	if k.closed.Load() {
		return ErrClosed
	}
	if !k.vnet || offset < virtioNetHdrLen {
		return fmt.Errorf("tun: write %s: no offloads, or offset %d below %d", k.name, offset, virtioNetHdrLen)
	}
	b := buf[offset-virtioNetHdrLen:]
	encodeVnetHdr(b, g)
	var err error
	if len(tail) == 0 {
		_, err = k.rawIO(true, b)
	} else {
		// Gathered here and written whole: measured, one memmove of the segment costs
		// less than the kernel's writev(2) copy from ~33 pieces.
		k.wmu.Lock()
		c := append(k.gbuf[:0], b...)
		for _, p := range tail {
			c = append(c, p...)
		}
		k.gbuf = c
		_, err = k.rawIO(true, c)
		k.wmu.Unlock()
	}
	if err != nil {
		return k.ioErr("write", err)
	}
	return nil
}

func checkKernelConfig(cfg *KernelConfig) error {
	if len(cfg.Name) >= unix.IFNAMSIZ {
		return fmt.Errorf("tun: device name %q is longer than %d bytes", cfg.Name, unix.IFNAMSIZ-1)
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultKernelMTU
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return fmt.Errorf("tun: %s: MTU %d out of range 68–65535", describe(cfg.Name, cfg.NetNS), cfg.MTU)
	}
	for _, p := range cfg.Addrs {
		if !p.IsValid() {
			return fmt.Errorf("tun: %s: invalid address %v", describe(cfg.Name, cfg.NetNS), p)
		}
		if p.Addr().Is6() && !p.Addr().Is4In6() && cfg.MTU < 1280 {
			return fmt.Errorf("tun: %s: IPv6 address %v needs MTU ≥ 1280, have %d", describe(cfg.Name, cfg.NetNS), p, cfg.MTU)
		}
	}
	for _, p := range cfg.Routes {
		if !p.IsValid() {
			return fmt.Errorf("tun: %s: invalid route %v", describe(cfg.Name, cfg.NetNS), p)
		}
	}
	if len(cfg.Routes) > 0 && !cfg.Up {
		return fmt.Errorf("tun: %s: routes need the device up (set Up)", describe(cfg.Name, cfg.NetNS))
	}
	return nil
}

// configure sets link type, flags, addresses, state and routes on the new device.
func (k *Kernel) configure(cfg KernelConfig) error {
	link, err := k.h.LinkByIndex(k.index)
	if err != nil {
		return fmt.Errorf("netlink: find link: %w", err)
	}
	if cfg.Infiniband {
		// The kernel refuses TUNSETLINK on a device that is up (EBUSY); it is down until
		// we bring it up below.
		if err := k.ioctl(unix.TUNSETLINK, ARPHRDInfiniband, false); err != nil {
			return fmt.Errorf("set link type infiniband (TUNSETLINK): %w", err)
		}
	}
	// A TUN device is created POINTOPOINT|NOARP|MULTICAST; make sure of MULTICAST, so the
	// kernel sends IGMP and MLD reports through the device for the groups joined on it.
	if link.Attrs().Flags&net.FlagMulticast == 0 {
		if err := k.h.LinkSetMulticastOn(link); err != nil {
			return fmt.Errorf("set multicast on: %w", err)
		}
	}
	for _, p := range cfg.Addrs {
		if err := k.h.AddrAdd(link, netlinkAddr(p)); err != nil {
			return fmt.Errorf("add address %v: %w", p, err)
		}
	}
	if cfg.Up {
		if err := k.h.LinkSetUp(link); err != nil {
			return fmt.Errorf("set up: %w", err)
		}
	}
	for _, p := range cfg.Routes {
		r := &netlink.Route{LinkIndex: k.index, Dst: prefixToIPNet(p), Scope: netlink.SCOPE_LINK}
		if err := k.h.RouteReplace(r); err != nil {
			return fmt.Errorf("add route %v: %w", p, err)
		}
	}
	return nil
}

// ioctl issues a TUN ioctl on the device's file, with an integer argument passed by
// value or, if byPtr, by pointer.
func (k *Kernel) ioctl(req uint, arg int, byPtr bool) error {
	sc, err := k.file.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		if byPtr {
			ierr = unix.IoctlSetPointerInt(int(fd), req, arg)
		} else {
			ierr = unix.IoctlSetInt(int(fd), req, arg)
		}
	})
	if err != nil {
		return err
	}
	return ierr
}

// monitor follows the device's MTU as the kernel reports it (`ip link set DEV mtu N`
// outside pibgw), until the device is closed.
func (k *Kernel) monitor() {
	defer close(k.events)
	for {
		err := k.mon.receive(func(msgs []syscall.NetlinkMessage) {
			for _, m := range msgs {
				if mtu, ok := linkMTU(m, k.index); ok && !k.closed.Load() {
					if k.mtu.Swap(int32(mtu)) != int32(mtu) {
						k.log.Debug("tun: MTU changed", "dev", k.name, "netns", k.netns, "mtu", mtu)
					}
				}
			}
		})
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOBUFS) && !k.closed.Load():
			// Notifications were lost: ask.
			if link, err := k.h.LinkByIndex(k.index); err == nil {
				k.mtu.Store(int32(link.Attrs().MTU))
			}
		default:
			return
		}
	}
}

// wgDevice is wireguard's device on a duplicate of the TUN descriptor.
type wgDevice struct{ wgtun.Device }

// wireguard returns wireguard's device for Read and Write, making it on first use.
func (k *Kernel) wireguard() (wgtun.Device, error) {
	if d := k.wg.Load(); d != nil {
		return d.Device, nil
	}
	k.wgMu.Lock()
	defer k.wgMu.Unlock()
	if d := k.wg.Load(); d != nil {
		return d.Device, nil
	}
	if k.closed.Load() {
		return nil, ErrClosed
	}
	sc, err := k.file.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := sc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("tun: %s: dup: %w", k.name, derr)
	}
	dev, _, err := wgtun.CreateUnmonitoredTUNFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tun: %s: %w", k.name, err)
	}
	// wireguard set its own offloads; put back those SetOffloads chose.
	if o := Offloads(k.offl.Load()); k.vnet && o != OffloadsAll {
		if err := k.SetOffloads(o); err != nil {
			dev.Close()
			return nil, err
		}
	}
	k.wg.Store(&wgDevice{dev})
	return dev, nil
}

// Read reads a batch of packets the kernel routed into the device. A large TCP or UDP
// segment from the kernel is split into MTU-sized packets, each in its own bufs[i], so
// len(bufs) should be BatchSize and each buffer offset+MTU bytes long. An error other
// than ErrClosed concerns that one read (a malformed segment, bufs too few or too small);
// the device stays usable.
func (k *Kernel) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if k.closed.Load() {
		return 0, ErrClosed
	}
	dev, err := k.wireguard()
	if err != nil {
		return 0, k.ioErr("read", err)
	}
	n, err := dev.Read(bufs, sizes, offset)
	if err != nil {
		if err = k.ioErr("read", err); err == ErrClosed {
			n = 0
		}
		return n, err
	}
	return n, nil
}

// rawIO reads or writes b whole with one read(2) or write(2) on the TUN file, through
// its RawConn, which keeps the descriptor open meanwhile and waits in Go's poller while
// the device has nothing to read. The call itself is a raw system call, one that does
// not tell the scheduler: the descriptor is non-blocking (checked at creation; if it is
// not, the file's own Read and Write are used), so the call never sleeps, but a write
// runs the kernel's receive path for the packet (GRO, TCP) before it returns, long
// enough that the scheduler would treat it as blocking and hand the daemon's only P
// (max_procs 1) to another thread, then take it back: thread wake-ups on every packet.
// Measured with scripts/bench-ipoib.sh: multi-host connected mode 4.4 → 5.7 Gbit/s.
func (k *Kernel) rawIO(write bool, b []byte) (int, error) {
	if k.raw == nil {
		if write {
			return k.file.Write(b)
		}
		return k.file.Read(b)
	}
	c := rawCalls.Get().(*rawCall)
	c.op, c.b = unix.SYS_READ, b
	var err error
	if write {
		c.op = unix.SYS_WRITE
		err = k.raw.Write(c.fn)
	} else {
		err = k.raw.Read(c.fn)
	}
	n, errno := c.n, c.errno
	c.b = nil
	rawCalls.Put(c)
	switch {
	case err != nil:
		return 0, err
	case errno != 0 && write:
		return 0, os.NewSyscallError("write", errno)
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	}
	return n, nil
}

// rawCall is one rawIO call: its arguments, results and the function the RawConn calls,
// bound once, so that a call allocates nothing (a closure over them would, per packet).
type rawCall struct {
	op    uintptr
	b     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

var rawCalls = sync.Pool{New: func() any {
	c := new(rawCall)
	c.fn = c.call
	return c
}}

// call makes the system call; false (EAGAIN) has the RawConn wait in the poller and call
// again.
func (c *rawCall) call(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall(c.op, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.b))), uintptr(len(c.b)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		c.n, c.errno = int(r), e
		return true
	}
}

// ioErr is what a failed read or write returns: ErrClosed once the device is closing,
// else the error, naming the operation and the device.
func (k *Kernel) ioErr(op string, err error) error {
	if k.closed.Load() || errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("tun: %s %s: %w", op, k.name, err)
}

// Write writes a batch of packets to the kernel. It uses the offset head-room (at least
// 10 bytes) for the virtio-net header and may coalesce consecutive segments of a TCP or
// UDP flow into one buffer's spare capacity, so the contents of bufs (between
// offset-10 and cap) are not preserved; the slice bufs itself is left as it was. If any
// packet fails, Write returns 0 and the errors (the others may have been delivered);
// writing to a device that is down fails with an error wrapping syscall.EIO.
func (k *Kernel) Write(bufs [][]byte, offset int) (int, error) {
	if k.closed.Load() {
		return 0, ErrClosed
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	if offset < virtioNetHdrLen {
		return 0, fmt.Errorf("tun: write %s: offset %d below %d bytes of head-room", k.name, offset, virtioNetHdrLen)
	}
	dev, err := k.wireguard()
	if err != nil {
		return 0, k.ioErr("write", err)
	}
	k.wmu.Lock()
	k.wbuf = append(k.wbuf[:0], bufs...)
	_, err = dev.Write(k.wbuf, offset)
	clear(k.wbuf)
	k.wmu.Unlock()
	if err != nil {
		return 0, k.ioErr("write", err)
	}
	return len(bufs), nil
}

// MTU returns the device's MTU.
func (k *Kernel) MTU() int { return int(k.mtu.Load()) }

// SetMTU changes the device's MTU.
func (k *Kernel) SetMTU(mtu int) error {
	if k.closed.Load() {
		return ErrClosed
	}
	if mtu < 68 || mtu > 65535 {
		return fmt.Errorf("tun: %s: MTU %d out of range 68–65535", describe(k.name, k.netns), mtu)
	}
	link, err := k.h.LinkByIndex(k.index)
	if err == nil {
		err = k.h.LinkSetMTU(link, mtu)
	}
	if err != nil {
		return devError("set MTU of", describe(k.name, k.netns), err)
	}
	k.mtu.Store(int32(mtu))
	return nil
}

// SetUp brings the device up or down (administrative state, `ip link set up|down`).
func (k *Kernel) SetUp(up bool) error {
	if k.closed.Load() {
		return ErrClosed
	}
	link, err := k.h.LinkByIndex(k.index)
	if err == nil {
		if up {
			err = k.h.LinkSetUp(link)
		} else {
			err = k.h.LinkSetDown(link)
		}
	}
	if err != nil {
		return devError("set state of", describe(k.name, k.netns), err)
	}
	return nil
}

// SetCarrier sets the device's carrier (TUNSETCARRIER): without it an up device shows
// NO-CARRIER and the kernel routes nothing through it — the state of an IPoIB interface
// whose port is not active or whose P_Key is not in the port's table.
func (k *Kernel) SetCarrier(on bool) error {
	if k.closed.Load() {
		return ErrClosed
	}
	v := 0
	if on {
		v = 1
	}
	if err := k.ioctl(unix.TUNSETCARRIER, v, true); err != nil {
		return devError("set carrier of", describe(k.name, k.netns), err)
	}
	return nil
}

// Name returns the interface name.
func (k *Kernel) Name() string { return k.name }

// NetNS returns the named network namespace the device is in ("" for the current one).
func (k *Kernel) NetNS() string { return k.netns }

// Index returns the interface index within its network namespace.
func (k *Kernel) Index() int { return k.index }

// BatchSize returns the most packets one Read returns (128 with offloads).
func (k *Kernel) BatchSize() int {
	if k.vnet {
		return conn.IdealBatchSize // wireguard's, with virtio-net headers
	}
	return 1
}

// Close closes the device, which removes it from the kernel; a blocked Read returns
// ErrClosed. It removes nothing else (the namespace stays).
func (k *Kernel) Close() error {
	k.closeOnce.Do(func() {
		k.wgMu.Lock()
		k.closed.Store(true)
		k.wgMu.Unlock()
		// Closing the last descriptor of a non-persistent TUN unregisters the device.
		k.closeErr = k.file.Close()
		if d := k.wg.Load(); d != nil {
			if err := d.Close(); err != nil && k.closeErr == nil {
				k.closeErr = err
			}
		}
		k.mon.close()
		<-k.events
		if link, err := k.h.LinkByIndex(k.index); err == nil && link.Attrs().Name == k.name {
			// Still there (someone else holds the queue open?): delete it.
			if err := k.h.LinkDel(link); err != nil && k.closeErr == nil {
				k.closeErr = devError("delete", describe(k.name, k.netns), err)
			}
		}
		k.h.Close()
		if k.closeErr != nil && errors.Is(k.closeErr, os.ErrClosed) {
			k.closeErr = nil
		}
	})
	return k.closeErr
}

// netlinkAddr is p as pibgw assigns it to a device: IPv6 without DAD, which is pointless
// on a NOARP device (the kernel skips it anyway) and would delay the address.
func netlinkAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: prefixToIPNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	a := p.Addr().Unmap()
	bits := p.Bits()
	if p.Addr().Is4In6() {
		bits -= 96
	}
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

func describe(name, ns string) string {
	if name == "" {
		name = "(unnamed)"
	}
	if ns == "" {
		return fmt.Sprintf("device %q", name)
	}
	return fmt.Sprintf("device %q in netns %q", name, ns)
}

// devError wraps err from op on a device, naming it and explaining the common errnos.
func devError(op, what string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("tun: %s %s: %w (needs root or CAP_NET_ADMIN)", op, what, err)
	case errors.Is(err, syscall.EBUSY) && op == "create":
		return fmt.Errorf("tun: %s %s: %w (a device of that name exists)", op, what, err)
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("tun: %s %s: %w (the device is up)", op, what, err)
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("tun: %s %s: %w (already present)", op, what, err)
	case errors.Is(err, os.ErrNotExist) && op == "create":
		return fmt.Errorf("tun: %s %s: %w (no /dev/net/tun: load the tun module)", op, what, err)
	}
	return fmt.Errorf("tun: %s %s: %w", op, what, err)
}

// ignoreRoutesWithLinkDown sets net.ipv{4,6}.conf.DEV.ignore_routes_with_linkdown in the
// calling thread's namespace (IPv6's only if the kernel has IPv6).
func (k *Kernel) ignoreRoutesWithLinkDown() error {
	for _, v := range []string{"ipv4", "ipv6"} {
		f := "/proc/sys/net/" + v + "/conf/" + k.name + "/ignore_routes_with_linkdown"
		if err := os.WriteFile(f, []byte("1"), 0); err != nil {
			if v == "ipv6" && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("sysctl %s: %w", f, err)
		}
	}
	return nil
}
