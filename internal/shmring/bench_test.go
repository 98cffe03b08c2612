package shmring

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Benchmarks of the ring against the baseline it replaces in the attach channel, a Unix
// SOCK_SEQPACKET socket: "unix" reads and writes it through os.File (Go's netpoller),
// "unix-blocking" with blocking read(2) and write(2). The ring variants: "ring" is the
// package as configured (defaultWait, spinIters); "ring-netpoll" spins as much but
// sleeps in the other wait mode; the "nospin" variants never spin, so that every wake-up
// goes through a doorbell, parked in the netpoller (waitNetpoll) or in poll(2) on the
// goroutine's thread (waitBlocking): the measurement behind defaultWait. Each runs
// between two goroutines and between two processes (the far end in a helper process).

type variant struct {
	name string
	mode waitMode // keepMode: defaultWait
	spin int      // -1: spinIters
}

const keepMode waitMode = -1

var variants = []variant{
	{"ring", keepMode, -1},
	{"ring-netpoll", waitNetpoll, -1},
	{"ring-nospin-blocking", waitBlocking, 0},
	{"ring-nospin-netpoll", waitNetpoll, 0},
}

// with runs f with the variant's settings.
func (v variant) with(f func()) {
	defer func(m waitMode, s int) { defaultWait, spinIters = m, s }(defaultWait, spinIters)
	if v.mode != keepMode {
		defaultWait = v.mode
	}
	if v.spin >= 0 {
		spinIters = v.spin
	}
	f()
}

var places = []string{"goroutines", "processes"}

// each runs bench for every variant and place, then the two baselines.
func each(b *testing.B, ring func(b *testing.B, processes bool), unix func(b *testing.B, processes, blocking bool)) {
	for _, where := range places {
		proc := where == "processes"
		for _, v := range variants {
			b.Run(v.name+"/"+where, func(b *testing.B) { v.with(func() { ring(b, proc) }) })
		}
		b.Run("unix/"+where, func(b *testing.B) { unix(b, proc, false) })
		b.Run("unix-blocking/"+where, func(b *testing.B) { unix(b, proc, true) })
	}
}

const (
	tpPkts = 16
	tpLen  = 4096
)

// BenchmarkThroughput4K moves batches of 16 4096-byte packets from a producer to a
// consumer that copies each packet out (as the daemon does before it trusts one); the
// consumer acknowledges the end with one record (or message) back. The baseline frames
// the 16 packets (8-byte length headers) into one 64 KiB message per batch on a
// SOCK_SEQPACKET socketpair; its consumer parses them in its own buffer.
func BenchmarkThroughput4K(b *testing.B) {
	each(b, benchRingThroughput, benchUnixThroughput)
}

func reportGBs(b *testing.B) {
	b.ReportMetric(float64(b.N)*tpPkts*tpLen/b.Elapsed().Seconds()/1e9, "GB/s")
}

// ringSink reads n records from a, copying each, then writes one record to b.
func ringSink(a, b *Ring, n int) error {
	ctx := context.Background()
	sink := make([]byte, tpLen)
	got := 0
	fn := func(_, _ uint16, recs [][]byte) {
		for _, r := range recs {
			copy(sink, r)
		}
		got += len(recs)
	}
	for got < n {
		if err := a.Read(ctx, 64, fn); err != nil {
			return err
		}
	}
	_, err := b.Write(ctx, [][]byte{nil}, 0, 0, true)
	return err
}

