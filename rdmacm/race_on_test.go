//go:build race

package rdmacm_test

// raceEnabled: the race detector slows the data path about tenfold; the big transfers
// shrink under it.
const raceEnabled = true
