package wire

import (
	"fmt"
	"hash/crc32"
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

// TestCRCFoldMatchesStdlib: the ICRC's CRC-32 by fold512 agrees with hash/crc32 at every
// length from 256 to 1300 and at packet sizes, from several starting values.
func TestCRCFoldMatchesStdlib(t *testing.T) {
	if !icrcFold512 {
		t.Skip("no AVX-512 VPCLMULQDQ on this CPU")
	}
	buf := make([]byte, 9000)
	for i := range buf {
		buf[i] = byte(i*151 + i>>7*3 + 5)
	}
	check := func(n int) {
		for _, init := range []uint32{0, 0xffffffff, uint32(n) * 2654435761} {
			p := buf[n%11 : n%11+n]
			if got, want := crcUpdFold(init, p), crc32.Update(init, crc32.IEEETable, p); got != want {
				t.Fatalf("len %d init %#x: fold %#08x, hash/crc32 %#08x", n, init, got, want)
			}
		}
	}
	for n := 256; n <= 1300; n++ {
		check(n)
	}
	for _, n := range []int{2048, 2078, 4096, 4126, 8999} {
		check(n)
	}
}
