package inet

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// naive is RFC 1071's reference algorithm.
func naive(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s>>16 + s&0xFFFF
	}
	return ^uint16(s)
}

func TestChecksumMatchesRFC1071(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if n%7 == 0 {
			for i := range b {
				b[i] = 0xFF
			}
		}
		if got, want := Checksum(b), naive(b); got != want {
			t.Fatalf("len %d: Checksum %#04x, RFC 1071 %#04x", n, got, want)
		}
	}
}

// tcp4 builds an IPv4/TCP packet with a payload of n bytes and a correct checksum.
func tcp4(n int) []byte {
	p := make([]byte, 20+20+n)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[6] = 0x40 // DF
	p[8], p[9] = 64, ProtoTCP
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	p[32] = 5 << 4
	for i := 40; i < len(p); i++ {
		p[i] = byte(i * 7)
	}
	SetIPv4HeaderChecksum(p[:20])
	iphl, proto, off, _ := Transport(p)
	SetPartial(p, iphl, proto, off)
	CompletePartial(p)
	return p
}

func TestPartialThenComplete(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 100, 1460, 1989} {
		p := tcp4(n)
		if !Valid(p) {
			t.Fatalf("payload %d: completed checksum not valid", n)
		}
		// The same as summing everything with the field zero.
		q := append([]byte(nil), p...)
		q[36], q[37] = 0, 0
		want := ^Fold(Sum(q[20:], PseudoSum(q, ProtoTCP, len(q)-20)))
		if got := binary.BigEndian.Uint16(p[36:]); got != want {
			t.Fatalf("payload %d: checksum %#04x, want %#04x", n, got, want)
		}
		if n < 6 {
			continue
		}
		p[45] ^= 1
		if Valid(p) {
			t.Fatalf("payload %d: corrupted packet still valid", n)
		}
		if naive(p[:20]) != 0 {
			t.Fatalf("IPv4 header checksum wrong")
		}
	}
}

func TestTransportRejects(t *testing.T) {
	p := tcp4(10)
	for name, mod := range map[string]func([]byte){
		"fragment": func(b []byte) { b[6] |= 0x20 },
		"icmp":     func(b []byte) { b[9] = 1 },
		"version":  func(b []byte) { b[0] = 0x55 },
		"ihl":      func(b []byte) { b[0] = 0x44 },
	} {
		q := append([]byte(nil), p...)
		mod(q)
		if _, _, _, ok := Transport(q); ok {
			t.Errorf("%s: Transport accepted it", name)
		}
		if CompletePartial(q) {
			t.Errorf("%s: CompletePartial accepted it", name)
		}
	}
	if _, _, _, ok := Transport(p[:30]); ok {
		t.Error("truncated TCP header accepted")
	}
}

func BenchmarkChecksum2K(b *testing.B) {
	buf := make([]byte, 2000)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		_ = Checksum(buf)
	}
}
