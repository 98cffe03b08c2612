package udplink

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

var testPSK = []byte("0123456789abcdef-test-key")

// hostPort is a fabric.Port that records packets and tells when a link is attached or
// taken away.
type hostPort struct {
	*fabrictest.Recorder
	mu      sync.Mutex
	link    fabric.Link
	changed chan struct{}
}

func newHostPort() *hostPort {
	return &hostPort{Recorder: fabrictest.NewRecorder(), changed: make(chan struct{})}
}

func (h *hostPort) Attach(l fabric.Link) {
	h.Recorder.Attach(l)
	h.mu.Lock()
	h.link = l
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// waitLink waits until the port is plugged (up) or unplugged (!up).
func (h *hostPort) waitLink(t *testing.T, up bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		h.mu.Lock()
		ok := (h.link != nil) == up
		ch := h.changed
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("port never went up=%v", up)
		}
	}
}

type testSwitch struct {
	sw    *fabric.Switch
	ports *SwitchPorts
	l     *Listener
}

func newTestSwitch(t *testing.T, nports int, cfg Config) *testSwitch {
	t.Helper()
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: nports})
	for i := 1; i <= nports; i++ {
		sw.SetLFT(uint16(i), uint8(i)) // LID i lives behind port i
	}
	ps := AllPorts(sw)
	l, err := Listen("127.0.0.1:0", ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return &testSwitch{sw: sw, ports: ps, l: l}
}

func dial(t *testing.T, s *testSwitch, guid uint64, cfg Config) (*Dialer, *hostPort) {
	t.Helper()
	hp := newHostPort()
	d, err := Dial(s.l.Addr().String(), guid, hp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, hp
}

func pkt(dlid, slid uint16, n int) []byte {
	return fabrictest.UD{DLID: dlid, SLID: slid, DestQP: 2, QKey: 3, Payload: bytes.Repeat([]byte{byte(n)}, n)}.Build()
}

func recv(t *testing.T, hp *hostPort, n int) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := hp.Wait(ctx, n)
	if err != nil {
		t.Fatalf("waiting for %d packets (have %d): %v", n, hp.Len(), err)
	}
	return p
}

// Two hosts exchange packets through the switch, with and without a PSK; what arrives
// is exactly what was sent, and each host has the port its GUID got.
func TestHostsThroughSwitch(t *testing.T) {
	eachAuth(t, func(t *testing.T, psk []byte) {
		s, ds, hs := withHosts(t, 4, Config{PSK: psk}, 0xA1, 0xB1)
		da, a, db, b := ds[0], hs[0], ds[1], hs[1]
		pa, pb := da.Status().SwitchPort, db.Status().SwitchPort
		if pa == pb || pa == 0 || pb == 0 {
			t.Fatalf("switch ports %d and %d", pa, pb)
		}
		want := [][]byte{pkt(uint16(pb), uint16(pa), 10), pkt(uint16(pb), uint16(pa), 4000), pkt(uint16(pb), uint16(pa), 0)}
		a.Send(want...)
		got := recv(t, b, len(want))
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("packet %d differs:\n got %x\nwant %x", i, got[i], want[i])
			}
		}
		back := pkt(uint16(pa), uint16(pb), 33)
		b.Send(back)
		if got := recv(t, a, 1); !bytes.Equal(got[0], back) {
			t.Fatalf("reply differs")
		}
		// The switch counts a packet sent once sendmmsg returned, which may be after
		// the host received it. A host whose answer was late (a loaded machine: over the
		// 100 ms ReconnectMin) sent another connect: the switch either took it, its new
		// session replacing the first, or dropped it as stale (it arrived after a newer
		// one, each sent on its own goroutine) — every connect sent is one or the other
		// once it arrives, and a late one may still be on its way.
		attempts := da.Status().Attempts + db.Status().Attempts
		waitFor(t, func() bool {
			c := s.l.Counters()
			return c.TxPackets == 4 && c.Connects+c.Dropped(DropStale) == attempts
		})
		c := s.l.Counters()
		if c.RxPackets != 4 || c.TxPackets != 4 || c.Connects < 2 {
			t.Fatalf("switch counters %+v; the hosts sent %d connects", c, attempts)
		}
		// The switch sent each on from the buffer it arrived in; hosts copy theirs.
		if c.TxForwarded != 4 || da.Counters().TxForwarded != 0 {
			t.Fatalf("forwarded in place: switch %d of 4, host %d", c.TxForwarded, da.Counters().TxForwarded)
		}
		for _, r := range DropReasons() {
			if c.Dropped(r) != 0 && r != DropStale {
				t.Fatalf("switch dropped %d for %v", c.Dropped(r), r)
			}
		}
		if len(s.l.Peers()) != 2 || s.l.Peers()[0].SessionKey != (psk != nil) {
			t.Fatalf("peers %+v", s.l.Peers())
		}
	})
}

