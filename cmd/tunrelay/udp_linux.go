package main

// The UDP chain (-udp, -forward): a multi-host fabric's data path with nothing of
// InfiniBand in it — the ceiling of pibgw's UDP links on this machine, as the plain relay
// is the ceiling of its TUN devices.
//
// A side (-a DEV -udp LOCAL -peer REMOTE) cuts each segment its device reads (up to
// 64 KiB, with its virtio-net metadata) into datagrams of at most chunkData bytes, each
// behind a chunkHdr-byte header: the sizes of a UDP link's data datagrams at IB MTU 4096
// (link header 16, LRH 8 and BTH 12 before the payload, ICRC 4 and VCRC 2 after). It sends
// them as a UDP link does, in runs of at most 65,507 bytes with UDP_SEGMENT, straight from
// the read buffer (an iovec per header and per payload), and receives with UDP_GRO,
// writing each segment to its device from the datagrams it arrived in. A forwarder
// (-forward LISTEN -between A,B) sends every datagram from A to B and from B to A from
// the buffer it arrived in, as `pibgw switch` forwards. No checksum, CRC, acknowledgement
// or copy in user space: what two hosts and a switch process move over loopback UDP here.
//
// With -crc each process also does the per-byte work a UDP link's data path cannot leave
// out, over the same bytes: the sender completes a segment's deferred TCP/UDP checksum
// (pibgw's wire.Finalize) and computes each chunk's CRC-32 and CRC-16 (an IB packet's
// ICRC and VCRC), the forwarder checks the CRC-16 (the switch's VCRC check), the
// receiver both (the HCA's). The results go into the chunk header; a chunk that fails
// is dropped.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/internal/csum"
	"github.com/pibgw/pibgw/tun"
	"github.com/pibgw/pibgw/wire"
)

const (
	chunkHdr  = 42   // header bytes of a chunk datagram, as a UDP link's around an IB payload
	chunkData = 4096 // payload bytes per datagram, as IB MTU 4096
	// maxRun is the most datagrams of chunkHdr+chunkData bytes one UDP_SEGMENT message
	// carries over IPv4 (65,507 bytes of UDP payload).
	maxRun    = 65507 / (chunkHdr + chunkData)
	maxChunks = (1<<16 + chunkData - 1) / chunkData // of one segment
	rxBatch   = 8                                   // messages per recvmmsg
	// rxRing receive buffers are reused in turn by a side: a segment's chunks stay where
	// they arrived until it is written, at most maxChunks messages (one datagram each,
	// without UDP_GRO) after its first. Few, so that they stay in the CPU's cache.
	rxRing   = 3 * rxBatch
	rxBufLen = 1<<16 + 512 // a coalesced (UDP_GRO) run
	ctrlLen  = 32          // ≥ unix.CmsgSpace(4)
)

// chainStats counts what one direction of a chain process moved.
type chainStats struct {
	segments, bytes, datagrams, dropped uint64
}

// mmsghdr is struct mmsghdr (linux/socket.h) on 64-bit platforms.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// Chunk header: segment number (4), offset (4), segment length (4), then the segment's
// virtio-net metadata: GSO type (1), flags (1: NeedsCsum, ECN), CsumStart, CsumOffset,
// HdrLen, Size (2 each); with -crc the completed checksum (2), the payload's CRC-32 (4)
// and CRC-16 (2); zero to chunkHdr.
func putChunkHdr(h []byte, seq uint32, off, total int, g tun.GSO) {
	binary.BigEndian.PutUint32(h[0:], seq)
	binary.BigEndian.PutUint32(h[4:], uint32(off))
	binary.BigEndian.PutUint32(h[8:], uint32(total))
	h[12] = uint8(g.Type)
	h[13] = 0
	if g.NeedsCsum {
		h[13] |= 1
	}
	if g.ECN {
		h[13] |= 2
	}
	binary.BigEndian.PutUint16(h[14:], g.CsumStart)
	binary.BigEndian.PutUint16(h[16:], g.CsumOffset)
	binary.BigEndian.PutUint16(h[18:], g.HdrLen)
	binary.BigEndian.PutUint16(h[20:], g.Size)
	clear(h[22:chunkHdr])
}

