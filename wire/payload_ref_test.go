package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// fakeSource resolves device 7, key 0x1234 to mem starting at address 0x10000.
func fakeSource(mem []byte) PayloadSource {
	return func(dev, key uint32, addr uint64, n int) []byte {
		if dev != 7 || key != 0x1234 || addr < 0x10000 || addr-0x10000+uint64(n) > uint64(len(mem)) {
			return nil
		}
		return mem[addr-0x10000:][:n]
	}
}

// refMemory is 8 KiB of patterned bytes (byte i is i*mul+add) that fakeSource resolves
// references to, for the test's duration.
func refMemory(t *testing.T, mul, add int) []byte {
	mem := make([]byte, 8192)
	for i := range mem {
		mem[i] = byte(i*mul + add)
	}
	SetPayloadSource(fakeSource(mem))
	t.Cleanup(func() { SetPayloadSource(nil) })
	return mem
}

// TestPayloadRef: a reference resolves to the sender's bytes without a copy; Finalize
// makes the packet exactly what one built by copying would be; a reference that does
// not resolve (unknown region, wrong secret) leaves a packet every receiver drops.
func TestPayloadRef(t *testing.T) {
	mem := refMemory(t, 7, 3)
	for _, global := range []bool{false, true} {
		want := buildPacket(RCSendMiddle, global, 4096)
		o := bthOffset(want)
		p := payloadOffset(want, o)
		copy(want[p:], mem[100:100+4096])
		SetICRC(want)

		pkt := buildPacket(RCSendMiddle, global, 4096)
		if SetPayloadRef(pkt, 7, 0x1234, 0x10000+100) {
			t.Fatal("referenced the payload of a packet whose ICRC is not pending")
		}
		SetICRCPending(pkt)
		if !SetPayloadRef(pkt, 7, 0x1234, 0x10000+100) || !HasPayloadRef(pkt) || !ICRCPending(pkt) || !CheckReceivedICRC(pkt) {
			t.Fatal("reference not set or not taken as pending")
		}
		src, ok := ResolvePayload(pkt)
		if !ok || len(src) != 4096 || &src[0] != &mem[100] {
			t.Fatal("reference did not resolve to the sender's own bytes")
		}
		c := append([]byte(nil), pkt...)
		Materialize(c)
		if HasPayloadRef(c) || !ICRCPending(c) || !bytes.Equal(c[p:p+4096], mem[100:100+4096]) {
			t.Fatal("Materialize did not copy the bytes in, keeping the ICRC pending")
		}
		Finalize(pkt)
		if !bytes.Equal(pkt, want) {
			t.Fatalf("global=%v: finalized packet differs from one built by copying", global)
		}

		for name, damage := range map[string]func(b []byte){
			"unknown key":  func(b []byte) { b[p+12] ^= 1 },
			"wrong secret": func(b []byte) { b[p] ^= 1 },
			"past the end": func(b []byte) { b[p+17] = 0x30 }, // address + 0x3000 + 4096 > 8192
		} {
			b := buildPacket(RCSendMiddle, global, 4096)
			SetICRCPending(b)
			SetPayloadRef(b, 7, 0x1234, 0x10000+100)
			damage(b)
			if _, ok := ResolvePayload(b); ok {
				t.Fatalf("%s: resolved", name)
			}
			Materialize(b)
			if HasPayloadRef(b) || ICRCPending(b) || CheckReceivedICRC(b) {
				t.Fatalf("%s: an unresolvable reference left a packet a receiver would take", name)
			}
		}
	}
	short := buildPacket(RCSendMiddle, false, PayloadRefMin-4)
	SetICRCPending(short)
	if SetPayloadRef(short, 7, 0x1234, 0x10000) {
		t.Fatal("referenced a payload shorter than PayloadRefMin")
	}
	SetPayloadSource(nil)
	b := buildPacket(RCSendMiddle, false, 4096)
	SetICRCPending(b)
	SetPayloadRef(b, 7, 0x1234, 0x10000)
	if _, ok := ResolvePayload(b); ok {
		t.Fatal("resolved without a source")
	}
}

