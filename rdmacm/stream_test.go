package rdmacm_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/rdmacm"
)

func dialListen(t *testing.T, h *testHost, port string) (*rdmacm.Listener, func() (net.Conn, net.Conn)) {
	t.Helper()
	l, err := rdmacm.Listen(h, "10.0.0.2:"+port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, func() (net.Conn, net.Conn) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := rdmacm.Dial(ctx, h, "10.0.0.2:"+port)
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
}

func TestStreamEcho(t *testing.T) {
	h := newTestHost(t, 2)
	_, pair := dialListen(t, h, "7471")
	c, s := pair()
	go io.Copy(s, s)                                   // echo
	msg := bytes.Repeat([]byte("rdma stream "), 20000) // 240 KB: several messages
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs")
	}
	if c.RemoteAddr().String() != "10.0.0.2:7471" || s.LocalAddr().String() != "10.0.0.2:7471" {
		t.Fatalf("addresses %v / %v", c.RemoteAddr(), s.LocalAddr())
	}
	c.Close()
	// The server's echo sees EOF and ends; its Read after that is EOF too.
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("server read after client close: %v", err)
	}
}

// TestStreamsConcurrent: 16 connections each move 64 MiB at once (4 MiB under the race
// detector or -short), SHA-256 checked; one reader sleeps 1 ms per read, and no
// connection ever sees an RNR NAK.
func TestStreamsConcurrent(t *testing.T) {
	h := newTestHost(t, 2)
	_, pair := dialListen(t, h, "7472")
	const conns = 16
	size := 64 << 20
	if raceEnabled || testing.Short() {
		size = 4 << 20
	}
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		c, s := pair()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			data := make([]byte, size)
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for k := range data {
				data[k] = byte(r.Uint32())
			}
			want := sha256.Sum256(data)
			go func() { c.Write(data) }()
			hs := sha256.New()
			buf := make([]byte, 100_000)
			n := 0
			for n < size {
				k, err := s.Read(buf)
				if err != nil {
					errs <- err
					return
				}
				hs.Write(buf[:k])
				n += k
				if i == 0 && n < 8<<20 {
					time.Sleep(time.Millisecond) // a slow reader (for its first 8 MiB)
				}
			}
			if !bytes.Equal(hs.Sum(nil), want[:]) {
				errs <- errors.New("sha256 differs")
			}
			for _, x := range []net.Conn{c, s} {
				if n := rc.ConnStats(x.(*rdmacm.Conn).ID().QP()).RNRNAKs.Load(); n != 0 {
					errs <- fmt.Errorf("%d RNR NAKs", n)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestDialRefused(t *testing.T) {
	h := newTestHost(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := rdmacm.Dial(ctx, h, "10.0.0.2:9")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a port nobody listens on: %v", err)
	}
}