// A switch sends packets on from the datagrams they arrived in (forwarded): a multicast
// packet to two hosts, unicast packets to each in between, one Send from the first host,
// with and without a PSK — every host gets exactly what was sent, each datagram with its
// own session's header, tag and a VCRC that checks (or the host would drop it).
func TestForwardInPlace(t *testing.T) {
	eachAuth(t, func(t *testing.T, psk []byte) {
		s, ds, hs := withHosts(t, 4, Config{PSK: psk}, 0xA1, 0xB1, 0xC1)
		a, db, b, dc, c := hs[0], ds[1], hs[1], ds[2], hs[2]
		pb, pc := uint16(db.Status().SwitchPort), uint16(dc.Status().SwitchPort)
		const mlid = 0xC001
		var m fabric.PortMask
		m.Set(int(pb))
		m.Set(int(pc))
		s.sw.SetMFT(mlid, m)
		mc1, mc2 := pkt(mlid, 1, 300), pkt(mlid, 1, 4000)
		ub, uc := pkt(pb, 1, 4000), pkt(pc, 1, 17)
		a.Send(mc1, ub, uc, mc2)
		for _, w := range []struct {
			h    *hostPort
			want [][]byte
		}{{b, [][]byte{mc1, ub, mc2}}, {c, [][]byte{mc1, uc, mc2}}} {
			got := recv(t, w.h, len(w.want))
			for i := range w.want {
				if !bytes.Equal(got[i], w.want[i]) {
					t.Fatalf("packet %d differs:\n got %x\nwant %x", i, got[i], w.want[i])
				}
			}
		}
		waitFor(t, func() bool { return s.l.Counters().TxPackets == 6 })
		if n := s.l.Counters().TxForwarded; n != 6 {
			t.Fatalf("%d of 6 packets forwarded in place", n)
		}
	})
}

