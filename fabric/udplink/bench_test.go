package udplink

import (
	"fmt"
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
