package rc_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/wire"
)

// TestACKPerBatch: SENDs that reach the responder in one batch are answered by one ACK
// (cumulative: the last one's PSN), and every one of them completes at the requester;
// the same SENDs arriving one batch each get an ACK each (hca.Packet.DeferKick).
func TestACKPerBatch(t *testing.T) {
	if hcatest.AttachedFromEnv() {
		t.Skip("attached devices may carry packets past the daemon's cables (direct rings)")
	}
	var (
		hold atomic.Bool
		mu   sync.Mutex
		held [][]byte
		next fabric.Link
		acks atomic.Int64
	)
	f, a, b := connect(t, connOpts{wrap: func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		switch {
		case i == 0 && d == fabric.AtoB: // a's requests, held while hold is set
			next = l
			return fabric.LinkFunc(func(pkts [][]byte) {
				if !hold.Load() {
					l.Send(pkts)
					return
				}
				mu.Lock()
				for _, p := range pkts {
					held = append(held, append([]byte(nil), p...))
				}
				mu.Unlock()
			})
		case i == 1 && d == fabric.AtoB: // b's responses, counted
			return fabric.LinkFunc(func(pkts [][]byte) {
				for _, p := range pkts {
					var pk wire.Packet
					if pk.Parse(p) == nil && pk.BTH != nil && pk.BTH.OpCode() == wire.RCAcknowledge {
						acks.Add(1)
					}
				}
				l.Send(pkts)
			})
		}
		return l
	}})
	const n = 4
	for round, together := range []bool{true, false} {
		for k := range n {
			b.postRecv(t, uint64(k), k*256, 256)
		}
		hold.Store(true)
		for k := range n {
			a.post(t, hca.SendWR{WRID: uint64(k), Opcode: hca.WRSend, SGL: []hca.SGE{a.sge(k*256, 100)}, SendFlags: hca.SendSignaled})
		}
		hold.Store(false)
		mu.Lock()
		pkts := held
		held = nil
		mu.Unlock()
		if len(pkts) != n {
			t.Fatalf("round %d: %d request packets held, want %d", round, len(pkts), n)
		}
		before := acks.Load()
		if together {
			next.Send(pkts)
		} else {
			for _, p := range pkts {
				next.Send([][]byte{p})
			}
		}
		for _, cq := range []*hca.CQ{a.scq, b.rcq} {
			wcs := drain(t, f, cq, n)
			if len(wcs) != n {
				t.Fatalf("round %d: %d completions, want %d", round, len(wcs), n)
			}
			for _, wc := range wcs {
				if wc.Status != hca.WCSuccess {
					t.Fatalf("round %d: completion %+v", round, wc)
				}
			}
		}
		want := int64(1)
		if !together {
			want = n
		}
		if got := acks.Load() - before; got != want {
			t.Fatalf("round %d (one batch: %v): %d ACKs, want %d", round, together, got, want)
		}
	}
}
