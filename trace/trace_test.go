package trace

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/wire"
)

// cmREQ builds a UD packet from QP1 to QP1 carrying a CM REQ MAD.
func cmREQ() []byte {
	n := wire.LRHLen + wire.BTHLen + wire.DETHLen + wire.MADLen + wire.ICRCLen
	b := make([]byte, n)
	l := wire.LRH(b)
	l.SetSLID(1)
	l.SetDLID(2)
	l.SetPktLen(uint16(n / 4))
	l.SetLNH(wire.LNHLocal)
	h := wire.BTH(b[wire.LRHLen:])
	h.SetOpCode(wire.UDSendOnly)
	h.SetPKey(0xFFFF)
	h.SetDestQP(1)
	h.SetPSN(7)
	d := wire.DETH(b[wire.LRHLen+wire.BTHLen:])
	d.SetQKey(0x80010000)
	d.SetSrcQP(1)
	wire.NewCMMAD(b[wire.LRHLen+wire.BTHLen+wire.DETHLen:][:wire.MADLen], wire.AttrCMReq, 0x1234)
	return b
}

func TestDecodeAndText(t *testing.T) {
	disable := Enable()
	defer disable()
	from := Next()
	Packet("pib_0", 1, DirTx, 0, cmREQ())
	Drop("pib_1", 1, DirRx, "drop_icrc", cmREQ()[:20])
	n, _, _ := Read(from, make([]Event, 8))
	if n != 2 {
		t.Fatalf("%d events", n)
	}
	evs := make([]Event, 2)
	Read(from, evs)
	cm := evs[0]
	if cm.Kind != KindCM || cm.QPN != 1 || !cm.Pkt.IsCM() || cm.Pkt.MADAttr != wire.AttrCMReq || cm.Pkt.MADTID != 0x1234 {
		t.Fatalf("CM packet recorded as %+v", cm)
	}
	if txt := cm.ToRecord("daemon", 1).Text; txt != "cm tx pib_0/1 qp 0x1 LRH 1→2 sl 0 vl 0 BTH UDSendOnly dqp 0x1 psn 0x7 pkey 0xffff DETH qkey 0x80010000 sqp 0x1 CM REQ tid 0x1234 payload 256" {
		t.Errorf("text %q", txt)
	}
	drop := evs[1]
	if drop.Kind != KindDrop || drop.What != "drop_icrc" || drop.Pkt.Valid {
		t.Fatalf("drop recorded as %+v", drop)
	}
	if txt := drop.ToRecord("1234", 1234).Text; !strings.HasPrefix(txt, "drop rx pib_1/1 drop_icrc: LRH 1→2") || !strings.HasSuffix(txt, "malformed") {
		t.Errorf("drop text %q", txt)
	}
}

func TestRingOverwritesAndCountsLost(t *testing.T) {
	disable := Enable()
	defer disable()
	from := Next()
	for i := range RingSize + 10 {
		Add(&Event{Kind: KindAPI, What: "x", A: uint64(i)})
	}
	buf := make([]Event, 4)
	n, next, lost := Read(from, buf)
	if n != 4 || lost != 10 || buf[0].A != 10 || buf[0].Seq != from+10 || next != from+14 {
		t.Fatalf("read after overrun: n %d lost %d first %+v next %d (from %d)", n, lost, buf[0], next, from)
	}
	if n, _, lost := Read(from+RingSize+10, buf); n != 0 || lost != 0 {
		t.Fatalf("read at the end: n %d lost %d", n, lost)
	}
}

func TestOffRecordsNothing(t *testing.T) {
	if On() {
		t.Fatal("tracing on with no reader")
	}
	before := Next()
	Add(&Event{Kind: KindAPI})
	Mark("nobody reads")
	if Next() != before {
		t.Fatal("an event was recorded with tracing off")
	}
	d1, d2 := Enable(), Enable()
	d1()
	d1() // idempotent
	if !On() {
		t.Fatal("one reader left, tracing off")
	}
	d2()
	if On() {
		t.Fatal("no reader left, tracing on")
	}
}