func benchRingThroughput(b *testing.B, processes bool) {
	ctx := context.Background()
	var pa, cb *Ring // the benchmark writes to pa and reads the acknowledgement from cb
	done := make(chan error, 1)
	start := func() {}
	if processes {
		a, err := Create(4 << 20)
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		bb, err := Create(MinSize)
		if err != nil {
			b.Fatal(err)
		}
		defer bb.Close()
		os.Setenv(countEnv, strconv.Itoa(b.N*tpPkts))
		cmd := startHelper(b, "sink", a, bb)
		os.Unsetenv(countEnv)
		go func() { done <- cmd.Wait() }()
		pa, cb = a, bb
	} else {
		a, ca := pair(b, 4<<20)
		pb, c := pair(b, MinSize)
		ready := make(chan struct{})
		go func() {
			<-ready
			done <- ringSink(ca, pb, b.N*tpPkts)
		}()
		start = func() { close(ready) }
		pa, cb = a, c
	}
	pkts := make([][]byte, tpPkts)
	for i := range pkts {
		pkts[i] = make([]byte, tpLen)
	}
	b.SetBytes(tpPkts * tpLen)
	b.ReportAllocs()
	b.ResetTimer()
	start()
	for i := 0; i < b.N; i++ {
		if n, err := pa.Write(ctx, pkts, 0, 0, true); n != tpPkts || err != nil {
			b.Fatal(n, err)
		}
	}
	if err := cb.Read(ctx, 1, func(uint16, uint16, [][]byte) {}); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal("consumer:", err)
	}
	reportGBs(b)
}

// sock is one end of a SOCK_SEQPACKET socketpair, used through os.File (the netpoller)
// or, if f is nil, with blocking system calls.
type sock struct {
	f    *os.File
	fd   int
	once sync.Once
}

