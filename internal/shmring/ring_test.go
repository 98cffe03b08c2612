package shmring

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The helper process: the test binary re-executed with helperEnv set runs one of the
// helpers below instead of the tests, on the rings it inherited as descriptors 3-5 (ring
// A, parent to child) and 6-8 (ring B, child to parent).
const (
	helperEnv = "SHMRING_TEST_HELPER"
	modeEnv   = "SHMRING_TEST_WAIT" // "blocking" or "netpoll": defaultWait in the child
	spinEnv   = "SHMRING_TEST_SPIN" // spinIters in the child
	countEnv  = "SHMRING_TEST_N"    // how many records a sink helper reads
)

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		switch os.Getenv(modeEnv) {
		case "blocking":
			defaultWait = waitBlocking
		case "netpoll":
			defaultWait = waitNetpoll
		}
		if s := os.Getenv(spinEnv); s != "" {
			spinIters, _ = strconv.Atoi(s)
		}
		if err := runHelper(h); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runHelper(name string) error {
	if ok, err := runSockHelper(name); ok {
		return err
	}
	a, err := Open(3, 4, 5)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := Open(6, 7, 8)
	if err != nil {
		return err
	}
	defer b.Close()
	switch name {
	case "exchange":
		return exchange(a, b)
	case "echo":
		return echo(a, b)
	case "sink":
		n, err := strconv.Atoi(os.Getenv(countEnv))
		if err != nil {
			return fmt.Errorf("%s: %w", countEnv, err)
		}
		return ringSink(a, b, n)
	}
	return fmt.Errorf("unknown helper %q", name)
}

// echo writes every record it reads from a back through b, until a closes.
func echo(a, b *Ring) error {
	ctx := context.Background()
	var werr error
	fn := func(tag, flags uint16, pkts [][]byte) {
		if _, err := b.Write(ctx, pkts, tag, flags, true); err != nil && werr == nil {
			werr = err
		}
	}
	for {
		if err := a.Read(ctx, 64, fn); err != nil {
			if errors.Is(err, ErrClosed) {
				return werr
			}
			return err
		}
	}
}

// startHelper runs the helper process on rings a and b.
func startHelper(tb testing.TB, helper string, a, b *Ring) *exec.Cmd {
	tb.Helper()
	var files []*os.File
	for _, r := range []*Ring{a, b} {
		m, d, s := r.Fds()
		for _, fd := range []int{m, d, s} {
			files = append(files, dupFile(tb, fd))
		}
	}
	return startHelperFiles(tb, helper, files)
}

func startHelperFiles(tb testing.TB, helper string, files []*os.File) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+helper, spinEnv+"="+strconv.Itoa(spinIters))
	if defaultWait == waitBlocking {
		cmd.Env = append(cmd.Env, modeEnv+"=blocking")
	} else {
		cmd.Env = append(cmd.Env, modeEnv+"=netpoll")
	}
	cmd.ExtraFiles = files
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	err := cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		tb.Fatal(err)
	}
	return cmd
}

func dupFile(tb testing.TB, fd int) *os.File {
	tb.Helper()
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return os.NewFile(uintptr(n), "dup")
}

// dupFds duplicates a ring's descriptors, for Open in the same process.
func dupFds(tb testing.TB, r *Ring) (int, int, int) {
	tb.Helper()
	m, d, s := r.Fds()
	var out [3]int
	for i, fd := range []int{m, d, s} {
		n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = n
	}
	return out[0], out[1], out[2]
}

// pair creates a ring and opens a second mapping of it, as the other process would:
// the producer writes to p and the consumer reads from c.
func pair(tb testing.TB, size int) (p, c *Ring) {
	tb.Helper()
	p, err := Create(size)
	if err != nil {
		tb.Fatal(err)
	}
	c, err = Open(dupFds(tb, p))
	if err != nil {
		p.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Close()
		c.Close()
	})
	return p, c
}

// payload is the content of record i: its length varies from 0 to 1999 and every byte
// depends on i.
func payload(buf []byte, i int) []byte {
	n := i % 2000
	b := buf[:n]
	for j := range b {
		b[j] = byte(i*7 + j*13)
	}
	return b
}

// groupTag and groupFlags are the tag and flags of record i in exchange: records go in
// groups of 10 with the same tag.
func groupTag(i int) uint16   { return uint16(i / 10) }
func groupFlags(i int) uint16 { return uint16(i/10) * 3 }

