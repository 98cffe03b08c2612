package ipoib_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/tun"
)

// TestNetstackEndToEnd is issue 5's acceptance point 5, with no privileges: a switch,
// two HCAs, the SM and SA, on real time; an IPoIB interface on each HCA whose IP side is
// a userspace gVisor netstack (tun.NewNetstack); and a TCP stream of 64 MiB (8 MiB with
// -short) from one stack to the other over the fabric, dialled and accepted through the
// netstacks' net.Conn API, arriving with the same SHA-256.
func TestNetstackEndToEnd(t *testing.T) {
	clk := clock.Real{}
	f := satest.OneSwitch(t, 2, satest.Options{Clock: clk})
	sm := f.StartSM(t, sa.Config{SweepInterval: -1})
	agent, err := sa.StartSA(sm, sa.AgentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })

	stacks := make([]*tun.Netstack, 2)
	ifs := make([]*ipoib.Interface, 2)
	for i, addr := range []string{"10.30.0.1/24", "10.30.0.2/24"} {
		name := []string{"ib0", "ib1"}[i]
		prefix := netip.MustParsePrefix(addr)
		port := f.HCAs[i].Port(1)
		ll := netip.PrefixFrom(ipoib.LinkLocalFromGUID(port.GUID()), 64)
		ns, err := tun.NewNetstack(tun.NetstackConfig{Name: name, MTU: 2044, Addrs: []netip.Prefix{prefix, ll}})
		if errors.Is(err, tun.ErrNetstackOmitted) {
			t.Skip("built with pibgw_omit_netstack: no userspace netstack")
		}
		if err != nil {
			t.Fatal(err)
		}
		stacks[i] = ns
		cl, err := sa.NewClient(port, sa.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		ifc, err := ipoib.New(ipoib.Config{
			Name: name, Port: port, PKey: 0xFFFF, SA: cl, Device: ns,
			Addrs: []netip.Prefix{prefix, ll}, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			ns.Close()
			t.Fatal(err)
		}
		ifs[i] = ifc
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ifc.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			ifc.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: Run: %v", name, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%s: Run did not return", name)
			}
			ns.Close()
		})
	}
	for deadline := time.Now().Add(10 * time.Second); !ifs[0].State().Up || !ifs[1].State().Up; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("interfaces not up: %+v, %+v", ifs[0].State(), ifs[1].State())
		}
	}

	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	ln, err := stacks[1].Listen("tcp4", "10.30.0.2:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		n   int64
		sum [32]byte
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
		got <- result{n, [32]byte(h.Sum(nil)), err}
	}()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := stacks[0].DialContext(ctx, "tcp4", "10.30.0.2:7000")
	if err != nil {
		t.Fatalf("dial 10.30.0.2:7000 over IPoIB: %v", err)
	}
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{5})
	src := io.TeeReader(io.LimitReader(readerFunc(rng.Read), size), h)
	if _, err := io.CopyBuffer(c, src, make([]byte, 256<<10)); err != nil {
		t.Fatalf("sending: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("receiving: %v", r.err)
		}
		if r.n != size || r.sum != [32]byte(h.Sum(nil)) {
			t.Fatalf("received %d bytes with SHA-256 %x; sent %d with %x", r.n, r.sum, size, h.Sum(nil))
		}
	case <-time.After(120 * time.Second):
		t.Fatal("the stream did not finish in 120 s")
	}
	d := time.Since(start)
	t.Logf("%d MiB over IPoIB between two netstacks in %v (%.0f MB/s)", size>>20, d.Round(time.Millisecond), float64(size)/d.Seconds()/1e6)

	// It went over the fabric: ARP resolved each side, and the counters saw the stream.
	a, b := ifs[0].Info().Counters, ifs[1].Info().Counters
	if a["tx_bytes"] < uint64(size) || b["rx_bytes"] < uint64(size) || a["neighbors_resolved"] == 0 {
		t.Errorf("counters: ib0 %v\nib1 %v", a, b)
	}
	var found bool
	for _, n := range ifs[0].Neighbors() {
		found = found || n.IP == netip.MustParseAddr("10.30.0.2") && n.State == "REACHABLE"
	}
	if !found {
		t.Errorf("ib0's neighbours lack 10.30.0.2: %+v", ifs[0].Neighbors())
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }
