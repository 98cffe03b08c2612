//go:build !amd64

package csum

const vecSum = false

const vecMin = 0

func sumWords(b []byte) uint64 { panic("csum: no vector sum on this architecture") }
