package ipoib_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/tun"
	"github.com/pibgw/pibgw/wire"
)

// gsoTUN is a fakeTUN with offloads, as a kernel TUN with virtio-net headers is: one
// packet per read (no GSO asked), writes recorded whole, each with its metadata on gso.
type gsoTUN struct {
	*fakeTUN
	gso chan tun.GSO
}

func newGSOTUN(name string) *gsoTUN { return &gsoTUN{newFakeTUN(name), make(chan tun.GSO, 4096)} }

func (g *gsoTUN) Offloads() bool { return true }

func (g *gsoTUN) ReadGSO(buf []byte, offset int) (int, tun.GSO, error) {
	sizes := []int{0}
	if _, err := g.Channel.Read([][]byte{buf}, sizes, offset); err != nil {
		return 0, tun.GSO{}, err
	}
	return sizes[0], tun.GSO{}, nil
}

func (g *gsoTUN) WriteGSO(buf []byte, offset int, meta tun.GSO, tail [][]byte) error {
	p := append([]byte(nil), buf[offset:]...)
	for _, t := range tail {
		p = append(p, t...)
	}
	select {
	case g.out <- p:
		select {
		case g.gso <- meta:
		default:
		}
	default:
	}
	return nil
}

// recvGSO is recv with the metadata the packet was written with.
func (g *gsoTUN) recvGSO(t testing.TB) ([]byte, tun.GSO) {
	t.Helper()
	p := g.recv(t)
	select { // WriteGSO records the metadata just after the packet
	case m := <-g.gso:
		return p, m
	case <-time.After(10 * time.Second):
		t.Fatal("a packet written without its metadata recorded")
		return nil, tun.GSO{}
	}
}

func newCMs(t testing.TB, tf *testFabric, n int) []*ibcm.CM {
	cms := make([]*ibcm.CM, n)
	for k := range cms {
		rc.Register(tf.f.HCAs[k])
		cms[k] = ibcm.New(ibcm.HCAPort(tf.f.HCAs[k].Port(1)), ibcm.Options{Clock: tf.clk})
		t.Cleanup(cms[k].Close) // after the interfaces (cleanups run last-in first-out)
	}
	return cms
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(rand.Uint32())
	}
	return b
}

