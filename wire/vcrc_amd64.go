package wire

import (
	"encoding/binary"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// VCRC with carry-less multiplication (PCLMULQDQ), as in Intel's "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction" (2009) for a bit-reflected CRC:
// the data is folded 64 bytes at a time into four 128-bit lanes, the lanes into one, and
// the last 128-bit remainder, congruent to the data modulo the VCRC polynomial, and the
// bytes past the last 16 are reduced to the register by carry-less multiplication too
// (crc16Reduce). The table-only CRC takes over below vcrcFoldMin bytes and on CPUs without
// PCLMULQDQ/SSE4.1.

// vcrcFold folds p (len(p) ≥ 64, a multiple of 16) whose first two bytes are first XORed
// with init, and returns the 128-bit remainder as two little-endian words.
//
//go:noescape
func vcrcFold(init uint64, p []byte, k *[4]uint64) (lo, hi uint64)

// fold512 is vcrcFold with AVX-512 VPCLMULQDQ, 256 bytes a round; len(p) ≥ 256. Folding
// knows nothing of the polynomial but its constants: the ICRC's CRC-32 uses it too.
//
//go:noescape
func fold512(init uint64, p []byte, k *[6]uint64) (lo, hi uint64)

// crc32Reduce and crc16Reduce return the register the slicing tables leave after the 32
// bytes A‖B (a0, a1, b0, b1: little-endian words) from zero, by carry-less multiplication
// (vcrc_amd64.s); k from reduceConsts.
//
//go:noescape
func crc32Reduce(a0, a1, b0, b1 uint64, k *[6]uint64) uint32

//go:noescape
func crc16Reduce(a0, a1, b0, b1 uint64, k *[6]uint64) uint16

var (
	icrcReduceK = reduceConsts(0x104C11DB7, 32) // x^32+x^26+…+1, IBA 7.8.1
	vcrcReduceK = reduceConsts(vcrcPolyFull, 16)
)

// reduceConsts returns crc32Reduce's and crc16Reduce's constants for the polynomial poly
// of degree deg (given with its x^deg term): x^(64+deg) mod P, x^(2·deg) mod P, P and
// ⌊x^(2·deg)/P⌋, each bit-reflected over deg+1 bits (the coefficient of x^i at bit
// deg−i), then the 128-bit fold's two (foldConsts).
func reduceConsts(poly uint64, deg int) *[6]uint64 {
	mod := func(n int) uint64 { // x^n mod P
		r := uint64(1)
		for range n {
			if r <<= 1; r>>deg&1 != 0 {
				r ^= poly
			}
		}
		return r
	}
	var quo uint64 // ⌊x^(2·deg)/P⌋ by long division, from the leading term x^deg·x^deg
	r := uint64(1) << deg
	for range deg + 1 {
		quo <<= 1
		if r>>deg&1 != 0 {
			r ^= poly
			quo |= 1
		}
		r <<= 1
	}
	reflect := func(v uint64) uint64 { return bits.Reverse64(v) >> (63 - deg) }
	f := foldConsts(poly, deg, 128)
	return &[6]uint64{reflect(mod(64 + deg)), reflect(mod(2 * deg)), reflect(poly), reflect(quo), f[0], f[1]}
}

// lanes returns the 32 bytes 0…0‖X‖tail as four little-endian words: X, a fold's 128-bit
// remainder (lo, hi), followed by the bytes past the folded ones (fewer than 16), with
// zeros before, which leave a register of zero as it is.
func lanes(lo, hi uint64, tail []byte) (a0, a1, b0, b1 uint64) {
	if len(tail) == 0 {
		return 0, 0, lo, hi
	}
	var b [32]byte
	x := b[16-len(tail) : 32-len(tail)]
	binary.LittleEndian.PutUint64(x, lo)
	binary.LittleEndian.PutUint64(x[8:], hi)
	copy(b[32-len(tail):], tail)
	return binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]),
		binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
}

var (
	vcrcCLMUL  = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41
	vcrcAVX512 = vcrcCLMUL && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ
)

// vcrcFold512Min is the length from which the AVX-512 fold takes over: measured, below a
// few hundred bytes the 128-bit fold is as fast.
const vcrcFold512Min = 256

// vcrcFoldMin is the length from which folding beats the slicing table.
const vcrcFoldMin = 64

func updateVCRCFast(crc uint16, p []byte) uint16 {
	if !vcrcCLMUL || len(p) < vcrcFoldMin {
		return updateVCRCTable(crc, p)
	}
	n := len(p) &^ 15
	var lo, hi uint64
	if vcrcAVX512 && n >= vcrcFold512Min {
		lo, hi = fold512(uint64(crc), p[:n], &vcrcK512)
	} else {
		lo, hi = vcrcFold(uint64(crc), p[:n], &vcrcK)
	}
	if !crcReduceCLMUL {
		r := remainder(lo, hi)
		return updateVCRCTable(updateVCRCTable(0, r[:]), p[n:])
	}
	a0, a1, b0, b1 := lanes(lo, hi, p[n:])
	return crc16Reduce(a0, a1, b0, b1, vcrcReduceK)
}

// crcReduceCLMUL says whether a fold's remainder, the bytes past it and the ICRC's masked
// header go through crc32Reduce/crc16Reduce rather than the slicing tables, as before them
// (BenchmarkCRCReduce compares the two: with each packet's bytes pushing the tables' lines
// out of the L1 cache, the tables made a 4 KiB packet's ICRC and VCRC 1.4 times as slow;
// across hosts they were 2.5 % (connected mode) and 3 % (datagram) of the machine's
// samples, the reductions 1.5 and 2 %).
var crcReduceCLMUL = true

// remainder is a fold's 128-bit remainder as the 16 bytes it stands for.
func remainder(lo, hi uint64) (r [16]byte) {
	binary.LittleEndian.PutUint64(r[:], lo)
	binary.LittleEndian.PutUint64(r[8:], hi)
	return r
}

// crcUpdFold continues a crc32.Update-style CRC-32 over p (len(p) ≥ 256) with fold512,
// where the CPU has AVX-512 VPCLMULQDQ: the 128-bit remainder and the bytes past it are
// reduced by crc32Reduce. hash/crc32's own carry-less multiplication folds 64 bytes a
// round.
func crcUpdFold(crc uint32, p []byte) uint32 {
	n := len(p) &^ 15
	lo, hi := fold512(uint64(^crc), p[:n], &icrcK512)
	if !crcReduceCLMUL {
		r := remainder(lo, hi)
		return crcSmall(crcSmall(0xFFFFFFFF, r[:]), p[n:])
	}
	a0, a1, b0, b1 := lanes(lo, hi, p[n:])
	return ^crc32Reduce(a0, a1, b0, b1, icrcReduceK)
}

// crcHead returns crcSmall(0, h) for h of 16 to 32 bytes (a masked LRH and BTH: 20), by
// carry-less multiplication where the CPU has it: the register after h from all ones is
// the one after h with its first four bytes complemented from zero.
func crcHead(h []byte) uint32 {
	if !vcrcCLMUL || !crcReduceCLMUL || len(h) < 16 || len(h) > 32 {
		return crcSmall(0, h)
	}
	var b [32]byte
	x := b[32-len(h):]
	copy(x, h)
	x[0], x[1], x[2], x[3] = ^x[0], ^x[1], ^x[2], ^x[3]
	return ^crc32Reduce(binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]),
		binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:]), icrcReduceK)
}

// icrcFold512 says whether crcUpd folds with crcUpdFold.
var icrcFold512 = vcrcAVX512
