package wire

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestReduceConsts: reduceConsts gives Linux's crc32-pclmul constants for the ICRC's
// polynomial (R4, R5, P', μ there), and the VCRC's that the model in crc16Reduce needs.
func TestReduceConsts(t *testing.T) {
	if got, want := [4]uint64(reduceConsts(0x104C11DB7, 32)[:4]), [4]uint64{0xccaa009e, 0x163cd6124, 0x1db710641, 0x1f7011641}; got != want {
		t.Fatalf("CRC-32 constants %#x, want %#x", got, want)
	}
	if got, want := [4]uint64(vcrcReduceK[:4]), [4]uint64{0x1e9de, 0xffb0, 0x1a011, 0xb111}; got != want {
		t.Fatalf("CRC-16 constants %#x, want %#x", got, want)
	}
}

// TestReduceMatchesTable: for random 128-bit remainders, and for the ones with a single
// bit set, crc32Reduce and crc16Reduce leave the register the slicing tables leave after
// the same 16 bytes from zero.
func TestReduceMatchesTable(t *testing.T) {
	if !vcrcCLMUL {
		t.Skip("no PCLMULQDQ/SSE4.1 on this CPU")
	}
	r := rand.New(rand.NewPCG(1, 2))
	check := func(lo, hi uint64) {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], lo)
		binary.LittleEndian.PutUint64(b[8:], hi)
		if got, want := crc32Reduce(0, 0, lo, hi, icrcReduceK), ^crcSmall(0xFFFFFFFF, b[:]); got != want {
			t.Fatalf("crc32Reduce(%#x, %#x) = %#08x, table %#08x", lo, hi, got, want)
		}
		if got, want := crc16Reduce(0, 0, lo, hi, vcrcReduceK), updateVCRCTable(0, b[:]); got != want {
			t.Fatalf("crc16Reduce(%#x, %#x) = %#04x, table %#04x", lo, hi, got, want)
		}
	}
	for i := range 128 {
		check(uint64(1)<<(i%64)*uint64(1-i/64), uint64(1)<<(i%64)*uint64(i/64))
	}
	check(0, 0)
	check(^uint64(0), ^uint64(0))
	for range 100000 {
		check(r.Uint64(), r.Uint64())
	}
}

// BenchmarkCRCReduce: the ICRC and VCRC of every packet of a 16 MiB ring of 4,126- and
// 2,078-byte packets (those of a 4096- and a 2048-byte MTU), each packet's bytes coming
// from memory as a UDP link's receive buffers do, with the fold's remainder reduced by
// carry-less multiplication (clmul) or through the slicing tables (table, before), whose
// lines the packets' bytes push out of the L1 cache.
func BenchmarkCRCReduce(b *testing.B) {
	if !vcrcCLMUL {
		b.Skip("no PCLMULQDQ/SSE4.1 on this CPU")
	}
	for _, size := range []int{4126, 2078} {
		ring := make([]byte, 16<<20)
		for i := range ring {
			ring[i] = byte(i*131 + i>>9)
		}
		n := len(ring) / size
		for _, clmul := range []bool{true, false} {
			name := map[bool]string{true: "clmul", false: "table"}[clmul]
			b.Run(fmt.Sprintf("%d/%s", size, name), func(b *testing.B) {
				defer func(on bool) { crcReduceCLMUL = on }(crcReduceCLMUL)
				crcReduceCLMUL = clmul
				b.SetBytes(int64(size))
				k := 0
				for b.Loop() {
					pkt := ring[k*size : (k+1)*size]
					_ = ICRC(pkt[:size-VCRCLen])
					_ = VCRC(pkt[:size-VCRCLen])
					if k++; k == n {
						k = 0
					}
				}
			})
		}
	}
}

// TestCRCHead: the carry-less CRC of a packet's first 16 to 32 bytes is the table's, for
// random bytes and for every single bit.
func TestCRCHead(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h [32]byte
	for n := 16; n <= 32; n++ {
		for i := range 8 * n {
			clear(h[:])
			h[i/8] = 1 << (i % 8)
			if got, want := crcHead(h[:n]), crcSmall(0, h[:n]); got != want {
				t.Fatalf("%d bytes, bit %d: %#08x, table %#08x", n, i, got, want)
			}
		}
		for range 2000 {
			for i := range h {
				h[i] = byte(r.Uint32())
			}
			if got, want := crcHead(h[:n]), crcSmall(0, h[:n]); got != want {
				t.Fatalf("%d bytes %x: %#08x, table %#08x", n, h[:n], got, want)
			}
		}
	}
}