// TestConnectedMode: two connected-mode interfaces move 60,000-byte packets whole over
// RC connections made on demand by the CM; a datagram-mode peer (no 0x80 flag) is
// reached over UD, and a packet too big for it comes back as ICMP "fragmentation
// needed" with the UD MTU; switching to datagram mode closes the connections and puts
// the MTU back; idle connections are reaped.
func TestConnectedMode(t *testing.T) {
	tf := newTestFabric(t, 3, sa.Config{})
	cms := newCMs(t, tf, 3)
	da, db, dc := newGSOTUN("ib0"), newGSOTUN("ib1"), newGSOTUN("ib2")
	a := tf.ifaceWith(t, 0, da, ipoib.Config{CM: cms[0], Mode: ipoib.Connected}, "10.10.0.1/24")
	b := tf.ifaceWith(t, 1, db, ipoib.Config{CM: cms[1], Mode: ipoib.Connected}, "10.10.0.2/24")
	c := tf.ifaceWith(t, 2, dc, ipoib.Config{CM: cms[2]}, "10.10.0.3/24")

	if a.MTU() != ipoib.ConnectedMTU || da.MTU() != ipoib.ConnectedMTU || a.Info().Mode != ipoib.Connected {
		t.Fatalf("connected mode: MTU %d (tun %d), mode %v", a.MTU(), da.MTU(), a.Info().Mode)
	}
	if c.MTU() != 2044 || a.HWAddr().Flags() != ipoib.FlagConnected || c.HWAddr().Flags() != 0 {
		t.Fatalf("datagram MTU %d, flags %#x / %#x", c.MTU(), a.HWAddr().Flags(), c.HWAddr().Flags())
	}

	// The first packet resolves B (ARP over UD); the big ones go over a connection.
	small := icmpEcho4("10.10.0.1", "10.10.0.2", 1, randomBytes(56))
	da.Inject(small)
	if got := db.recv(t); !bytes.Equal(got, small) {
		t.Fatal("A→B small packet differs")
	}
	for k := range 3 {
		big := icmpEcho4("10.10.0.1", "10.10.0.2", uint16(2+k), randomBytes(60000-28))
		da.Inject(big)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("A %v\nB %v", a.Info().Counters, b.Info().Counters)
				t.Logf("HCA A %v\nHCA B %v", tf.f.HCAs[0].Port(1).Counters().Snapshot(), tf.f.HCAs[1].Port(1).Counters().Snapshot())
			}
		})
		if got := db.recv(t); !bytes.Equal(got, big) {
			t.Fatalf("A→B 60,000-byte packet %d differs (%d bytes)", k, len(got))
		}
	}
	reply := icmpEcho4("10.10.0.2", "10.10.0.1", 9, randomBytes(ipoib.ConnectedMTU-28))
	db.Inject(reply)
	if got := da.recv(t); !bytes.Equal(got, reply) {
		t.Fatal("B→A 65,520-byte packet differs")
	}
	// B counts its passive connection when its CM reports it established, which can come
	// just after the first data on it (IBA 12.9.6: data before the RTU establishes too).
	waitFor(t, "B's passive connection counted", func() bool { return b.Counter("cm_rx_connections") == 1 })
	// In one process a SEND completes as it is posted: the send ring never fills.
	if a.Counter("cm_tx_connections") != 1 || b.Counter("cm_rx_connections") != 1 ||
		b.Counter("cm_tx_connections") != 1 || a.Counter("tx_cm_packets") < 3 || b.Counter("rx_cm_packets") < 3 ||
		a.Counter("cm_tx_ring_full") != 0 {
		t.Fatalf("counters: A %v, B %v", a.Info().Counters, b.Info().Counters)
	}
	var nb ipoib.Neighbor
	for _, n := range a.Neighbors() {
		if n.IP == netipMust("10.10.0.2") {
			nb = n
		}
	}
	if !nb.Connected || nb.CMState != "connected" || nb.QPN == 0 || nb.RemoteQPN == 0 || nb.HWAddr.Flags() != ipoib.FlagConnected {
		t.Fatalf("neighbour 10.10.0.2: %+v", nb)
	}

	// C is in datagram mode: reached over UD; too big for it → ICMP with its MTU.
	toC := icmpEcho4("10.10.0.1", "10.10.0.3", 1, randomBytes(100))
	da.Inject(toC)
	if got := dc.recv(t); !bytes.Equal(got, toC) {
		t.Fatal("A→C small packet differs")
	}
	bigC := icmpEcho4("10.10.0.1", "10.10.0.3", 2, randomBytes(4000))
	da.Inject(bigC)
	icmp := da.recv(t)
	if len(icmp) < 28+20 || icmp[9] != 1 || icmp[20] != 3 || icmp[21] != 4 ||
		binary.BigEndian.Uint16(icmp[26:]) != 2044 || !bytes.Equal(icmp[28:48], bigC[:20]) ||
		[4]byte(icmp[12:16]) != [4]byte(bigC[16:20]) || [4]byte(icmp[16:20]) != [4]byte(bigC[12:16]) {
		t.Fatalf("expected ICMP fragmentation needed (MTU 2044), got % x", icmp[:min(len(icmp), 64)])
	}
	if csum(icmp[:20]) != 0 || csum(icmp[20:]) != 0 {
		t.Fatal("ICMP checksums wrong")
	}
	// The counter goes up once the TUN write has returned, which can be just after the
	// test has read the ICMP.
	waitFor(t, "tx_icmp_too_big counted", func() bool { return a.Counter("tx_icmp_too_big") == 1 })
	if a.Counter("cm_tx_connections") != 1 {
		t.Fatalf("counters: %v", a.Info().Counters)
	}
	// IPv6 too: "packet too big" (RFC 4443 §3.2), to the link-local addresses.
	la, lc := a.LinkLocal().String(), c.LinkLocal().String()
	small6 := echo6(la, lc, 1, randomBytes(64))
	da.Inject(small6)
	if got := dc.recv(t); !bytes.Equal(got, small6) {
		t.Fatal("A→C small IPv6 packet differs")
	}
	big6 := echo6(la, lc, 2, randomBytes(3000))
	da.Inject(big6)
	ptb := da.recv(t)
	if len(ptb) != 1280 || ptb[6] != 58 || ptb[40] != 2 || binary.BigEndian.Uint32(ptb[44:]) != 2044 ||
		!bytes.Equal(ptb[48:88], big6[:40]) || !bytes.Equal(ptb[8:24], big6[24:40]) {
		t.Fatalf("expected ICMPv6 packet too big (MTU 2044), got % x", ptb[:min(len(ptb), 64)])
	}
	ph := append(append(append([]byte(nil), ptb[8:40]...), 0, 0, byte((len(ptb)-40)>>8), byte(len(ptb)-40), 0, 0, 0, 58), ptb[40:]...)
	if csum(ph) != 0 {
		t.Fatal("ICMPv6 checksum wrong")
	}

	// Datagram mode: MTU back, connection closed (B sees the DREQ), flag gone, and a big
	// packet to B gets the ICMP.
	if err := a.SetMode(ipoib.Datagram); err != nil {
		t.Fatal(err)
	}
	if a.MTU() != 2044 || da.MTU() != 2044 || a.HWAddr().Flags() != 0 || a.Info().Mode != ipoib.Datagram {
		t.Fatalf("datagram again: MTU %d (tun %d), flags %#x", a.MTU(), da.MTU(), a.HWAddr().Flags())
	}
	waitFor(t, "B's RX connection closed", func() bool {
		for _, n := range a.Neighbors() {
			if n.CMState != "" {
				return false
			}
		}
		return true
	})
	da.Inject(small)
	if got := db.recv(t); !bytes.Equal(got, small) {
		t.Fatal("A→B small packet over UD differs")
	}
	da.Inject(icmpEcho4("10.10.0.1", "10.10.0.2", 20, randomBytes(5000)))
	if icmp := da.recv(t); icmp[20] != 3 || icmp[21] != 4 {
		t.Fatalf("expected ICMP after the switch, got % x", icmp[:min(len(icmp), 40)])
	}

	// B's connection to A idles: reaped after the idle timeout (checked every 1.5×) —
	// by B (its TX side) or by A (its RX side, whose DREQ ends B's): none is left.
	tf.clk.Advance(ipoib.DefaultCMIdleTimeout * 3 / 2)
	waitFor(t, "idle connection reaped", func() bool {
		if a.Counter("cm_reaped")+b.Counter("cm_reaped") == 0 {
			return false
		}
		for _, n := range b.Neighbors() {
			if n.CMState != "" {
				return false
			}
		}
		return true
	})
}

