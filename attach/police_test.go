package attach_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/wire"
)

// udQP is a UD QP in RTS with receives posted, on port 1 of d.
type udQP struct {
	qp  *hca.QP
	cq  *hca.CQ
	mr  *hca.MR
	buf []byte
}

const testQKey = 0x1234

func newUDQP(t *testing.T, d *hca.Device) *udQP {
	t.Helper()
	ctx := d.Open()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeUD,
		Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	a := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: testQKey}
	if err := qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{QPState: hca.QPStateRTR}
	if err := qp.Modify(&a, hca.QPAttrState); err != nil {
		t.Fatal(err)
	}
	a = hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 1}
	if err := qp.Modify(&a, hca.QPAttrState|hca.QPAttrSQPSN); err != nil {
		t.Fatal(err)
	}
	u := &udQP{qp: qp, cq: cq, buf: make([]byte, 16*256)}
	if u.mr, err = pd.RegMR(u.buf, hca.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if _, err := qp.PostRecv([]hca.RecvWR{{WRID: uint64(i), SGL: []hca.SGE{{Addr: u.mr.Addr() + uint64(i*256), Length: 256, LKey: u.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// forged is a UD SEND-only packet with every field the daemon checks chosen by the test.
type forged struct {
	vl         uint8
	slid, dlid uint16
	pkey       uint16
	dqp, sqp   uint32
	qkey       uint32
	payload    []byte
}

func (f forged) bytes() []byte {
	n := wire.LRHLen + wire.BTHLen + wire.DETHLen + len(f.payload)
	n += wire.PadFor(n) + wire.ICRCLen
	b := make([]byte, n)
	lrh := wire.LRH(b)
	lrh.SetVL(f.vl)
	lrh.SetLNH(wire.LNHLocal)
	lrh.SetDLID(f.dlid)
	lrh.SetSLID(f.slid)
	lrh.SetPktLen(uint16(n / 4))
	bth := wire.BTH(b[wire.LRHLen:])
	bth.SetOpCode(wire.UDSendOnly)
	bth.SetPadCnt(uint8(wire.PadFor(wire.LRHLen + wire.BTHLen + wire.DETHLen + len(f.payload))))
	bth.SetPKey(f.pkey)
	bth.SetDestQP(f.dqp)
	bth.SetPSN(1)
	deth := b[wire.LRHLen+wire.BTHLen:]
	binary.BigEndian.PutUint32(deth[0:], f.qkey)
	binary.BigEndian.PutUint32(deth[4:], f.sqp&0xFFFFFF)
	copy(b[wire.LRHLen+wire.BTHLen+wire.DETHLen:], f.payload)
	wire.SetICRCPending(b)
	return b
}

func counters(t *testing.T, f *inproc.Fabric, s *attach.Session) map[string]uint64 {
	t.Helper()
	for _, si := range f.Attached() {
		if si.ID == s.ID() {
			return si.Counters
		}
	}
	t.Fatalf("session %d not listed", s.ID())
	return nil
}

// waitCounter waits until counter name of s reaches want.
func waitCounter(t *testing.T, f *inproc.Fabric, s *attach.Session, name string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := counters(t, f, s)[name]
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d (%v)", name, got, want, counters(t, f, s))
		}
		time.Sleep(time.Millisecond)
	}
}

// received polls victim's CQ for up to d and returns what arrived.
func received(u *udQP, d time.Duration) []hca.WC {
	var out []hca.WC
	var wc [4]hca.WC
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		n := u.cq.Poll(wc[:])
		out = append(out, wc[:n]...)
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// An attached process that forges what its QPs could not send has the packets dropped
// and counted by the daemon; the victim receives nothing. The same packet with honest
// fields arrives, so the forgeries fail for the field they change.
func TestPolicing(t *testing.T) {
	f, path := startFabric(t)
	attacker, victim := dial(t, path), dial(t, path)
	a := newUDQP(t, attacker.Device("pib_0"))
	v := newUDQP(t, victim.Device("pib_1"))
	other := newUDQP(t, victim.Device("pib_0")) // another process's QP on the attacker's HCA
	aLID := attacker.Device("pib_0").Port(1).LID()
	vLID := victim.Device("pib_1").Port(1).LID()
	honest := forged{slid: aLID, dlid: vLID, pkey: 0xFFFF, dqp: v.qp.Num(), sqp: a.qp.Num(), qkey: testQKey, payload: []byte("hello")}
	send := func(p forged) {
		attacker.Device("pib_0").Port(1).Transmit([][]byte{p.bytes()})
	}

	send(honest)
	if got := received(v, 200*time.Millisecond); len(got) != 1 || got[0].Status != hca.WCSuccess || got[0].SrcQP != a.qp.Num() {
		t.Fatalf("honest packet: %+v", got)
	}

	cases := []struct {
		name, counter string
		mutate        func(*forged)
	}{
		{"SLID of another port", "police_slid", func(p *forged) { p.slid = vLID }},
		{"source QP of another process", "police_src_qp", func(p *forged) { p.sqp = other.qp.Num() }},
		{"source QP nobody has", "police_src_qp", func(p *forged) { p.sqp = 0x123456 }},
		{"P_Key not in the table", "police_pkey", func(p *forged) { p.pkey = 0x8005 }},
		{"to QP0", "police_qp0", func(p *forged) { p.dqp = 0 }},
		{"on VL15", "police_qp0", func(p *forged) { p.vl = 15 }},
		{"from QP1, not a CM MAD", "police_mad", func(p *forged) { p.sqp = 1; p.qkey = hca.GSIQKey }},
		{"controlled Q_Key", "police_qkey", func(p *forged) { p.qkey = 0x80000001 }},
	}
	for _, c := range cases {
		before := counters(t, f, attacker)[c.counter]
		p := honest
		c.mutate(&p)
		send(p)
		waitCounter(t, f, attacker, c.counter, before+1)
		if got := received(v, 50*time.Millisecond); len(got) != 0 {
			t.Errorf("%s: the victim received %+v", c.name, got)
		}
	}
	if got := counters(t, f, attacker)["tx_packets"]; got != 1 {
		t.Errorf("tx_packets = %d, want only the honest one", got)
	}
}
