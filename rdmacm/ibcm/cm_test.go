package ibcm_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

const service = 0x0000000001060000 | 7471 // RDMA_PS_TCP port 7471 (IBA A11)

// rig is two HCAs on a switch with a CM each, on fake time, with both cables captured
// and a filter that can drop CM messages on their way out of either HCA.
type rig struct {
	clk  *clock.Fake
	f    *hcatest.Fabric
	cm   [2]*ibcm.CM
	pcap string
	cw   *fabric.CaptureWriter

	mu    sync.Mutex
	drop  map[dropKey]int // (sender, attribute) → how many more to drop
	dead  [2]atomic.Bool  // drop everything a side sends
	sent  map[dropKey]int // CM messages that left each HCA, by attribute
	wires [][]byte        // every CM MAD that left HCA 0, in order
}

type dropKey struct {
	from int
	attr uint16
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{clk: clock.NewFake(time.Unix(1_700_000_000, 0)), drop: map[dropKey]int{}, sent: map[dropKey]int{}}
	r.pcap = filepath.Join(t.TempDir(), "cm.pcap")
	f, err := os.Create(r.pcap)
	if err != nil {
		t.Fatal(err)
	}
	r.cw = fabric.NewCaptureWriter(f, fabric.CaptureOptions{Clock: r.clk})
	t.Cleanup(func() { f.Close() })
	capture := fabric.CaptureWrapper(r.cw, 0)
	r.f = hcatest.NewFabric(t, 2, hcatest.Options{Clock: r.clk, Wrap: func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if d != fabric.AtoB { // only what the HCA sends: each packet captured once
			return l
		}
		l = capture(l)
		return fabric.LinkFunc(func(pkts [][]byte) {
			keep := pkts[:0:0]
			for _, p := range pkts {
				if !r.pass(i, p) {
					continue
				}
				keep = append(keep, p)
			}
			if len(keep) > 0 {
				l.Send(keep)
			}
		})
	}})
	for i := range r.cm {
		r.cm[i] = ibcm.New(ibcm.HCAPort(r.f.Devs[i].Port(1)), ibcm.Options{Clock: r.clk})
	}
	t.Cleanup(func() {
		for _, c := range r.cm {
			c.Close()
		}
	})
	return r
}

// pass decides whether HCA i's packet p goes out, and records CM messages.
func (r *rig) pass(i int, p []byte) bool {
	const madOff = wire.LRHLen + wire.BTHLen + wire.DETHLen
	if len(p) < madOff+wire.MADLen || p[madOff+1] != wire.MgmtClassCM {
		return !r.dead[i].Load()
	}
	attr := binary.BigEndian.Uint16(p[madOff+16:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead[i].Load() {
		return false
	}
	k := dropKey{i, attr}
	if r.drop[k] > 0 {
		r.drop[k]--
		return false
	}
	r.sent[k]++
	if i == 0 {
		r.wires = append(r.wires, append([]byte(nil), p[madOff:madOff+wire.MADLen]...))
	}
	return true
}

func (r *rig) dropNext(from int, attr uint16, n int) {
	r.mu.Lock()
	r.drop[dropKey{from, attr}] += n
	r.mu.Unlock()
}

func (r *rig) count(from int, attr uint16) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[dropKey{from, attr}]
}

// checkCapture has tshark decode every captured frame cleanly and show the messages.
func (r *rig) checkCapture(t *testing.T, attrs ...string) {
	t.Helper()
	if err := r.cw.Close(); err != nil {
		t.Fatal(err)
	}
	fabrictest.RequireCleanDecode(t, r.pcap, fabrictest.NoEoIBHeuristic...)
	seen := map[string]bool{}
	for _, row := range fabrictest.TsharkFields(t, r.pcap, "infiniband.mad.attributeid") {
		seen[row[0]] = true
	}
	for _, a := range attrs {
		if !seen[a] {
			t.Errorf("capture has no CM message with attribute %s (has %v)", a, seen)
		}
	}
}

// events collects an ID's events.
type events struct{ ch chan ev }

type ev struct {
	id *ibcm.ID
	e  ibcm.Event
}

func newEvents() *events { return &events{ch: make(chan ev, 64)} }

func (e *events) handler(id *ibcm.ID, x *ibcm.Event) { e.ch <- ev{id, *x} }

// want waits for the next event and checks its type.
func (e *events) want(t *testing.T, typ ibcm.EventType) ev {
	t.Helper()
	select {
	case x := <-e.ch:
		if x.e.Type != typ {
			t.Fatalf("event %v (reason %d), want %v", x.e.Type, x.e.Reason, typ)
		}
		return x
	case <-time.After(5 * time.Second):
		t.Fatalf("no %v event", typ)
	}
	return ev{}
}

// none checks that no event is pending after the CM goroutines had a moment.
func (e *events) none(t *testing.T) {
	t.Helper()
	select {
	case x := <-e.ch:
		t.Fatalf("unexpected event %v", x.e.Type)
	case <-time.After(20 * time.Millisecond):
	}
}

// path is the SA PathRecord from HCA from to HCA to, as rdma_cm would resolve it.
func (r *rig) path(from, to int) sa.Path {
	src, _ := r.f.Devs[from].Port(1).GID(0)
	dst, _ := r.f.Devs[to].Port(1).GID(0)
	return sa.Path{SGID: src, DGID: dst, SLID: uint16(from + 1), DLID: uint16(to + 1), PKey: 0xFFFF,
		MTU: uint8(hca.MTU4096), Rate: 3, PacketLifeTime: 18, HopLimit: 0}
}

func (r *rig) req(private string) ibcm.ReqParam {
	return ibcm.ReqParam{
		ServiceID: service, QPN: 0x123, QPType: hca.QPTypeRC, StartingPSN: 0xABCDE, PKey: 0xFFFF,
		Path: r.path(0, 1), ResponderRes: 4, InitiatorDepth: 4,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, RetryCount: 7, RNRRetryCount: 7,
		MaxCMRetries: 15, Private: []byte(private),
	}
}

// advance moves fake time in steps, letting the CM goroutines run between them.
func (r *rig) advance(d, step time.Duration) {
	for t := time.Duration(0); t < d; t += step {
		r.clk.Advance(step)
		time.Sleep(time.Millisecond)
	}
}

// connect runs REQ → REP → RTU and returns the two established IDs.
func connect(t *testing.T, r *rig, ae, pe *events) (active, passive *ibcm.ID) {
	t.Helper()
	active = r.cm[0].NewID(ae.handler, nil)
	if err := active.SendReq(r.req("hello from A")); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventReqReceived)
	passive = x.id
	q := x.e.Req
	if q.QPN != 0x123 || q.StartingPSN != 0xABCDE || q.ServiceID != service || q.Path.DLID != 1 || q.Path.SLID != 2 ||
		q.Path.MTU != uint8(hca.MTU4096) || q.RNRRetryCount != 7 || q.MaxCMRetries != 15 || q.Path.PacketLifeTime != 18 ||
		!bytes.HasPrefix(x.e.Private, []byte("hello from A")) || len(x.e.Private) != wire.CMReqPrivateLen {
		t.Fatalf("REQ received as %+v, private %q", q, x.e.Private)
	}
	if err := passive.SendRep(ibcm.RepParam{QPN: 0x456, StartingPSN: 0x777, ResponderRes: 4, InitiatorDepth: 4,
		RNRRetryCount: 7, Private: []byte("hello from B")}); err != nil {
		t.Fatal(err)
	}
	y := ae.want(t, ibcm.EventRepReceived)
	if y.e.Rep.QPN != 0x456 || y.e.Rep.StartingPSN != 0x777 || !bytes.HasPrefix(y.e.Private, []byte("hello from B")) {
		t.Fatalf("REP received as %+v", y.e.Rep)
	}
	if err := active.SendRTU(nil); err != nil {
		t.Fatal(err)
	}
	pe.want(t, ibcm.EventRTUReceived)
	if active.State() != ibcm.Established || passive.State() != ibcm.Established {
		t.Fatalf("states %v / %v", active.State(), passive.State())
	}
	return active, passive
}

func listen(t *testing.T, r *rig, pe *events) *ibcm.ID {
	t.Helper()
	l := r.cm[1].NewID(pe.handler, nil)
	if err := l.Listen(service, 0); err != nil {
		t.Fatal(err)
	}
	return l
}

