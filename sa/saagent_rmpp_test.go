package sa_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
)

// saDropLink drops, once each, the SA RMPP packets drop selects.
type saDropLink struct {
	inner fabric.Link
	mu    sync.Mutex
	drop  func(r wire.RMPPHeader) bool
	done  map[[2]uint32]bool
	n     int
}

func (l *saDropLink) Send(pkts [][]byte) {
	out := pkts[:0:0]
	for _, p := range pkts {
		const off = wire.LRHLen + wire.BTHLen + wire.DETHLen
		if len(p) >= off+wire.MADLen && p[off+1] == wire.MgmtClassSubnAdm {
			r := wire.RMPPOf(wire.MAD(p[off : off+wire.MADLen]))
			k := [2]uint32{uint32(r.Type()), r.SegmentNumber()}
			l.mu.Lock()
			skip := r.Active() && l.drop(r) && !l.done[k]
			if skip {
				l.done[k] = true
				l.n++
			}
			l.mu.Unlock()
			if skip {
				continue
			}
		}
		out = append(out, p)
	}
	if len(out) > 0 {
		l.inner.Send(out)
	}
}

// TestSARMPPRecoversFromLoss loses two DATA segments of a NodeRecord GetTable on the
// way to the client and one ACK on the way back: the receiver re-ACKs, the sender goes
// back after its timeout, and the table arrives whole.
func TestSARMPPRecoversFromLoss(t *testing.T) {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := satest.SmallTree(t, satest.Options{Clock: fake})
	s := newSAFabric(t, f, sa.Config{SweepInterval: -1}, sa.ClientOptions{Timeout: 5 * time.Second})
	down := &saDropLink{done: map[[2]uint32]bool{}, drop: func(r wire.RMPPHeader) bool {
		return r.Type() == wire.RMPPTypeData && (r.SegmentNumber() == 3 || r.SegmentNumber() == 9)
	}}
	up := &saDropLink{done: map[[2]uint32]bool{}, drop: func(r wire.RMPPHeader) bool {
		return r.Type() == wire.RMPPTypeAck && r.SegmentNumber() == 1
	}}
	f.HCACables[4].Wrap(fabric.BtoA, func(l fabric.Link) fabric.Link { down.inner = l; return down })
	f.HCACables[4].Wrap(fabric.AtoB, func(l fabric.Link) fabric.Link { up.inner = l; return up })
	type result struct {
		recs []wire.NodeRecord
		err  error
	}
	done := make(chan result, 1)
	go func() {
		recs, err := s.clients[4].NodeRecords(context.Background())
		done <- result{recs, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if want := len(f.HCAs) + len(f.Switches); len(r.recs) != want {
				t.Fatalf("%d records after loss, want %d", len(r.recs), want)
			}
			if down.n != 2 || up.n != 1 {
				t.Fatalf("dropped %d segments and %d ACKs, want 2 and 1", down.n, up.n)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("GetTable did not complete")
		}
		if fake.Pending() == 0 {
			runtime.Gosched()
			continue
		}
		fake.Advance(100 * time.Millisecond)
		runtime.Gosched()
	}
}

// linuxAckLink sends the client's RMPP ACKs as Linux's RMPP does (mad_rmpp.c format_ack):
// the DATA's method with the response bit flipped, GetTable instead of GetTableResp.
type linuxAckLink struct {
	inner fabric.Link
	mu    sync.Mutex
	n     int
}

func (l *linuxAckLink) Send(pkts [][]byte) {
	out := make([][]byte, 0, len(pkts))
	for _, p := range pkts {
		const off = wire.LRHLen + wire.BTHLen + wire.DETHLen
		if len(p) >= off+wire.MADLen && p[off+1] == wire.MgmtClassSubnAdm {
			m := wire.MAD(p[off : off+wire.MADLen])
			if r := wire.RMPPOf(m); r.Active() && r.Type() == wire.RMPPTypeAck {
				q := append([]byte(nil), p...)
				wire.Finalize(q)
				q[off+3] ^= 0x80
				wire.SetICRC(q)
				p = q
				l.mu.Lock()
				l.n++
				l.mu.Unlock()
			}
		}
		out = append(out, p)
	}
	l.inner.Send(out)
}

// TestSARMPPAckAsRequest: a receiver whose ACKs come with the request method (Linux's,
// and pibgw's libibumad) gets a many-segment NodeRecord table whole, with no resend: the
// SA takes such an ACK as its transfer's (it ignored it, and the transfer stalled at its
// first window until it aborted).
func TestSARMPPAckAsRequest(t *testing.T) {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := satest.SmallTree(t, satest.Options{Clock: fake})
	s := newSAFabric(t, f, sa.Config{SweepInterval: -1}, sa.ClientOptions{Timeout: 5 * time.Second})
	up := &linuxAckLink{}
	f.HCACables[4].Wrap(fabric.AtoB, func(l fabric.Link) fabric.Link { up.inner = l; return up })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := s.clients[4].NodeRecords(ctx) // the fake clock never moves: no resend
	if err != nil {
		t.Fatal(err)
	}
	if want := len(f.HCAs) + len(f.Switches); len(recs) != want {
		t.Fatalf("%d records, want %d", len(recs), want)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.n < 2 {
		t.Fatalf("%d ACKs sent as requests, want the table's (at least 2)", up.n)
	}
}