// TestConnectedModeChecksum: a TCP or UDP packet received over a connection goes to the
// kernel as CHECKSUM_PARTIAL — its checksum field the pseudo-header sum, csum_start at
// the transport header — so the kernel does not sum 64 KiB again; completing it gives
// back the packet sent. ICMP and a UDP datagram without a checksum go as they came.
func TestConnectedModeChecksum(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	cms := newCMs(t, tf, 2)
	da, db := newGSOTUN("ib0"), newGSOTUN("ib1")
	tf.ifaceWith(t, 0, da, ipoib.Config{CM: cms[0], Mode: ipoib.Connected}, "10.10.0.1/24")
	tf.ifaceWith(t, 1, db, ipoib.Config{CM: cms[1], Mode: ipoib.Connected}, "10.10.0.2/24")

	small := icmpEcho4("10.10.0.1", "10.10.0.2", 1, randomBytes(56))
	da.Inject(small)
	if got, g := db.recvGSO(t); !bytes.Equal(got, small) || g != (tun.GSO{}) {
		t.Fatalf("ICMP: differs or written with metadata %+v", g)
	}
	// withSum gives the IPv4 TCP or UDP packet p its transport checksum.
	withSum := func(p []byte, off int) []byte {
		ph := append(append(append([]byte(nil), p[12:20]...), 0, p[9], byte((len(p)-20)>>8), byte(len(p)-20)), p[20:]...)
		binary.BigEndian.PutUint16(p[20+off:], csum(ph))
		return p
	}
	tcp := make([]byte, 20+60000)
	copy(tcp[20:], randomBytes(60000))
	tcp[20+12], tcp[20+13] = 5<<4, 0x18 // data offset 5 words, PSH ACK
	sent := [][]byte{
		withSum(ipv4("10.10.0.1", "10.10.0.2", 6, 64, tcp), 16),
		withSum(udp4("10.10.0.1", "10.10.0.2", 4000, 5000, randomBytes(30000)), 6),
		udp4("10.10.0.1", "10.10.0.2", 4000, 5000, randomBytes(30000)), // checksum 0
	}
	for k, p := range sent {
		da.Inject(p)
		got, g := db.recvGSO(t)
		if len(got) != len(p) {
			t.Fatalf("packet %d: %d bytes, sent %d", k, len(got), len(p))
		}
		if k == 2 {
			if g != (tun.GSO{}) || !bytes.Equal(got, p) {
				t.Fatalf("UDP without a checksum: metadata %+v, or the packet differs", g)
			}
			continue
		}
		off := uint16(16)
		if k == 1 {
			off = 6
		}
		if g != (tun.GSO{NeedsCsum: true, CsumStart: 20, CsumOffset: off}) {
			t.Fatalf("packet %d: metadata %+v, want CHECKSUM_PARTIAL at 20+%d", k, g, off)
		}
		if bytes.Equal(got, p) {
			t.Fatalf("packet %d: checksum field not turned into the pseudo-header sum", k)
		}
		if !inet.CompletePartial(got) || !bytes.Equal(got, p) {
			t.Fatalf("packet %d: completing the partial checksum does not give the packet sent", k)
		}
	}
}

