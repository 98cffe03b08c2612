package attach_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
)

// Benchmarks between two attached processes, each beside the same benchmark in one
// process (both ends on in-process devices) and a memcpy baseline:
//
//	go test -run '^$' -bench . -benchmem ./attach
//
// "attached" runs three processes: a daemon (an in-process fabric serving the attach
// socket), this benchmark attached to it, and a peer process attached to it; their data
// packets take the direct rings between the two processes (direct.go), past the daemon.

// benchPair connects a local end on pib_1 to a peer on pib_0 running role ("target" or
// "echo") with a QP of type qp ("rc" or "ud"): in another process through the attach
// channel, or in this one.
func benchPair(b *testing.B, attached bool, qp, role string) (*end, map[string]string) {
	b.Helper()
	typ := hca.QPTypeRC
	if qp == "ud" {
		typ = hca.QPTypeUD
	}
	if !attached {
		f := hcatest.NewFabric(b, 2, hcatest.Options{Register: rc.Register})
		e, err := newEnd(f.Devs[1], typ, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		p, err := newEnd(f.Devs[0], typ, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.connect(p.port.LID(), p.qp.Num()); err != nil {
			b.Fatal(err)
		}
		if err := p.connect(e.port.LID(), e.qp.Num()); err != nil {
			b.Fatal(err)
		}
		if role == "echo" {
			for i := range 64 {
				p.postRecv(uint64(i))
			}
			go p.echo(e.port.LID(), e.qp.Num(), true)
			b.Cleanup(func() { p.qp.Modify(&hca.QPAttr{QPState: hca.QPStateErr}, hca.QPAttrState) })
		}
		return e, map[string]string{"addr": itoa(p.mr.Addr()), "rkey": itoa(uint64(p.mr.RKey())), "qpn": itoa(uint64(p.qp.Num()))}
	}
	path := startDaemonProc(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := attach.Dial(ctx, path, nil)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	e, err := newEnd(s.Device("pib_1"), typ, 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	_, info := startPeer(b, path, "pib_0", qp, role, e)
	return e, info
}

func itoa(v uint64) string { return string(appendUint(nil, v)) }

func appendUint(b []byte, v uint64) []byte {
	if v >= 10 {
		b = appendUint(b, v/10)
	}
	return append(b, byte('0'+v%10))
}

var modes = []struct {
	name     string
	attached bool
}{{"inproc", false}, {"attached", true}}

// BenchmarkRDMAWrite64K is ib_write_bw's pattern: 64 KiB RDMA WRITEs, 16 in flight.
func BenchmarkRDMAWrite64K(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			e, info := benchPair(b, m.attached, "rc", "target")
			b.SetBytes(64 << 10)
			b.ReportAllocs()
			b.ResetTimer()
			wc, done := writeStreamB(b, e, info, 16, b.N)
			if wc.Status != hca.WCSuccess || done != b.N {
				b.Fatalf("%d of %d writes, %+v", done, b.N, wc)
			}
		})
	}
	b.Run("memcpy", func(b *testing.B) {
		src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
		b.SetBytes(64 << 10)
		for b.Loop() {
			copy(dst, src)
		}
	})
}

// writeStreamB is writeStream for a benchmark: n writes, depth in flight.
func writeStreamB(b *testing.B, e *end, info map[string]string, depth, n int) (hca.WC, int) {
	const size = 64 << 10
	addr, rkey := num(info, "addr"), uint32(num(info, "rkey"))
	wrs := make([]hca.SendWR, 1)
	sgl := e.sge(0, size) // the verbs copy it: one for every WR
	post := func(id uint64) {
		wrs[0] = hca.SendWR{WRID: id, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: sgl,
			RemoteAddr: addr + (id%8)*size, RKey: rkey}
		if _, err := e.qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
	}
	next := 0
	for ; next < min(depth, n); next++ {
		post(uint64(next))
	}
	done := 0
	var wcs [16]hca.WC
	for done < n {
		k := e.cq.Poll(wcs[:])
		for _, wc := range wcs[:k] {
			if wc.Status != hca.WCSuccess {
				return wc, done
			}
			done++
			if next < n {
				post(uint64(next))
				next++
			}
		}
	}
	return hca.WC{}, done
}

// BenchmarkSendPingPong8 is ib_send_lat's pattern: an 8-byte RC SEND, the peer sends it
// back, one at a time; it reports the round trip's p50, p99 and maximum. ib_send_lat
// times the same round trip but prints half of it (perftest's print_report_lat divides
// SEND and WRITE latencies by an rtt_factor of 2): its t_typical compares with half of
// p50 here.
func BenchmarkSendPingPong8(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			e, info := benchPair(b, m.attached, "rc", "echo")
			qpn := uint32(num(info, "qpn"))
			for i := range 64 {
				e.postRecv(uint64(i))
			}
			lat := make([]time.Duration, 0, b.N)
			var wcs [4]hca.WC
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := e.send(uint64(i), 8, qpn); err != nil {
					b.Fatal(err)
				}
				for got := false; !got; {
					k := e.cq.Poll(wcs[:])
					for _, wc := range wcs[:k] {
						if wc.Status != hca.WCSuccess {
							b.Fatalf("%+v", wc)
						}
						if wc.Opcode == hca.WCRecv {
							got = true
							e.postRecv(wc.WRID)
						}
					}
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			// The longest round trip: one near the RC timeout (16.8 ms, timeout 12) or a
			// multiple of it was a retransmission.
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, "max-µs")
		})
	}
}

// BenchmarkUD64 moves 64-byte UD messages: the peer sends each one back, 64 are in
// flight; msgs/s counts the messages delivered, both ways.
func BenchmarkUD64(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			e, info := benchPair(b, m.attached, "ud", "echo")
			qpn := uint32(num(info, "qpn"))
			for i := range 256 {
				e.postRecv(uint64(i))
			}
			const window = 64
			sent, echoed := 0, 0
			var wcs [32]hca.WC
			b.ReportAllocs()
			b.ResetTimer()
			deadline := time.Now().Add(time.Minute)
			for echoed < b.N {
				for sent < b.N && sent-echoed < window {
					if err := e.send(uint64(sent), 64, qpn); err != nil {
						b.Fatal(err)
					}
					sent++
				}
				k := e.cq.Poll(wcs[:])
				for _, wc := range wcs[:k] {
					if wc.Status != hca.WCSuccess {
						b.Fatalf("%+v", wc)
					}
					if wc.Opcode == hca.WCRecv {
						echoed++
						e.postRecv(wc.WRID)
					}
				}
				if k == 0 && time.Now().After(deadline) {
					// UD is unreliable: a message lost for lack of a receive WQE is not
					// echoed; count it and move on.
					b.Fatalf("%d of %d echoed", echoed, sent)
				}
			}
			b.StopTimer()
			b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