// disconnect runs DREQ → DREP and TIMEWAIT on both sides.
func disconnect(t *testing.T, r *rig, active, passive *ibcm.ID, ae, pe *events) {
	t.Helper()
	if err := active.SendDReq(nil); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventDReqReceived)
	if err := x.id.SendDRep(nil); err != nil {
		t.Fatal(err)
	}
	ae.want(t, ibcm.EventDRepReceived)
	if active.State() != ibcm.TimeWait || passive.State() != ibcm.TimeWait {
		t.Fatalf("states after DREP %v / %v, want TIMEWAIT", active.State(), passive.State())
	}
	r.advance(3*time.Second, 500*time.Millisecond) // 4.096 µs × 2^19 ≈ 2.1 s
	ae.want(t, ibcm.EventTimeWaitExit)
	pe.want(t, ibcm.EventTimeWaitExit)
}

func TestConnectDisconnect(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	listen(t, r, pe)
	a, p := connect(t, r, ae, pe)
	disconnect(t, r, a, p, ae, pe)
	if a.State() != ibcm.Idle || p.State() != ibcm.Idle {
		t.Fatalf("after TIMEWAIT: %v / %v", a.State(), p.State())
	}
	for _, c := range []struct {
		from int
		attr uint16
	}{{0, wire.AttrCMReq}, {1, wire.AttrCMRep}, {0, wire.AttrCMRTU}, {0, wire.AttrCMDReq}, {1, wire.AttrCMDRep}} {
		if n := r.count(c.from, c.attr); n != 1 {
			t.Errorf("HCA %d sent attribute %#x %d times, want once", c.from, c.attr, n)
		}
	}
	r.checkCapture(t, "0x0010", "0x0013", "0x0014", "0x0015", "0x0016")
	// tshark reads the REQ's fields where IBA 12.6.5 puts them.
	rows := fabrictest.TsharkFields(t, r.pcap, "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn",
		"infiniband.cm.req.serviceid.dport", "infiniband.cm.rep.localqpn")
	var req, rep bool
	for _, row := range rows {
		if row[0] == "0x000123" && row[1] == "0x0abcde" && row[2] == "0x1d2f" {
			req = true
		}
		if row[3] == "0x000456" {
			rep = true
		}
	}
	if !req || !rep {
		t.Errorf("tshark fields %v", rows)
	}
}

func TestRejectWithPrivateData(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	listen(t, r, pe)
	a := r.cm[0].NewID(ae.handler, nil)
	if err := a.SendReq(r.req("")); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventReqReceived)
	if err := x.id.SendRej(wire.RejConsumerReject, nil, []byte("go away")); err != nil {
		t.Fatal(err)
	}
	y := ae.want(t, ibcm.EventRejReceived)
	if y.e.Reason != wire.RejConsumerReject || !bytes.HasPrefix(y.e.Private, []byte("go away")) {
		t.Fatalf("REJ reason %d private %q", y.e.Reason, y.e.Private[:8])
	}
	if a.State() != ibcm.Idle {
		t.Fatalf("active state %v", a.State())
	}
	r.advance(2*time.Minute, 5*time.Second)
	ae.none(t) // no REQ_ERROR after a REJ
	if n := r.count(0, wire.AttrCMReq); n != 1 {
		t.Fatalf("REQ sent %d times after the REJ", n)
	}
	r.checkCapture(t, "0x0010", "0x0012")
}

func TestNoListenerRejects(t *testing.T) {
	r := newRig(t)
	ae := newEvents()
	a := r.cm[0].NewID(ae.handler, nil)
	if err := a.SendReq(r.req("")); err != nil {
		t.Fatal(err)
	}
	y := ae.want(t, ibcm.EventRejReceived)
	if y.e.Reason != wire.RejInvalidServiceID {
		t.Fatalf("REJ reason %d, want 8 (invalid service ID)", y.e.Reason)
	}
}