func chunkMeta(h []byte) (seq uint32, off, total int, g tun.GSO) {
	g = tun.GSO{
		Type: tun.GSOType(h[12]), NeedsCsum: h[13]&1 != 0, ECN: h[13]&2 != 0,
		CsumStart: binary.BigEndian.Uint16(h[14:]), CsumOffset: binary.BigEndian.Uint16(h[16:]),
		HdrLen: binary.BigEndian.Uint16(h[18:]), Size: binary.BigEndian.Uint16(h[20:]),
	}
	return binary.BigEndian.Uint32(h), int(binary.BigEndian.Uint32(h[4:])), int(binary.BigEndian.Uint32(h[8:])), g
}

// udpSock is a UDP socket bound to addr (IPv4), with UDP_GRO and large buffers.
func udpSock(addr string) (*net.UDPConn, syscall.RawConn, error) {
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, nil, err
	}
	c, err := net.ListenUDP("udp4", ua)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetWriteBuffer(4 << 20)
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil || serr != nil {
		c.Close()
		return nil, nil, fmt.Errorf("UDP_GRO on %s: %v", addr, errors.Join(err, serr))
	}
	return c, rc, nil
}

// sockaddr4 is an IPv4 address as sendmmsg takes it.
func sockaddr4(addr string) (unix.RawSockaddrInet4, error) {
	var sa unix.RawSockaddrInet4
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return sa, fmt.Errorf("%q: want IPv4ADDR:PORT", addr)
	}
	sa.Family = unix.AF_INET
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], ap.Port())
	sa.Addr = ap.Addr().As4()
	return sa, nil
}

// setSegment makes m's control a UDP_SEGMENT cmsg of size in c (len ≥ ctrlLen).
func setSegment(m *unix.Msghdr, c []byte, size int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(size)
	m.Control = &c[0]
	m.SetControllen(unix.CmsgSpace(2))
}

// groSize is the segment size of a UDP_GRO cmsg in c, or 0.
func groSize(c []byte) int {
	for len(c) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(c) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(2) {
			if d := c[unix.CmsgLen(0):l]; len(d) >= 4 {
				return int(*(*int32)(unsafe.Pointer(&d[0])))
			}
			return int(*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])))
		}
		c = c[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(c)):]
	}
	return 0
}

// sendAll sends msgs with sendmmsg, waiting in the poller while the socket is full.
// As the UDP links do, the calls are raw (MSG_DONTWAIT, never sleeping in the kernel).
func sendAll(rc syscall.RawConn, msgs []mmsghdr) error {
	var errno syscall.Errno
	sent := 0
	err := rc.Write(func(fd uintptr) bool {
		for sent < len(msgs) {
			r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&msgs[sent])),
				uintptr(len(msgs)-sent), unix.MSG_DONTWAIT, 0, 0)
			switch {
			case e == unix.EAGAIN:
				return false
			case e == unix.EINTR:
			case e != 0:
				errno = e
				sent++ // skip it, as UDP loses datagrams
			default:
				sent += int(r)
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// rxBatchState is a recvmmsg batch over buffers of a ring.
type rxBatchState struct {
	ring  [][]byte
	next  int
	msgs  [rxBatch]mmsghdr
	iovs  [rxBatch]unix.Iovec
	names [rxBatch]unix.RawSockaddrInet4
	ctrl  [rxBatch * ctrlLen]byte
	bufs  [rxBatch][]byte // the ring buffers of the current batch
	count int
}

// newRxBatch makes a batch over a ring of n buffers (a multiple of rxBatch).
func newRxBatch(n int) *rxBatchState {
	b := &rxBatchState{ring: make([][]byte, n)}
	mem := make([]byte, n*rxBufLen)
	for i := range b.ring {
		b.ring[i] = mem[i*rxBufLen : (i+1)*rxBufLen : (i+1)*rxBufLen]
	}
	return b
}

// read receives up to rxBatch messages into the ring's next buffers, blocking in the
// poller until one arrives.
func (b *rxBatchState) read(rc syscall.RawConn) error {
	if b.next+rxBatch > len(b.ring) {
		b.next = 0
	}
	for i := range b.msgs {
		b.bufs[i] = b.ring[b.next+i]
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(len(b.bufs[i]))
		m := &b.msgs[i].hdr
		m.Iov, m.Iovlen = &b.iovs[i], 1
		m.Name, m.Namelen = (*byte)(unsafe.Pointer(&b.names[i])), unix.SizeofSockaddrInet4
		m.Control = &b.ctrl[i*ctrlLen]
		m.SetControllen(ctrlLen)
		m.Flags = 0
	}
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[0])),
			rxBatch, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		errno, b.count = e, int(r)
		return true
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		b.count = 0
		return errno
	}
	b.next += rxBatch
	return nil
}

