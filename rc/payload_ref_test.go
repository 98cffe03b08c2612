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
	// A local ACK timeout of 0.5 s (17), not 67 ms: behind the delaying link on a loaded
	// machine under -race, eight 67 ms timeouts ran out (RETRY_EXC_ERR) in CI once.
	_, a, b := connect(t, connOpts{timeout: 17, wrap: func(_ int, _ fabric.Direction, l fabric.Link) fabric.Link {
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

// foldSum is the folded one's-complement sum of b plus the pseudo-header sum 0x1234 the
// test's messages start with (RFC 1071): 0xFFFF over a region whose checksum is right.
func foldSum(b []byte) uint16 {
	sum := uint32(0x1234)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// TestSendIPCsum: an RC SEND with IBV_SEND_IP_CSUM has its checksum finished over the
// whole message — by the receiving HCA for a QP that wants complete checksums, by no one
// for one that takes CHECKSUM_PARTIAL data (WCIPCsumPartial), at once by the sender when
// the message is not passed by reference, and in what a capture shows.
func TestSendIPCsum(t *testing.T) {
	if hcatest.AttachedFromEnv() {
		t.Skip("checks in-process deferral")
	}
	const start, offset = 24, 16 // as a TCP checksum after a 20-byte IPv4 header and 4 bytes
	for _, tc := range []struct {
		name    string
		n       int
		refs    bool
		partial bool
		capture bool
	}{
		{"ref/complete", 64 << 10, true, false, false},
		{"ref/partial", 64 << 10, true, true, false},
		{"ref/capture", 64 << 10, true, true, true},
		{"one-packet/capture", 4096, true, true, true},
		{"copy/complete", 64 << 10, false, false, false},
		{"copy/partial", 64 << 10, false, true, false},
		{"one-packet/complete", 1000, true, false, false},
		{"one-packet/partial", 1000, true, true, false},
		{"short/complete", 100, true, false, false},
		{"odd/complete", 9999, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hca.SetPayloadRefs(tc.refs)
			defer hca.SetPayloadRefs(true)
			var capBuf bytes.Buffer
			cw := fabric.NewCaptureWriter(&capBuf, fabric.CaptureOptions{})
			o := connOpts{csumPartial: tc.partial}
			if tc.capture {
				o.wrap = func(_ int, _ fabric.Direction, l fabric.Link) fabric.Link { return fabric.NewCaptureLink(l, cw) }
			}
			_, a, b := connect(t, o)
			msg := a.buf[:tc.n]
			for i := range msg {
				msg[i] = byte(i*29 + 5)
			}
			msg[start+offset], msg[start+offset+1] = 0x12, 0x34 // the pseudo-header sum
			want := append([]byte(nil), msg...)
			b.postRecv(t, 1, 0, tc.n)
			a.post(t, hca.SendWR{WRID: 2, Opcode: hca.WRSend, SendFlags: hca.SendSignaled | hca.SendIPCsum,
				SGL: []hca.SGE{a.sge(0, tc.n)}, CsumStart: start, CsumOffset: offset})
			if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
				t.Fatalf("send: %v", wc.Status)
			}
			wc := waitWC(t, b.rcq, nil)
			if wc.Status != hca.WCSuccess || int(wc.ByteLen) != tc.n {
				t.Fatalf("receive: %+v", wc)
			}
			got := b.buf[:tc.n]
			if !bytes.Equal(msg, want) {
				t.Fatal("the engine wrote into the sender's memory")
			}
			partial := wc.WCFlags&hca.WCIPCsumPartial != 0
			switch {
			case partial && !(tc.partial && tc.refs || tc.partial && tc.n <= 4096 && tc.n >= 256):
				t.Fatalf("WCIPCsumPartial for a %s receive", tc.name)
			case partial:
				if !bytes.Equal(got, want) {
					t.Fatal("a partial receive differs from what was sent")
				}
			default:
				if s := foldSum(got[start:]); s != 0xFFFF {
					t.Fatalf("received region sums to %#04x, want 0xffff (checksum %02x%02x)", s, got[start+offset], got[start+offset+1])
				}
				if !bytes.Equal(got[:start+offset], want[:start+offset]) || !bytes.Equal(got[start+offset+2:], want[start+offset+2:]) {
					t.Fatal("bytes other than the checksum changed")
				}
			}
			if tc.capture {
				cw.Close()
				// The capture's first packet of the SEND carries the finished checksum:
				// find the first 4096 - start - offset - 2 bytes after the field.
				c := capBuf.Bytes()
				after := want[start+offset+2 : min(tc.n, 4096)]
				k := bytes.Index(c, after)
				if k < 2 {
					t.Fatal("the capture lacks the first packet's bytes")
				}
				fixed := append(append(append([]byte(nil), want[start:start+offset]...), c[k-2:k]...), want[start+offset+2:]...)
				if s := foldSum(fixed); s != 0xFFFF {
					t.Fatalf("the captured checksum %02x%02x does not verify (sum %#04x)", c[k-2], c[k-1], s)
				}
			}
		})
	}
}