// A packet from another process whose BTH.Resv8a holds what inside a process marks
// deferred work (here "ICRC pending") is not taken for one of ours: the mark is cleared
// where it enters, so the receiving HCA checks its ICRC, which here is wrong — and the
// switch that forwarded it from its receive buffer gave it a VCRC matching the cleared
// byte, or the host would have dropped it.
func TestForeignMarks(t *testing.T) {
	eachAuth(t, func(t *testing.T, psk []byte) {
		s, ds, hs := withHosts(t, 2, Config{PSK: psk}, 0x41, 0x42)
		da, b := ds[0], hs[1]
		p := pkt(uint16(3-da.Status().SwitchPort), 1, 64)
		p[len(p)-1] ^= 0xff // a wrong ICRC
		wire.SetICRCPending(p)
		// As a host that does not finalize would send it: header, packet, VCRC, tag.
		hp := da.cur.Load()
		dg := make([]byte, maxDatagram)
		Header(dg).put(MsgData, hp.session, hp.txSeq.Add(1))
		n := HeaderLen + copy(dg[HeaderLen:], p)
		binary.LittleEndian.PutUint16(dg[n:], wire.VCRC(p))
		n += wire.VCRCLen
		if hp.tx != nil {
			var no nonce
			n = len(seal(hp.tx, &no, dg[:n]))
		}
		if _, err := da.e.uc.WriteToUDPAddrPort(dg[:n], s.l.Addr()); err != nil {
			t.Fatal(err)
		}
		got := recv(t, b, 1)[0]
		if wire.ICRCPending(got) || wire.CheckReceivedICRC(got) {
			t.Fatalf("a foreign packet passes as ICRC pending: %x", got)
		}
		want := append([]byte(nil), p...)
		wire.ClearMarks(want)
		if !bytes.Equal(got, want) {
			t.Fatalf("got %x\nwant %x", got, want)
		}
		// Counted once sendmmsg returned, which may be after the host received it.
		waitFor(t, func() bool { return s.l.Counters().TxPackets == 1 })
		if s.l.Counters().TxForwarded != 1 {
			t.Fatalf("not forwarded in place")
		}
	})
}

// Packets an in-process sender left with a pending ICRC leave finalized (wire.Finalize).
func TestSendFinalizes(t *testing.T) {
	s := newTestSwitch(t, 2, Config{})
	_, a := dial(t, s, 1, Config{})
	_, b := dial(t, s, 2, Config{})
	a.waitLink(t, true)
	b.waitLink(t, true)
	p := pkt(2, 1, 20)
	want := append([]byte(nil), p...)
	wire.SetICRCPending(p)
	a.Send(p)
	if got := recv(t, b, 1)[0]; !bytes.Equal(got, want) || !wire.CheckICRC(got) {
		t.Fatalf("not finalized: %x", got)
	}
}

// A host whose PSK differs is never connected; the switch counts its datagrams as
// failing authentication.
func TestWrongPSK(t *testing.T) {
	s := newTestSwitch(t, 2, Config{PSK: testPSK})
	d, _ := dial(t, s, 7, Config{PSK: []byte("another-key-0123456789")})
	waitFor(t, func() bool { return s.l.Counters().Dropped(DropAuth) >= 1 })
	if d.Status().Up || s.l.Counters().Connects != 0 {
		t.Fatal("a host with the wrong key got a session")
	}
}

