package ud_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
)

// BenchmarkUDSendRecv measures UD messages from one HCA through the switch into another,
// polled from the receive CQ: one sender goroutine (post_send, reaping its CQ every 64
// sends) and one receiver goroutine (poll_cq, re-post the buffer), with the receive queue
// depth as the flow-control window, as ib_send_bw -c UD runs.
func BenchmarkUDSendRecv(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchUD(b, size) })
	}
}

// BenchmarkMemcpy is the baseline: copying the same message sizes once.
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func benchUD(b *testing.B, size int) {
	const depth = 512
	f := hcatest.NewFabric(b, 2, hcatest.Options{})
	s := newEndpoint(b, f.Devs[0], size, hca.AccessLocalWrite)
	r := newEndpoint(b, f.Devs[1], depth*(size+40), hca.AccessLocalWrite)
	var err error
	ch := r.ctx.CreateCompChannel()
	if r.rcq, err = r.ctx.CreateCQ(depth*2, ch); err != nil {
		b.Fatal(err)
	}
	rqp, err := r.pd.CreateQP(hca.QPInitAttr{SendCQ: r.scq, RecvCQ: r.rcq, QPType: hca.QPTypeUD,
		Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: depth, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	toRTS(b, rqp, testQKey)
	recvs := make([]hca.RecvWR, depth)
	sges := make([]hca.SGE, depth)
	for i := range recvs {
		sges[i] = hca.SGE{Addr: r.mr.Addr() + uint64(i*(size+40)), Length: uint32(size + 40), LKey: r.mr.LKey()}
		recvs[i] = hca.RecvWR{WRID: uint64(i), SGL: sges[i : i+1]}
	}
	if _, err := rqp.PostRecv(recvs); err != nil {
		b.Fatal(err)
	}
	ah := s.ah(b, 2, false, [16]byte{})
	wrs := []hca.SendWR{{Opcode: hca.WRSend,
		SGL: []hca.SGE{{Addr: s.mr.Addr(), Length: uint32(size), LKey: s.mr.LKey()}},
		AH:  ah, RemoteQPN: rqp.Num(), RemoteQKey: testQKey}}

	var credits atomic.Int64
	credits.Store(depth)
	var received atomic.Int64
	total := int64(b.N)
	var wg sync.WaitGroup
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	wg.Add(1)
	go func() { // receiver
		defer wg.Done()
		var wcs [32]hca.WC
		var repost [32]hca.RecvWR
		idle := 0
		for received.Load() < total {
			n := r.rcq.Poll(wcs[:])
			if n == 0 {
				// Busy-poll briefly as RDMA applications do, then sleep on the
				// completion channel (ibv_req_notify_cq + ibv_get_cq_event), so an idle
				// receiver gives its CPU back to the sender on a busy machine.
				if idle++; idle < 32 {
					backoff()
					continue
				}
				if err := r.rcq.ReqNotify(false); err != nil {
					panic(err)
				}
				if r.rcq.Poll(wcs[:1]) == 0 && received.Load() < total {
					select {
					case <-ch.Events():
						r.rcq.AckEvents(1)
					case <-time.After(10 * time.Millisecond):
					}
				} else {
					n = 1
				}
				idle = 0
				if n == 0 {
					continue
				}
			}
			idle = 0
			for i := 0; i < n; i++ {
				if wcs[i].Status != hca.WCSuccess {
					panic(wcs[i].Status.String())
				}
				repost[i] = recvs[wcs[i].WRID]
			}
			if _, err := rqp.PostRecv(repost[:n]); err != nil {
				panic(err)
			}
			received.Add(int64(n))
			credits.Add(int64(n))
		}
	}()
	var swc [16]hca.WC
	local := int64(0) // credits taken from the shared counter, spent without touching it
	for i := 0; i < b.N; i++ {
		for local == 0 {
			if local = credits.Swap(0); local == 0 {
				runtime.Gosched()
			}
		}
		local--
		wrs[0].SendFlags = 0
		if i%64 == 63 {
			wrs[0].SendFlags = hca.SendSignaled
		}
		if _, err := s.qp.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		s.scq.Poll(swc[:])
	}
	wg.Wait()
	b.StopTimer()
	if drops := r.port.Counters().Get(hca.CntDropNoRecvWQE); drops != 0 {
		b.Fatalf("%d messages dropped for lack of a receive WQE", drops)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

var backoffSink int

// backoff spins briefly without touching shared memory, so an idle poller does not pull
// the CQ's cache line away from the producer on every iteration: completions then arrive
// in batches.
//
//go:noinline
func backoff() {
	x := backoffSink
	for i := 0; i < 200; i++ {
		x = x*31 + i
	}
	backoffSink = x
}
