package attach_test

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/inproc"
)

// Packets between two attached sessions take the direct ring, counted on both rows of
// pibgw ps and in the daemon's port counters; while something observes the fabric (here
// a fault on a cable) they go through the daemon, and switching paths back and forth
// keeps them in order.
func TestDirectPath(t *testing.T) {
	f, sender, receiver, a, v, sendFrom := directPair(t)
	send := func(seq uint32) {
		p := make([]byte, 8)
		binary.BigEndian.PutUint32(p, seq)
		sendFrom(a.qp.Num(), p)
	}
	xmit := func() uint64 { return f.Device("pib_0").Port(1).Counters().Get(hca.CntUnicastXmitPkts) }
	rcv := func() uint64 { return f.Device("pib_1").Port(1).Counters().Get(hca.CntUnicastRcvPkts) }
	x0, r0 := xmit(), rcv()

	send(0)
	if got := received(v, 100*time.Millisecond); len(got) != 1 || got[0].Status != hca.WCSuccess || got[0].SrcQP != a.qp.Num() {
		t.Fatalf("first packet: %+v", got)
	}
	for _, c := range []struct {
		s    *attach.Session
		name string
	}{{sender, "direct_tx_packets"}, {sender, "tx_packets"}, {receiver, "direct_rx_packets"}, {receiver, "rx_packets"}} {
		if got := counters(t, f, c.s)[c.name]; got != 1 {
			t.Errorf("%s of session %d = %d, want 1", c.name, c.s.ID(), got)
		}
	}
	if x, r := xmit()-x0, rcv()-r0; x != 1 || r != 1 {
		t.Errorf("daemon port counters: %d sent by pib_0, %d received by pib_1, want 1 and 1", x, r)
	}

	// Paths switch under a stream: daemon (fault on), direct (off), daemon, direct. The
	// receiver takes packets in by itself (its receive goroutine) while the sender sends.
	const perPhase = 3
	seq := uint32(1)
	for phase := range 4 {
		cfg := fabric.FaultConfig{}
		if phase%2 == 0 {
			cfg.Corrupt = 1e-12 // a fault that changes nothing, but observes
		}
		if err := f.Fault("pib_0/1", cfg); err != nil {
			t.Fatal(err)
		}
		for range perPhase {
			send(seq)
			seq++
		}
	}
	got := received(v, 200*time.Millisecond)
	if len(got) != 4*perPhase {
		t.Fatalf("received %d of %d", len(got), 4*perPhase)
	}
	for i, wc := range got {
		off := int(wc.WRID)*256 + 40 // after the GRH space of a UD receive
		if s := binary.BigEndian.Uint32(v.buf[off:]); wc.Status != hca.WCSuccess || s != uint32(i+1) {
			t.Fatalf("packet %d: sequence %d, %+v", i, s, wc)
		}
		v.qp.PostRecv([]hca.RecvWR{{WRID: wc.WRID, SGL: []hca.SGE{{Addr: v.mr.Addr() + wc.WRID*256, Length: 256, LKey: v.mr.LKey()}}}})
	}
	c := counters(t, f, sender)
	if c["tx_packets"] != 1+4*perPhase || c["direct_tx_packets"] != 1+2*perPhase {
		t.Errorf("sender: tx_packets %d, direct_tx_packets %d; want %d and %d (the fault phases through the daemon)",
			c["tx_packets"], c["direct_tx_packets"], 1+4*perPhase, 1+2*perPhase)
	}
	if x, r := xmit()-x0, rcv()-r0; x != 1+4*perPhase || r != 1+4*perPhase {
		t.Errorf("daemon port counters: %d sent, %d received, want %d", x, r, 1+4*perPhase)
	}
}

