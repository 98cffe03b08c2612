package ipoib_test

import (
	"sync"
	"testing"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/tun"
)

// benchFlow paces a benchmark: the sender's device hands out packets while fewer than
// window are in flight (sent, not yet delivered at the receiver), as a transport's
// window would; UD itself has no flow control.
type benchFlow struct {
	mu        sync.Mutex
	cond      sync.Cond
	budget    int
	issued    int
	delivered int
	window    int
	closed    bool
}

// benchTUN is a tun.Device that reads copies of one packet (sender) or counts what it
// is given (receiver), allocating nothing.
type benchTUN struct {
	name string
	pkt  []byte
	flow *benchFlow
	send bool
}

func (d *benchTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	f := d.flow
	f.mu.Lock()
	defer f.mu.Unlock()
	for !f.closed && (!d.send || f.budget == 0 || f.issued-f.delivered >= f.window) {
		f.cond.Wait()
	}
	if f.closed {
		return 0, tun.ErrClosed
	}
	n := min(len(bufs), f.budget, f.window-(f.issued-f.delivered))
	for k := 0; k < n; k++ {
		sizes[k] = copy(bufs[k][offset:], d.pkt)
	}
	f.issued += n
	f.budget -= n
	return n, nil
}

func (d *benchTUN) Write(bufs [][]byte, offset int) (int, error) {
	f := d.flow
	f.mu.Lock()
	f.delivered += len(bufs)
	f.cond.Broadcast()
	f.mu.Unlock()
	return len(bufs), nil
}

func (d *benchTUN) MTU() int         { return 2044 }
func (d *benchTUN) SetMTU(int) error { return nil }
func (d *benchTUN) Name() string     { return d.name }
func (d *benchTUN) BatchSize() int   { return 128 }
func (d *benchTUN) Close() error {
	d.flow.mu.Lock()
	d.flow.closed = true
	d.flow.cond.Broadcast()
	d.flow.mu.Unlock()
	return nil
}

// waitDelivered waits until n packets were delivered in all.
func (f *benchFlow) waitDelivered(n int) {
	f.mu.Lock()
	for f.delivered < n && !f.closed {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

// allow lets the sending TUN hand out n more packets.
func (f *benchFlow) allow(n int) {
	f.mu.Lock()
	f.budget = n
	f.cond.Broadcast()
	f.mu.Unlock()
}

// run sends one packet of size bytes as a warm-up (it waits for ARP, the path and, in
// connected mode, the connection), then b.N timed, and reports pkt/s.
func (f *benchFlow) run(b *testing.B, size int) {
	f.allow(1)
	f.waitDelivered(1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	f.allow(b.N)
	f.waitDelivered(1 + b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
}

// BenchmarkIPoIBDatagram moves 1400-byte IPv4 packets from A to B: tun read batches,
// one PostSend per batch, the fabric through a switch, receive CQ batches, tun writes.
func BenchmarkIPoIBDatagram(b *testing.B) {
	tf := newTestFabric(b, 2, sa.Config{SweepInterval: -1})
	flow := &benchFlow{window: 256}
	flow.cond.L = &flow.mu
	pkt := udp4("10.10.0.1", "10.10.0.2", 1000, 2000, make([]byte, 1400-28))
	tx := &benchTUN{name: "ib0", pkt: pkt, flow: flow, send: true}
	rx := &benchTUN{name: "ib1", flow: flow}
	a := tf.ifaceOn(b, 0, 0xFFFF, tx, "10.10.0.1/24")
	tf.ifaceOn(b, 1, 0xFFFF, rx, "10.10.0.2/24")
	flow.run(b, len(pkt))
	if d := a.Counter("drop_send_error"); d != 0 {
		b.Fatalf("%d send errors", d)
	}
}

// benchGSOTUN is a benchTUN with offloads (one packet per read, no GSO asked), as
// connected mode needs.
type benchGSOTUN struct{ *benchTUN }

func (d benchGSOTUN) Offloads() bool { return true }

func (d benchGSOTUN) ReadGSO(buf []byte, offset int) (int, tun.GSO, error) {
	var sizes [1]int
	bufs := [1][]byte{buf}
	if _, err := d.Read(bufs[:], sizes[:], offset); err != nil {
		return 0, tun.GSO{}, err
	}
	return sizes[0], tun.GSO{}, nil
}

func (d benchGSOTUN) WriteGSO(buf []byte, offset int, _ tun.GSO, _ [][]byte) error {
	bufs := [1][]byte{buf}
	_, err := d.Write(bufs[:], offset)
	return err
}

func (d benchGSOTUN) MTU() int { return 65520 }

// BenchmarkIPoIBConnected64K moves 65,520-byte IPv4 TCP packets from A to B in
// connected mode: one TUN read each, one RC SEND of 16 packets through the switch into
// an SRQ buffer, one TUN write (as CHECKSUM_PARTIAL) — against memcpy of the same
// packet, the least any user-space relay does, in the same run.
func BenchmarkIPoIBConnected64K(b *testing.B) {
	tcp := make([]byte, 20+65480)
	tcp[20+12], tcp[20+13] = 5<<4, 0x10
	pkt := ipv4("10.10.0.1", "10.10.0.2", 6, 64, tcp)
	b.Run("memcpy", func(b *testing.B) {
		dst := make([]byte, len(pkt))
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			copy(dst, pkt)
		}
	})
	b.Run("connected", func(b *testing.B) {
		tf := newTestFabric(b, 2, sa.Config{SweepInterval: -1})
		cms := newCMs(b, tf, 2)
		flow := &benchFlow{window: 4}
		flow.cond.L = &flow.mu
		tx := benchGSOTUN{&benchTUN{name: "ib0", pkt: pkt, flow: flow, send: true}}
		rx := benchGSOTUN{&benchTUN{name: "ib1", flow: flow}}
		a := tf.ifaceWith(b, 0, tx, ipoib.Config{CM: cms[0], Mode: ipoib.Connected}, "10.10.0.1/24")
		tf.ifaceWith(b, 1, rx, ipoib.Config{CM: cms[1], Mode: ipoib.Connected}, "10.10.0.2/24")
		flow.run(b, len(pkt))
		if d := a.Counter("drop_send_error"); d != 0 || a.Counter("tx_cm_packets") < uint64(b.N) {
			b.Fatalf("%d send errors, %d sent over the connection: %v", d, a.Counter("tx_cm_packets"), a.Info().Counters)
		}
	})
}