// TestLostMessages: a lost REQ, REP, RTU or DREQ is recovered by retransmission.
func TestLostMessages(t *testing.T) {
	for _, c := range []struct {
		name   string
		from   int
		attr   uint16
		resend int // the side whose timer resends
	}{{"REQ", 0, wire.AttrCMReq, 0}, {"REP", 1, wire.AttrCMRep, 1}, {"RTU", 0, wire.AttrCMRTU, 1}, {"DREQ", 0, wire.AttrCMDReq, 0}, {"DREP", 1, wire.AttrCMDRep, 0}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			ae, pe := newEvents(), newEvents()
			listen(t, r, pe)
			r.dropNext(c.from, c.attr, 1)
			a := r.cm[0].NewID(ae.handler, nil)
			if err := a.SendReq(r.req("")); err != nil {
				t.Fatal(err)
			}
			if c.attr == wire.AttrCMReq {
				pe.none(t)
				r.advance(7*time.Second, time.Second) // 4.3 s + 2 × 1.07 s
			}
			x := pe.want(t, ibcm.EventReqReceived)
			p := x.id
			if err := p.SendRep(ibcm.RepParam{QPN: 0x456, StartingPSN: 1, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			if c.attr == wire.AttrCMRep {
				ae.none(t)
				r.advance(5*time.Second, time.Second) // the REQ's local CM response timeout
			}
			ae.want(t, ibcm.EventRepReceived)
			if err := a.SendRTU(nil); err != nil {
				t.Fatal(err)
			}
			if c.attr == wire.AttrCMRTU {
				// The passive side resends its REP; the active side answers with RTU again.
				pe.none(t)
				r.advance(5*time.Second, time.Second)
			}
			pe.want(t, ibcm.EventRTUReceived)
			if err := a.SendDReq(nil); err != nil {
				t.Fatal(err)
			}
			if c.attr == wire.AttrCMDReq {
				pe.none(t)
				r.advance(7*time.Second, time.Second)
			}
			x = pe.want(t, ibcm.EventDReqReceived)
			if err := x.id.SendDRep(nil); err != nil {
				t.Fatal(err)
			}
			if c.attr == wire.AttrCMDRep {
				// The DREQ is resent; the passive side in TIMEWAIT answers it again.
				ae.none(t)
				r.advance(7*time.Second, time.Second)
			}
			ae.want(t, ibcm.EventDRepReceived)
			if n := r.count(c.from, c.attr); n != 1 {
				t.Fatalf("%s got through %d times, want 1 (after the lost one)", c.name, n)
			}
			if st := r.cm[c.resend].Stats(); st.Retransmits == 0 {
				t.Fatalf("no retransmission counted: %+v", st)
			}
		})
	}
}

// TestPeerVanishes: with nobody answering, REQ is sent 1 + MaxCMRetries times, then
// REQ_ERROR (rdma_cm's UNREACHABLE).
func TestPeerVanishes(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	listen(t, r, pe)
	r.dead[1].Store(true)
	a := r.cm[0].NewID(ae.handler, nil)
	p := r.req("")
	p.MaxCMRetries = 3
	if err := a.SendReq(p); err != nil {
		t.Fatal(err)
	}
	r.advance(40*time.Second, time.Second)
	ae.want(t, ibcm.EventReqError)
	if n := r.count(0, wire.AttrCMReq); n != 4 {
		t.Fatalf("REQ sent %d times, want 1 + 3 retries", n)
	}
	if a.State() != ibcm.Idle {
		t.Fatalf("state %v", a.State())
	}
}

// TestDuplicateReqInTimeWait: a REQ for a connection the passive side holds in TIMEWAIT
// is stale: REJ 10 (IBA 12.9.8.3.1).
func TestDuplicateReqInTimeWait(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	listen(t, r, pe)
	a, p := connect(t, r, ae, pe)
	reqMAD := r.wires[0]
	if wire.MAD(reqMAD).AttrID() != wire.AttrCMReq {
		t.Fatalf("first CM message from A is %#x", wire.MAD(reqMAD).AttrID())
	}
	if err := a.SendDReq(nil); err != nil {
		t.Fatal(err)
	}
	pe.want(t, ibcm.EventDReqReceived).id.SendDRep(nil)
	ae.want(t, ibcm.EventDRepReceived)
	if p.State() != ibcm.TimeWait {
		t.Fatalf("passive state %v", p.State())
	}
	// The REQ again, from A's port, as a peer that lost track would send it.
	if err := r.f.Devs[0].Port(1).SendMAD(hca.MADAddr{DLID: 2, QPN: 1, QKey: hca.GSIQKey}, reqMAD); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.count(1, wire.AttrCMRej) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if r.count(1, wire.AttrCMRej) != 1 {
		t.Fatal("no REJ for the stale REQ")
	}
	pe.none(t) // no new connection request
	r.checkCapture(t, "0x0012")
	rows := fabrictest.TsharkFields(t, r.pcap, "infiniband.cm.rej.reason")
	found := false
	for _, row := range rows {
		if row[0] == "10" || row[0] == "0x000a" {
			found = true
		}
	}
	if !found {
		t.Fatalf("tshark shows no REJ reason 10: %v", rows)
	}
}

