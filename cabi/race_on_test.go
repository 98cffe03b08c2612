//go:build race

package cabi

// raceEnabled: the test binary (the fabric's daemon side) runs under the race detector.
const raceEnabled = true
