package rc_test

import (
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
)

// pacedLink delivers at most perTick packets each time the clock moves by tick: a slow
// link.
type pacedLink struct {
	mu    sync.Mutex
	inner fabric.Link
	q     [][]byte
}

func (l *pacedLink) Send(pkts [][]byte) {
	l.mu.Lock()
	for _, p := range pkts {
		l.q = append(l.q, append([]byte(nil), p...))
	}
	l.mu.Unlock()
}

func (l *pacedLink) tick(n int) {
	l.mu.Lock()
	if n > len(l.q) {
		n = len(l.q)
	}
	out := l.q[:n:n]
	l.q = l.q[n:]
	l.mu.Unlock()
	if len(out) > 0 {
		l.inner.Send(out)
	}
}

// A long READ whose responses keep arriving must not time out: each response shows
// forward progress.
func TestRCLongReadKeepsTimer(t *testing.T) {
	clk := newFakeClock()
	var paced *pacedLink
	wrap := func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if i == 1 && d == fabric.AtoB { // responder -> switch
			paced = &pacedLink{inner: l}
			return paced
		}
		return l
	}
	// timeout 10: 4.2 ms; 1 MiB at MTU 256 is 4096 responses, 64 per 100 µs: 6.4 ms.
	_, a, b := connect(t, connOpts{clk: clk, timeout: 10, mtu: hca.MTU256, wrap: wrap})
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRRDMARead, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 1<<20)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	var wc [1]hca.WC
	for i := 0; i < 100000; i++ {
		if a.scq.Poll(wc[:]) == 1 {
			if wc[0].Status != hca.WCSuccess {
				t.Fatalf("after %v: %s", time.Duration(i)*100*time.Microsecond, wc[0].Status)
			}
			t.Logf("done after %v", time.Duration(i)*100*time.Microsecond)
			return
		}
		paced.tick(64)
		clk.Advance(100 * time.Microsecond)
	}
	t.Fatal("no completion")
}
