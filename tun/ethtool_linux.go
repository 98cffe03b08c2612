package tun

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ethtool's link settings (ETHTOOL_GLINKSETTINGS / ETHTOOL_SLINKSETTINGS,
// include/uapi/linux/ethtool.h). The TUN driver keeps what is set and reports it
// (tun_set_link_ksettings): `ethtool ib0` then shows the IB port's speed, as ipoib's
// ipoib_get_link_ksettings does, not the TUN default 10000Mb/s Twisted Pair.
const (
	ethtoolGLinkSettings = 0x4c
	ethtoolSLinkSettings = 0x4d
	ethtoolPortOther     = 0xff
	ethtoolDuplexFull    = 0x01
	ethtoolAutonegOff    = 0x00
)

type ethtoolLinkSettings struct {
	cmd                 uint32
	speed               uint32
	duplex              uint8
	port                uint8
	phyAddress          uint8
	autoneg             uint8
	mdioSupport         uint8
	ethTpMdix           uint8
	ethTpMdixCtrl       uint8
	linkModeMasksNwords int8
	transceiver         uint8
	masterSlaveCfg      uint8
	masterSlaveState    uint8
	rateMatching        uint8
	reserved            [7]uint32
	masks               [3 * 127]uint32 // supported, advertising, lp_advertising
}

type ethtoolIfreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// SetLinkSpeed sets the speed (Mb/s) the device reports to ethtool, with full duplex,
// port OTHER and no autonegotiation, as ipoib reports an IB port.
func (k *Kernel) SetLinkSpeed(mbps int) error {
	if k.closed.Load() {
		return ErrClosed
	}
	fd, err := socketIn(k.netns)
	if err != nil {
		return devError("set link speed of", describe(k.name, k.netns), err)
	}
	defer unix.Close(fd)
	var ls ethtoolLinkSettings
	var req ethtoolIfreq
	copy(req.name[:], k.name)
	req.data = unsafe.Pointer(&ls)
	do := func() error {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
		runtime.KeepAlive(&ls)
		if e != 0 {
			return e
		}
		return nil
	}
	// The handshake: the kernel answers a request of no mask words with how many it
	// wants, negated.
	ls.cmd = ethtoolGLinkSettings
	if err := do(); err != nil {
		return devError("read link settings of", describe(k.name, k.netns), err)
	}
	n := -ls.linkModeMasksNwords
	if n <= 0 || int(n) > 127 {
		return fmt.Errorf("tun: %s: ethtool link mode words %d", describe(k.name, k.netns), n)
	}
	ls = ethtoolLinkSettings{cmd: ethtoolGLinkSettings, linkModeMasksNwords: n}
	if err := do(); err != nil {
		return devError("read link settings of", describe(k.name, k.netns), err)
	}
	ls.cmd, ls.speed, ls.duplex, ls.port, ls.autoneg = ethtoolSLinkSettings, uint32(mbps), ethtoolDuplexFull, ethtoolPortOther, ethtoolAutonegOff
	if err := do(); err != nil {
		return devError("set link settings of", describe(k.name, k.netns), err)
	}
	return nil
}

// socketIn opens a datagram socket in network namespace name ("" for this process's),
// for ioctls on the devices there.
func socketIn(name string) (int, error) {
	if name == "" {
		return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	}
	target, err := netns.GetFromName(name)
	if err != nil {
		return -1, err
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return -1, err
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return -1, err
	}
	fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err := netns.Set(orig); err != nil {
		// The thread stays in the other namespace: leave it locked, so that Go ends
		// it with the goroutine instead of running other code there.
		if serr == nil {
			unix.Close(fd)
		}
		return -1, err
	}
	runtime.UnlockOSThread()
	return fd, serr
}