// message returns message i of the batch and its UDP_GRO segment size (its length when
// it is one datagram).
func (b *rxBatchState) message(i int) ([]byte, int) {
	n := int(b.msgs[i].n)
	c := b.ctrl[i*ctrlLen : i*ctrlLen+min(int(b.msgs[i].hdr.Controllen), ctrlLen)]
	seg := groSize(c)
	if seg <= 0 || seg > n {
		seg = n
	}
	return b.bufs[i][:n], seg
}

// Where -crc's results go in a chunk header.
const (
	hdrCsum  = 22
	hdrCRC32 = 24
	hdrCRC16 = 28
)

// crcOK reports whether a chunk's payload p has the CRCs its header h carries; with vcrcOnly,
// only the CRC-16 is checked.
func crcOK(h, p []byte, vcrcOnly bool) bool {
	if binary.BigEndian.Uint16(h[hdrCRC16:]) != wire.VCRC(p) {
		return false
	}
	return vcrcOnly || binary.BigEndian.Uint32(h[hdrCRC32:]) == wire.ICRC(p)
}

// chainSend reads dev's segments and sends them to the peer to as chunk datagrams.
func chainSend(dev tun.Offloader, rc syscall.RawConn, to unix.RawSockaddrInet4, crc bool) (chainStats, error) {
	var st chainStats
	buf := make([]byte, tun.MinOffset+1<<16)
	hdrs := make([]byte, maxChunks*chunkHdr)
	iovs := make([]unix.Iovec, 2*maxChunks)
	msgs := make([]mmsghdr, maxChunks)
	ctrl := make([]byte, maxChunks*ctrlLen)
	var seq uint32
	for {
		n, g, err := dev.ReadGSO(buf, tun.MinOffset)
		if err != nil {
			if errors.Is(err, tun.ErrClosed) {
				return st, nil
			}
			continue
		}
		seq++
		seg := buf[tun.MinOffset : tun.MinOffset+n]
		var sum uint16
		if crc && g.NeedsCsum && int(g.CsumStart) < n {
			sum = ^csum.Fold(csum.Sum(seg[g.CsumStart:], 0))
		}
		chunks := (n + chunkData - 1) / chunkData
		for k := range chunks {
			h := hdrs[k*chunkHdr : (k+1)*chunkHdr]
			putChunkHdr(h, seq, k*chunkData, n, g)
			p := seg[k*chunkData : min((k+1)*chunkData, n)]
			if crc {
				binary.BigEndian.PutUint16(h[hdrCsum:], sum)
				binary.BigEndian.PutUint32(h[hdrCRC32:], wire.ICRC(p))
				binary.BigEndian.PutUint16(h[hdrCRC16:], wire.VCRC(p))
			}
			iovs[2*k].Base, iovs[2*k+1].Base = &h[0], &p[0]
			iovs[2*k].SetLen(chunkHdr)
			iovs[2*k+1].SetLen(len(p))
		}
		nm := 0
		for k := 0; k < chunks; k += maxRun {
			c := min(maxRun, chunks-k)
			m := &msgs[nm].hdr
			m.Name, m.Namelen = (*byte)(unsafe.Pointer(&to)), unix.SizeofSockaddrInet4
			m.Iov, m.Iovlen = &iovs[2*k], uint64(2*c)
			if c > 1 {
				setSegment(m, ctrl[nm*ctrlLen:], chunkHdr+chunkData)
			} else {
				m.Control = nil
				m.SetControllen(0)
			}
			nm++
		}
		if err := sendAll(rc, msgs[:nm]); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return st, nil
			}
			st.dropped++
			continue
		}
		st.segments++
		st.bytes += uint64(n)
		st.datagrams += uint64(chunks)
	}
}

