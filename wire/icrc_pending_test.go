package wire

import (
	"encoding/binary"
	"testing"
)

// TestCsumPending: SetCsumPending accepts only a field inside the payload of an
// ICRC-pending packet; Finalize completes the sum, clears both marks and writes the ICRC.
func TestCsumPending(t *testing.T) {
	pkt := buildPacket(UDSendOnly, false, 64)
	n := len(pkt)
	if SetCsumPending(pkt, 0, 0, false) {
		t.Fatal("marked a packet whose ICRC is not pending")
	}
	SetICRCPending(pkt)
	payload := LRHLen + BTHLen + DETHLen
	plen := n - ICRCLen - int(BTH(pkt[LRHLen:]).PadCnt()) - payload
	if SetCsumPending(pkt, uint16(plen-1), 0, false) {
		t.Fatal("accepted a field that runs past the payload")
	}
	if !SetCsumPending(pkt, 8, 2, false) || !CsumPending(pkt) || !ICRCPending(pkt) {
		t.Fatal("SetCsumPending refused a field inside the payload")
	}
	binary.BigEndian.PutUint16(pkt[payload+10:], 0)
	Finalize(pkt)
	if CsumPending(pkt) || ICRCPending(pkt) || !CheckICRC(pkt) {
		t.Fatal("Finalize left a mark or a bad ICRC")
	}
	var sum uint32
	for i := payload + 8; i+1 < payload+plen; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pkt[i:]))
	}
	if plen%2 == 1 {
		sum += uint32(pkt[payload+plen-1]) << 8
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	if sum != 0xFFFF {
		t.Fatalf("completed region folds to %#04x, want 0xffff", sum)
	}
}

// FuzzFinalize: a packet from anywhere with a forged pending mark and any ICRC-slot
// contents never makes Finalize panic.
func FuzzFinalize(f *testing.F) {
	p := buildPacket(UDSendOnly, false, 40)
	SetICRCPending(p)
	SetCsumPending(p, 4, 16, true)
	f.Add(p)
	f.Fuzz(func(t *testing.T, b []byte) {
		if o := bthOffset(b); o >= 0 {
			b[o+4] = csumPendingMark
		}
		Finalize(b)
	})
}
