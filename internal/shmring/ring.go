package shmring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes and limits.
const (
	// HeaderSize is the size of the header page at the start of the memfd; the data area
	// follows it.
	HeaderSize = 4096
	// MaxRecord is the longest record Write accepts: a 64 KiB payload and 256 bytes of
	// headers.
	MaxRecord = 64<<10 + 256
	// MinSize and MaxSize bound the data area Create accepts (a power of two).
	MinSize = 4096
	MaxSize = 1 << 30
)

// Header layout (byte offsets in the header page). Producer-written words and
// consumer-written words are two cache lines apart (128 bytes, so the adjacent-line
// prefetcher does not pair them either).
const (
	offMagic     = 0   // u32 magic
	offVersion   = 4   // u32 version
	offSize      = 8   // u64 size of the data area
	offClosed    = 16  // u32, nonzero once either side called Close
	offHead      = 128 // u64 producer index: bytes ever published
	offProdWait  = 136 // u32, 1 while the producer waits for space
	offProdWant  = 144 // u64, the tail the waiting producer wants before it is woken
	offTail      = 256 // u64 consumer index: bytes ever released
	offConsSleep = 264 // u32, 1 while the consumer sleeps on the data doorbell
)

const (
	magic   = 0x474e5253 // "SRNG" little-endian
	version = 1

	recHdr     = 8          // u32 length, u16 tag, u16 flags
	wrapMarker = 0xffffffff // length of a record header that means "continue at offset 0"
)

// Errors.
var (
	ErrClosed   = errors.New("shmring: closed")
	ErrCorrupt  = errors.New("shmring: ring corrupted by the other side")
	ErrTooLarge = errors.New("shmring: record longer than MaxRecord or the ring")
)

// Doorbells.
const (
	bellData  = 0 // rung by the producer, read by the consumer
	bellSpace = 1 // rung by the consumer, read by the producer
)

// waitMode is how a goroutine sleeps on a doorbell.
type waitMode int

const (
	waitNetpoll  waitMode = iota // read the non-blocking eventfd through an os.File: park in the netpoller
	waitBlocking                 // poll(2) then read(2) in the goroutine, holding its thread
)

// Tunables, variables so that the benchmarks can compare settings.
var (
	// defaultWait is the wait mode of new rings (see the package comment for the figures).
	defaultWait = waitBlocking
	// spinIters is how many times Read and a waiting Write re-check the ring before they
	// sleep on the doorbell, about 10 µs; spinYield is how often (a mask on the
	// iteration) they yield the processor meanwhile, so that a goroutine they wait for
	// can run on it.
	spinIters = 5000
	spinYield = 63
	// spinOSYield is how often (a mask) a spin yields the processor to the operating
	// system (the checks where it does not yield to Go's scheduler): on a machine with
	// fewer processors than busy processes, the process a spinner waits for may be
	// queued behind it on the same processor, and only sched_yield(2) lets it run before
	// the time slice ends. Every 32nd check (two of every 64, one going to Go's
	// scheduler) measured better than every 128th and far better than every 1024th
	// (attach's benchmarks, alternating runs).
	spinOSYield = 31
	// spinOSFrom is the check from which a spin yields to the operating system: the
	// first ones stay in the process, so that two sides that each have a processor
	// meet without a system call (ring ping-pong between processes 0.28 µs, against
	// 0.8–3 µs yielding from the start).
	spinOSFrom = 256
	// pollBackstop bounds a waitBlocking sleep when ctx can end: the other process can
	// read our eventfds and so eat the wake-up that ctx's end rings.
	pollBackstop = 50 // ms
)

// spinPause is called on iteration i of a spin: now and then it lets another goroutine
// of this process, or another process, run on this processor (the one it waits for may
// be queued behind it). It reports whether a yield to the operating system kept the
// thread off the processor for longer than yieldLost.
func spinPause(i int) (lost bool) {
	switch {
	case i&spinYield == spinYield:
		runtime.Gosched()
	case i&spinOSYield == spinOSYield && i >= spinOSFrom:
		t := time.Now()
		OSYield()
		return time.Since(t) > yieldLost
	}
	return false
}