const exchangeN = 100000

// sendAll writes exchangeN records to r, a group at a time.
func sendAll(r *Ring) error {
	ctx := context.Background()
	bufs := make([][]byte, 10)
	for i := range bufs {
		bufs[i] = make([]byte, 2000)
	}
	pkts := make([][]byte, 10)
	for g := 0; g < exchangeN/10; g++ {
		for k := range pkts {
			pkts[k] = payload(bufs[k], g*10+k)
		}
		n, err := r.Write(ctx, pkts, groupTag(g*10), groupFlags(g*10), true)
		if err != nil {
			return err
		}
		if n != len(pkts) {
			return fmt.Errorf("wrote %d of %d", n, len(pkts))
		}
	}
	return nil
}

// recvAll reads exchangeN records from r and checks them.
func recvAll(r *Ring) error {
	ctx := context.Background()
	want := make([]byte, 2000)
	i := 0
	var bad error
	fn := func(tag, flags uint16, pkts [][]byte) {
		for _, p := range pkts {
			if bad != nil {
				return
			}
			if tag != groupTag(i) || flags != groupFlags(i) {
				bad = fmt.Errorf("record %d: tag %d flags %d, want %d %d", i, tag, flags, groupTag(i), groupFlags(i))
			} else if w := payload(want, i); !bytes.Equal(p, w) {
				bad = fmt.Errorf("record %d: %d bytes, want %d, or content differs", i, len(p), len(w))
			}
			i++
		}
	}
	for i < exchangeN && bad == nil {
		if err := r.Read(ctx, 32, fn); err != nil {
			return fmt.Errorf("after %d records: %w", i, err)
		}
	}
	return bad
}

// exchange sends exchangeN records through b and checks the exchangeN that come
// through a, at the same time.
func exchange(a, b *Ring) error {
	errc := make(chan error, 1)
	go func() { errc <- sendAll(b) }()
	err := recvAll(a)
	if e := <-errc; err == nil {
		err = e
	}
	return err
}

