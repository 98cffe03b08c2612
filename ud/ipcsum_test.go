package ud_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/wire"
)

// ipoibTCP is an IPoIB message (4-byte header, IPv4, TCP) whose TCP checksum field holds
// the pseudo-header sum, as a kernel hands it over with CHECKSUM_PARTIAL; want is the same
// packet with the checksum completed.
func ipoibTCP(payload int) (msg, want []byte) {
	ip := make([]byte, 20+20+payload)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[8], ip[9] = 64, inet.ProtoTCP
	copy(ip[12:], []byte{10, 1, 0, 1, 10, 1, 0, 2})
	inet.SetIPv4HeaderChecksum(ip[:20])
	binary.BigEndian.PutUint16(ip[20:], 40000)
	binary.BigEndian.PutUint16(ip[22:], 5201)
	ip[32], ip[33] = 5<<4, 0x10
	for i := 40; i < len(ip); i++ {
		ip[i] = byte(i*31 + 7)
	}
	inet.SetPartial(ip, 20, inet.ProtoTCP, inet.TCPCsumOffset)
	msg = append([]byte{0x08, 0x00, 0, 0}, ip...)
	want = append([]byte(nil), msg...)
	inet.CompletePartial(want[4:])
	return msg, want
}

// TestUDIPCsumOffload: a send with SendIPCsum reaches a QP that asked for partial
// checksums unchanged, flagged WCIPCsumOK|WCIPCsumPartial; an ordinary QP gets the
// checksum completed (WCIPCsumOK); a capture of the wire shows it completed; a send
// without the flag is delivered as it is, with no flag.
func TestUDIPCsumOffload(t *testing.T) {
	// Attached, the link runs on the daemon's goroutine.
	var mu sync.Mutex
	var captured [][]byte
	f := hcatest.NewFabric(t, 2, hcatest.Options{Wrap: func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if i != 0 || d != fabric.AtoB {
			return l
		}
		return linkFunc(func(pkts [][]byte) {
			for _, p := range pkts {
				c := append([]byte(nil), p...)
				wire.Finalize(c)
				mu.Lock()
				captured = append(captured, c)
				mu.Unlock()
			}
			l.Send(pkts)
		})
	}})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	plain := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	partial := newPartialEndpoint(t, f.Devs[1])
	ah := a.ah(t, 2, false, [16]byte{})
	msg, want := ipoibTCP(1000)
	copy(a.buf, msg)

	for _, c := range []struct {
		name    string
		dst     *endpoint
		flags   hca.SendFlags
		wantWC  hca.WCFlags
		wantMsg []byte
	}{
		{"partial receiver", partial, hca.SendIPCsum, hca.WCIPCsumOK | hca.WCIPCsumPartial, msg},
		{"plain receiver", plain, hca.SendIPCsum, hca.WCIPCsumOK, want},
		{"no offload", partial, 0, 0, msg},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			captured = nil
			mu.Unlock()
			clear(c.dst.buf)
			c.dst.postRecv(t, 1, 0, 8192)
			wr := sendWR(a, ah, c.dst, uint32(len(msg)))
			wr.SendFlags |= c.flags
			wr.CsumStart, wr.CsumOffset = 4+20, inet.TCPCsumOffset
			if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := poll1(t, a.scq); wc.Status != hca.WCSuccess {
				t.Fatalf("send: %v", wc.Status)
			}
			wc := poll1(t, c.dst.rcq)
			if wc.Status != hca.WCSuccess || int(wc.ByteLen) != 40+len(msg) {
				t.Fatalf("receive: %v, %d bytes", wc.Status, wc.ByteLen)
			}
			if got := wc.WCFlags &^ hca.WCGRH; got != c.wantWC {
				t.Errorf("WC flags %#x, want %#x", got, c.wantWC)
			}
			if got := c.dst.buf[40 : 40+len(msg)]; !bytes.Equal(got, c.wantMsg) {
				t.Errorf("received message differs from the expected one (checksum %#04x, want %#04x)",
					binary.BigEndian.Uint16(got[4+36:]), binary.BigEndian.Uint16(c.wantMsg[4+36:]))
			}
			if c.wantWC&hca.WCIPCsumPartial == 0 && c.wantWC != 0 && !inet.Valid(c.dst.buf[44:40+len(msg)]) {
				t.Error("completed TCP checksum is not valid")
			}
			// What the wire shows: always complete, never the in-process marks.
			mu.Lock()
			n := len(captured)
			var p []byte
			if n > 0 {
				p = captured[0]
			}
			mu.Unlock()
			if n != 1 {
				t.Fatalf("captured %d packets", n)
			}
			if wire.ICRCPending(p) || wire.CsumPending(p) || !wire.CheckICRC(p) {
				t.Fatal("captured packet still pending or with a bad ICRC")
			}
			pay := p[wire.LRHLen+wire.BTHLen+wire.DETHLen : len(p)-wire.ICRCLen]
			if c.flags != 0 && !bytes.Equal(pay[:len(want)], want) {
				t.Error("captured packet does not carry the completed checksum")
			}
		})
	}
}