func TestSubscribeRings(t *testing.T) {
	disable := Enable()
	defer disable()
	bell, cancel := Subscribe()
	defer cancel()
	go Mark("ding")
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	select {
	case <-bell:
	case <-ctx.Done():
		t.Fatal("the doorbell did not ring")
	}
}

func TestFilter(t *testing.T) {
	var pk Event
	pk.Kind, pk.Dir = KindPacket, DirRx
	pk.Pkt.Decode(cmREQ())
	api := Event{Kind: KindAPI, QPN: 0x48}
	mark := Event{Kind: KindMark}
	for _, c := range []struct {
		f    Filter
		ev   *Event
		want bool
	}{
		{Filter{}, &pk, true},
		{Filter{QPN: 1}, &pk, true},
		{Filter{QPN: 0x48}, &pk, false},
		{Filter{QPN: 0x48}, &api, true},
		{Filter{LID: 2}, &pk, true},
		{Filter{LID: 3}, &pk, false},
		{Filter{LID: 2}, &api, false},
		{Filter{Kinds: []Kind{KindCM, KindAPI}}, &api, true},
		{Filter{Kinds: []Kind{KindDrop}}, &api, false},
		{Filter{Kinds: []Kind{KindDrop}, QPN: 9}, &mark, true},
	} {
		if got := c.f.Match(c.ev); got != c.want {
			t.Errorf("%+v on %v: %v, want %v", c.f, c.ev.Kind, got, c.want)
		}
	}
	if ks, err := ParseKinds("packet, drop,cm"); err != nil || len(ks) != 3 || ks[2] != KindCM {
		t.Errorf("ParseKinds: %v %v", ks, err)
	}
	if _, err := ParseKinds("packet,bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("ParseKinds(bogus): %v", err)
	}
}

// FuzzDecode checks that decoding and describing any bytes never panics.
func FuzzDecode(f *testing.F) {
	f.Add(cmREQ())
	f.Add(cmREQ()[:30])
	f.Fuzz(func(t *testing.T, b []byte) {
		ev := Event{Kind: KindPacket, Dir: DirRx}
		ev.Pkt.Decode(b)
		_ = ev.ToRecord("x", 1)
		if ev.Pkt.Len != uint32(len(b)) {
			t.Fatal("length")
		}
	})
}

// BenchmarkOff is the cost of a hook with no one tracing: the check alone.
func BenchmarkOff(b *testing.B) {
	raw := cmREQ()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if On() {
			Packet("pib_0", 1, DirTx, 0, raw)
		}
	}
}

// BenchmarkPacketOn is the cost of recording a packet while someone traces.
func BenchmarkPacketOn(b *testing.B) {
	disable := Enable()
	defer disable()
	raw := cmREQ()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Packet("pib_0", 1, DirTx, 0, raw)
	}
}

func TestDecodeXRCETH(t *testing.T) {
	op := wire.Opcode(0xA4) // XRC SEND Only: BTH, XRCETH, payload
	n := wire.LRHLen + wire.BTHLen + wire.XRCETHLen + 8 + wire.ICRCLen
	b := make([]byte, n)
	l := wire.LRH(b)
	l.SetLNH(wire.LNHLocal)
	l.SetDLID(3)
	l.SetSLID(4)
	l.SetPktLen(uint16(n / 4))
	h := wire.BTH(b[wire.LRHLen:])
	h.SetOpCode(op)
	h.SetDestQP(0x48)
	wire.XRCETH(b[wire.LRHLen+wire.BTHLen:]).SetSRQ(0x2a)
	var hd Headers
	hd.Decode(b)
	ev := Event{Kind: KindPacket, Dir: DirTx, Dev: "pib_0", Port: 1, Pkt: hd}
	if s := ev.ToRecord("daemon", 1).Text; !hd.Valid || !strings.Contains(s, "XRCSendOnly") || !strings.Contains(s, "XRCETH srq 0x2a") {
		t.Fatalf("XRC packet: %q", s)
	}
}
