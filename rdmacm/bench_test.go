package rdmacm_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/pibgw/pibgw/rdmacm"
)

// Baselines in the same process: a loopback TCP net.Conn for the stream and ping-pong
// figures, and the RC transport's own WRITE throughput in the rc package.

func streamPair(b *testing.B, port string) (net.Conn, net.Conn) {
	h := newTestHost(&testing.T{}, 2)
	l, err := rdmacm.Listen(h, "10.0.0.2:"+port)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	c, err := rdmacm.Dial(context.Background(), h, "10.0.0.2:"+port)
	if err != nil {
		b.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	return c, s
}

func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	return c, s
}

func benchStream(b *testing.B, c, s net.Conn) {
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	done := make(chan struct{})
	go func() {
		io.CopyBuffer(io.Discard, s, make([]byte, 256<<10))
		close(done)
	}()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	<-done
}

func BenchmarkStream(b *testing.B) {
	b.Run("rdmacm", func(b *testing.B) { c, s := streamPair(b, "7600"); benchStream(b, c, s) })
	b.Run("tcp-loopback", func(b *testing.B) { c, s := tcpPair(b); benchStream(b, c, s) })
}

func benchPingPong(b *testing.B, c, s net.Conn) {
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64)
	rtts := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		rtts[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "p99-ns")
	c.Close()
	s.Close()
}

func BenchmarkPingPong64(b *testing.B) {
	b.Run("rdmacm", func(b *testing.B) { c, s := streamPair(b, "7601"); benchPingPong(b, c, s) })
	b.Run("tcp-loopback", func(b *testing.B) { c, s := tcpPair(b); benchPingPong(b, c, s) })
}

// BenchmarkConnect: one op is a whole connection's life on the CM — resolve, connect,
// accept, established on both sides, disconnect on both sides (TIMEWAIT is not waited
// for, as a server does not wait for it either).
func BenchmarkConnect(b *testing.B) {
	h := newTestHost(&testing.T{}, 2)
	sch, cch := rdmacm.CreateEventChannel(), rdmacm.CreateEventChannel()
	l, _ := rdmacm.CreateID(h, sch, nil, rdmacm.PSTCP)
	if err := l.BindAddr(netip.AddrPortFrom(h.addr(1), 7602)); err != nil {
		b.Fatal(err)
	}
	if err := l.Listen(128); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	next := func(ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
		for {
			e, err := ch.GetEvent(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if e.Type == rdmacm.EventTimewaitExit {
				e.Ack()
				continue
			}
			if e.Type != want {
				b.Fatalf("%v, want %v", e.Type, want)
			}
			e.Ack()
			return e
		}
	}
	dst := netip.AddrPortFrom(h.addr(1), 7602)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		id, _ := rdmacm.CreateID(h, cch, nil, rdmacm.PSTCP)
		id.ResolveAddr(netip.Addr{}, dst, time.Second)
		next(cch, rdmacm.EventAddrResolved)
		id.ResolveRoute(time.Second)
		next(cch, rdmacm.EventRouteResolved)
		id.Connect(rdmacm.ConnParam{QPNum: 0x100})
		r := next(sch, rdmacm.EventConnectRequest)
		r.ID.Accept(rdmacm.ConnParam{QPNum: 0x200})
		next(cch, rdmacm.EventConnectResponse)
		id.Establish()
		next(sch, rdmacm.EventEstablished)
		id.Disconnect()
		next(sch, rdmacm.EventDisconnected)
		r.ID.Disconnect()
		next(cch, rdmacm.EventDisconnected)
		id.Destroy()
		r.ID.Destroy()
	}
}
