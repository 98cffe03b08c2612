//go:build !race

package cabi

const raceEnabled = false
