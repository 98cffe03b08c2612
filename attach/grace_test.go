package attach

import (
	"context"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/shmring"
	"github.com/pibgw/pibgw/wire"
)

// TestGraceAfterSilentRequest is the receive goroutine's decision when its grace runs out
// after the program polled: a packet waiting in the ring that completes nothing at this
// end (an RDMA WRITE, READ request or atomic) is one the program's polls will not ask
// for — ib_write_lat polls for its own write's completion, then spins on its memory for
// the peer's — so the goroutine takes it in at once and the grace shrinks as for a
// program that stopped polling. Anything else waits for the program's next poll, and the
// grace stays. Before, the grace grew back to its longest whenever the program had polled,
// and ib_write_lat's writes each waited out 200 µs and more in some runs (t_typical
// 440–530 µs against 5–50).
func TestGraceAfterSilentRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     wire.Opcode
		silent bool
	}{
		{"RC RDMA WRITE Only", wire.RCRDMAWriteOnly, true},
		{"RC RDMA WRITE First", wire.RCRDMAWriteFirst, true},
		{"RC RDMA READ request", wire.RCRDMAReadRequest, true},
		{"RC Fetch&Add", wire.RCFetchAdd, true},
		{"UC RDMA WRITE Last", 0x20 | wire.RCRDMAWriteLast, true},
		{"RC SEND Only", wire.RCSendOnly, false},
		{"RC ACK", wire.RCAcknowledge, false},
		{"RC RDMA WRITE Only with immediate", wire.RCRDMAWriteOnlyImm, false},
		{"RC RDMA READ response", wire.RCRDMAReadResponseOnly, false},
		{"UD SEND Only", 0x64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := shmring.Create(shmring.MinSize)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s := &Session{rx: r} // no devices: a delivered packet goes nowhere
			s.grace.Store(int64(pollGrace))
			pkt := make([]byte, 64)
			wire.LRH(pkt).SetLNH(wire.LNHLocal)
			wire.BTH(pkt[wire.LRHLen:]).SetOpCode(tc.op)
			start := nanotime()
			if _, err := r.Write(context.Background(), [][]byte{pkt}, tag(0, 1), 0, false); err != nil {
				t.Fatal(err)
			}
			s.lastPoll.Store(nanotime()) // the program polled during the grace
			s.adaptGrace(start, pollGrace, s.rxRings(nil))

			grace := time.Duration(s.grace.Load())
			tail, head := r.Indexes()
			if taken := tail == head; tc.silent {
				if grace != pollGrace/2 || !taken {
					t.Errorf("grace %v, packet taken %v; want %v and taken", grace, taken, pollGrace/2)
				}
			} else if grace != pollGrace || taken {
				t.Errorf("grace %v, packet taken %v; want %v and left to the program", grace, taken, pollGrace)
			}
		})
	}
}
