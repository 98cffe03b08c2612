//go:build race

package daemon_test

// raceEnabled: the race detector's shadow memory makes a process's RSS several times its
// heap, and keeps it, so RSS bounds are meaningless there (the heap's still hold).
const raceEnabled = true
