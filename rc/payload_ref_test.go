package rc_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/wire"
)

// refCounter is a link that counts the packets crossing it whose payload (of at least
// wire.PayloadRefMin bytes) is a reference, and those that carry their bytes.
type refCounter struct {
	inner       fabric.Link
	refs, bytes *atomic.Int64
}

func (l refCounter) Send(pkts [][]byte) {
	for _, p := range pkts {
		var pk wire.Packet
		if pk.Parse(p) != nil || len(pk.Payload) < wire.PayloadRefMin {
			continue
		}
		if wire.HasPayloadRef(p) {
			l.refs.Add(1)
		} else {
			l.bytes.Add(1)
		}
	}
	l.inner.Send(pkts)
}

// sendAndWrite sends a 64 KiB SEND and a 64 KiB RDMA WRITE from a to b and checks that
// both arrive intact.
func sendAndWrite(t *testing.T, a, b *side) {
	t.Helper()
	const n = 64 << 10
	for i := range n {
		a.buf[i] = byte(i*31 + 7)
		a.buf[n+i] = byte(i*17 + 1)
	}
	b.postRecv(t, 1, 0, n)
	a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, n)}})
	a.post(t, hca.SendWR{WRID: 3, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(n, n)},
		RemoteAddr: b.mr.Addr() + n, RKey: b.mr.RKey()})
	for range 2 {
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
			t.Fatalf("send: %v", wc.Status)
		}
	}
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCSuccess || wc.ByteLen != n {
		t.Fatalf("receive: %+v", wc)
	}
	if !bytes.Equal(b.buf[:2*n], a.buf[:2*n]) {
		t.Fatal("data differ")
	}
}

// TestPayloadRefs: between in-process HCAs, RC SENDs and RDMA WRITEs of more than
// PayloadRefMin bytes per packet cross the fabric as references and arrive intact; with
// references off (hca.SetPayloadRefs), or on UC, they carry their bytes.
func TestPayloadRefs(t *testing.T) {
	if hcatest.AttachedFromEnv() {
		t.Skip("attached devices send every packet to another process: no references")
	}
	for _, tc := range []struct {
		name     string
		typ      hca.QPType
		refs     bool
		wantRefs bool
	}{
		{"rc", hca.QPTypeRC, true, true},
		{"rc/off", hca.QPTypeRC, false, false},
		{"uc", hca.QPTypeUC, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hca.SetPayloadRefs(tc.refs)
			defer hca.SetPayloadRefs(true)
			var refs, byts atomic.Int64
			_, a, b := connect(t, connOpts{typ: tc.typ, wrap: func(_ int, _ fabric.Direction, l fabric.Link) fabric.Link {
				return refCounter{l, &refs, &byts}
			}})
			if tc.typ == hca.QPTypeUC {
				sendUC(t, a, b)
			} else {
				sendAndWrite(t, a, b)
			}
			// Each 64 KiB message is 16 packets at MTU 4096, seen on both cables.
			if tc.wantRefs && (refs.Load() == 0 || byts.Load() != 0) || !tc.wantRefs && refs.Load() != 0 {
				t.Fatalf("%d packets by reference, %d with bytes", refs.Load(), byts.Load())
			}
		})
	}
}

// sendUC sends 64 KiB over UC and checks it.
func sendUC(t *testing.T, a, b *side) {
	const n = 64 << 10
	for i := range n {
		a.buf[i] = byte(i*31 + 7)
	}
	b.postRecv(t, 1, 0, n)
	a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, n)}})
	if wc := waitWC(t, b.rcq, nil); wc.Status != hca.WCSuccess || !bytes.Equal(b.buf[:n], a.buf[:n]) {
		t.Fatalf("receive: %+v", wc)
	}
}

// TestPayloadRefsLeaveWithBytes: a packet kept beyond the sender's call (a delaying
// cable) carries its bytes, and so does what a capture shows.
func TestPayloadRefsLeaveWithBytes(t *testing.T) {
	if hcatest.AttachedFromEnv() {
		t.Skip("attached devices send every packet to another process: no references")
	}
	var refs, byts atomic.Int64
	var capBuf bytes.Buffer
	cw := fabric.NewCaptureWriter(&capBuf, fabric.CaptureOptions{})
	_, a, b := connect(t, connOpts{wrap: func(_ int, _ fabric.Direction, l fabric.Link) fabric.Link {
		// What the delaying link hands on is counted; the capture sees what enters it.
		l = fabric.NewFaultLink(refCounter{l, &refs, &byts}, fabric.FaultConfig{Delay: 20 * time.Microsecond})
		return fabric.NewCaptureLink(l, cw)
	}})
	sendAndWrite(t, a, b)
	if refs.Load() != 0 || byts.Load() == 0 {
		t.Fatalf("behind a delaying link: %d packets by reference, %d with bytes", refs.Load(), byts.Load())
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	// The capture holds the message's bytes (a run of 4096 of them from the SEND).
	if !bytes.Contains(capBuf.Bytes(), a.buf[4096:8192]) {
		t.Fatal("the capture lacks the packets' bytes")
	}
}

// TestPayloadRefForged: a packet whose reference does not resolve (here a wrong secret,
// as one arriving from outside the process would carry) is dropped as damaged, and the
// message still arrives by retransmission.
func TestPayloadRefForged(t *testing.T) {
	if hcatest.AttachedFromEnv() {
		t.Skip("attached devices send every packet to another process: no references")
	}
	var forged atomic.Bool
	_, a, b := connect(t, connOpts{timeout: 8, retry: 7, wrap: func(_ int, _ fabric.Direction, l fabric.Link) fabric.Link {
		return fabric.LinkFunc(func(pkts [][]byte) {
			for _, p := range pkts {
				if wire.HasPayloadRef(p) && forged.CompareAndSwap(false, true) {
					f := append([]byte(nil), p...)
					var pk wire.Packet
					pk.Parse(p)
					f[len(p)-len(pk.Payload)-wire.ICRCLen-int(pk.BTH.PadCnt())] ^= 0xFF // the secret's first byte
					l.Send([][]byte{f})
					return // the original is lost
				}
			}
			l.Send(pkts)
		})
	}})
	sendAndWrite(t, a, b)
	if !forged.Load() || b.port.Counters().Get(hca.CntDropICRC) == 0 {
		t.Fatalf("forged %v, ICRC drops %d", forged.Load(), b.port.Counters().Get(hca.CntDropICRC))
	}
}
