package tun

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// cloneDevice is the TUN clone device (the kernel's drivers/net/tun.c, tun_miscdev).
const cloneDevice = "/dev/net/tun"

// createTUN opens a TUN device named name as wireguard's CreateTUN does (IFF_TUN,
// IFF_NO_PI, IFF_VNET_HDR, non-blocking) and returns its file, which Go's poller waits
// on: reading an idle device holds no OS thread. Unlike CreateTUN, which leaves the
// clone descriptor open when TUNSETIFF fails (the name is taken, say), the descriptor is
// closed on every failure path. The rest of what wireguard's CreateTUNFromFile does —
// its offloads, the MTU — Kernel.open does, and its netlink monitor (a thread blocked in
// poll(2) and 64 KiB per device, for as long as the device lives) is replaced by the
// Kernel's own, which waits in the poller too.
func createTUN(name string) (*os.File, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, err
	}
	// IFF_VNET_HDR: wireguard's offloads and its "tun status hack" need it.
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	fd, err := unix.Open(cloneDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%s does not exist", cloneDevice)
		}
		return nil, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Non-blocking before the runtime's poller takes it (os.NewFile looks at the flag).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), cloneDevice), nil
}

// tunName is the name of the TUN device f is attached to (TUNGETIFF).
func tunName(f *os.File) (string, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var ierr error
	if err := sc.Control(func(fd uintptr) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			ierr = err
			return
		}
		if ierr = unix.IoctlIfreq(int(fd), unix.TUNGETIFF, ifr); ierr == nil {
			name = ifr.Name()
		}
	}); err != nil {
		return "", err
	}
	if ierr != nil {
		return "", fmt.Errorf("TUNGETIFF: %w", ierr)
	}
	return name, nil
}
