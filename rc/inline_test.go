package rc_test

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/pibgw/pibgw/hca"
)

// TestRCInlineThenGathered: SENDs posted inline and from registered memory in turn, more
// than the send queue holds, so that a gathered SEND takes a slot an inline one had. Each
// arrives with its own bytes. (The slot kept its inline buffer, and a gathered WR in it
// was sent as inline with no bytes: the packet carried what its buffer held before — UCX,
// which sends short messages inline and others from its buffers, saw old messages.)
func TestRCInlineThenGathered(t *testing.T) {
	const depth, n, rounds = 4, 40, 3 * 4
	f, a, b := connect(t, connOpts{depth: depth})
	var inl [n]byte
	for i := range rounds {
		want := bytes.Repeat([]byte{byte('a' + i)}, n)
		b.postRecv(t, uint64(i), i*n, n)
		wr := hca.SendWR{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled}
		if i%2 == 0 {
			copy(inl[:], want)
			wr.SendFlags |= hca.SendInline
			wr.SGL = []hca.SGE{{Addr: uint64(uintptr(unsafe.Pointer(&inl[0]))), Length: n}}
		} else {
			copy(a.buf[i*n:], want)
			wr.SGL = []hca.SGE{a.sge(i*n, n)}
		}
		a.post(t, wr)
		clear(inl[:]) // inline bytes are the post's: the buffer is the caller's again
		if wc := drain(t, f, a.scq, 1); len(wc) != 1 || wc[0].Status != hca.WCSuccess {
			t.Fatalf("send %d: %+v", i, wc)
		}
		if wc := drain(t, f, b.rcq, 1); len(wc) != 1 || wc[0].Status != hca.WCSuccess || wc[0].ByteLen != n {
			t.Fatalf("receive %d: %+v", i, wc)
		}
		if got := b.buf[i*n : (i+1)*n]; !bytes.Equal(got, want) {
			t.Fatalf("message %d (inline %v) arrived as %q, want %q", i, i%2 == 0, got, want)
		}
	}
}
