package fabric_test

import (
	"fmt"
	"io"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

// benchPkt returns a UD packet of exactly size bytes (LRH through ICRC).
func benchPkt(dlid uint16, size int) []byte {
	const hdrs = 8 + 12 + 8 + 4
	return fabrictest.UD{DLID: dlid, SLID: 1, DestQP: 2, QKey: 3, Payload: make([]byte, size-hdrs)}.Build()
}

// BenchmarkForward sends packets host → cable → switch → cable → sink. One op is one
// packet; batch is the number of packets per Send.
func BenchmarkForward(b *testing.B) {
	for _, size := range []int{64, 4096} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("%dB/batch=%d", size, batch), func(b *testing.B) {
				sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 4})
				src, dst := &fabrictest.Sink{}, &fabrictest.Sink{}
				fabric.NewCable(src, sw.Port(1))
				fabric.NewCable(dst, sw.Port(2))
				sw.SetLFT(0x20, 2)
				pkts := make([][]byte, batch)
				for i := range pkts {
					pkts[i] = benchPkt(0x20, size)
				}
				link := src.Link()
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for n := 0; n < b.N; n += batch {
					link.Send(pkts)
				}
				b.StopTimer()
				if dst.Packets.Load() == 0 {
					b.Fatal("nothing forwarded")
				}
			})
		}
	}
}

// BenchmarkForwardParallel has every goroutine send into the same switch port.
func BenchmarkForwardParallel(b *testing.B) {
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 4})
	src, dst := &fabrictest.Sink{}, &fabrictest.Sink{}
	fabric.NewCable(src, sw.Port(1))
	fabric.NewCable(dst, sw.Port(2))
	sw.SetLFT(0x20, 2)
	link := src.Link()
	b.ReportAllocs()
	b.SetBytes(64 * 32)
	b.RunParallel(func(pb *testing.PB) {
		pkts := make([][]byte, 32)
		for i := range pkts {
			pkts[i] = benchPkt(0x20, 64)
		}
		for pb.Next() {
			link.Send(pkts)
		}
	})
}

// BenchmarkCaptureWrite is the capture writer's throughput to io.Discard, VCRC included.
// One op is one packet.
func BenchmarkCaptureWrite(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			cw := fabric.NewCaptureWriter(io.Discard, fabric.CaptureOptions{})
			pkts := make([][]byte, 32)
			for i := range pkts {
				pkts[i] = benchPkt(0x20, size)
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for n := 0; n < b.N; n += len(pkts) {
				cw.WritePackets(pkts)
			}
		})
	}
}

// BenchmarkFaultPass is a FaultLink with every fault possible but rare.
func BenchmarkFaultPass(b *testing.B) {
	f := fabric.NewFaultLink(fabric.LinkFunc(func([][]byte) {}), fabric.FaultConfig{Seed: 1, Loss: 0.01, Corrupt: 0.01, Reorder: 0.01, Duplicate: 0.01})
	pkts := make([][]byte, 32)
	for i := range pkts {
		pkts[i] = benchPkt(0x20, 256)
	}
	b.ReportAllocs()
	b.SetBytes(256)
	for n := 0; n < b.N; n += len(pkts) {
		f.Send(pkts)
	}
}

// The forwarding path allocates nothing: cable, switch (unicast and multicast), cable.
func TestForwardNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 4})
	src, d2, d3 := &fabrictest.Sink{}, &fabrictest.Sink{}, &fabrictest.Sink{}
	fabric.NewCable(src, sw.Port(1))
	fabric.NewCable(d2, sw.Port(2))
	fabric.NewCable(d3, sw.Port(3))
	sw.SetLFT(0x20, 2)
	sw.SetMFT(0xC001, fabric.MakePortMask(1, 2, 3))
	pkts := [][]byte{benchPkt(0x20, 64), benchPkt(0x20, 64), benchPkt(0xC001, 64), benchPkt(0x99, 64), benchPkt(0x20, 4096)}
	link := src.Link()
	if n := testing.AllocsPerRun(1000, func() { link.Send(pkts) }); n != 0 {
		t.Fatalf("%.1f allocations per forwarded batch", n)
	}
	if d2.Packets.Load() == 0 || d3.Packets.Load() == 0 {
		t.Fatal("nothing forwarded")
	}
}

// BenchmarkSMPDirected sends a directed-route SubnGet(NodeInfo) from a port through a
// chain of switches to the last one, whose SMA answers back along the return path: the
// SM's sweep on an in-process fabric, one SMI per hop each way. One op is one SMP and its
// response; ns/hop divides by the switches traversed (twice the chain's length but one).
func BenchmarkSMPDirected(b *testing.B) {
	for _, hops := range []int{1, 5} {
		b.Run(fmt.Sprintf("hops=%d", hops), func(b *testing.B) {
			src := &fabrictest.Sink{}
			sws := make([]*fabric.Switch, hops)
			path := []uint8{1}
			for i := range sws {
				sws[i] = fabric.NewSwitch(fabric.SwitchConfig{Ports: 4})
				if i == 0 {
					fabric.NewCable(src, sws[0].Port(1))
				} else {
					fabric.NewCable(sws[i-1].Port(2), sws[i].Port(1))
					path = append(path, 2)
				}
			}
			// ICRC pending, as the SM's HCA sends it in process (no CRC computed per hop).
			smp := fabrictest.DRSMP(1, wire.AttrNodeInfo, path...)
			wire.SetICRCPending(smp)
			pkts := [][]byte{smp}
			link := src.Link()
			// The CPU time of the benchmark's thread, beside the wall time: on a machine
			// shared with other work the two differ, and the CPU time is what a change
			// to the path changes.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := threadCPU()
			for range b.N {
				link.Send(pkts)
			}
			cpu := threadCPU() - cpu0
			b.StopTimer()
			if got := src.Packets.Load(); got != uint64(b.N) {
				b.Fatalf("%d responses to %d SMPs", got, b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*hops-1), "ns/hop")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(2*hops-1), "cpu-ns/hop")
		})
	}
}

// threadCPU is the CPU time the calling OS thread has used (RUSAGE_THREAD).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
