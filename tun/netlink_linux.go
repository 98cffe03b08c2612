package tun

import (
	"encoding/binary"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nlSocket is a NETLINK_ROUTE socket subscribed to notification groups, non-blocking
// and waited on in Go's poller: a goroutine waiting for the next notification holds no
// OS thread (vishvananda/netlink's Subscribe blocks one in recvfrom(2), and the runtime
// never gives a thread back) and no buffer (one comes from a pool once data is there).
type nlSocket struct {
	f  *os.File
	rc syscall.RawConn
}

// nlBufs are receive buffers, taken only while a message is read and parsed.
var nlBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// subscribeNetlink opens a NETLINK_ROUTE socket in ns (the current namespace if ns < 0)
// subscribed to groups (RTNLGRP_*, all below 32).
func subscribeNetlink(ns netns.NsHandle, groups ...uint) (*nlSocket, error) {
	fd := -1
	open := func() error {
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		var mask uint32
		for _, g := range groups {
			mask |= 1 << (g - 1)
		}
		if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: mask}); err != nil {
			unix.Close(s)
			return err
		}
		fd = s
		return nil
	}
	var err error
	if ns >= 0 {
		err = inNetNS(ns, open)
	} else {
		err = open()
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "netlink")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &nlSocket{f: f, rc: rc}, nil
}

// receive waits for the next datagram and hands its messages to f, which must be quick
// and must not keep them (they live in a pooled buffer). After close it returns an error
// wrapping os.ErrClosed; ENOBUFS says notifications were lost.
func (s *nlSocket) receive(f func([]syscall.NetlinkMessage)) error {
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		bp := nlBufs.Get().(*[]byte)
		defer nlBufs.Put(bp)
		for {
			// A raw system call, as rawIO's: it never blocks (MSG_DONTWAIT), and a
			// scheduler told of it could hand the P to a new thread when a loaded
			// machine makes it slow — with every device of a namespace woken by one
			// link change, a thread for each.
			b := *bp
			r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
				unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0:
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			default:
				rerr = e
				return true
			}
			msgs, err := syscall.ParseNetlinkMessage(b[:r])
			if err != nil {
				rerr = err
				return true
			}
			f(msgs)
			return true
		}
	})
	if err != nil {
		return err
	}
	return rerr
}

// close ends a waiting receive.
func (s *nlSocket) close() { s.f.Close() }

// linkMTU is the MTU (IFLA_MTU) of an RTM_NEWLINK message about ifindex.
func linkMTU(m syscall.NetlinkMessage, ifindex int) (int, bool) {
	if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
		return 0, false
	}
	// struct ifinfomsg: family, pad, type (u16), index (s32), …
	if int(int32(binary.NativeEndian.Uint32(m.Data[4:]))) != ifindex {
		return 0, false
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return 0, false
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_MTU && len(a.Value) >= 4 {
			return int(binary.NativeEndian.Uint32(a.Value)), true
		}
	}
	return 0, false
}