// A receiver that stops reading holds a sender back for at most a head-of-queue lifetime,
// after which packets for it are dropped; when it is killed, its peers' direct rings close
// and the daemon carries on.
func TestDirectPeerStalledThenKilled(t *testing.T) {
	f, path := startFabric(t)
	s := dial(t, path)
	e, err := newEnd(s.Device("pib_1"), hca.QPTypeUD, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p, info := startPeer(t, path, "pib_0", "ud", "target", e)
	qpn := uint32(num(info, "qpn"))
	pid := p.cmd.Process.Pid
	row := func() map[string]uint64 {
		for _, si := range f.Attached() {
			if si.PID == pid {
				return si.Counters
			}
		}
		return nil
	}
	// stream sends n messages of size bytes and waits for their send completions.
	stream := func(n, size int) time.Duration {
		start := time.Now()
		var wcs [64]hca.WC
		sent, done := 0, 0
		for done < n {
			for sent < n && sent-done < 256 {
				if err := e.send(uint64(sent), size, qpn); err != nil {
					t.Fatal(err)
				}
				sent++
			}
			k := e.cq.Poll(wcs[:])
			for _, wc := range wcs[:k] {
				if wc.Status != hca.WCSuccess {
					t.Fatalf("send completion %+v", wc)
				}
				done++
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%d of %d sends completed in 20 s", done, n)
			}
		}
		return time.Since(start)
	}
	stream(100, 64)
	deadline := time.Now().Add(5 * time.Second)
	for row()["direct_rx_packets"] < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("the peer's row: %v, want 100 direct packets received", row())
		}
		time.Sleep(time.Millisecond)
	}

	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// 12 MiB for a 4 MiB ring: the sender waits once (a head-of-queue lifetime, 268 ms),
	// then drops.
	d := stream(3000, 4096)
	if d > 5*time.Second {
		t.Errorf("3000 sends toward a stopped process took %v", d)
	}
	t.Logf("3000 sends toward a stopped process: %v", d)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(f.Attached()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after the kill: %d sessions", len(f.Attached()))
		}
		time.Sleep(time.Millisecond)
	}
	// The sender's direct ring is closed; it asks again and its packets go to the
	// daemon, which drops them (the QP number is free).
	if d := stream(100, 64); d > 2*time.Second {
		t.Errorf("100 sends after the kill took %v", d)
	}
}

// A QP number a process frees while a receiver of its direct ring still counts it among
// the process's stays reserved — no other process can get it, so the first cannot pass
// off as someone else's QP by writing into the ring itself — until the receiver has been
// told a list without it (here when the process next asks for a route).
func TestDirectFreedQPNQuarantine(t *testing.T) {
	f, sender, _, a, v, sendFrom := directPair(t)
	send := func(sqp uint32) { sendFrom(sqp, []byte("12345678")) }
	send(a.qp.Num())
	if got := received(v, 100*time.Millisecond); len(got) != 1 || got[0].SrcQP != a.qp.Num() {
		t.Fatalf("first packet: %+v", got)
	}
	if counters(t, f, sender)["direct_tx_packets"] != 1 {
		t.Fatal("the first packet did not take the direct ring")
	}
	q := a.qp.Num()
	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	dev := f.Device("pib_0")
	if dev.ForwarderOf(q) == nil {
		t.Fatalf("QP %#x was released while the receiver still takes it for the sender's", q)
	}
	// A new QP of the sender sends: the route is asked again, the receiver gets the list
	// without q, and q is given back.
	b := newUDQP(t, sender.Device("pib_0"))
	if b.qp.Num() == q {
		t.Fatalf("QP %#x handed out again while quarantined", q)
	}
	send(b.qp.Num())
	if got := received(v, 100*time.Millisecond); len(got) != 1 || got[0].SrcQP != b.qp.Num() {
		t.Fatalf("packet from the new QP: %+v", got)
	}
	if dev.ForwarderOf(q) != nil {
		t.Fatalf("QP %#x still reserved after the receiver was told it is not the sender's", q)
	}
}

// directPair is a daemon with two attached sessions, a UD QP in each (a on the sender's
// pib_0, v on the receiver's pib_1), and send, which puts a packet with payload from
// source QP sqp of the sender to v on the sender's port.
func directPair(t *testing.T) (f *inproc.Fabric, sender, receiver *attach.Session, a, v *udQP, send func(sqp uint32, payload []byte)) {
	f, path := startFabric(t)
	sender, receiver = dial(t, path), dial(t, path)
	a = newUDQP(t, sender.Device("pib_0"))
	v = newUDQP(t, receiver.Device("pib_1"))
	aLID := sender.Device("pib_0").Port(1).LID()
	vLID := receiver.Device("pib_1").Port(1).LID()
	send = func(sqp uint32, payload []byte) {
		p := forged{slid: aLID, dlid: vLID, pkey: 0xFFFF, dqp: v.qp.Num(), sqp: sqp, qkey: testQKey, payload: payload}
		sender.Device("pib_0").Port(1).Transmit([][]byte{p.bytes()})
	}
	return f, sender, receiver, a, v, send
}
