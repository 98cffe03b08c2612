package hca

import (
	"testing"
	"time"
)

type chanKicker chan struct{}

func (k chanKicker) Kick() { close(k) }

// TestPollWaitsForBatchKicks: a completion pushed while its batch still has responses to
// send (an rc ACK, DeferKick) is not handed to a poller on another thread until the
// batch's kicks ran. A program that polled it and exited at once took the ACK with it,
// and the peer's send ended in IBV_WC_RETRY_EXC_ERR (cabi TestInitQPAttr beside two
// CPU-bound processes).
func TestPollWaitsForBatchKicks(t *testing.T) {
	old := settleKicksFor
	settleKicksFor = time.Minute // the kick below is what ends the wait
	t.Cleanup(func() { settleKicksFor = old })
	d := newTestDevice(t, 1)
	cq, err := d.Open().CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	pk := &Packet{Port: d.Port(1)}
	kicked := make(chanKicker)
	pk.DeferKick(kicked)         // the batch's ACK, queued
	cq.Push(&WC{WRID: 7}, false) // the receive it completes
	polled := make(chan time.Time, 1)
	go func() {
		var wc [1]WC
		for cq.Poll(wc[:]) == 0 {
		}
		polled <- time.Now()
	}()
	time.Sleep(20 * time.Millisecond) // the poller sees the completion queued meanwhile
	select {
	case <-polled:
		t.Fatal("the completion was polled before its batch's ACK was sent")
	default:
	}
	at := time.Now()
	pk.runHandlers() // the batch's end: kicks, then handlers
	<-kicked
	if p := <-polled; p.Before(at) {
		t.Fatalf("polled at %v, before the kick at %v", p, at)
	}
	if n := d.unsentKicks.Load(); n != 0 {
		t.Fatalf("%d kicks counted as unsent after the batch", n)
	}
}
