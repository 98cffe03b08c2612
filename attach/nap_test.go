package attach

import (
	"testing"
	"time"
)

// TestNap: a nap sleeps out its time unless kicked; a kick ends a nap under way (or the
// next one) at once; a closed napper's kick does nothing.
func TestNap(t *testing.T) {
	n := newNapper()
	if n.fd < 0 {
		t.Skip("no eventfd")
	}
	start := time.Now()
	if n.nap(200 * time.Microsecond) {
		t.Fatal("a nap nobody kicked reports a kick")
	}
	if d := time.Since(start); d < 200*time.Microsecond {
		t.Fatalf("a 200 µs nap took %v", d)
	}
	done := make(chan bool)
	go func() { done <- n.nap(time.Minute) }()
	time.Sleep(10 * time.Millisecond) // most likely asleep by now; a kick before it works too
	n.kick()
	select {
	case kicked := <-done:
		if !kicked {
			t.Fatal("a kicked nap reports no kick")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a kick did not end a one-minute nap")
	}
	n.close()
	n.kick()
	n.close()
}