// yieldLost is how long a spin's sched_yield may keep the thread off the processor
// before WaitAny stops spinning and sleeps on the doorbells. Yielding to a thread that
// never yields back — a program spinning on its memory for an RDMA WRITE, on a machine
// with no idle core — loses the processor for a whole time slice, and meanwhile the
// ring's writer, seeing a consumer that is not asleep, rings no doorbell: a record could
// wait milliseconds where a sleeper is woken in microseconds (UC ib_write_lat: 1.5–1.8
// ms typical against 23 µs).
const yieldLost = 100 * time.Microsecond

// OSYield gives the processor to another runnable thread of any process, if one waits
// for it (sched_yield(2)); it returns at once otherwise.
func OSYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// one is what ringing a doorbell adds to the eventfd.
var one = [8]byte{1}

// Ring is one direction of a channel: a producer writes records, a consumer reads them.
// At most one goroutine writes and one reads at a time; they may be different goroutines
// of one process, or the two ends may be in different processes (the creator and the
// process that received Fds and called Open).
type Ring struct {
	mem  []byte // the whole mapping: header page and data area
	data []byte // the data area
	size uint64
	mask uint64

	memfd int
	bell  [2]int      // eventfds: bellData, bellSpace
	files [2]*os.File // waitNetpoll: the eventfds as pollable files
	mode  waitMode

	// Shared words in the header page.
	head      *atomic.Uint64
	tail      *atomic.Uint64
	prodWait  *atomic.Uint32
	prodWant  *atomic.Uint64
	consSleep *atomic.Uint32
	shClosed  *atomic.Uint32

	closed atomic.Bool  // Close was called in this process
	ops    atomic.Int64 // Read, Write and wake-ups in progress; Close waits for 0
	spin   atomic.Int64 // SetSpin

	_ [64]byte
	// Producer state.
	phead uint64 // head as published (the producer's own; the shared word is never re-read)
	ptail uint64 // tail as last read from the consumer, validated
	pbuf  [8]byte
	ppfd  [1]unix.PollFd

	_ [64]byte
	// Consumer state.
	ctail   uint64 // tail (the consumer's own)
	corrupt bool
	batch   [][]byte
	cbuf    [8]byte
	cpfd    [1]unix.PollFd
}

// Create makes a new ring with size bytes of record space (a power of two between MinSize
// and MaxSize): a sealed memfd (MFD_CLOEXEC) holding a header page and the data area,
// mapped MAP_SHARED, and two eventfds (EFD_NONBLOCK|EFD_CLOEXEC): "data", rung by the
// producer to wake a sleeping consumer, and "space", rung by the consumer to wake a
// producer waiting for room.
func Create(size int) (*Ring, error) {
	if size < MinSize || size > MaxSize || size&(size-1) != 0 {
		return nil, fmt.Errorf("shmring: size %d is not a power of two in [%d, %d]", size, MinSize, MaxSize)
	}
	memfd, err := unix.MemfdCreate("pibgw-shmring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shmring: memfd_create: %w", err)
	}
	fds := []int{memfd}
	fail := func(err error) (*Ring, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	if err := unix.Ftruncate(memfd, int64(HeaderSize+size)); err != nil {
		return fail(fmt.Errorf("shmring: ftruncate: %w", err))
	}
	// The other process must not be able to shrink the file under our mapping (a SIGBUS
	// here); Open checks the seal.
	if _, err := unix.FcntlInt(uintptr(memfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail(fmt.Errorf("shmring: sealing the memfd: %w", err))
	}
	var bell [2]int
	for i := range bell {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			return fail(fmt.Errorf("shmring: eventfd: %w", err))
		}
		fds = append(fds, fd)
		bell[i] = fd
	}
	mem, err := unix.Mmap(memfd, 0, HeaderSize+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("shmring: mmap: %w", err))
	}
	binary.LittleEndian.PutUint32(mem[offMagic:], magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], version)
	binary.LittleEndian.PutUint64(mem[offSize:], uint64(size))
	return newRing(mem, memfd, bell, 0, 0), nil
}

// Open maps a ring from the descriptors Fds returned in the creating process (passed over
// SCM_RIGHTS or inherited). Open takes ownership of the descriptors, also when it fails
// (it closes them then). It checks that mem is a memfd sealed against shrinking whose
// size matches the header, that the header is a ring of this version, and that data and
// space are eventfds.
func Open(mem, data, space int) (*Ring, error) {
	r, err := open(mem, data, space)
	if err != nil {
		for _, fd := range []int{mem, data, space} {
			unix.Close(fd)
		}
		return nil, err
	}
	return r, nil
}

