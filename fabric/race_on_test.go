//go:build race

package fabric_test

// raceEnabled: sync.Pool drops items on purpose under the race detector, so allocation
// counts are meaningless there.
const raceEnabled = true
