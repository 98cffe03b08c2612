package tun

import (
	"errors"
	"testing"
	"time"
)

// closeWhileReading calls read until it fails, closes the device with close once the
// call is waiting, and checks that the wait ended with ErrClosed (what, e.g. "Read",
// names the call in the messages).
func closeWhileReading(t *testing.T, what string, read func() error, close func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		for {
			if err := read(); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("blocked %s after Close: %v, want ErrClosed", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still blocked after Close", what)
	}
}