// FuzzPayloadRef: a packet from anywhere carrying the reference mark never makes
// ResolvePayload, Materialize or Finalize panic, and never resolves without the secret.
func FuzzPayloadRef(f *testing.F) {
	mem := make([]byte, 8192)
	SetPayloadSource(fakeSource(mem))
	p := buildPacket(RCSendFirst, false, 512)
	SetICRCPending(p)
	SetPayloadRef(p, 7, 0x1234, 0x10000)
	clear(p[LRHLen+BTHLen : LRHLen+BTHLen+8]) // what arrives from outside lacks the secret
	f.Add(p)
	f.Fuzz(func(t *testing.T, b []byte) {
		o := bthOffset(b)
		if o >= 0 {
			b[o+4] = payloadRefMark | byte(len(b)&1)<<4 // msgCsumMark for odd lengths
		}
		if _, ok := ResolvePayload(b); ok && binary.LittleEndian.Uint64(b[payloadOffset(b, o):]) != refSecret {
			t.Fatal("resolved a reference without the process's secret")
		}
		c := append([]byte(nil), b...)
		Materialize(c)
		d := bytes.Repeat([]byte{0xAA}, len(b)) // CopyPacket leaves a reference's bytes to Finalize
		CopyPacket(d, b)
		Finalize(d)
		Finalize(b)
		if !bytes.Equal(d, b) {
			t.Fatal("a copy finalized differs from the packet finalized in place")
		}
	})
}

// TestCopyPacket: a copy of a packet whose payload is a reference leaves the payload's
// bytes past the reference alone (Materialize or Finalize brings them in, one pass over
// them), and finalized it is exactly the packet finalized in place; other packets are
// copied whole; an unresolvable reference still yields a packet every receiver drops.
func TestCopyPacket(t *testing.T) {
	refMemory(t, 5, 1)
	for _, global := range []bool{false, true} {
		for _, msgCsum := range []bool{false, true} {
			pkt := buildPacket(RCSendFirst, global, 4096)
			SetICRCPending(pkt)
			if !SetPayloadRef(pkt, 7, 0x1234, 0x10000+64) {
				t.Fatal("reference not set")
			}
			if msgCsum && !SetMsgCsumPending(pkt, 6000, 20, 16, false) {
				t.Fatal("message checksum not set")
			}
			o := bthOffset(pkt)
			p, end := payloadOffset(pkt, o), payloadEnd(pkt, o)
			dst := bytes.Repeat([]byte{0xAA}, len(pkt)+100)
			if n := CopyPacket(dst, pkt); n != len(pkt) {
				t.Fatalf("CopyPacket returned %d, want %d", n, len(pkt))
			}
			c := dst[:len(pkt)]
			if !bytes.Equal(c[:p+PayloadRefLen], pkt[:p+PayloadRefLen]) || !bytes.Equal(c[end:], pkt[end:]) {
				t.Fatal("headers, reference or trailer not copied")
			}
			if !bytes.Equal(c[p+PayloadRefLen+4:end], bytes.Repeat([]byte{0xAA}, end-p-PayloadRefLen-4)) {
				t.Fatal("the referenced payload's bytes were copied too")
			}
			Finalize(c)
			want := append([]byte(nil), pkt...)
			Finalize(want)
			if !bytes.Equal(c, want) || !CheckICRC(c) {
				t.Fatalf("global=%v msgCsum=%v: finalized copy differs from the packet finalized in place", global, msgCsum)
			}
		}
		plain := buildPacket(RCSendMiddle, global, 300)
		for i := range plain {
			plain[i] ^= byte(i)
		}
		dst := make([]byte, len(plain))
		if CopyPacket(dst, plain); !bytes.Equal(dst, plain) {
			t.Fatal("a packet without a reference was not copied whole")
		}
		bad := buildPacket(RCSendMiddle, global, 4096)
		SetICRCPending(bad)
		SetPayloadRef(bad, 7, 0x9999, 0x10000) // unknown key
		dst = bytes.Repeat([]byte{0xAA}, len(bad))
		CopyPacket(dst, bad)
		Finalize(dst)
		if CheckReceivedICRC(dst) {
			t.Fatal("an unresolvable reference copied and finalized passes a receiver's check")
		}
	}
}
