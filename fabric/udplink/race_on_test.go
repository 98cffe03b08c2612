//go:build race

package udplink

// raceEnabled: the race detector makes sync primitives allocate.
const raceEnabled = true
