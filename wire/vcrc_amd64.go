package wire

import (
	"encoding/binary"

	"golang.org/x/sys/cpu"
)

// VCRC with carry-less multiplication (PCLMULQDQ), as in Intel's "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction" (2009) for a bit-reflected CRC:
// the data is folded 64 bytes at a time into four 128-bit lanes, the lanes into one, and
// the last 128-bit remainder, congruent to the data modulo the VCRC polynomial, goes
// through the slicing table. The table-only CRC takes over below vcrcFoldMin bytes and on
// CPUs without PCLMULQDQ/SSE4.1.

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
	var r [16]byte
	binary.LittleEndian.PutUint64(r[:8], lo)
	binary.LittleEndian.PutUint64(r[8:], hi)
	return updateVCRCTable(updateVCRCTable(0, r[:]), p[n:])
}

// crcUpdFold continues a crc32.Update-style CRC-32 over p (len(p) ≥ 256) with fold512,
// where the CPU has AVX-512 VPCLMULQDQ: the 128-bit remainder and the tail go through
// the slicing table. hash/crc32's own carry-less multiplication folds 64 bytes a round.
func crcUpdFold(crc uint32, p []byte) uint32 {
	n := len(p) &^ 15
	lo, hi := fold512(uint64(^crc), p[:n], &icrcK512)
	var r [16]byte
	binary.LittleEndian.PutUint64(r[:8], lo)
	binary.LittleEndian.PutUint64(r[8:], hi)
	return crcSmall(crcSmall(0xFFFFFFFF, r[:]), p[n:])
}

// icrcFold512 says whether crcUpd folds with crcUpdFold.
var icrcFold512 = vcrcAVX512
