package tun

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// cloneDevice is the TUN clone device (the kernel's drivers/net/tun.c, tun_miscdev).
const cloneDevice = "/dev/net/tun"

// createTUN opens a TUN device named name as wireguard's CreateTUN does (IFF_TUN,
// IFF_NO_PI, IFF_VNET_HDR, non-blocking) and hands it to wireguard's
// CreateTUNFromFile. Unlike CreateTUN, which leaves the clone descriptor open when
// TUNSETIFF fails (the name is taken, say) and CreateTUNFromFile, which leaves the file
// open when it fails, the descriptor is closed on every failure path.
func createTUN(name string, mtu int) (wgtun.Device, error) {
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
	f := os.NewFile(uintptr(fd), cloneDevice)
	dev, err := wgtun.CreateTUNFromFile(f, mtu)
	if err != nil {
		f.Close()
		return nil, err
	}
	return dev, nil
}
