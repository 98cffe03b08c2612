// Package tun is the IP side of pibgw's IPoIB interfaces: the Device seam through which
// IP packets enter and leave an interface, and its implementations — the Linux kernel TUN
// device (link type infiniband, configured by netlink, optionally in a network namespace)
// and a userspace gVisor netstack for unprivileged use and Go programs. tuntest has an
// in-memory fake.
//
// The seam has the shape of wireguard-go's tun.Device: batched reads and writes with
// head-room, so that an implementation with segmentation offload can hand over many
// packets per call and callers can prepend headers without copying.
package tun

import "errors"

// Device moves IP packets (no link-layer header) between pibgw and an IP stack.
type Device interface {
	// Read reads up to len(bufs) packets. Packet i is written to bufs[i][offset:] and is
	// sizes[i] bytes long; the offset bytes in front are head-room for the caller. It
	// blocks until at least one packet is available and returns how many were read.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes packets bufs[i][offset:] (each one IP packet) to the stack and
	// returns how many were written. The offset bytes in front may be used by the
	// implementation (a virtio header, say).
	Write(bufs [][]byte, offset int) (int, error)
	// MTU returns the device's MTU; SetMTU changes it.
	MTU() int
	SetMTU(mtu int) error
	// Name is the interface name as the IP stack knows it ("ib0").
	Name() string
	// BatchSize is the most packets one Read returns, and the batch Write prefers.
	BatchSize() int
	// Close releases the device; a blocked Read returns ErrClosed.
	Close() error
}

// ErrClosed is returned by Read and Write on a closed device.
var ErrClosed = errors.New("tun: device closed")

// MinOffset is the head-room every Device accepts in Read and Write: enough for the
// kernel TUN's virtio-net header (10 bytes) and IPoIB's 4-byte encapsulation header, with
// room to spare.
const MinOffset = 32
