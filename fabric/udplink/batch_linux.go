package udplink

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Batched datagram I/O with recvmmsg(2)/sendmmsg(2). golang.org/x/net's ReadBatch returns
// each source address as a new *net.UDPAddr, an allocation per datagram; these batches
// keep their headers, iovecs and socket addresses in arrays made once, so the steady state
// allocates nothing.

// mmsghdr is struct mmsghdr (linux/socket.h) on 64-bit platforms.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// batch is a set of datagram slots for one recvmmsg or sendmmsg call.
type batch struct {
	msgs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // big enough for sockaddr_in too
	nlens []uint32                // send: each slot's address length
	bufs  [][]byte
	mem   []byte   // the memory of bufs
	lens  []int    // payload length of each slot (send) or received length (receive)
	nonce nonce    // AEAD scratch of the sender that holds the batch
	run   [][]byte // received packets being collected for one Receive call

	count int // slots in use (send) or received (receive)
	errno syscall.Errno
	sent  int                   // messages sent
	rfn   func(fd uintptr) bool // method values, made once
	wfn   func(fd uintptr) bool

	// UDP segmentation offload (Linux 4.18+ UDP_SEGMENT, 5.0+ UDP_GRO): a message may
	// carry several datagrams of one size (the last may be shorter), which the kernel
	// sends, and a receiving socket with UDP_GRO is handed, as one.
	ctrl     []byte        // per message: a UDP_SEGMENT cmsg (send) or room for UDP_GRO's (receive)
	segs     []int         // receive: each message's segment size (0: one datagram)
	slots    []int         // send: datagrams in each message
	nmsgs    int           // send: messages built from the slots
	datagram int           // send: datagrams of the messages sent
	refusal  syscall.Errno // send: why the kernel refused a segmented message
}

const ctrlLen = 32 // ≥ unix.CmsgSpace(4)

// maxGSOSegments is the kernel's UDP_MAX_SEGMENTS; maxGSOBytes the most one UDP
// message carries over IPv4.
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65507
)

func newBatch(n, bufSize int) *batch {
	b := &batch{
		msgs:  make([]mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n),
		nlens: make([]uint32, n),
		bufs:  make([][]byte, n),
		lens:  make([]int, n),
		run:   make([][]byte, 0, n*max(1, bufSize/maxDatagram)),
		ctrl:  make([]byte, n*ctrlLen),
		segs:  make([]int, n),
		slots: make([]int, n),
	}
	mem := make([]byte, n*bufSize)
	b.mem = mem
	for i := range b.msgs {
		b.bufs[i] = mem[i*bufSize : (i+1)*bufSize : (i+1)*bufSize]
		b.iovs[i].Base = &b.bufs[i][0]
		b.msgs[i].hdr.Iov = &b.iovs[i]
		b.msgs[i].hdr.Iovlen = 1
		b.msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	}
	b.rfn = b.recv
	b.wfn = b.send
	return b
}

// recv and send are raw system calls (they do not tell Go's scheduler): with
// MSG_DONTWAIT they never sleep — the RawConn waits in the poller when they would — but
// on loopback a send runs the receiving socket's whole path before it returns, and a
// receive copies up to a coalesced 64 KiB per message: long enough that the scheduler
// would hand the process's only P (max_procs 1) to another thread and take it back, two
// thread wake-ups per batch. Measured with scripts/bench-ipoib.sh (with the TUN's
// rawIO): multi-host datagram mode +9 %, connected +30 %.
func (b *batch) recv(fd uintptr) bool {
	for i := range b.msgs {
		m := &b.msgs[i]
		m.hdr.Namelen = unix.SizeofSockaddrInet6
		m.hdr.Flags = 0
		m.hdr.Control = &b.ctrl[i*ctrlLen]
		m.hdr.SetControllen(ctrlLen)
		m.n = 0
		b.iovs[i].SetLen(len(b.bufs[i]))
	}
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[0])),
		uintptr(len(b.msgs)), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.errno = e
	if e == 0 {
		b.count = int(r)
		for i := 0; i < b.count; i++ {
			b.lens[i] = int(b.msgs[i].n)
			b.segs[i] = b.groSize(i)
		}
	}
	return true
}

// groSize returns the segment size the kernel reported for message i (a UDP_GRO cmsg),
// or 0.
func (b *batch) groSize(i int) int {
	n := int(b.msgs[i].hdr.Controllen)
	c := b.ctrl[i*ctrlLen : i*ctrlLen+min(n, ctrlLen)]
	for len(c) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(c) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(2) {
			d := c[unix.CmsgLen(0):l]
			if len(d) >= 4 {
				return int(*(*int32)(unsafe.Pointer(&d[0])))
			}
			return int(*(*uint16)(unsafe.Pointer(&d[0])))
		}
		c = c[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(c)):]
	}
	return 0
}

// readBatch receives up to len(b.msgs) datagrams, blocking until at least one arrives.
func (b *batch) readBatch(rc syscall.RawConn) error {
	b.count, b.errno = 0, 0
	if err := rc.Read(b.rfn); err != nil {
		return err
	}
	if b.errno != 0 {
		return b.errno
	}
	return nil
}

// truncated reports whether slot i's datagram was longer than its buffer.
func (b *batch) truncated(i int) bool { return b.msgs[i].hdr.Flags&unix.MSG_TRUNC != 0 }

// from returns slot i's source address.
func (b *batch) from(i int) netip.AddrPort {
	sa := &b.names[i]
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), port)
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}

// setTo addresses slot i to the raw address sa.
func (b *batch) setTo(i int, sa *rawAddr) {
	b.names[i] = sa.sa
	b.nlens[i] = sa.len
	b.msgs[i].hdr.Namelen = sa.len
}