func open(memfd, data, space int) (*Ring, error) {
	if memfd < 0 || data < 0 || space < 0 || memfd == data || memfd == space || data == space {
		return nil, fmt.Errorf("shmring: open: bad descriptors %d, %d, %d", memfd, data, space)
	}
	seals, err := unix.FcntlInt(uintptr(memfd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("shmring: open: descriptor %d is not a memfd: %w", memfd, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shmring: open: memfd is not sealed against shrinking")
	}
	var st unix.Stat_t
	if err := unix.Fstat(memfd, &st); err != nil {
		return nil, fmt.Errorf("shmring: open: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("shmring: open: memfd is not a regular file")
	}
	if st.Size < HeaderSize+MinSize || st.Size > HeaderSize+MaxSize {
		return nil, fmt.Errorf("shmring: open: memfd size %d out of range", st.Size)
	}
	for _, fd := range []int{data, space} {
		if err := checkEventfd(fd); err != nil {
			return nil, err
		}
	}
	mem, err := unix.Mmap(memfd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmring: open: mmap: %w", err)
	}
	head, tail, bad := checkHeader(mem)
	if bad != nil {
		unix.Munmap(mem)
		return nil, bad
	}
	for _, fd := range []int{data, space} {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("shmring: open: %w", err)
		}
	}
	return newRing(mem, memfd, [2]int{data, space}, head, tail), nil
}

// checkHeader checks the header of a ring Open mapped (mem: the whole memfd) and returns
// its indexes. It reads each shared word once; the other side may change them at any
// time, and only the values read here are used.
func checkHeader(mem []byte) (head, tail uint64, err error) {
	m := (*atomic.Uint32)(unsafe.Pointer(&mem[offMagic])).Load()
	v := (*atomic.Uint32)(unsafe.Pointer(&mem[offVersion])).Load()
	size := (*atomic.Uint64)(unsafe.Pointer(&mem[offSize])).Load()
	head = (*atomic.Uint64)(unsafe.Pointer(&mem[offHead])).Load()
	tail = (*atomic.Uint64)(unsafe.Pointer(&mem[offTail])).Load()
	switch {
	case m != magic:
		err = fmt.Errorf("shmring: open: bad magic %#x", m)
	case v != version:
		err = fmt.Errorf("shmring: open: version %d, want %d", v, version)
	case size != uint64(len(mem))-HeaderSize:
		err = fmt.Errorf("shmring: open: header says %d bytes of data, the memfd has %d", size, len(mem)-HeaderSize)
	case size&(size-1) != 0:
		err = fmt.Errorf("shmring: open: size %d is not a power of two", size)
	case head%recHdr != 0 || tail%recHdr != 0 || head-tail > size:
		err = fmt.Errorf("shmring: open: head %d and tail %d inconsistent: %w", head, tail, ErrCorrupt)
	}
	return head, tail, err
}

// checkEventfd reports whether fd is an eventfd.
func checkEventfd(fd int) error {
	var buf [64]byte
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf[:])
	if err != nil {
		return fmt.Errorf("shmring: open: descriptor %d: %w", fd, err)
	}
	if s := string(buf[:n]); s != "anon_inode:[eventfd]" {
		return fmt.Errorf("shmring: open: descriptor %d is %q, not an eventfd", fd, s)
	}
	return nil
}

// rewindAt is the offset of the data area past which a producer that finds the ring empty
// starts again at offset 0 (Write), and how much of it each side touches when it maps
// the ring (prefault): 64 KiB, a record of MaxRecord or a batch of small packets.
const rewindAt = 64 << 10

// prefault touches the first rewindAt bytes of the data area, one word per page, with
// an atomic add of zero (it changes nothing the other side may be writing), so that the
// pages a ping-pong uses are mapped for writing in this process before the first record.
func (r *Ring) prefault() {
	n := min(uint64(rewindAt), r.size)
	for off := uint64(0); off < n; off += 4096 {
		(*atomic.Uint64)(unsafe.Pointer(&r.data[off])).Add(0)
	}
}

func newRing(mem []byte, memfd int, bell [2]int, head, tail uint64) *Ring {
	r := &Ring{
		mem:   mem,
		data:  mem[HeaderSize:],
		size:  uint64(len(mem) - HeaderSize),
		memfd: memfd,
		bell:  bell,
		mode:  defaultWait,
		phead: head,
		ptail: tail,
		ctail: tail,
	}
	r.mask = r.size - 1
	r.spin.Store(int64(spinIters))
	r.head = (*atomic.Uint64)(unsafe.Pointer(&mem[offHead]))
	r.tail = (*atomic.Uint64)(unsafe.Pointer(&mem[offTail]))
	r.prodWait = (*atomic.Uint32)(unsafe.Pointer(&mem[offProdWait]))
	r.prodWant = (*atomic.Uint64)(unsafe.Pointer(&mem[offProdWant]))
	r.consSleep = (*atomic.Uint32)(unsafe.Pointer(&mem[offConsSleep]))
	r.shClosed = (*atomic.Uint32)(unsafe.Pointer(&mem[offClosed]))
	r.prefault()
	r.ppfd[0] = unix.PollFd{Fd: int32(bell[bellSpace]), Events: unix.POLLIN}
	r.cpfd[0] = unix.PollFd{Fd: int32(bell[bellData]), Events: unix.POLLIN}
	if r.mode == waitNetpoll {
		// The eventfds are non-blocking, so os.NewFile registers them with the netpoller
		// (and, not having set the mode itself, never resets it: the file description is
		// shared with the other process).
		r.files[bellData] = os.NewFile(uintptr(bell[bellData]), "shmring-data")
		r.files[bellSpace] = os.NewFile(uintptr(bell[bellSpace]), "shmring-space")
	}
	return r
}

// Fds returns the three descriptors to pass to the other process, which calls Open with
// them; they stay owned by r.
func (r *Ring) Fds() (mem, data, space int) {
	return r.memfd, r.bell[bellData], r.bell[bellSpace]
}

// SetSpin sets how many times Read and a waiting Write re-check the ring before they
// sleep on a doorbell (default 5000, about 10 µs; see the package comment). 0 sleeps at
// once: the better choice where the two processes compete for processors with other
// work, or to spend no processor time waiting. It may be called at any time.
func (r *Ring) SetSpin(iters int) { r.spin.Store(int64(max(iters, 0))) }

// Size is the size of the data area in bytes.
func (r *Ring) Size() int { return int(r.size) }

// enter registers an operation that uses the mapping or the descriptors; it fails once
// Close has begun. Close waits for every entered operation to exit.
func (r *Ring) enter() bool {
	r.ops.Add(1)
	if r.closed.Load() {
		r.ops.Add(-1)
		return false
	}
	return true
}

func (r *Ring) exit() { r.ops.Add(-1) }

// Close marks the ring closed for both sides, wakes every goroutine blocked in Read or
// Write (in this process and, through the doorbells and the shared closed word, in the
// other), waits for them to return ErrClosed, then unmaps the ring and closes its
// descriptors. It must not be called from inside a Read callback. Further calls return nil.
func (r *Ring) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.shClosed.Store(1)
	r.ring(bellData)
	r.ring(bellSpace)
	for i := 1; r.ops.Load() != 0; i++ {
		time.Sleep(20 * time.Microsecond)
		if i%50 == 0 {
			// The other process may have eaten the wake-up (it can read our eventfds).
			r.ring(bellData)
			r.ring(bellSpace)
		}
	}
	err := unix.Munmap(r.mem)
	r.mem, r.data = nil, nil
	for i, fd := range r.bell {
		var e error
		if r.files[i] != nil {
			e = r.files[i].Close()
		} else {
			e = unix.Close(fd)
		}
		if err == nil {
			err = e
		}
	}
	if e := unix.Close(r.memfd); err == nil {
		err = e
	}
	return err
}

