//go:build !pibgw_omit_netstack

package tun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// netstackPair returns two stacks, 10.77.0.1 and 10.77.0.2 (and fe80::1, fe80::2), whose
// interfaces are joined by Copy both ways.
func netstackPair(t testing.TB, mtu int) (a, b *Netstack) {
	t.Helper()
	var err error
	a, err = NewNetstack(NetstackConfig{Name: "ib0", MTU: mtu, Addrs: []netip.Prefix{
		netip.MustParsePrefix("10.77.0.1/24"), netip.MustParsePrefix("fe80::1/64")}})
	if err != nil {
		t.Fatal(err)
	}
	b, err = NewNetstack(NetstackConfig{Name: "ib1", MTU: mtu, Addrs: []netip.Prefix{
		netip.MustParsePrefix("10.77.0.2/24"), netip.MustParsePrefix("fe80::2/64")}})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); Copy(b, a) }()
	go func() { defer wg.Done(); Copy(a, b) }()
	t.Cleanup(func() {
		a.Close()
		b.Close()
		wg.Wait()
	})
	return a, b
}

// streamTCP sends size pseudo-random bytes from a to b over TCP and checks they arrive
// intact.
func streamTCP(t testing.TB, a, b *Netstack, addr string, size int64) {
	t.Helper()
	ln, err := b.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		sum [32]byte
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		n, err := io.Copy(h, c)
		got <- result{sum: [32]byte(h.Sum(nil)), n: n, err: err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(&prng{r: rand.NewChaCha8([32]byte{1})}, size), h)
	if _, err := io.CopyBuffer(c, src, make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.n != size || r.sum != [32]byte(h.Sum(nil)) {
			t.Fatalf("received %d bytes with SHA-256 %x, sent %d with %x", r.n, r.sum, size, h.Sum(nil))
		}
	case <-time.After(120 * time.Second):
		t.Fatal("stream did not finish")
	}
}

type prng struct{ r *rand.ChaCha8 }

func (p *prng) Read(b []byte) (int, error) { return p.r.Read(b) }

func TestNetstackTCPStream(t *testing.T) {
	a, b := netstackPair(t, 2044)
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	start := time.Now()
	streamTCP(t, a, b, "10.77.0.2:5201", size)
	d := time.Since(start)
	t.Logf("%d MiB over TCP between two netstacks at MTU 2044: %v (%.0f MB/s)", size>>20, d, float64(size)/d.Seconds()/1e6)
}

func TestNetstackUDP(t *testing.T) {
	a, b := netstackPair(t, 2044)
	for _, tc := range []struct{ network, listen, dial string }{
		{"udp4", "10.77.0.2:5300", "10.77.0.2:5300"},
		{"udp6", "[fe80::2]:5300", "[fe80::2]:5300"},
		{"udp", ":5301", "10.77.0.2:5301"},
	} {
		t.Run(tc.network, func(t *testing.T) {
			pc, err := b.ListenPacket(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			go func() {
				buf := make([]byte, 2000)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					pc.WriteTo(bytes.ToUpper(buf[:n]), from)
				}
			}()
			c, err := a.DialContext(context.Background(), tc.network, tc.dial)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("ping over netstack")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 100)
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "PING OVER NETSTACK" {
				t.Fatalf("reply %q, %v", buf[:n], err)
			}
		})
	}
}

func TestNetstackTCP6AndListenAny(t *testing.T) {
	a, b := netstackPair(t, 2044)
	ln, err := b.Listen("tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	for _, addr := range []string{"[fe80::2]:7000", "10.77.0.2:7000"} {
		c, err := a.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := []byte("echo via " + addr)
		c.Write(msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, msg) {
			t.Fatalf("echo via %s: %q, %v", addr, buf, err)
		}
		c.Close()
	}
}

func TestNetstackDevice(t *testing.T) {
	ns, err := NewNetstack(NetstackConfig{MTU: 1280, Addrs: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Name() != "netstack0" || ns.MTU() != 1280 || ns.BatchSize() < 1 {
		t.Fatalf("name %q MTU %d batch %d", ns.Name(), ns.MTU(), ns.BatchSize())
	}
	// An echo request written in comes back as a reply.
	req := icmp4Echo(netip.MustParseAddr("10.77.0.9"), netip.MustParseAddr("10.77.0.1"), 8, 7, 1, []byte("hello"))
	writePacket(t, ns, req)
	rep := readUntil(t, ns, 5*time.Second, func(p []byte) bool {
		v, proto, m := ipProto(p)
		return v == 4 && proto == 1 && len(m) > 0 && m[0] == 0
	})
	want := icmp4Echo(netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.9"), 0, 7, 1, []byte("hello"))
	if !bytes.Equal(rep[20:], want[20:]) {
		t.Fatalf("echo reply %x, want %x", rep, want)
	}
	// Junk is dropped and counted, not an error.
	junk := make([]byte, MinOffset+3)
	if n, err := ns.Write([][]byte{junk}, MinOffset); n != 1 || err != nil || ns.Dropped() != 1 {
		t.Fatalf("junk write: %d, %v, dropped %d", n, err, ns.Dropped())
	}
	if err := ns.SetMTU(1500); err != nil || ns.MTU() != 1500 {
		t.Fatalf("SetMTU: %v, MTU %d", err, ns.MTU())
	}
	if _, err := ns.DialContext(context.Background(), "tcp", "example.com:80"); err == nil {
		t.Errorf("dial by name accepted")
	}
	if _, err := ns.Listen("udp", ":1"); err == nil {
		t.Errorf("Listen udp accepted")
	}
	closeWhileReading(t, "Read", func() error {
		_, err := ns.Read([][]byte{make([]byte, 2000)}, []int{0}, 0)
		return err
	}, func() error { ns.Close(); return nil })
	if _, err := ns.Write([][]byte{make([]byte, 40)}, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

// BenchmarkNetstackRelay measures TCP throughput between two netstacks joined by Copy.
func BenchmarkNetstackRelay(b *testing.B) {
	for _, mtu := range []int{2044, 65520} {
		b.Run(mtuName(mtu), func(b *testing.B) {
			x, y := netstackPair(b, mtu)
			ln, err := y.Listen("tcp4", "10.77.0.2:5201")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan int64, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- 0
					return
				}
				n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
				c.Close()
				done <- n
			}()
			c, err := x.DialContext(context.Background(), "tcp4", "10.77.0.2:5201")
			if err != nil {
				b.Fatal(err)
			}
			chunk := make([]byte, 256<<10)
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			if n := <-done; n != int64(b.N)*int64(len(chunk)) {
				b.Fatalf("received %d of %d bytes", n, int64(b.N)*int64(len(chunk)))
			}
		})
	}
}

func mtuName(mtu int) string { return fmt.Sprintf("MTU%d", mtu) }
