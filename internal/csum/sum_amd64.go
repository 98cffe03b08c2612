package csum

import "golang.org/x/sys/cpu"

// sumWords returns the sum of b's little-endian 32-bit words (AVX2: sixteen words a
// round); len(b) is a multiple of 64 and at most maxVecLen.
//
//go:noescape
func sumWords(b []byte) uint64

// vecSum says whether Sum adds with sumWords: measured, from vecMin bytes on it is
// faster than the scalar loop (BenchmarkSum).
var vecSum = cpu.X86.HasAVX2

const vecMin = 256