// ring rings doorbell i. The eventfd is non-blocking: if the other process filled its
// counter, the write fails with EAGAIN, and a counter that full wakes the sleeper anyway.
func (r *Ring) ring(i int) {
	unix.Write(r.bell[i], one[:])
}

// sleep blocks until doorbell i rings (perhaps it rang already), ctx ends or Close wakes
// it. The caller re-checks the ring, Close and ctx after it returns.
func (r *Ring) sleep(ctx context.Context, i int) error {
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() {
			if r.enter() {
				r.ring(i)
				r.exit()
			}
		})
		defer stop()
	}
	buf, pfd := &r.cbuf, &r.cpfd
	if i == bellSpace {
		buf, pfd = &r.pbuf, &r.ppfd
	}
	if r.mode == waitNetpoll {
		_, err := r.files[i].Read(buf[:])
		return err
	}
	timeout := -1
	if ctx.Done() != nil {
		timeout = pollBackstop
	}
	for {
		n, err := unix.Poll(pfd[:], timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return err
		}
		_, err = unix.Read(r.bell[i], buf[:])
		if err == unix.EAGAIN || err == unix.EINTR {
			err = nil
		}
		return err
	}
}

// recLen is the space a record of n payload bytes takes: its header and the payload padded
// to 8 bytes.
func recLen(n int) uint64 {
	return uint64(recHdr + (n+7)&^7)
}