// asyncLossyLink is HCA A's side of its cable as a UDP link to another process makes it:
// packets leave the sender's call (materialised, wire.Finalize) and arrive later, from
// another goroutine, so a SEND does not complete while it is posted and the connection
// uses the send ring as toward another process. The first time each RC SEND Middle
// packet with PSN ≡ 3 (mod 16) passes, it is dropped: the responder NAKs the gap and
// the requester sends the message again from its send-ring slot.
func asyncLossyLink(t *testing.T, l fabric.Link, dropped *atomic.Int64) fabric.Link {
	ch := make(chan [][]byte, 1024)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case b := <-ch:
				l.Send(b)
			case <-done:
				return
			}
		}
	}()
	var mu sync.Mutex
	seen := map[uint32]bool{}
	return fabric.LinkFunc(func(pkts [][]byte) {
		var out [][]byte
		for _, p := range pkts {
			c := append([]byte(nil), p...)
			wire.Finalize(c)
			var pk wire.Packet
			if pk.Parse(c) == nil && pk.BTH != nil && pk.BTH.OpCode() == wire.RCSendMiddle && pk.BTH.PSN()%16 == 3 {
				mu.Lock()
				first := !seen[pk.BTH.PSN()]
				seen[pk.BTH.PSN()] = true
				mu.Unlock()
				if first {
					dropped.Add(1)
					continue
				}
			}
			out = append(out, c)
		}
		if len(out) > 0 {
			select {
			case ch <- out:
			case <-done:
			}
		}
	})
}