func TestCrossProcess(t *testing.T) {
	a, err := Create(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Create(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cmd := startHelper(t, "exchange", a, b)
	errc := make(chan error, 1)
	go func() { errc <- sendAll(a) }()
	if err := recvAll(b); err != nil {
		t.Error("parent receiving:", err)
	}
	if err := <-errc; err != nil {
		t.Error("parent sending:", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Error("helper:", err)
	}
}

// readAll reads whatever is in c now and returns copies of the records with their tags
// and flags; it fails if the ring is empty.
type rec struct {
	tag, flags uint16
	b          []byte
}

func readAll(t *testing.T, c *Ring, max int) (recs []rec, batches int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // deliver what is there, do not wait
	for {
		err := c.Read(ctx, max, func(tag, flags uint16, pkts [][]byte) {
			batches++
			if len(pkts) > max {
				t.Errorf("batch of %d > max %d", len(pkts), max)
			}
			for _, p := range pkts {
				recs = append(recs, rec{tag, flags, bytes.Clone(p)})
			}
		})
		if errors.Is(err, context.Canceled) {
			return recs, batches
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	p, c := pair(t, 1<<20)
	sizes := []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 256, 1000, 4095, 4096, 4097, 9000, 65535, 65536, MaxRecord - 1, MaxRecord}
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		var pkts [][]byte
		for i, n := range sizes {
			b := make([]byte, n)
			for j := range b {
				b[j] = byte(i + j*31 + round)
			}
			pkts = append(pkts, b)
		}
		n, err := p.Write(ctx, pkts, uint16(round), 0xbeef, false)
		if err != nil || n != len(pkts) {
			t.Fatalf("Write: %d, %v", n, err)
		}
		recs, _ := readAll(t, c, 1000)
		if len(recs) != len(pkts) {
			t.Fatalf("read %d records, want %d", len(recs), len(pkts))
		}
		for i, r := range recs {
			if r.tag != uint16(round) || r.flags != 0xbeef || !bytes.Equal(r.b, pkts[i]) {
				t.Fatalf("record %d (%d bytes) differs", i, len(pkts[i]))
			}
		}
	}
}

func TestTooLarge(t *testing.T) {
	p, _ := pair(t, 1<<20)
	n, err := p.Write(context.Background(), [][]byte{make([]byte, 10), make([]byte, MaxRecord+1)}, 0, 0, true)
	if n != 0 || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write of MaxRecord+1: %d, %v", n, err)
	}
	small, _ := pair(t, MinSize)
	n, err = small.Write(context.Background(), [][]byte{make([]byte, MinSize)}, 0, 0, true)
	if n != 0 || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write of a record longer than the ring: %d, %v", n, err)
	}
	// The largest record a ring can hold goes through.
	n, err = small.Write(context.Background(), [][]byte{make([]byte, MinSize-recHdr)}, 0, 0, true)
	if n != 1 || err != nil {
		t.Fatalf("Write of a ring-sized record: %d, %v", n, err)
	}
}

func TestWrapAround(t *testing.T) {
	p, c := pair(t, MinSize)
	ctx := context.Background()
	next, want := 0, 0
	buf := make([]byte, 2000)
	for round := 0; round < 500; round++ {
		// A few records of varying sizes, then read them all.
		var pkts [][]byte
		for k := 0; k < 1+round%3; k++ {
			b := payload(make([]byte, 2000), next)
			if len(b) > 1300 {
				b = b[:next%1300]
			}
			pkts = append(pkts, b)
			next++
		}
		n, err := p.Write(ctx, pkts, 1, 2, true)
		if err != nil || n != len(pkts) {
			t.Fatalf("round %d: Write: %d, %v", round, n, err)
		}
		if err := c.Read(ctx, 100, func(tag, flags uint16, got [][]byte) {
			for _, g := range got {
				w := payload(buf, want)
				if len(w) > 1300 {
					w = w[:want%1300]
				}
				if !bytes.Equal(g, w) {
					t.Fatalf("record %d differs", want)
				}
				want++
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if want != next {
		t.Fatalf("read %d records, wrote %d", want, next)
	}
	if p.phead < 50*MinSize {
		t.Fatalf("only %d bytes went through, the ring did not wrap much", p.phead)
	}
}

func TestFullNoWait(t *testing.T) {
	p, c := pair(t, MinSize)
	pkts := make([][]byte, 10)
	for i := range pkts {
		pkts[i] = bytes.Repeat([]byte{byte(i)}, 1000)
	}
	n, err := p.Write(context.Background(), pkts, 0, 0, false)
	// 1008 bytes per record: 4 fit in 4096.
	if err != nil || n != 4 {
		t.Fatalf("Write to a ring with room for 4: %d, %v", n, err)
	}
	n, err = p.Write(context.Background(), pkts[4:], 0, 0, false)
	if err != nil || n != 0 {
		t.Fatalf("Write to a full ring: %d, %v", n, err)
	}
	recs, _ := readAll(t, c, 100)
	if len(recs) != 4 {
		t.Fatalf("read %d records, want 4", len(recs))
	}
	for i, r := range recs {
		if !bytes.Equal(r.b, pkts[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
	// Now there is room again; the next record wraps.
	n, err = p.Write(context.Background(), pkts[4:], 0, 0, false)
	if err != nil || n != 4 {
		t.Fatalf("Write after the consumer emptied the ring: %d, %v", n, err)
	}
}

func TestFullWait(t *testing.T) {
	p, c := pair(t, MinSize)
	pkts := make([][]byte, 20)
	for i := range pkts {
		pkts[i] = bytes.Repeat([]byte{byte(i)}, 1000)
	}
	done := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = p.Write(context.Background(), pkts, 7, 8, true)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Write of 20 KB into a 4 KB ring returned at once: %d, %v", n, err)
	case <-time.After(50 * time.Millisecond):
	}
	got := 0
	for got < len(pkts) {
		if err := c.Read(context.Background(), 100, func(tag, flags uint16, recs [][]byte) {
			for _, r := range recs {
				if tag != 7 || flags != 8 || !bytes.Equal(r, pkts[got]) {
					t.Errorf("record %d differs", got)
				}
				got++
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil || n != len(pkts) {
		t.Fatalf("Write: %d, %v", n, err)
	}
}

func TestWriteWaitContext(t *testing.T) {
	p, _ := pair(t, MinSize)
	pkts := [][]byte{make([]byte, 3000), make([]byte, 3000)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	n, err := p.Write(ctx, pkts, 0, 0, true)
	if n != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write into a full ring until the deadline: %d, %v", n, err)
	}
}

func TestReadContext(t *testing.T) {
	_, c := pair(t, MinSize)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := c.Read(ctx, 1, func(uint16, uint16, [][]byte) { t.Error("fn called on an empty ring") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read of an empty ring until the deadline: %v", err)
	}
}

// blocked runs f in a goroutine, checks that it blocks, runs unblock and checks that f
// then returns ErrClosed.
func blocked(t *testing.T, f func() error, unblock func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		t.Fatalf("returned without blocking: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	unblock()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still blocked 5s after Close")
	}
}

func TestCloseUnblocks(t *testing.T) {
	read := func(c *Ring) func() error {
		return func() error {
			return c.Read(context.Background(), 10, func(uint16, uint16, [][]byte) {})
		}
	}
	write := func(p *Ring) func() error {
		return func() error {
			_, err := p.Write(context.Background(), [][]byte{make([]byte, 3000), make([]byte, 3000)}, 0, 0, true)
			return err
		}
	}
	for _, mode := range []waitMode{waitNetpoll, waitBlocking} {
		defer func(m waitMode) { defaultWait = m }(defaultWait)
		defaultWait = mode
		t.Run(fmt.Sprintf("mode%d", mode), func(t *testing.T) {
			// Close on the ring the goroutine uses.
			_, c := pair(t, MinSize)
			blocked(t, read(c), func() { c.Close() })
			p, _ := pair(t, MinSize)
			blocked(t, write(p), func() { p.Close() })
			// Close on the other side's mapping: the shared closed word and the doorbells.
			p, c = pair(t, MinSize)
			blocked(t, read(c), func() { p.Close() })
			p, c = pair(t, MinSize)
			blocked(t, write(p), func() { c.Close() })
			// Once closed, calls fail at once.
			if err := read(c)(); !errors.Is(err, ErrClosed) {
				t.Fatalf("Read after Close: %v", err)
			}
			if err := write(p)(); !errors.Is(err, ErrClosed) {
				t.Fatalf("Write after the peer's Close: %v", err)
			}
		})
	}
}

func TestCloseDrains(t *testing.T) {
	// Records published before the producer closed are still delivered.
	p, c := pair(t, MinSize)
	if n, err := p.Write(context.Background(), [][]byte{[]byte("last")}, 0, 0, false); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	p.Close()
	var got []string
	err := c.Read(context.Background(), 10, func(_, _ uint16, pkts [][]byte) { got = append(got, string(pkts[0])) })
	if err != nil || len(got) != 1 || got[0] != "last" {
		t.Fatalf("Read after the producer closed: %q, %v", got, err)
	}
	if err := c.Read(context.Background(), 10, func(uint16, uint16, [][]byte) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Read: %v", err)
	}
}

func TestBatching(t *testing.T) {
	p, c := pair(t, 1<<16)
	ctx := context.Background()
	type w struct {
		tag, flags uint16
		n          int
	}
	writes := []w{{1, 0, 3}, {1, 0, 2}, {2, 0, 1}, {2, 5, 4}, {1, 0, 1}}
	for _, x := range writes {
		pkts := make([][]byte, x.n)
		for i := range pkts {
			pkts[i] = []byte{byte(x.tag), byte(x.flags), byte(i)}
		}
		if n, err := p.Write(ctx, pkts, x.tag, x.flags, false); n != x.n || err != nil {
			t.Fatal(n, err)
		}
	}
	type batch struct {
		tag, flags uint16
		n          int
	}
	var got []batch
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for {
		err := c.Read(cctx, 4, func(tag, flags uint16, pkts [][]byte) {
			for _, p := range pkts {
				if p[0] != byte(tag) || p[1] != byte(flags) {
					t.Errorf("record %v in batch with tag %d flags %d", p, tag, flags)
				}
			}
			got = append(got, batch{tag, flags, len(pkts)})
		})
		if err != nil {
			break
		}
	}
	want := []batch{{1, 0, 4}, {1, 0, 1}, {2, 0, 1}, {2, 5, 4}, {1, 0, 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// Shared-memory corruption by the other side.

func putHdr(r *Ring, off uint64, n uint32, tag, flags uint16) {
	binary.LittleEndian.PutUint64(r.data[off:], uint64(n)|uint64(tag)<<32|uint64(flags)<<48)
}

func TestCorruptConsumer(t *testing.T) {
	cases := []struct {
		name string
		set  func(p *Ring) // p is the producer's mapping; it sets head
	}{
		{"head beyond tail+size", func(p *Ring) { p.head.Store(MinSize + 8) }},
		{"head behind tail", func(p *Ring) { p.head.Store(^uint64(7)) }},
		{"head not aligned", func(p *Ring) { putHdr(p, 0, 0, 0, 0); p.head.Store(4) }},
		{"length over MaxRecord", func(p *Ring) { putHdr(p, 0, MaxRecord+1, 0, 0); p.head.Store(MinSize) }},
		{"length past head", func(p *Ring) { putHdr(p, 0, 100, 0, 0); p.head.Store(64) }},
		{"length past the end", func(p *Ring) {
			putHdr(p, 0, MinSize-16, 0, 0) // ends at MinSize-8
			putHdr(p, MinSize-8, 8, 0, 0)  // 16 bytes in the last 8
			p.head.Store(MinSize)
		}},
		{"wrap marker at 0", func(p *Ring) { putHdr(p, 0, wrapMarker, 0, 0); p.head.Store(MinSize) }},
		{"wrap marker past head", func(p *Ring) {
			putHdr(p, 0, 8, 0, 0)
			putHdr(p, 16, wrapMarker, 0, 0)
			p.head.Store(24)
		}},
		{"length past head after good records", func(p *Ring) {
			putHdr(p, 0, 8, 0, 0)
			putHdr(p, 16, 9, 0, 0)
			p.head.Store(32)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pair(t, MinSize)
			tc.set(p)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var err error
			for i := 0; i < 3 && err == nil; i++ {
				err = c.Read(ctx, 10, func(_, _ uint16, pkts [][]byte) {
					for _, b := range pkts {
						for range b {
						}
					}
				})
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read: %v, want ErrCorrupt", err)
			}
			if err := c.Read(ctx, 10, func(uint16, uint16, [][]byte) {}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read after ErrCorrupt: %v, want ErrCorrupt again", err)
			}
		})
	}
}

func TestCorruptProducer(t *testing.T) {
	// After a 4008-byte record, the next one wraps: head is MinSize when the producer
	// reads tail, which must be in [0, MinSize].
	for _, tail := range []uint64{MinSize * 3, MinSize + 8, ^uint64(0)} {
		p, c := pair(t, MinSize)
		ctx := context.Background()
		if n, err := p.Write(ctx, [][]byte{make([]byte, 4000)}, 0, 0, false); n != 1 || err != nil {
			t.Fatal(n, err)
		}
		// Tail is ahead of head (or behind by more than size once head advances).
		c.tail.Store(tail)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := p.Write(tctx, [][]byte{make([]byte, 4000)}, 0, 0, true)
		cancel()
		if n != 0 || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("tail %d: Write: %d, %v, want ErrCorrupt", tail, n, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	fresh := func() (*Ring, int, int, int) {
		r, err := Create(MinSize)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		m, d, s := dupFds(t, r)
		return r, m, d, s
	}
	expectErr := func(what string, m, d, s int) {
		t.Helper()
		r, err := Open(m, d, s)
		if err == nil {
			r.Close()
			t.Fatalf("%s: Open succeeded", what)
		}
		t.Logf("%s: %v", what, err)
		// Open closed the descriptors.
		for _, fd := range []int{m, d, s} {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				t.Fatalf("%s: descriptor %d still open", what, fd)
			}
		}
	}
	r, m, d, s := fresh()
	binary.LittleEndian.PutUint32(r.mem[offMagic:], 1)
	expectErr("bad magic", m, d, s)

	r, m, d, s = fresh()
	binary.LittleEndian.PutUint32(r.mem[offVersion:], 9)
	expectErr("bad version", m, d, s)

	r, m, d, s = fresh()
	binary.LittleEndian.PutUint64(r.mem[offSize:], 2*MinSize)
	expectErr("size mismatch", m, d, s)

	r, m, d, s = fresh()
	r.head.Store(2 * MinSize)
	expectErr("head too far", m, d, s)

	_, m, d, s = fresh()
	expectErr("data and space swapped with mem", d, m, s)

	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(pipe[1])
	_, m, d, s = fresh()
	unix.Close(d)
	expectErr("a pipe for the data doorbell", m, pipe[0], s)

	// A memfd without seals: the other side could shrink it under the mapping.
	fd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, HeaderSize+MinSize)
	_, _, d, s = fresh()
	expectErr("unsealed memfd", fd, d, s)
}

// FuzzConsumer fills a ring's header and data area with the fuzzer's bytes and reads it,
// both through the creator's mapping (whose indices were 0) and through Open: whatever
// the bytes, Read and Open return (data or an error) and never panic. The input is the
// header's words (fuzzHeader) and then the data area: the header page's other bytes are
// unused, and a short input leaves the rest of the ring zero, so that the fuzzer's
// inputs stay short — it minimizes each new one, and minimizing 8 KiB images took
// it its whole minute each time.
func FuzzConsumer(f *testing.F) {
	const size = fuzzSize
	// Seeds: a valid header with records.
	seed := func(recs []int, wrapAt int) []byte {
		b := make([]byte, HeaderSize+size)
		binary.LittleEndian.PutUint32(b[offMagic:], magic)
		binary.LittleEndian.PutUint32(b[offVersion:], version)
		binary.LittleEndian.PutUint64(b[offSize:], size)
		pos := uint64(0)
		for i, n := range recs {
			if i == wrapAt {
				binary.LittleEndian.PutUint64(b[HeaderSize+pos:], wrapMarker)
				pos = size
			}
			binary.LittleEndian.PutUint64(b[HeaderSize+pos&(size-1):], uint64(n)|uint64(i)<<32)
			pos += recLen(n)
		}
		binary.LittleEndian.PutUint64(b[offHead:], pos)
		return fuzzPack(b)
	}
	f.Add(seed([]int{0, 1, 100, 8}, -1))
	f.Add(seed([]int{3000, 500, 100}, 2))
	f.Add(seed(nil, -1))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, in []byte) { fuzzConsumer(t, in) })
}

// fuzzHeader are the byte ranges of the header page that hold its words: magic,
// version, size and closed; head, prodWait and prodWant; tail and consSleep.
var fuzzHeader = [][2]int{{offMagic, offClosed + 8}, {offHead, offProdWant + 8}, {offTail, offConsSleep + 8}}

// fuzzPack makes a FuzzConsumer input of a ring image (header page and data area), its
// trailing zeros left out.
func fuzzPack(img []byte) []byte {
	var in []byte
	for _, r := range fuzzHeader {
		in = append(in, img[r[0]:r[1]]...)
	}
	in = append(in, img[HeaderSize:]...)
	for len(in) > 0 && in[len(in)-1] == 0 {
		in = in[:len(in)-1]
	}
	return in
}

// TestFuzzPack: a FuzzConsumer input holds every header word and the data area.
func TestFuzzPack(t *testing.T) {
	img := make([]byte, HeaderSize+fuzzSize)
	for _, r := range fuzzHeader {
		for i := r[0]; i < r[1]; i++ {
			img[i] = byte(i) | 1
		}
	}
	for i := HeaderSize; i < len(img)-5; i++ {
		img[i] = byte(i) | 1
	}
	in := fuzzPack(img)
	if want := 64 + fuzzSize - 5; len(in) != want {
		t.Fatalf("input of %d bytes, want %d", len(in), want)
	}
	got := make([]byte, len(img))
	fuzzUnpack(got, in)
	if !bytes.Equal(got, img) {
		t.Fatal("unpacked input differs from the image")
	}
}

// fuzzUnpack writes a FuzzConsumer input over mem, a zeroed ring image.
func fuzzUnpack(mem, in []byte) {
	for _, r := range fuzzHeader {
		in = in[copy(mem[r[0]:r[1]], in):]
	}
	copy(mem[HeaderSize:], in)
}

// fuzzRing is the ring every FuzzConsumer execution of this process reads: creating,
// opening and unmapping two mappings per input cost some 250 µs of system calls (munmap
// most), and the fuzzer ran 90 inputs a second.
var fuzzRing struct {
	once sync.Once
	r    *Ring
	err  error
}

// fuzzConsumer is one execution of FuzzConsumer: the fuzzer's bytes over a ring as
// Create leaves it, read by a consumer; then Open's check of the header, and the
// consumer and the producer of the ring as Open would make it read and write it. The
// rings are fresh Ring values over one mapping (its bytes are all the state two
// processes share), and do not spin: ctx is over before they start, so a Read that
// finds the ring empty has only its spin left to do before it returns ctx's error —
// 5000 re-checks and some 150 sched_yield(2) calls, each giving the processor away for
// a time slice on a busy machine. The spin re-reads head and the closed words, nothing
// that the fuzzer's bytes can steer.
func fuzzConsumer(t testing.TB, in []byte) {
	fuzzRing.once.Do(func() { fuzzRing.r, fuzzRing.err = Create(fuzzSize) })
	if fuzzRing.err != nil {
		t.Fatal(fuzzRing.err)
	}
	base := fuzzRing.r
	mem := base.mem
	clear(mem)
	binary.LittleEndian.PutUint32(mem[offMagic:], magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], version)
	binary.LittleEndian.PutUint64(mem[offSize:], fuzzSize)
	fuzzUnpack(mem, in)
	ring := func(head, tail uint64) *Ring {
		r := newRing(mem, base.memfd, base.bell, head, tail)
		if r.mode != waitBlocking {
			t.Fatal("fuzzConsumer's rings must not wrap the shared eventfds in files")
		}
		r.SetSpin(0)
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fn := func(_, _ uint16, pkts [][]byte) {
		for _, p := range pkts {
			for i := range p {
				_ = p[i]
			}
		}
	}
	r := ring(0, 0)
	for i := 0; i < 4; i++ {
		if r.Read(ctx, 3, fn) != nil {
			break
		}
	}
	// The creator wrote the magic and size; the fuzzer's bytes may have kept them.
	head, tail, err := checkHeader(mem)
	if err != nil {
		return
	}
	c := ring(head, tail)
	for i := 0; i < 4; i++ {
		if c.Read(ctx, 3, fn) != nil {
			break
		}
	}
	// And the producer side of the opened mapping.
	c.Write(ctx, [][]byte{make([]byte, 100)}, 0, 0, false)
}

const fuzzSize = MinSize

// BenchmarkFuzzConsumer is the cost of two FuzzConsumer executions: a valid ring with a
// record (read, then found empty) and one that Open refuses. With a ring created, opened
// and closed per input and spinning on empty reads: 2.3–2.5 ms (load average 7, two
// cores); now 10–16 µs.
func BenchmarkFuzzConsumer(b *testing.B) {
	valid := make([]byte, HeaderSize+fuzzSize)
	binary.LittleEndian.PutUint32(valid[offMagic:], magic)
	binary.LittleEndian.PutUint32(valid[offVersion:], version)
	binary.LittleEndian.PutUint64(valid[offSize:], fuzzSize)
	binary.LittleEndian.PutUint64(valid[HeaderSize:], 100)
	binary.LittleEndian.PutUint64(valid[offHead:], recLen(100))
	valid = fuzzPack(valid)
	for i := 0; i < b.N; i++ {
		fuzzConsumer(b, valid)
		fuzzConsumer(b, []byte{0xff})
	}
}

// TestConcurrentSameRing has the producer and the consumer use one Ring value, the race
// detector watching the accesses in the mapping.
func TestConcurrentSameRing(t *testing.T) {
	r, err := Create(MinSize)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2000)
		for i := 0; i < n; i++ {
			if _, err := r.Write(context.Background(), [][]byte{payload(buf, i%700)}, uint16(i), 0, true); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	want := make([]byte, 2000)
	for i := 0; i < n; {
		if err := r.Read(context.Background(), 16, func(tag, _ uint16, pkts [][]byte) {
			for _, p := range pkts {
				if tag != uint16(i) || !bytes.Equal(p, payload(want, i%700)) {
					t.Fatalf("record %d differs", i)
				}
				i++
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// TestPeek: Peek shows the records not taken yet, oldest first and across the ring's
// wrap, stops where its function says, and takes nothing: TryRead then delivers them all.
func TestPeek(t *testing.T) {
	p, c := pair(t, MinSize)
	ctx := context.Background()
	next := 0
	for round := 0; round < 200; round++ {
		var pkts [][]byte
		for k := 0; k < 1+round%3; k++ {
			pkts = append(pkts, payload(make([]byte, 700+next%600), next))
			next++
		}
		if n, err := p.Write(ctx, pkts, uint16(round), 0, true); err != nil || n != len(pkts) {
			t.Fatalf("round %d: Write: %d, %v", round, n, err)
		}
		var seen [][]byte
		found, err := c.Peek(func(tag uint16, rec []byte) bool {
			if tag != uint16(round) {
				t.Fatalf("round %d: tag %d", round, tag)
			}
			seen = append(seen, bytes.Clone(rec))
			return len(seen) == 2
		})
		if err != nil || found != (len(pkts) >= 2) || len(seen) != min(len(pkts), 2) {
			t.Fatalf("round %d: Peek: found %v, saw %d of %d records, %v", round, found, len(seen), len(pkts), err)
		}
		for i := range seen {
			if !bytes.Equal(seen[i], pkts[i]) {
				t.Fatalf("round %d: peeked record %d differs", round, i)
			}
		}
		var got int
		if ok, err := c.TryRead(100, func(_, _ uint16, recs [][]byte) {
			for _, r := range recs {
				if !bytes.Equal(r, pkts[got]) {
					t.Fatalf("round %d: record %d differs after Peek", round, got)
				}
				got++
			}
		}); !ok || err != nil || got != len(pkts) {
			t.Fatalf("round %d: TryRead after Peek: %v, %d of %d records, %v", round, ok, got, len(pkts), err)
		}
		if found, err := c.Peek(func(uint16, []byte) bool { return true }); found || err != nil {
			t.Fatalf("round %d: Peek of an empty ring: %v, %v", round, found, err)
		}
	}
	if p.phead < 20*MinSize {
		t.Fatalf("only %d bytes went through, the ring did not wrap much", p.phead)
	}
}

// TestRewindWhenEmpty: a producer that finds the ring empty past rewindAt goes back to
// offset 0, so that a ping-pong keeps to the first rewindAt bytes (pages both processes
// touched already) instead of going round the whole ring through fresh pages; the
// records arrive intact.
func TestRewindWhenEmpty(t *testing.T) {
	p, c := pair(t, 1<<20)
	ctx := context.Background()
	buf := make([]byte, 2000)
	maxOff := uint64(0)
	next, want := 0, 0
	check := func(tag, flags uint16, got [][]byte) {
		for _, g := range got {
			if !bytes.Equal(g, payload(buf, want)) {
				t.Fatalf("record %d differs", want)
			}
			want++
		}
	}
	for round := 0; round < 2000; round++ {
		pkt := payload(make([]byte, 2000), next)
		next++
		if n, err := p.Write(ctx, [][]byte{pkt}, 1, 0, true); err != nil || n != 1 {
			t.Fatalf("round %d: Write: %d, %v", round, n, err)
		}
		maxOff = max(maxOff, (p.phead-1)&p.mask)
		if err := c.Read(ctx, 100, check); err != nil {
			t.Fatal(err)
		}
	}
	if want != next {
		t.Fatalf("read %d records, wrote %d", want, next)
	}
	if limit := uint64(rewindAt + recLen(2000)); maxOff >= limit {
		t.Fatalf("a ping-pong used the ring up to offset %d; want below %d", maxOff, limit)
	}
}

// TestRewindFreesSkippedSpace: the bytes a rewind skips are free at once. A producer that
// went back to the start of an empty ring while the consumer was away (busy elsewhere)
// can still write a whole ring's worth without waiting; the skipped bytes used to count
// until the consumer had passed the wrap marker, leaving only the offset's worth, and a
// non-waiting writer (the daemon) dropped the rest of a burst as if the ring were full.
func TestRewindFreesSkippedSpace(t *testing.T) {
	const size = 1 << 20
	p, c := pair(t, size)
	ctx := context.Background()
	pkt := make([]byte, 4000)
	// Past rewindAt, then everything taken.
	for p.phead&p.mask < rewindAt {
		if n, err := p.Write(ctx, [][]byte{pkt}, 1, 0, false); err != nil || n != 1 {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	took := 0
	for took < int(p.phead/uint64(recLen(len(pkt)))) {
		if err := c.Read(ctx, 100, func(_, _ uint16, got [][]byte) { took += len(got) }); err != nil {
			t.Fatal(err)
		}
	}
	// A burst of nearly a ring, not waiting: the consumer has not run since.
	n := int((size - rewindAt) / recLen(len(pkt)))
	burst := make([][]byte, n)
	for i := range burst {
		burst[i] = payload(make([]byte, 4000), i)
		burst[i] = append(burst[i], make([]byte, 4000-len(burst[i]))...)
	}
	if got, err := p.Write(ctx, burst, 2, 0, false); err != nil || got != n {
		t.Fatalf("a burst of %d records after a rewind: %d written, %v (the skipped bytes counted as used)", n, got, err)
	}
	i := 0
	for i < n {
		err := c.Read(ctx, 100, func(tag, _ uint16, got [][]byte) {
			for _, g := range got {
				if tag != 2 || !bytes.Equal(g, burst[i]) {
					t.Fatalf("record %d of the burst differs (tag %d)", i, tag)
				}
				i++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if tail, head := c.Indexes(); tail != head {
		t.Fatalf("consumer's tail %d, head %d: want everything taken", tail, head)
	}
}
