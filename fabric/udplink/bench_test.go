package udplink

import (
	"net"
	"sync/atomic"
	"time"

	"fmt"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/wire"
	"testing"

	"github.com/pibgw/pibgw/fabric/fabrictest"
)

// BenchmarkReceive runs the listener's receive path over a batch of 32 data datagrams as
// recvmmsg returns them: checks (tag, header, replay window, VCRC) and delivery to a port.
// One op is one packet. The baseline sub-benchmark only computes the VCRC of the same
// packets, the least a receiver must do per packet.
func BenchmarkReceive(b *testing.B) {
	for _, size := range []int{64, 4096} {
		p := pkt(2, 1, size-32)
		b.Run(fmt.Sprintf("%dB/baseline=vcrc", size), func(b *testing.B) {
			h := newRxHarness(b, nil, &fabrictest.Sink{})
			h.connect()
			d := h.data(p)
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if !checkVCRC(d[HeaderLen:]) {
					b.Fatal("bad VCRC")
				}
			}
		})
		for _, psk := range [][]byte{nil, testPSK} {
			name := map[bool]string{false: "allowlist", true: "psk"}[psk != nil]
			b.Run(fmt.Sprintf("%dB/%s", size, name), func(b *testing.B) {
				sink := &fabrictest.Sink{}
				h := newRxHarness(b, psk, sink)
				h.connect()
				var ds [][]byte
				for range 32 {
					ds = append(ds, h.data(p))
				}
				h.inject(ds...)
				bt := h.b
				sp := h.session()
				b.ReportAllocs()
				b.SetBytes(int64(len(p)))
				b.ResetTimer()
				for n := 0; n < b.N; n += 32 {
					sp.win = replayWindow{} // the same sequence numbers again
					h.l.e.receive(bt)
				}
				b.StopTimer()
				if sink.Packets.Load() < uint64(b.N) {
					b.Fatalf("delivered %d of %d", sink.Packets.Load(), b.N)
				}
			})
		}
	}
}

func checkVCRC(b []byte) bool { return len(b) > 2 && vcrcOK(b) }

// BenchmarkSend sends packets on a session to a loopback socket: encode, finalize, VCRC,
// tag, sendmmsg. One op is one packet. The baseline sends the same datagrams, already
// encoded, one write(2) each (net.UDPConn.WriteToUDPAddrPort).
func BenchmarkSend(b *testing.B) {
	for _, size := range []int{64, 4096} {
		p := pkt(2, 1, size-32)
		b.Run(fmt.Sprintf("%dB/baseline=write", size), func(b *testing.B) {
			h := newRxHarness(b, nil, &fabrictest.Sink{})
			h.connect()
			d := h.data(p)
			uc, to := h.l.e.uc, h.src
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := uc.WriteToUDPAddrPort(d, to); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, psk := range [][]byte{nil, testPSK} {
			name := map[bool]string{false: "allowlist", true: "psk"}[psk != nil]
			b.Run(fmt.Sprintf("%dB/%s", size, name), func(b *testing.B) {
				h := newRxHarness(b, psk, &fabrictest.Sink{})
				h.connect()
				sp := h.session()
				pkts := make([][]byte, 32)
				for i := range pkts {
					pkts[i] = p
				}
				sp.Send(pkts) // warm the batch free list
				b.ReportAllocs()
				b.SetBytes(int64(len(p)))
				b.ResetTimer()
				for n := 0; n < b.N; n += 32 {
					sp.Send(pkts)
				}
				b.StopTimer()
				if c := h.l.Counters(); c.Dropped(DropTxError) != 0 {
					b.Fatalf("send errors: %+v", c)
				}
			})
		}
	}
}

// echoPort sends back, on its link, every packet it receives, with DLID and SLID swapped.
type echoPort struct{ link atomic.Pointer[fabric.Link] }

func (e *echoPort) Attach(l fabric.Link) {
	if l == nil {
		e.link.Store(nil)
		return
	}
	e.link.Store(&l)
}

func (e *echoPort) Receive(pkts [][]byte) {
	l := e.link.Load()
	if l == nil {
		return
	}
	for _, p := range pkts {
		d, s := wire.LRH(p).DLID(), wire.LRH(p).SLID()
		wire.LRH(p).SetDLID(s)
		wire.LRH(p).SetSLID(d)
	}
	(*l).Send(pkts)
}

// signalPort tells, on got, that packets arrived.
type signalPort struct {
	echoPort
	got chan struct{}
}

func (s *signalPort) Receive([][]byte) { s.got <- struct{}{} }

// BenchmarkRoundTrip is one 64-byte packet from host A through the switch to host B and
// back, every hop a UDP link on loopback (four datagrams): the latency a multi-host
// fabric adds. The baseline is a UDP echo between two plain sockets (two datagrams).
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("baseline=udp-echo", func(b *testing.B) {
		srv, _ := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		cli, _ := net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
		defer srv.Close()
		defer cli.Close()
		go func() {
			buf := make([]byte, 2048)
			for {
				n, a, err := srv.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				srv.WriteToUDPAddrPort(buf[:n], a)
			}
		}()
		msg, buf := make([]byte, 64), make([]byte, 2048)
		for b.Loop() {
			cli.Write(msg)
			cli.Read(buf)
		}
	})
	b.Run("udplink", func(b *testing.B) {
		sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 2})
		l, err := Listen("127.0.0.1:0", AllPorts(sw), Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		a, echo := &signalPort{got: make(chan struct{}, 1)}, &echoPort{}
		da, _ := Dial(l.Addr().String(), 1, a, Config{})
		db, _ := Dial(l.Addr().String(), 2, echo, Config{})
		defer da.Close()
		defer db.Close()
		for !da.Status().Up || !db.Status().Up {
			time.Sleep(time.Millisecond)
		}
		pa, pb := da.Status().SwitchPort, db.Status().SwitchPort
		sw.SetLFT(uint16(pa), uint8(pa))
		sw.SetLFT(uint16(pb), uint8(pb))
		p := pkt(uint16(pb), uint16(pa), 32)
		link := *a.link.Load()
		pkts := [][]byte{p}
		for b.Loop() {
			link.Send(pkts)
			<-a.got
		}
	})
}

// The receive and send paths allocate nothing per packet once warm (with and without a
// PSK). Under the race detector sync primitives allocate, so the test does not apply.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, psk := range [][]byte{nil, testPSK} {
		sink := &fabrictest.Sink{}
		h := newRxHarness(t, psk, sink)
		h.connect()
		var ds [][]byte
		for range 32 {
			ds = append(ds, h.data(pkt(2, 1, 1000)))
		}
		h.inject(ds...)
		sp := h.session()
		if n := testing.AllocsPerRun(50, func() {
			sp.win = replayWindow{}
			h.l.e.receive(h.b)
		}); n != 0 {
			t.Errorf("psk %v: receive: %v allocs per batch", psk != nil, n)
		}
		pkts := make([][]byte, 32)
		for i := range pkts {
			pkts[i] = pkt(2, 1, 1000)
		}
		sp.Send(pkts)
		if n := testing.AllocsPerRun(50, func() { sp.Send(pkts) }); n != 0 {
			t.Errorf("psk %v: send: %v allocs per batch", psk != nil, n)
		}
	}
}
