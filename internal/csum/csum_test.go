package csum

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"
)

// refSum is RFC 1071 word by word: the reference the fast sums are held to.
func refSum(b []byte, sum uint64) uint64 {
	for ; len(b) >= 2; b = b[2:] {
		sum += uint64(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	return sum
}

func fill(r *rand.Rand, b []byte, kind int) {
	for i := range b {
		switch kind {
		case 0:
			b[i] = byte(r.Uint32())
		case 1:
			b[i] = 0xff
		case 2:
			b[i] = 0
		}
	}
}

// TestSumMatchesReference: every length up to 1,100 bytes and packet sizes, at odd and
// even offsets, random, all-ones and all-zero bytes, on a running sum, folded as a
// checksum would be; the scalar loop alone too.
func TestSumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 70016)
	lens := []int{2044, 2048, 4096, 4156, 9000, 65480, 65535, 65536, 69999}
	for n := range 1100 {
		lens = append(lens, n)
	}
	for _, n := range lens {
		for kind := range 3 {
			for _, off := range []int{0, 1, 7} {
				b := buf[off : off+n]
				fill(r, b, kind)
				for _, start := range []uint64{0, 0xffff, 0xfffffffffffffff0} {
					want := Fold(refSum(b, uint64(Fold(start))))
					if got := Fold(Sum(b, start)); got != want {
						t.Fatalf("len %d kind %d off %d start %#x: Sum folds to %#04x, want %#04x", n, kind, off, start, got, want)
					}
					if got := Fold(sumScalar(b, start)); got != want {
						t.Fatalf("len %d kind %d off %d start %#x: sumScalar folds to %#04x, want %#04x", n, kind, off, start, got, want)
					}
				}
			}
		}
	}
}

// TestSumPieces: a sum taken in even-length pieces (and an odd last one) equals the sum
// of the whole, whichever path each piece takes.
func TestSumPieces(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 9001)
	fill(r, b, 0)
	want := Checksum(b)
	for range 200 {
		var s uint64
		rest := b
		for len(rest) > 0 {
			n := min(len(rest), 2*r.IntN(400))
			if n == 0 {
				n = len(rest)
			}
			s = Sum(rest[:n], s)
			rest = rest[n:]
		}
		if got := ^Fold(s); got != want {
			t.Fatalf("pieces: %#04x, whole: %#04x", got, want)
		}
	}
}

func FuzzSum(f *testing.F) {
	f.Add([]byte{}, uint64(0))
	f.Add(make([]byte, 300), uint64(0xffff))
	f.Fuzz(func(t *testing.T, b []byte, start uint64) {
		want := Fold(refSum(b, uint64(Fold(start))))
		if got := Fold(Sum(b, start)); got != want {
			t.Fatalf("Sum folds to %#04x, want %#04x", got, want)
		}
	})
}

func TestSumAllocs(t *testing.T) {
	b := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() { _ = Sum(b, 0) }); n != 0 {
		t.Fatalf("Sum allocates %v times per call", n)
	}
}

// BenchmarkSum compares Sum with the scalar loop it replaces, same run: a UD packet's
// payload at MTU 2044 and a 64 KiB TCP segment.
func BenchmarkSum(b *testing.B) {
	for _, n := range []int{64, 128, 256, 2044, 65480} {
		buf := make([]byte, n)
		for _, c := range []struct {
			name string
			f    func([]byte, uint64) uint64
		}{{"Sum", Sum}, {"scalar", sumScalar}} {
			b.Run(c.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				var s uint64
				for range b.N {
					s = c.f(buf, s)
				}
				sink = s
			})
		}
	}
}

var sink uint64