// chainReceive receives chunk datagrams and writes each whole segment to dev, from the
// receive buffers its chunks arrived in. A segment whose chunks do not arrive in order is
// dropped (loopback keeps order).
func chainReceive(dev tun.Offloader, rc syscall.RawConn, crc bool) (chainStats, error) {
	var st chainStats
	b := newRxBatch(rxRing)
	var (
		active      bool
		seq         uint32
		total, got  int
		meta        tun.GSO
		first       []byte // the first chunk's buffer, through its payload
		firstOff    int    // where its payload starts
		tail        = make([][]byte, 0, maxChunks)
		started, at int // messages received when the segment started, and so far
	)
	for {
		if err := b.read(rc); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return st, nil
			}
			continue
		}
		for i := range b.count {
			at++
			msg, size := b.message(i)
			for o := 0; o < len(msg); o += size {
				d := msg[o:min(o+size, len(msg))]
				st.datagrams++
				if len(d) < chunkHdr {
					st.dropped++
					continue
				}
				s, off, tot, g := chunkMeta(d)
				if crc && !crcOK(d, d[chunkHdr:], false) {
					st.dropped++
					active = false
					continue
				}
				switch {
				case off == 0:
					if active {
						st.dropped++
					}
					active, seq, total, got, meta = true, s, tot, 0, g
					first, firstOff, tail, started = msg[:o+len(d)], o+chunkHdr, tail[:0], at
				case active && s == seq && off == got && at-started < rxRing-rxBatch:
					tail = append(tail, d[chunkHdr:])
				default:
					st.dropped++
					active = false
					continue
				}
				got += len(d) - chunkHdr
				if got < total {
					continue
				}
				active = false
				if got > total || dev.WriteGSO(first, firstOff, meta, tail) != nil {
					st.dropped++
					continue
				}
				st.segments++
				st.bytes += uint64(total)
			}
		}
	}
}

// forward sends each datagram from a to b and from b to a, from its receive buffer.
func forward(rc syscall.RawConn, a, b unix.RawSockaddrInet4, crc bool) (chainStats, error) {
	var st chainStats
	rx := newRxBatch(rxBatch) // each batch is sent on before the next is received
	var msgs [rxBatch]mmsghdr
	var iovs [rxBatch]unix.Iovec
	var ctrl [rxBatch * ctrlLen]byte
	for {
		if err := rx.read(rc); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return st, nil
			}
			continue
		}
		nm := 0
		for i := range rx.count {
			msg, size := rx.message(i)
			from := rx.names[i]
			to := &b
			switch {
			case from.Port == a.Port && from.Addr == a.Addr:
			case from.Port == b.Port && from.Addr == b.Addr:
				to = &a
			default:
				st.dropped++
				continue
			}
			if crc && !forwardOK(msg, size) {
				st.dropped++
				continue
			}
			iovs[nm].Base = &msg[0]
			iovs[nm].SetLen(len(msg))
			m := &msgs[nm].hdr
			m.Name, m.Namelen = (*byte)(unsafe.Pointer(to)), unix.SizeofSockaddrInet4
			m.Iov, m.Iovlen = &iovs[nm], 1
			if len(msg) > size {
				setSegment(m, ctrl[nm*ctrlLen:], size)
			} else {
				m.Control = nil
				m.SetControllen(0)
			}
			nm++
			st.datagrams += uint64((len(msg) + size - 1) / size)
			st.bytes += uint64(len(msg))
		}
		if nm > 0 {
			if err := sendAll(rc, msgs[:nm]); err != nil {
				if errors.Is(err, net.ErrClosed) {
					return st, nil
				}
				st.dropped++
			}
		}
	}
}