// Without a PSK, sources outside the allow-list are dropped.
func TestAllowList(t *testing.T) {
	s := newTestSwitch(t, 2, Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.9.0/24")}})
	d, _ := dial(t, s, 7, Config{})
	waitFor(t, func() bool { return s.l.Counters().Dropped(DropNotAllowed) >= 1 })
	if d.Status().Up {
		t.Fatal("a host outside the allow-list got a session")
	}
}

// A full switch refuses the next host with a reason both sides see, and keeps serving.
func TestFullSwitchRefuses(t *testing.T) {
	s := newTestSwitch(t, 1, Config{})
	_, a := dial(t, s, 1, Config{})
	a.waitLink(t, true)
	d2, _ := dial(t, s, 2, Config{})
	waitFor(t, func() bool { return d2.Status().Refusal != "" })
	if r := d2.Status().Refusal; !strings.Contains(r, "switch full") || !strings.Contains(r, "1 ports") {
		t.Fatalf("refusal %q", r)
	}
	if s.l.Counters().Refused == 0 || d2.Counters().Refused == 0 {
		t.Fatal("refusal not counted")
	}
	// Still serving: the first host's port loops a packet back to itself.
	s.sw.SetLFT(9, 1)
	a.Send(pkt(9, 1, 8))
	recv(t, a, 1)
}

// A host whose port GUID is one of the switch process's own ports (a host left at the
// default node_guid_base, which the switch process's SM HCA has too) is refused with a
// reason naming the port, and takes no switch port; another host still gets one.
func TestLocalGUIDRefused(t *testing.T) {
	s := newTestSwitch(t, 4, Config{})
	s.ports.Reserve(0x0002c90300000301, "pib_0 port 1")
	d, _ := dial(t, s, 0x0002c90300000301, Config{})
	waitFor(t, func() bool { return d.Status().Refusal != "" })
	if r := d.Status().Refusal; !strings.Contains(r, "0x0002c90300000301") || !strings.Contains(r, "pib_0 port 1") ||
		!strings.Contains(r, "node_guid_base") {
		t.Fatalf("refusal %q", r)
	}
	if got := s.ports.Assignments(); len(got) != 0 {
		t.Fatalf("the refused host was given a port: %+v", got)
	}
	d2, b := dial(t, s, 0x0002c90301000301, Config{})
	b.waitLink(t, true)
	if d2.Status().SwitchPort != 1 {
		t.Fatalf("the next host got port %d", d2.Status().SwitchPort)
	}
}

// A host that comes back (a new socket, the same GUID) gets its port back.
func TestReconnectSamePort(t *testing.T) {
	s := newTestSwitch(t, 8, Config{})
	_, x := dial(t, s, 0x10, Config{})
	d, a := dial(t, s, 0x11, Config{})
	x.waitLink(t, true)
	a.waitLink(t, true)
	first := d.Status().SwitchPort
	d.Close()
	a.waitLink(t, false)
	waitFor(t, func() bool { return !s.sw.PortUp(first) })
	d2, a2 := dial(t, s, 0x11, Config{})
	a2.waitLink(t, true)
	if got := d2.Status().SwitchPort; got != first {
		t.Fatalf("came back on port %d, had %d", got, first)
	}
	if !s.sw.PortUp(first) {
		t.Fatal("switch port not up")
	}
}

// Keepalives keep an idle session up; a silent peer is declared dead after DeadAfter:
// the switch port goes down, and the host reconnects when the switch answers again.
func TestDeadPeer(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	cfg := Config{Clock: fc, Keepalive: 100 * time.Millisecond, DeadAfter: 500 * time.Millisecond}
	s := newTestSwitch(t, 2, cfg)
	d, a := dial(t, s, 0x21, cfg)
	a.waitLink(t, true)
	num := d.Status().SwitchPort
	// Idle for 2 s of fake time, advanced in keepalive steps: each side's keepalives
	// reach the other before the next step.
	for range 20 {
		rx := s.l.Counters().RxDatagrams
		fc.Advance(100 * time.Millisecond)
		waitFor(t, func() bool { return s.l.Counters().RxDatagrams > rx })
	}
	if !d.Status().Up || !s.sw.PortUp(num) {
		t.Fatal("idle session died")
	}
	// The host goes silent (its socket closes without a disconnect).
	d.e.close()
	fc.Advance(600 * time.Millisecond)
	if s.sw.PortUp(num) || len(s.l.Peers()) != 0 || s.l.Counters().Deaths != 1 {
		t.Fatalf("dead host's port still up (peers %v)", s.l.Peers())
	}
}

// The switch process dies (silently) and a new one listens on the same address: the
// host's port goes down, the host reconnects with back-off and gets a port again.
func TestSwitchRestart(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	cfg := Config{Clock: fc, Keepalive: 100 * time.Millisecond, DeadAfter: 500 * time.Millisecond, PSK: testPSK,
		ReconnectMin: 100 * time.Millisecond, ReconnectMax: 400 * time.Millisecond}
	s := newTestSwitch(t, 2, cfg)
	addr := s.l.Addr().String()
	d, a := dial(t, s, 0x31, cfg)
	a.waitLink(t, true)
	s.l.e.close() // killed: no disconnect
	fc.Advance(600 * time.Millisecond)
	a.waitLink(t, false)
	if d.Status().Up || d.Counters().Deaths != 1 {
		t.Fatalf("status %+v", d.Status())
	}
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 2})
	l2, err := Listen(addr, AllPorts(sw), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l2.Close)
	// The host connects again when its back-off timer fires.
	for i := 0; i < 30 && !d.Status().Up; i++ {
		fc.Advance(cfg.ReconnectMax)
		if l2.Counters().Connects > 0 {
			break
		}
	}
	a.waitLink(t, true)
	if !sw.PortUp(d.Status().SwitchPort) {
		t.Fatal("new switch's port not up")
	}
}