// Write copies pkts into the ring, one record each with the given tag and flags, and
// publishes them together, ringing the data doorbell only if the consumer sleeps. A
// record longer than MaxRecord (or than the ring) fails the whole call with ErrTooLarge
// before anything is written. If the ring fills: with wait false Write publishes what fit
// and returns its count (the caller drops the rest); with wait true it publishes what fit
// so far and waits for the consumer (spinning briefly, then sleeping on the space
// doorbell) until everything is written, ctx ends (the count and ctx's error) or the ring
// is closed (ErrClosed). ErrCorrupt means the consumer's index is impossible.
//
// Only one goroutine at a time may call Write on a ring.
func (r *Ring) Write(ctx context.Context, pkts [][]byte, tag, flags uint16, wait bool) (int, error) {
	for _, p := range pkts {
		if len(p) > MaxRecord || recLen(len(p)) > r.size {
			return 0, ErrTooLarge
		}
	}
	if !r.enter() {
		return 0, ErrClosed
	}
	defer r.exit()
	if r.shClosed.Load() != 0 {
		return 0, ErrClosed
	}
	head := r.phead
	if off := head & r.mask; off >= rewindAt && r.tail.Load() == head {
		// The consumer has taken everything: go back to the start of the data area (a
		// wrap marker here), so that traffic that never fills the ring keeps to its
		// first rewindAt bytes — memory both processes touched already (prefault)
		// rather than fresh pages, each costing a page fault in both processes on its
		// first use: a 4 KiB ping-pong ran at 150 µs/iter until it had been round a
		// 4 MiB ring once, then 6 µs.
		//
		// The tail moves past the skipped bytes with head, so that they are free at once:
		// counted as used until the consumer had passed the wrap marker, they left only
		// off bytes free, and a burst that came before the consumer ran (16 packets of a
		// 64 KiB message, to a process busy elsewhere) was dropped as if the ring were
		// full (ibv_srq_pingpong -s 65536 under the race detector: IBV_WC_RETRY_EXC_ERR).
		// The consumer, which stores the tail only after records it took, takes the
		// moved tail as its own (adoptTail); the compare-and-swap moves it only while it
		// is the head, that is while the consumer has nothing to store.
		binary.LittleEndian.PutUint64(r.data[off:], wrapMarker)
		if skip := r.size - off; r.tail.CompareAndSwap(head, head+skip) {
			head += skip
			r.ptail = head
		}
	}
	hdr := uint64(tag)<<32 | uint64(flags)<<48
	n := 0
	for n < len(pkts) {
		p := pkts[n]
		rec := recLen(len(p))
		off := head & r.mask
		need, wrap := rec, false
		if rec > r.size-off {
			need, wrap = r.size-off, true
		}
		if head+need-r.ptail > r.size {
			if !r.loadTail(head) {
				r.publish(head)
				return n, ErrCorrupt
			}
			if head+need-r.ptail > r.size {
				r.publish(head)
				if !wait {
					return n, nil
				}
				if err := r.waitSpace(ctx, head, need); err != nil {
					return n, err
				}
				continue
			}
		}
		if wrap {
			binary.LittleEndian.PutUint64(r.data[off:], wrapMarker)
			head += need
			continue
		}
		binary.LittleEndian.PutUint64(r.data[off:], hdr|uint64(len(p)))
		copy(r.data[off+recHdr:], p)
		head += rec
		n++
	}
	r.publish(head)
	return n, nil
}

