package wire

import (
	"fmt"
	"testing"
)

// TestVCRCFold128: with the AVX-512 fold off (as on CPUs without it), the 128-bit fold
// agrees with the table at every length too.
func TestVCRCFold128(t *testing.T) {
	defer func(on bool) { vcrcAVX512 = on }(vcrcAVX512)
	vcrcAVX512 = false
	TestVCRCFoldMatchesTable(t)
}

// BenchmarkVCRCFold compares the AVX-512 fold (where the CPU has it) with the 128-bit one
// in the same run, at the sizes of a 2048- and a 4096-byte MTU.
func BenchmarkVCRCFold(b *testing.B) {
	for _, n := range []int{256, 2048 + 30, 4096 + 30} {
		pkt := make([]byte, n)
		for i := range pkt {
			pkt[i] = byte(i * 7)
		}
		for _, avx := range []bool{true, false} {
			b.Run(fmt.Sprintf("%d/avx512=%v", n, avx && vcrcAVX512), func(b *testing.B) {
				defer func(on bool) { vcrcAVX512 = on }(vcrcAVX512)
				vcrcAVX512 = avx && vcrcAVX512
				b.SetBytes(int64(n))
				for b.Loop() {
					_ = VCRC(pkt)
				}
			})
		}
	}
}