// A datagram replayed from the wire is dropped; so are short, truncated, unknown-version
// and unknown-session datagrams, each counted under its reason.
func TestBadDatagrams(t *testing.T) {
	eachAuth(t, func(t *testing.T, psk []byte) {
		cfg := Config{PSK: psk}
		s := newTestSwitch(t, 2, cfg)
		d, a := dial(t, s, 0x41, cfg)
		a.waitLink(t, true)
		p := d.cur.Load()
		// A valid data datagram as the host would send it, then replayed.
		dg := encode(p, pkt(1, 2, 16))
		sendFrom := func(b []byte) {
			// From the host's own socket address, so the session lookup matches.
			if _, err := d.e.uc.WriteToUDPAddrPort(b, s.l.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		before := s.l.Counters()
		sendFrom(dg) // first copy: accepted
		sendFrom(dg) // replay
		waitFor(t, func() bool { return s.l.Counters().Dropped(DropReplay) == before.Dropped(DropReplay)+1 })
		sendFrom([]byte{1, 2, 3})
		waitFor(t, func() bool { return s.l.Counters().Dropped(DropShort) > before.Dropped(DropShort) })
		sendFrom(make([]byte, 9000))
		waitFor(t, func() bool { return s.l.Counters().Dropped(DropTruncated) > before.Dropped(DropTruncated) })
		if psk == nil {
			bad := append([]byte(nil), dg...)
			bad[0] = 9
			sendFrom(bad)
			waitFor(t, func() bool { return s.l.Counters().Dropped(DropVersion) > before.Dropped(DropVersion) })
			bad = append([]byte(nil), dg...)
			Header(bad).put(MsgData, p.session+1, 1<<40)
			sendFrom(bad)
			waitFor(t, func() bool { return s.l.Counters().Dropped(DropUnknownSession) > before.Dropped(DropUnknownSession) })
			bad = append([]byte(nil), dg...)
			Header(bad).put(MsgData, p.session, 1<<41)
			bad[len(bad)-1] ^= 1
			sendFrom(bad)
			waitFor(t, func() bool { return s.l.Counters().Dropped(DropVCRC) > before.Dropped(DropVCRC) })
		} else {
			bad := append([]byte(nil), dg...)
			bad[20] ^= 1
			sendFrom(bad)
			waitFor(t, func() bool { return s.l.Counters().Dropped(DropAuth) > before.Dropped(DropAuth) })
		}
		// The session still works.
		a.Reset()
		s.sw.SetLFT(9, uint8(p.num))
		a.Send(pkt(9, 2, 4))
		recv(t, a, 1)
	})
}

// withHosts starts a switch of nports ports and a host dialing it for each GUID, and
// waits until every host is plugged in.
func withHosts(t *testing.T, nports int, cfg Config, guids ...uint64) (*testSwitch, []*Dialer, []*hostPort) {
	t.Helper()
	s := newTestSwitch(t, nports, cfg)
	var ds []*Dialer
	var hs []*hostPort
	for _, g := range guids {
		d, h := dial(t, s, g, cfg)
		ds, hs = append(ds, d), append(hs, h)
	}
	for _, h := range hs {
		h.waitLink(t, true)
	}
	return s, ds, hs
}

// eachAuth runs f as two subtests: links with an allow-list (psk nil) and with a PSK.
func eachAuth(t *testing.T, f func(t *testing.T, psk []byte)) {
	for _, psk := range [][]byte{nil, testPSK} {
		t.Run(map[bool]string{false: "allowlist", true: "psk"}[psk != nil], func(t *testing.T) { f(t, psk) })
	}
}

// encode returns the next data datagram p would send carrying pkt.
func encode(p *peer, pkt []byte) []byte {
	buf := make([]byte, maxDatagram)
	var n nonce
	return buf[:p.encodeData(buf, pkt, &n)]
}

// waitFor polls cond: the events it waits for happen in another goroutine that gives no
// other signal (a counter moves).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	os.Exit(m.Run())
}

// A Jack's cable follows the session: down until the dialer connects, up while it is,
// down when it ends; packets cross it both ways, and the cable counts them.
func TestJack(t *testing.T) {
	s := newTestSwitch(t, 2, Config{})
	_, far := dial(t, s, 0x51, Config{})
	far.waitLink(t, true)
	local := fabrictest.NewRecorder()
	j := NewJack(local)
	if local.LinkUp() || j.Up() {
		t.Fatal("jack cable up before a session")
	}
	hp := newHostPort() // notices the dialer's attach on the jack's UDP side
	d, err := Dial(s.l.Addr().String(), 0x52, &jackWatch{Port: j.UDP(), hp: hp}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	hp.waitLink(t, true)
	if !local.LinkUp() || !j.Up() {
		t.Fatal("jack cable down with a session")
	}
	pa, pb := 1, 2
	if d.Status().SwitchPort == 1 {
		pa, pb = 2, 1
	}
	p := pkt(uint16(pb), uint16(pa), 12)
	far.Send(p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := local.Wait(ctx, 1); err != nil || !bytes.Equal(got[0], p) {
		t.Fatalf("local port got %x, %v", got, err)
	}
	q := pkt(uint16(pa), uint16(pb), 12)
	local.Send(q)
	if got := recv(t, far, 1); !bytes.Equal(got[0], q) {
		t.Fatal("far port got something else")
	}
	if c := j.Cable().Counters(fabric.BtoA); c.Packets != 1 {
		t.Fatalf("cable counters %+v", c)
	}
	d.Close()
	hp.waitLink(t, false)
	if local.LinkUp() {
		t.Fatal("jack cable up after the session ended")
	}
}

// jackWatch passes Attach on to a Jack's UDP side and tells a hostPort about it.
type jackWatch struct {
	fabric.Port
	hp *hostPort
}

func (w *jackWatch) Attach(l fabric.Link) {
	w.Port.Attach(l)
	w.hp.Attach(l)
}

// A restarted switch answers the old session's keepalives with a disconnect, and the
// host reconnects at once, long before its link timeout.
func TestSwitchRestartHint(t *testing.T) {
	eachAuth(t, func(t *testing.T, psk []byte) {
		fc := clock.NewFake(time.Unix(1e9, 0))
		cfg := Config{Clock: fc, Keepalive: 100 * time.Millisecond, DeadAfter: 10 * time.Second, PSK: psk}
		s := newTestSwitch(t, 2, cfg)
		addr := s.l.Addr().String()
		d, a := dial(t, s, 0x61, cfg)
		a.waitLink(t, true)
		s.l.e.close()
		l2, err := Listen(addr, AllPorts(fabric.NewSwitch(fabric.SwitchConfig{Ports: 2})), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l2.Close)
		fc.Advance(100 * time.Millisecond) // the host's next keepalive
		waitFor(t, func() bool { return l2.Counters().Connects == 1 })
		if l2.Counters().StaleHints != 1 || d.Counters().Deaths != 0 {
			t.Fatalf("switch %+v host %+v", l2.Counters(), d.Counters())
		}
		waitFor(t, func() bool { return d.Status().Up })
	})
}

// A switch of 254 ports (IBA's most) takes 254 hosts, each on its own port, refuses the
// 255th with "switch full", and still forwards between its hosts.
func TestFullSize(t *testing.T) {
	const n = 254
	s := newTestSwitch(t, n, Config{})
	hosts := make([]*hostPort, n)
	dialers := make([]*Dialer, n)
	for i := range hosts {
		dialers[i], hosts[i] = dial(t, s, uint64(0x1000+i), Config{})
	}
	for _, h := range hosts {
		h.waitLink(t, true)
	}
	ports := map[int]bool{}
	for _, d := range dialers {
		ports[d.Status().SwitchPort] = true
	}
	if len(ports) != n || len(s.l.Peers()) != n {
		t.Fatalf("%d distinct ports, %d sessions", len(ports), len(s.l.Peers()))
	}
	extra, _ := dial(t, s, 0x9999, Config{})
	waitFor(t, func() bool { return strings.Contains(extra.Status().Refusal, "switch full: all 254 ports") })
	first, last := dialers[0].Status().SwitchPort, dialers[n-1].Status().SwitchPort
	p := pkt(uint16(last), uint16(first), 40)
	hosts[0].Send(p)
	if got := recv(t, hosts[n-1], 1); !bytes.Equal(got[0], p) {
		t.Fatal("port 1 → port 254 did not arrive intact")
	}
}

// A coalesced run (UDP_GRO) is split at its segment size: every datagram of it is
// delivered, in order, the last one shorter.
func TestGROSplit(t *testing.T) {
	sink := fabrictest.NewRecorder()
	h := newRxHarness(t, testPSK, sink)
	h.connect()
	var run []byte
	var want [][]byte
	for i := range 5 {
		p := pkt(2, 1, 100)
		if i == 4 {
			p = pkt(2, 1, 40)
		}
		want = append(want, p)
		run = append(run, h.data(p)...)
	}
	seg := len(h.data(want[0])) // same length as the others
	h.hp.txSeq.Add(^uint64(0))  // that datagram was never sent
	h.injectGRO(run, seg)
	got := sink.Packets()
	if len(got) != 5 {
		t.Fatalf("%d packets delivered, want 5 (counters %+v)", len(got), h.l.Counters())
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
}

// countHandler counts the records of one message at each level.
type countHandler struct {
	msg    string
	mu     sync.Mutex
	levels map[slog.Level]int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countHandler) WithGroup(string) slog.Handler            { return h }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.mu.Lock()
		h.levels[r.Level]++
		h.mu.Unlock()
	}
	return nil
}

func (h *countHandler) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.levels[l]
}

// A refused host retries on its back-off; the switch logs its refusal at WARN once (and
// again when the reason changes), the retries at DEBUG, and counts each.
func TestRefusalLoggedOnce(t *testing.T) {
	h := &countHandler{msg: "udplink: refused host", levels: map[slog.Level]int{}}
	s := newTestSwitch(t, 4, Config{Logger: slog.New(h)})
	s.ports.Reserve(0x0002c90300000301, "pib_0 port 1")
	dial(t, s, 0x0002c90300000301, Config{ReconnectMin: 5 * time.Millisecond, ReconnectMax: 10 * time.Millisecond})
	waitFor(t, func() bool { return s.l.Counters().Refused >= 5 })
	if w, d := h.count(slog.LevelWarn), h.count(slog.LevelDebug); w != 1 || d < 4 {
		t.Fatalf("%d refusals counted, logged %d at WARN and %d at DEBUG: want 1 at WARN, the rest at DEBUG",
			s.l.Counters().Refused, w, d)
	}
	// Another host's refusal is its own.
	s.ports.Reserve(0x0002c90300000302, "pib_0 port 2")
	dial(t, s, 0x0002c90300000302, Config{ReconnectMin: 5 * time.Millisecond, ReconnectMax: 10 * time.Millisecond})
	waitFor(t, func() bool { return h.count(slog.LevelWarn) == 2 })
}