// loadTail reads the consumer's index and keeps it if it is possible: between head-size
// and head (head being the producer's own index, published or not).
func (r *Ring) loadTail(head uint64) bool {
	t := r.tail.Load()
	if head-t > r.size {
		return false
	}
	r.ptail = t
	return true
}

// publish makes everything written up to head visible to the consumer and wakes it if it
// sleeps.
func (r *Ring) publish(head uint64) {
	if head == r.phead {
		return
	}
	r.phead = head
	r.head.Store(head) // on amd64 an XCHG: a full barrier before the flag is read
	if r.consSleep.Load() != 0 && r.consSleep.CompareAndSwap(1, 0) {
		r.ring(bellData)
	}
}

// waitSpace waits until need bytes are free after head. Spinning, it takes them as soon
// as they are free; asleep, it asks to be woken when a quarter of the ring is (or need,
// if more), so that a consumer that releases a little at a time does not wake it for
// each record. That costs the records nothing: the consumer reaches them only after it
// has drained three quarters of the ring.
func (r *Ring) waitSpace(ctx context.Context, head, need uint64) error {
	limit := int(r.spin.Load())
	for spin := 0; ; spin++ {
		if r.closed.Load() || r.shClosed.Load() != 0 {
			return ErrClosed
		}
		if !r.loadTail(head) {
			return ErrCorrupt
		}
		if head+need-r.ptail <= r.size {
			return nil
		}
		if spin < limit {
			spinPause(spin)
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		r.prodWant.Store(head + max(need, r.size/4) - r.size) // free >= that iff tail >= want
		r.prodWait.Store(1)
		if !r.loadTail(head) {
			r.prodWait.Store(0)
			return ErrCorrupt
		}
		if head+need-r.ptail <= r.size || r.closed.Load() || r.shClosed.Load() != 0 {
			r.prodWait.Store(0)
			continue
		}
		if err := r.sleep(ctx, bellSpace); err != nil {
			r.prodWait.Store(0)
			if r.closed.Load() {
				return ErrClosed
			}
			return err
		}
	}
}

// Read waits until at least one record is in the ring — re-checking briefly, then
// sleeping on the data doorbell — and delivers every record published at that moment:
// it calls fn once per run of up to max consecutive records with the same tag and flags,
// and releases their space (ringing the space doorbell if the producer waits) after fn
// returns. It returns nil after delivering, ctx's error if ctx ends first (records
// already there are still delivered), ErrClosed after Close on either side (once the
// records published before the other side closed are delivered), or ErrCorrupt if the
// producer broke the ring (it stays broken).
//
// The slices fn receives point into the shared memory: they are valid only until fn
// returns, and the producer's process can change their bytes at any moment, also while
// fn reads them. A consumer that must trust the content (check it, then use it) copies it
// first. fn must not call Close.
//
// Only one goroutine at a time may call Read on a ring.
func (r *Ring) Read(ctx context.Context, max int, fn func(tag, flags uint16, pkts [][]byte)) error {
	if !r.enter() {
		return ErrClosed
	}
	defer r.exit()
	if max < 1 {
		max = 1
	}
	limit := int(r.spin.Load())
	for spin := 0; ; spin++ {
		if r.corrupt {
			return ErrCorrupt
		}
		// Read the closed word before head: the producer publishes its last records
		// before it closes, so seeing it closed and then an empty ring means it is over.
		peerClosed := r.shClosed.Load() != 0
		head := r.head.Load()
		if head != r.ctail {
			return r.deliver(head, max, fn)
		}
		if r.closed.Load() || peerClosed {
			return ErrClosed
		}
		if spin < limit {
			spinPause(spin)
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// No lost wake-up: set the flag, then look again; the producer publishes head,
		// then reads the flag.
		r.consSleep.Store(1)
		if r.head.Load() != r.ctail || r.shClosed.Load() != 0 || r.closed.Load() {
			r.consSleep.Store(0)
			continue
		}
		if err := r.sleep(ctx, bellData); err != nil {
			r.consSleep.Store(0)
			if r.closed.Load() {
				return ErrClosed
			}
			return err
		}
	}
}

// deliver hands the records between the consumer's tail and head to fn, checking every
// byte of ring state it uses.
func (r *Ring) deliver(head uint64, max int, fn func(tag, flags uint16, pkts [][]byte)) error {
	r.adoptTail(head)
	pos := r.ctail
	if head%recHdr != 0 || head-pos > r.size {
		r.corrupt = true
		return ErrCorrupt
	}
	batch := r.batch[:0]
	var btag, bflags uint16
	for pos != head {
		rec, tag, flags, next, ok := r.record(pos, head)
		if !ok {
			r.corrupt = true
			break
		}
		if rec == nil { // a wrap marker
			pos = next
			continue
		}
		if len(batch) > 0 && (tag != btag || flags != bflags || len(batch) >= max) {
			fn(btag, bflags, batch)
			clear(batch)
			batch = batch[:0]
			r.release(pos)
		}
		batch = append(batch, rec)
		btag, bflags = tag, flags
		pos = next
	}
	if r.corrupt {
		clear(batch)
		r.batch = batch[:0]
		return ErrCorrupt
	}
	if len(batch) > 0 {
		fn(btag, bflags, batch)
		clear(batch)
	}
	r.batch = batch[:0]
	r.release(pos)
	return nil
}

// adoptTail takes the shared tail as the consumer's own when the producer moved it
// forward, past the bytes it skipped when it went back to the start of an empty ring
// (Write). head is the head the consumer read, before it reads the tail: a tail past
// it is a rewind whose records are not published yet, which the consumer takes once
// they are (the producer moves the tail before it publishes).
func (r *Ring) adoptTail(head uint64) {
	// A producer's tail is record-aligned like its head; one that is not is ignored (a
	// hostile producer's, which the bounds of deliver and record then judge as before).
	if t := r.tail.Load(); t != r.ctail && t%recHdr == 0 && int64(t-r.ctail) > 0 && int64(head-t) >= 0 {
		r.ctail = t
	}
}

// record reads the record at pos (before head): its bytes, tag and flags and where the
// next one starts — no bytes for a wrap marker — or !ok when the ring state is corrupt.
func (r *Ring) record(pos, head uint64) (rec []byte, tag, flags uint16, next uint64, ok bool) {
	off := pos & r.mask // 8-aligned, so a record header fits before the end
	avail := head - pos // > 0 and a multiple of 8
	w := binary.LittleEndian.Uint64(r.data[off : off+recHdr])
	n := uint64(uint32(w))
	tag, flags = uint16(w>>32), uint16(w>>48)
	if n == wrapMarker {
		skip := r.size - off
		if off == 0 || skip > avail {
			return nil, 0, 0, 0, false
		}
		return nil, 0, 0, pos + skip, true
	}
	if n > MaxRecord {
		return nil, 0, 0, 0, false
	}
	l := recLen(int(n))
	if l > r.size-off || l > avail {
		return nil, 0, 0, 0, false
	}
	start := off + recHdr
	return r.data[start : start+n : start+n], tag, flags, pos + l, true
}

// Peek shows fn the records in the ring that nobody has taken yet, oldest first, without
// taking them, until fn returns true; it reports whether fn did. The caller serialises it
// with TryRead and Read, as those with each other. fn must not keep rec: the producer
// may reuse its space once a reader takes it.
func (r *Ring) Peek(fn func(tag uint16, rec []byte) bool) (bool, error) {
	if !r.enter() {
		return false, ErrClosed
	}
	defer r.exit()
	if r.corrupt {
		return false, ErrCorrupt
	}
	head := r.head.Load()
	r.adoptTail(head)
	pos := r.ctail
	if head%recHdr != 0 || head-pos > r.size {
		r.corrupt = true
		return false, ErrCorrupt
	}
	for pos != head {
		rec, tag, _, next, ok := r.record(pos, head)
		if !ok {
			r.corrupt = true
			return false, ErrCorrupt
		}
		if rec != nil && fn(tag, rec) {
			return true, nil
		}
		pos = next
	}
	return false, nil
}

// release gives the space up to pos back to the producer and wakes it if it waits.
func (r *Ring) release(pos uint64) {
	r.ctail = pos
	r.tail.Store(pos) // a full barrier before the flag is read
	// The producer stores want before the flag. Once the consumer has released all it
	// was given, tail is the producer's published head and want (at most head) is met.
	if r.prodWait.Load() != 0 && int64(pos-r.prodWant.Load()) >= 0 && r.prodWait.CompareAndSwap(1, 0) {
		r.ring(bellSpace)
	}
}