// forwardOK checks the CRC-16 of every chunk of a received message of size-byte datagrams.
func forwardOK(msg []byte, size int) bool {
	for o := 0; o < len(msg); o += size {
		d := msg[o:min(o+size, len(msg))]
		if len(d) < chunkHdr || !crcOK(d, d[chunkHdr:], true) {
			return false
		}
	}
	return true
}

// runSide relays dev to peer and what arrives on local to dev, until a signal (or stop).
func runSide(dev *tun.Kernel, local, peer string, crc bool, log *slog.Logger, stderr io.Writer, sig <-chan os.Signal, stop <-chan struct{}) int {
	if !dev.Offloads() {
		fmt.Fprintln(stderr, "tunrelay: -udp needs a device with offloads")
		return 1
	}
	to, err := sockaddr4(peer)
	if err != nil {
		fmt.Fprintf(stderr, "tunrelay: -peer %v\n", err)
		return 2
	}
	c, rc, err := udpSock(local)
	if err != nil {
		fmt.Fprintf(stderr, "tunrelay: -udp %v\n", err)
		return 1
	}
	log.Info("relaying over UDP", "device", dev.Name(), "local", local, "peer", peer)
	var st [2]chainStats
	var errs [2]error
	var wg sync.WaitGroup
	ended := make(chan struct{}, 2)
	wg.Add(2)
	go func() { defer wg.Done(); st[0], errs[0] = chainSend(dev, rc, to, crc); ended <- struct{}{} }()
	go func() { defer wg.Done(); st[1], errs[1] = chainReceive(dev, rc, crc); ended <- struct{}{} }()
	wait(log, sig, stop, ended, "a socket or device went away")
	dev.Close()
	c.Close()
	wg.Wait()
	return report(stderr, []string{"device→udp", "udp→device"}, st[:], errs[:])
}

// runForward forwards between the two addresses of between until a signal (or stop).
func runForward(local, between string, crc bool, log *slog.Logger, stderr io.Writer, sig <-chan os.Signal, stop <-chan struct{}) int {
	as, bs, ok := strings.Cut(between, ",")
	a, err1 := sockaddr4(as)
	b, err2 := sockaddr4(bs)
	if !ok || err1 != nil || err2 != nil {
		fmt.Fprintf(stderr, "tunrelay: -between %q: want A,B (IPv4ADDR:PORT each)\n", between)
		return 2
	}
	c, rc, err := udpSock(local)
	if err != nil {
		fmt.Fprintf(stderr, "tunrelay: -forward %v\n", err)
		return 1
	}
	log.Info("forwarding", "local", local, "between", between)
	var st chainStats
	var ferr error
	ended := make(chan struct{}, 1)
	go func() { st, ferr = forward(rc, a, b, crc); ended <- struct{}{} }()
	wait(log, sig, stop, ended, "the socket went away")
	c.Close()
	<-ended
	fmt.Fprintf(stderr, "tunrelay: forwarded: %d bytes in %d datagrams, %d dropped\n", st.bytes, st.datagrams, st.dropped)
	if ferr != nil && !errors.Is(ferr, net.ErrClosed) {
		fmt.Fprintf(stderr, "tunrelay: forward: %v\n", ferr)
		return 1
	}
	return 0
}

func report(stderr io.Writer, dirs []string, st []chainStats, errs []error) int {
	status := 0
	for i, dir := range dirs {
		fmt.Fprintf(stderr, "tunrelay: %s: %d segments, %d bytes, %d datagrams, %d dropped\n",
			dir, st[i].segments, st[i].bytes, st[i].datagrams, st[i].dropped)
		if errs[i] != nil && !errors.Is(errs[i], net.ErrClosed) && !errors.Is(errs[i], tun.ErrClosed) {
			fmt.Fprintf(stderr, "tunrelay: %s: %v\n", dir, errs[i])
			status = 1
		}
	}
	return status
}
