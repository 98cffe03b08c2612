//go:build race

package mgmttest

const raceEnabled = true