func (s *sock) Read(b []byte) (int, error) {
	if s.f != nil {
		return s.f.Read(b)
	}
	for {
		n, err := unix.Read(s.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (s *sock) Write(b []byte) (int, error) {
	if s.f != nil {
		return s.f.Write(b)
	}
	for {
		n, err := unix.Write(s.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

// Close closes s once; later calls do nothing.
func (s *sock) Close() (err error) {
	s.once.Do(func() {
		if s.f != nil {
			err = s.f.Close()
		} else {
			err = unix.Close(s.fd)
		}
	})
	return err
}

// seqpacket returns a connected SOCK_SEQPACKET pair; both ends are closed at the end of
// the benchmark unless the caller closed them.
func seqpacket(tb testing.TB, blocking bool) (*sock, *sock) {
	tb.Helper()
	typ := unix.SOCK_SEQPACKET | unix.SOCK_CLOEXEC
	if !blocking {
		typ |= unix.SOCK_NONBLOCK
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
	if err != nil {
		tb.Fatal(err)
	}
	a, b := &sock{fd: fds[0]}, &sock{fd: fds[1]}
	if !blocking {
		a.f = os.NewFile(uintptr(fds[0]), "a")
		b.f = os.NewFile(uintptr(fds[1]), "b")
	}
	tb.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

// startSockHelper runs helper on s's peer in a helper process: "sockecho" or "socksink",
// through os.File or, blocking, with blocking system calls.
func startSockHelper(b *testing.B, helper string, peer *sock, blocking bool) chan error {
	if blocking {
		helper += "-blocking"
	}
	cmd := startHelperFiles(b, helper, []*os.File{dupFile(b, peer.fd)})
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// sockSink reads n framed packets from s, then writes a 1-byte message.
func sockSink(s *sock, n int) error {
	buf := make([]byte, 2*tpPkts*(8+tpLen))
	got := 0
	for got < n {
		m, err := s.Read(buf)
		if err != nil {
			return err
		}
		for off := 0; off+8 <= m; {
			off += 8 + int(binary.LittleEndian.Uint32(buf[off:]))
			got++
		}
	}
	_, err := s.Write(buf[:1])
	return err
}

func benchUnixThroughput(b *testing.B, processes, blocking bool) {
	w, peer := seqpacket(b, blocking)
	var done chan error
	start := func() {}
	if processes {
		os.Setenv(countEnv, strconv.Itoa(b.N*tpPkts))
		done = startSockHelper(b, "socksink", peer, blocking)
		os.Unsetenv(countEnv)
	} else {
		done = make(chan error, 1)
		ready := make(chan struct{})
		go func() {
			<-ready
			done <- sockSink(peer, b.N*tpPkts)
		}()
		start = func() { close(ready) }
	}
	pkts := make([][]byte, tpPkts)
	for i := range pkts {
		pkts[i] = make([]byte, tpLen)
	}
	msg := make([]byte, tpPkts*(8+tpLen))
	b.SetBytes(tpPkts * tpLen)
	b.ReportAllocs()
	b.ResetTimer()
	start()
	for i := 0; i < b.N; i++ {
		off := 0
		for _, p := range pkts {
			binary.LittleEndian.PutUint32(msg[off:], uint32(len(p)))
			off += 8 + copy(msg[off+8:], p)
		}
		if _, err := w.Write(msg[:off]); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Read(msg); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal("consumer:", err)
	}
	reportGBs(b)
}

// BenchmarkPingPong64 sends a 64-byte record and waits for its echo, reporting the
// median round trip; the baseline does the same over a SOCK_SEQPACKET socketpair.
func BenchmarkPingPong64(b *testing.B) {
	each(b, benchRingPingPong, benchUnixPingPong)
}

// roundTrips runs b.N round trips of rt and reports their median.
func roundTrips(b *testing.B, rt func()) {
	samples := make([]int64, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range samples {
		t0 := time.Now()
		rt()
		samples[i] = int64(time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2]), "p50-ns")
}

func benchRingPingPong(b *testing.B, processes bool) {
	ctx := context.Background()
	var pa, cb *Ring // the benchmark writes to pa and reads from cb
	var wait func()
	if processes {
		a, err := Create(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		bb, err := Create(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		defer bb.Close()
		cmd := startHelper(b, "echo", a, bb)
		pa, cb = a, bb
		wait = func() {
			a.Close()
			if err := cmd.Wait(); err != nil {
				b.Error("echo helper:", err)
			}
		}
	} else {
		a, ca := pair(b, 1<<20)
		pb, c := pair(b, 1<<20)
		done := make(chan error, 1)
		go func() { done <- echo(ca, pb) }()
		pa, cb = a, c
		wait = func() {
			a.Close()
			if err := <-done; err != nil {
				b.Error("echo:", err)
			}
		}
	}
	defer wait()
	ping := [][]byte{make([]byte, 64)}
	fn := func(_, _ uint16, _ [][]byte) {}
	rt := func() {
		if _, err := pa.Write(ctx, ping, 1, 0, true); err != nil {
			b.Fatal(err)
		}
		if err := cb.Read(ctx, 1, fn); err != nil {
			b.Fatal(err)
		}
	}
	rt() // the far end is up
	roundTrips(b, rt)
}

// sockEcho echoes every message on s until the other end closes.
func sockEcho(s *sock) error {
	buf := make([]byte, 1<<16)
	for {
		n, err := s.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return err
		}
	}
}

func benchUnixPingPong(b *testing.B, processes, blocking bool) {
	s, peer := seqpacket(b, blocking)
	var done chan error
	if processes {
		done = startSockHelper(b, "sockecho", peer, blocking)
	} else {
		done = make(chan error, 1)
		go func() { done <- sockEcho(peer) }()
	}
	defer func() {
		s.Close()
		if err := <-done; err != nil {
			b.Error("echo:", err)
		}
	}()
	ping := make([]byte, 64)
	buf := make([]byte, 1<<16)
	rt := func() {
		if _, err := s.Write(ping); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
	rt()
	roundTrips(b, rt)
}

// runSockHelper runs a socket helper on descriptor 3.
func runSockHelper(name string) (bool, error) {
	var s *sock
	switch name {
	case "sockecho", "socksink":
		s = &sock{f: os.NewFile(3, "sock"), fd: 3}
	case "sockecho-blocking", "socksink-blocking":
		s = &sock{fd: 3}
	default:
		return false, nil
	}
	switch name {
	case "sockecho", "sockecho-blocking":
		return true, sockEcho(s)
	}
	n, err := strconv.Atoi(os.Getenv(countEnv))
	if err != nil {
		return true, fmt.Errorf("%s: %w", countEnv, err)
	}
	return true, sockSink(s, n)
}
