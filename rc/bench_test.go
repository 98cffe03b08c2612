package rc_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rc"
)

// BenchmarkMemcpy64K is the baseline for BenchmarkRCWriteBW: one copy of the message.
func BenchmarkMemcpy64K(b *testing.B) {
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}

// BenchmarkRCWriteBW is ib_write_bw between two in-process HCAs: RDMA WRITEs of 64 KiB
// at MTU 4096, up to 32 outstanding, every 16th signaled; "window" writes through a type
// 2 memory window over the responder's region (its R_Key checks against the window's);
// "copy" without payloads by reference.
func BenchmarkRCWriteBW(b *testing.B) {
	for _, loss := range []float64{0, 1e-9, 0.01} {
		b.Run(fmt.Sprintf("64KiB/loss=%g", loss), func(b *testing.B) { benchWrite(b, 64<<10, loss, false) })
	}
	b.Run("64KiB/window", func(b *testing.B) { benchWrite(b, 64<<10, 0, true) })
	// The baseline for payloads by reference (wire.SetPayloadRef): the same writes with
	// every packet carrying its bytes.
	b.Run("64KiB/copy", func(b *testing.B) {
		hca.SetPayloadRefs(false)
		defer hca.SetPayloadRefs(true)
		benchWrite(b, 64<<10, 0, false)
	})
}

func benchWrite(b *testing.B, size int, loss float64, window bool) {
	var wrap func(int, fabric.Direction, fabric.Link) fabric.Link
	if loss > 0 {
		wrap = func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
			return fabric.NewFaultLink(l, fabric.FaultConfig{Seed: uint64(7 + 2*i + int(d)), Loss: loss})
		}
	}
	// Real time; the local ACK timeout 4.096 µs × 2^6 ≈ 262 µs only fires when the last
	// packets before a pause are lost.
	_, a, r := connect(b, connOpts{bufLen: size, timeout: 6, retry: 7, wrap: wrap, depth: 64, access: mwAccess})
	rkey := r.mr.RKey()
	if window {
		rkey = r.bindType2(b, 0, size, hca.AccessRemoteWrite)
	}
	wr := []hca.SendWR{{Opcode: hca.WRRDMAWrite, SGL: []hca.SGE{a.sge(0, size)}, RemoteAddr: r.mr.Addr(), RKey: rkey}}
	const outstanding = 32
	var wcs [16]hca.WC
	posted, sigPosted, sigDone := 0, 0, 0
	var idle time.Duration
	reap := func() {
		t0 := time.Now()
		defer func() { idle += time.Since(t0) }()
		n := a.scq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			if wc.Status != hca.WCSuccess {
				pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				b.Fatalf("%s\na: %s\nr: %s\na counters %v\nr counters %v", wc.Status, rc.DebugState(a.qp), rc.DebugState(r.qp), a.port.Counters().Snapshot(), r.port.Counters().Snapshot())
			}
			sigDone++
		}
		if n == 0 {
			runtime.Gosched()
		}
	}
	post := func(signaled bool) {
		wr[0].SendFlags = 0
		if signaled {
			wr[0].SendFlags = hca.SendSignaled
			sigPosted++
		}
		if _, err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		posted++
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for posted-16*sigDone >= outstanding {
			reap()
		}
		post(posted%16 == 15)
	}
	post(true) // wait for everything to land
	for deadline := time.Now().Add(30 * time.Second); sigDone < sigPosted; {
		reap()
		if time.Now().After(deadline) {
			b.Fatal("writes did not complete")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	sent := a.port.Counters().Get(hca.CntXmitPkts)
	b.ReportMetric(float64(sent)/float64((b.N+1)*size/4096), "pkts/needed")
	b.ReportMetric(idle.Seconds()/b.Elapsed().Seconds()*100, "%waiting")
	st := rc.ConnStats(a.qp)
	b.ReportMetric(float64(st.Timeouts.Load())*1000/float64(b.N+1), "timeouts/1k-msgs")
	b.ReportMetric(float64(st.SeqNAKs.Load())*1000/float64(b.N+1), "naks/1k-msgs")
}

// BenchmarkRCSendLatency is ib_send_lat: 8-byte SENDs bounced between two goroutines, one
// per QP, each busy-polling its receive CQ. One op is one round trip; the median of the
// round trips is reported as p50-ns.
func BenchmarkRCSendLatency(b *testing.B) {
	_, a, r := connect(b, connOpts{bufLen: 4096})
	const depth = 64
	for i := 0; i < depth; i++ {
		a.postRecv(b, uint64(i), 64+i*16, 16)
		r.postRecv(b, uint64(i), 64+i*16, 16)
	}
	rtts := make([]int64, b.N)
	var stop atomic.Bool
	var wg sync.WaitGroup
	echo := func(s *side, first bool, n int) {
		defer wg.Done()
		wr := []hca.SendWR{{Opcode: hca.WRSend, SGL: []hca.SGE{s.sge(0, 8)}, SendFlags: hca.SendInline}}
		var wcs [4]hca.WC
		rw := []hca.RecvWR{{SGL: []hca.SGE{{}}}}
		sent := 0
		for i := 0; i < n; i++ {
			start := time.Now()
			if first {
				if sent++; sent%32 == 0 {
					wr[0].SendFlags = hca.SendInline | hca.SendSignaled
				} else {
					wr[0].SendFlags = hca.SendInline
				}
				if _, err := s.qp.PostSend(wr); err != nil {
					panic(err)
				}
			}
			for spins := 0; ; spins++ {
				if s.rcq.Poll(wcs[:1]) == 1 {
					break
				}
				if stop.Load() {
					return
				}
				if spins%64 == 63 {
					runtime.Gosched() // let the peer run if both share a P
				}
			}
			rw[0].WRID = wcs[0].WRID
			rw[0].SGL[0] = s.sge(64+int(wcs[0].WRID)*16, 16)
			if _, err := s.qp.PostRecv(rw); err != nil {
				panic(err)
			}
			if first {
				rtts[i] = int64(time.Since(start))
			} else {
				if sent++; sent%32 == 0 {
					wr[0].SendFlags = hca.SendInline | hca.SendSignaled
				} else {
					wr[0].SendFlags = hca.SendInline
				}
				if _, err := s.qp.PostSend(wr); err != nil {
					panic(err)
				}
			}
			s.scq.Poll(wcs[:])
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	wg.Add(2)
	go echo(r, false, b.N)
	echo(a, true, b.N)
	stop.Store(true)
	wg.Wait()
	b.StopTimer()
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	b.ReportMetric(float64(rtts[len(rtts)/2]), "p50-ns")
	b.ReportMetric(float64(rtts[len(rtts)*99/100]), "p99-ns")
}