func (b *batch) send(fd uintptr) bool {
	for b.sent < b.nmsgs {
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[b.sent])),
			uintptr(b.nmsgs-b.sent), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EAGAIN:
			return false
		case e == unix.EINTR:
			continue
		case (e == unix.EIO || e == unix.EINVAL || e == unix.EMSGSIZE) && b.slots[b.sent] > 1:
			// The path cannot segment: a segment larger than its MTU (EMSGSIZE; EINVAL
			// before Linux 6.3), or no checksum offload on the device (EIO). Say so; the
			// caller sends again without.
			b.refusal = e
			return true
		case e != 0:
			// A datagram the kernel will not take (e.g. ECONNREFUSED from an earlier ICMP
			// error, EHOSTUNREACH): skip it and send the rest, as UDP loses datagrams.
			b.errno = e
			b.sent++
			continue
		}
		for k := b.sent; k < b.sent+int(r); k++ {
			b.datagram += b.slots[k]
		}
		b.sent += int(r)
	}
	return true
}

// layout builds the messages from slots 0..count-1 (all to one address): one datagram
// each, or with gso runs of equal-size datagrams, the last of a run possibly shorter.
func (b *batch) layout(gso bool) {
	k := 0
	for s := 0; s < b.count; {
		n, size, total := 1, b.lens[s], b.lens[s]
		for gso && s+n < b.count && n < maxGSOSegments && b.lens[s+n-1] == size && b.lens[s+n] <= size &&
			total+b.lens[s+n] <= maxGSOBytes {
			total += b.lens[s+n]
			n++
		}
		m := &b.msgs[k].hdr
		m.Name = (*byte)(unsafe.Pointer(&b.names[s]))
		m.Namelen = b.nlens[s]
		m.Iov = &b.iovs[s]
		m.Iovlen = uint64(n)
		m.Flags = 0
		if n > 1 {
			c := b.ctrl[k*ctrlLen:]
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(size)
			m.Control = &c[0]
			m.SetControllen(unix.CmsgSpace(2))
		} else {
			m.Control = nil
			m.SetControllen(0)
		}
		b.slots[k] = n
		k++
		s += n
	}
	b.nmsgs = k
}

// writeBatch sends slots 0..count-1, as few messages as UDP segmentation offload
// allows when gso is on; it reports whether the kernel refused segmentation (the
// caller then turns it off) after sending everything without it.
func (b *batch) writeBatch(rc syscall.RawConn, gso bool) (refused bool, err error) {
	for i := 0; i < b.count; i++ {
		b.iovs[i].SetLen(b.lens[i])
	}
	b.layout(gso)
	b.sent, b.errno, b.datagram, b.refusal = 0, 0, 0, 0
	if err := rc.Write(b.wfn); err != nil {
		return false, err
	}
	if gso && b.sent < b.nmsgs && b.refusal != 0 {
		// Send the rest one datagram each.
		done := b.datagram
		b.relayout(done)
		b.sent, b.errno = 0, 0
		if err := rc.Write(b.wfn); err != nil {
			return true, err
		}
		b.datagram += done
		refused = true
	}
	if b.errno != 0 {
		return refused, b.errno
	}
	return refused, nil
}

// relayout makes one message per datagram of slots from..count-1.
func (b *batch) relayout(from int) {
	k := 0
	for s := from; s < b.count; s++ {
		m := &b.msgs[k].hdr
		m.Name = (*byte)(unsafe.Pointer(&b.names[s]))
		m.Namelen = b.nlens[s]
		m.Iov, m.Iovlen, m.Flags = &b.iovs[s], 1, 0
		m.Control = nil
		m.SetControllen(0)
		b.slots[k] = 1
		k++
	}
	b.nmsgs = k
	b.datagram = 0
}

// rawAddr is a peer's socket address in the form sendmmsg takes, built once per peer.
type rawAddr struct {
	sa  unix.RawSockaddrInet6
	len uint32
}

// makeRawAddr converts ap for a socket of family fam (AF_INET or AF_INET6).
func makeRawAddr(ap netip.AddrPort, fam int) (rawAddr, error) {
	var r rawAddr
	a := ap.Addr()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], ap.Port())
	if fam == unix.AF_INET {
		if !a.Unmap().Is4() {
			return r, errors.New("udplink: IPv6 peer on an IPv4 socket")
		}
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.sa))
		s4.Family = unix.AF_INET
		*(*[2]byte)(unsafe.Pointer(&s4.Port)) = port
		s4.Addr = a.Unmap().As4()
		r.len = unix.SizeofSockaddrInet4
		return r, nil
	}
	r.sa.Family = unix.AF_INET6
	*(*[2]byte)(unsafe.Pointer(&r.sa.Port)) = port
	r.sa.Addr = a.As16() // an IPv4 address becomes v4-mapped
	r.len = unix.SizeofSockaddrInet6
	return r, nil
}

// listenUDP opens the socket: udp4 for an IPv4 (or empty) host, udp6 otherwise, so the
// socket's address family is known.
func listenUDP(addr string) (*net.UDPConn, int, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, 0, err
	}
	network, fam := "udp4", unix.AF_INET
	if ua.IP != nil && ua.IP.To4() == nil {
		network, fam = "udp6", unix.AF_INET6
	}
	c, err := net.ListenUDP(network, ua)
	if err != nil {
		return nil, 0, err
	}
	// Bursts of full-size packets: give the socket room (the kernel caps it at rmem_max).
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetWriteBuffer(4 << 20)
	return c, fam, nil
}

// enableGRO asks the kernel to hand runs of a flow's datagrams over coalesced
// (UDP_GRO, Linux 5.0); it reports whether it does.
func enableGRO(rc syscall.RawConn) bool {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); err != nil {
		return false
	}
	return serr == nil
}
