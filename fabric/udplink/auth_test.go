package udplink

import (
	"math/rand/v2"
	"testing"
)

// The replay window against a reference that remembers every sequence number: each is
// accepted once, nothing older than the window is, and numbers inside the window are
// judged by what was seen, across word boundaries and big jumps.
func TestReplayWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var w replayWindow
	seen := map[uint64]bool{}
	var top uint64
	for range 200000 {
		var seq uint64
		switch r.IntN(4) {
		case 0: // ahead, sometimes far
			seq = top + 1 + uint64(r.IntN(2000))
		case 1, 2: // behind, inside or just outside the window
			seq = top - min(top, uint64(r.IntN(windowBits+70)))
		default: // a repeat
			seq = top
		}
		want := seq != 0 && !seen[seq] && (seq > top || top-seq < windowBits)
		if got := w.check(seq); got != want {
			t.Fatalf("seq %d (top %d): check %v, want %v", seq, top, got, want)
		}
		if want {
			w.accept(seq)
			seen[seq] = true
			top = max(top, seq)
		}
	}
}