// connectedPair makes ib0 (10.10.0.1) and ib1 (10.10.0.2) in connected mode, HCA A's
// cable toward the fabric wrapped by wrap, and brings A's connection to B up: a small
// packet has crossed it.
func connectedPair(t *testing.T, wrap func(fabric.Link) fabric.Link) (a, b *ipoib.Interface, da, db *gsoTUN) {
	t.Helper()
	tf := newTestFabric(t, 2, sa.Config{})
	cms := newCMs(t, tf, 2)
	tf.f.HCACables[0].Wrap(fabric.AtoB, wrap)
	da, db = newGSOTUN("ib0"), newGSOTUN("ib1")
	a = tf.ifaceWith(t, 0, da, ipoib.Config{CM: cms[0], Mode: ipoib.Connected}, "10.10.0.1/24")
	b = tf.ifaceWith(t, 1, db, ipoib.Config{CM: cms[1], Mode: ipoib.Connected}, "10.10.0.2/24")
	small := icmpEcho4("10.10.0.1", "10.10.0.2", 1, randomBytes(56))
	da.Inject(small)
	if got := db.recv(t); !bytes.Equal(got, small) {
		t.Fatal("A→B small packet differs")
	}
	return a, b, da, db
}

// TestConnectedModeRemoteLoss: toward a peer whose SENDs complete only when their ACKs
// are back (another process), with packets lost, every 60,000-byte packet arrives whole
// and in order: a message stays in its send-ring slot until its completion, the
// transmit loop reading the next ones into other slots — go-back-N resends a lost
// message's packets from that slot.
func TestConnectedModeRemoteLoss(t *testing.T) {
	var dropped atomic.Int64
	a, b, da, db := connectedPair(t, func(l fabric.Link) fabric.Link { return asyncLossyLink(t, l, &dropped) })
	const n = 160
	sent := make([][]byte, n)
	for k := range sent {
		sent[k] = icmpEcho4("10.10.0.1", "10.10.0.2", uint16(2+k), randomBytes(60000-28))
		da.Inject(sent[k])
	}
	for k := range sent {
		if got := db.recv(t); !bytes.Equal(got, sent[k]) {
			t.Fatalf("A→B 60,000-byte packet %d of %d differs (%d bytes; %d packets dropped; A %v, B %v)",
				k, n, len(got), dropped.Load(), a.Info().Counters, b.Info().Counters)
		}
	}
	if dropped.Load() < n/2 {
		t.Fatalf("only %d packets dropped", dropped.Load())
	}
}

// TestConnectedModeRingFull: toward another process a message holds its send-ring slot
// until its ACK is back; with the ACKs held up, the message after the ring's 32 waits
// for a slot and cm_tx_ring_full counts it; once they come, every message arrives in
// order.
func TestConnectedModeRingFull(t *testing.T) {
	var gate *gatedLink
	a, _, da, db := connectedPair(t, func(l fabric.Link) fabric.Link { gate = newGatedLink(t, l); return gate })
	if a.Counter("cm_tx_ring_full") != 0 {
		t.Fatalf("cm_tx_ring_full before: %v", a.Info().Counters)
	}
	gate.hold()
	const ring, n = 32, 36
	sent := make([][]byte, n)
	for k := range sent[:ring] {
		sent[k] = icmpEcho4("10.10.0.1", "10.10.0.2", uint16(2+k), randomBytes(20000))
		da.Inject(sent[k])
	}
	// The ring's 32 messages all go out without waiting for an ACK.
	waitFor(t, "the ring's messages on the wire", func() bool { return gate.heldMessages() == ring })
	if a.Counter("cm_tx_ring_full") != 0 {
		t.Fatalf("cm_tx_ring_full with %d messages in flight: %v", ring, a.Info().Counters)
	}
	for k := ring; k < n; k++ {
		sent[k] = icmpEcho4("10.10.0.1", "10.10.0.2", uint16(2+k), randomBytes(20000))
		da.Inject(sent[k])
	}
	waitFor(t, "a send waiting for a ring slot", func() bool { return a.Counter("cm_tx_ring_full") > 0 })
	if got := gate.heldMessages(); got != ring {
		t.Fatalf("%d messages on the wire with the ring full, want %d", got, ring)
	}
	gate.open()
	for k := range sent {
		if got := db.recv(t); !bytes.Equal(got, sent[k]) {
			t.Fatalf("A→B packet %d of %d differs (%d bytes)", k, n, len(got))
		}
	}
}