// TestCsumEngineKnowsNoIP: the checksum engine sums whatever region the WR names (here
// not IP at all): the receiver that wants complete checksums finds the RFC 1071 sum of
// the region in the field; a field outside the message fails the WR with LOC_QP_OP_ERR
// and sends nothing.
func TestCsumEngineKnowsNoIP(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	a := newEndpoint(t, f.Devs[0], 8192, hca.AccessLocalWrite)
	b := newEndpoint(t, f.Devs[1], 8192, hca.AccessLocalWrite)
	ah := a.ah(t, 2, false, [16]byte{})
	msg := make([]byte, 301)
	for i := range msg {
		msg[i] = byte(i*7 + 3)
	}
	const start, off = 10, 6
	binary.BigEndian.PutUint16(msg[start+off:], 0x1234) // the "pseudo-header" part
	copy(a.buf, msg)
	b.postRecv(t, 1, 0, 8192)
	wr := sendWR(a, ah, b, uint32(len(msg)))
	wr.SendFlags |= hca.SendIPCsum
	wr.CsumStart, wr.CsumOffset = start, off
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
	if wc := poll1(t, b.rcq); wc.Status != hca.WCSuccess || wc.WCFlags&hca.WCIPCsumOK == 0 {
		t.Fatalf("receive: %v, flags %#x", wc.Status, wc.WCFlags)
	}
	got := b.buf[40 : 40+len(msg)]
	if !bytes.Equal(got[:start+off], msg[:start+off]) || !bytes.Equal(got[start+off+2:], msg[start+off+2:]) {
		t.Fatal("bytes outside the checksum field changed")
	}
	// As a TCP receiver checks it: the region with the stored checksum, plus the
	// pseudo-header sum the field held, folds to all ones.
	if sum := inet.Fold(inet.Sum(got[start:], 0x1234)); sum != 0xFFFF {
		t.Fatalf("region and partial sum fold to %#04x, want 0xffff", sum)
	}

	// A sum that comes out 0: stored as 0x0000 (TCP, RFC 1624), or as 0xFFFF when the
	// WR says zero means "no checksum" (UDP, RFC 768).
	binary.BigEndian.PutUint16(msg[start+off:], 0)
	rest := inet.Fold(inet.Sum(msg[start:], 0))
	binary.BigEndian.PutUint16(msg[start+off:], 0xFFFF-rest)
	copy(a.buf, msg)
	for _, noZero := range []bool{false, true} {
		b.postRecv(t, 1, 0, 8192)
		wr.CsumNoZero = noZero
		if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		poll1(t, a.scq)
		poll1(t, b.rcq)
		want := uint16(0)
		if noZero {
			want = 0xFFFF
		}
		if got := binary.BigEndian.Uint16(b.buf[40+start+off:]); got != want {
			t.Errorf("CsumNoZero %v: zero sum stored as %#04x, want %#04x", noZero, got, want)
		}
	}

	wr.CsumStart, wr.CsumOffset = uint16(len(msg)-1), 0
	if _, err := a.qp.PostSend([]hca.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.scq); wc.Status != hca.WCLocQPOpErr {
		t.Fatalf("field outside the message: %v, want LOC_QP_OP_ERR", wc.Status)
	}
}

func newPartialEndpoint(t testing.TB, d *hca.Device) *endpoint {
	t.Helper()
	e := newEndpoint(t, d, 8192, hca.AccessLocalWrite)
	qp, err := e.pd.CreateQP(hca.QPInitAttr{
		SendCQ: e.scq, RecvCQ: e.rcq, QPType: hca.QPTypeUD, IPCsumPartial: true,
		Cap: hca.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	toRTS(t, qp, testQKey)
	e.qp = qp
	return e
}

type linkFunc func([][]byte)

func (f linkFunc) Send(pkts [][]byte) { f(pkts) }