func TestMRAExtendsTheWait(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	listen(t, r, pe)
	a := r.cm[0].NewID(ae.handler, nil)
	p := r.req("")
	p.MaxCMRetries = 1
	if err := a.SendReq(p); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventReqReceived)
	if err := x.id.SendMRA(24, nil); err != nil { // ≈ 69 s
		t.Fatal(err)
	}
	ae.want(t, ibcm.EventMRAReceived)
	r.advance(30*time.Second, time.Second) // past REQ's timeout × retries
	ae.none(t)
	if n := r.count(0, wire.AttrCMReq); n != 1 {
		t.Fatalf("REQ resent %d times during the MRA wait", n-1)
	}
	if err := x.id.SendRep(ibcm.RepParam{QPN: 9}); err != nil {
		t.Fatal(err)
	}
	ae.want(t, ibcm.EventRepReceived)
}

func TestSIDR(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	const udService = 0x0000000001110000 | 7174 // RDMA_PS_UDP
	l := r.cm[1].NewID(pe.handler, nil)
	if err := l.Listen(udService, 0); err != nil {
		t.Fatal(err)
	}
	a := r.cm[0].NewID(ae.handler, nil)
	if err := a.SendSIDRReq(ibcm.SIDRReqParam{ServiceID: udService, PKey: 0xFFFF, DLID: 2, Timeout: 20, MaxRetries: 3, Private: []byte("udp?")}); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventSIDRReqReceived)
	if x.e.PKey != 0xFFFF || !bytes.HasPrefix(x.e.Private, []byte("udp?")) {
		t.Fatalf("SIDR_REQ received as %+v", x.e)
	}
	if err := x.id.SendSIDRRep(ibcm.SIDRRepParam{Status: wire.SIDRStatusOK, QPN: 0x321, QKey: 0x01234567}); err != nil {
		t.Fatal(err)
	}
	y := ae.want(t, ibcm.EventSIDRRepReceived)
	if y.e.SIDRStatus != 0 || y.e.QPN != 0x321 || y.e.QKey != 0x01234567 {
		t.Fatalf("SIDR_REP %+v", y.e)
	}
	// Nobody listens: status 1.
	b := r.cm[0].NewID(ae.handler, nil)
	if err := b.SendSIDRReq(ibcm.SIDRReqParam{ServiceID: udService + 1, PKey: 0xFFFF, DLID: 2, Timeout: 20}); err != nil {
		t.Fatal(err)
	}
	if z := ae.want(t, ibcm.EventSIDRRepReceived); z.e.SIDRStatus != wire.SIDRStatusNoService {
		t.Fatalf("status %d, want 1", z.e.SIDRStatus)
	}
	r.checkCapture(t, "0x0017", "0x0018")
}

// TestLoopback: both ends on one port (a host connecting to itself) must work: the CM
// never sends with its lock held.
func TestLoopback(t *testing.T) {
	r := newRig(t)
	ae, pe := newEvents(), newEvents()
	l := r.cm[0].NewID(pe.handler, nil)
	if err := l.Listen(service, 0); err != nil {
		t.Fatal(err)
	}
	a := r.cm[0].NewID(ae.handler, nil)
	p := r.req("")
	p.Path = r.path(0, 0)
	if err := a.SendReq(p); err != nil {
		t.Fatal(err)
	}
	x := pe.want(t, ibcm.EventReqReceived)
	if err := x.id.SendRep(ibcm.RepParam{QPN: 0x456}); err != nil {
		t.Fatal(err)
	}
	ae.want(t, ibcm.EventRepReceived)
	if err := a.SendRTU(nil); err != nil {
		t.Fatal(err)
	}
	pe.want(t, ibcm.EventRTUReceived)
}