// TestConnectedModeBurstOfSmallMessages: the sender's whole ring of small messages
// reaches the receiver in one batch (as a UDP link's recvmmsg run does), and each takes a
// receive buffer of the SRQ before the batch's end lets the interface re-post any. The SRQ
// must hold them: without a buffer the responder answers RNR, and IPoIB-CM's RNR retry
// count of 0 ends the connection (with 16 buffers it failed thousands of times a second in
// the multi-host benchmark with 1,400-byte UDP datagrams).
func TestConnectedModeBurstOfSmallMessages(t *testing.T) {
	var gate *gatedLink
	a, b, da, db := connectedPair(t, func(l fabric.Link) fabric.Link { gate = newGatedLink(t, l); return gate })
	gate.hold()
	const n = 32 // the send ring
	sent := make([][]byte, n)
	for k := range sent {
		sent[k] = icmpEcho4("10.10.0.1", "10.10.0.2", uint16(2+k), randomBytes(1372))
		da.Inject(sent[k])
	}
	waitFor(t, "the burst on the wire", func() bool { return gate.heldMessages() == n })
	gate.open()
	for k := range sent {
		if got := db.recv(t); !bytes.Equal(got, sent[k]) {
			t.Fatalf("A→B packet %d of %d differs (%d bytes): %v", k, n, len(got), a.Info().Counters)
		}
	}
	if f := a.Counter("cm_failed"); f != 0 || b.Counter("drop_recv_error") != 0 {
		t.Fatalf("connection failed %d times: A %v, B %v", f, a.Info().Counters, b.Info().Counters)
	}
}

// gatedLink delivers asynchronously, as to another process (a SEND then completes only
// when its ACK is back); while held it keeps the RC packets (IBA opcodes 0x00–0x1F), so no
// message is acknowledged, and open sends them on in order.
type gatedLink struct {
	mu      sync.Mutex
	holding bool
	held    [][]byte
	ch      chan [][]byte
}

func newGatedLink(t *testing.T, l fabric.Link) *gatedLink {
	g := &gatedLink{ch: make(chan [][]byte, 4096)}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case b := <-g.ch:
				l.Send(b)
			case <-done:
				return
			}
		}
	}()
	return g
}

func (g *gatedLink) Send(pkts [][]byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out [][]byte
	for _, p := range pkts {
		c := append([]byte(nil), p...)
		wire.Finalize(c)
		var pk wire.Packet
		if g.holding && pk.Parse(c) == nil && pk.BTH != nil && pk.BTH.OpCode() < 0x20 {
			g.held = append(g.held, c)
			continue
		}
		out = append(out, c)
	}
	if len(out) > 0 {
		g.ch <- out
	}
}

func (g *gatedLink) hold() { g.mu.Lock(); g.holding = true; g.mu.Unlock() }

// heldMessages counts the SENDs held whole: their last packets (SEND Last or Only, with
// or without immediate data: IBA 9.2 opcodes 0x02-0x05).
func (g *gatedLink) heldMessages() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.held {
		var pk wire.Packet
		if pk.Parse(c) == nil && pk.BTH != nil && pk.BTH.OpCode() >= 0x02 && pk.BTH.OpCode() <= 0x05 {
			n++
		}
	}
	return n
}

func (g *gatedLink) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = false
	if len(g.held) > 0 {
		g.ch <- g.held
		g.held = nil
	}
}
