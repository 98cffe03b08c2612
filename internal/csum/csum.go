// Package csum is the Internet checksum (RFC 1071): a one's-complement sum of
// big-endian 16-bit words. It knows nothing of the packets it sums: IP (internal/inet)
// and the HCA's checksum engine (wire's deferred checksums) both use it.
package csum

import (
	"encoding/binary"
	"math/bits"
)

// Sum adds b to the running one's-complement sum (RFC 1071) as big-endian 16-bit words;
// b may have odd length only as the last piece of a sum. Fold the result with Fold.
func Sum(b []byte, sum uint64) uint64 {
	if vecSum && len(b) >= vecMin {
		for len(b) >= 64 {
			n := min(len(b), maxVecLen) &^ 63
			sum = addSwapped(sum, sumWords(b[:n]))
			b = b[n:]
		}
	}
	return sumScalar(b, sum)
}

// maxVecLen bounds one sumWords call so that its 64-bit total cannot overflow: it adds
// len/4 words below 2^32.
const maxVecLen = 1 << 30

// addSwapped adds w, a sum of little-endian 32-bit words, to the running sum of
// big-endian 16-bit words. Folded to 16 bits w is the one's-complement sum of the same
// bytes as little-endian 16-bit words (2^16 ≡ 1 modulo 2^16−1), and that is the
// big-endian sum with its bytes swapped (RFC 1071 §2 (B), byte order independence).
// Fold keeps a non-zero sum non-zero, so the result folds to what the big-endian
// loop gives, not just to an equivalent value.
func addSwapped(sum, w uint64) uint64 {
	s, c := bits.Add64(sum, uint64(bits.ReverseBytes16(Fold(w))), 0)
	return s + c
}

// sumScalar is Sum one 64-bit word at a time.
func sumScalar(b []byte, sum uint64) uint64 {
	var c uint64
	for len(b) >= 32 {
		sum, c = bits.Add64(sum, binary.BigEndian.Uint64(b), 0)
		sum, c = bits.Add64(sum, binary.BigEndian.Uint64(b[8:]), c)
		sum, c = bits.Add64(sum, binary.BigEndian.Uint64(b[16:]), c)
		sum, c = bits.Add64(sum, binary.BigEndian.Uint64(b[24:]), c)
		sum += c
		b = b[32:]
	}
	for len(b) >= 8 {
		sum, c = bits.Add64(sum, binary.BigEndian.Uint64(b), 0)
		sum += c
		b = b[8:]
	}
	if len(b) >= 4 {
		sum, c = bits.Add64(sum, uint64(binary.BigEndian.Uint32(b)), 0)
		sum += c
		b = b[4:]
	}
	if len(b) >= 2 {
		sum, c = bits.Add64(sum, uint64(binary.BigEndian.Uint16(b)), 0)
		sum += c
		b = b[2:]
	}
	if len(b) == 1 {
		sum, c = bits.Add64(sum, uint64(b[0])<<8, 0)
		sum += c
	}
	return sum
}

// Fold folds a running sum to 16 bits (not complemented).
func Fold(sum uint64) uint16 {
	sum = sum>>32 + sum&0xFFFFFFFF
	sum = sum>>32 + sum&0xFFFFFFFF
	sum = sum>>16 + sum&0xFFFF
	sum = sum>>16 + sum&0xFFFF
	return uint16(sum)
}

// Checksum is the Internet checksum of b: the complement of its folded sum.
func Checksum(b []byte) uint16 { return ^Fold(Sum(b, 0)) }
