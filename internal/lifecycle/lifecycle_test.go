package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPathFor(t *testing.T) {
	if got := PathFor("/run/pibgw/pibgw.sock"); got != "/run/pibgw/pibgw.state" {
		t.Errorf("PathFor = %s", got)
	}
}

// A second daemon waits for the first's lock, bounded, and names the holder.
func TestAcquireWaitsThenRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pibgw.state")
	a, err := Acquire(context.Background(), path, 0, Record{PID: 4242}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Acquire(context.Background(), path, 100*time.Millisecond, Record{PID: 2}, nil)
	if err == nil || !strings.Contains(err.Error(), "pid 4242") || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("second Acquire: %v after %v", err, time.Since(start))
	}
	// Released during the wait: the waiter gets the new file, not the unlinked one.
	done := make(chan error, 1)
	var b *State
	go func() {
		var err error
		b, err = Acquire(context.Background(), path, 5*time.Second, Record{PID: 2}, nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.Prev != nil {
		t.Errorf("a clean exit left a record: %+v", b.Prev)
	}
	if !same(b.f, path) {
		t.Error("the waiter holds a lock on an unlinked file")
	}
	b.Release()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("state file left after a clean release: %v", err)
	}
}

// A daemon that died (its lock gone with it) leaves its record for the next one.
func TestPrevRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pibgw.state")
	a, err := Acquire(context.Background(), path, 0, Record{PID: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetNetNS([]string{"pib0", "pib1"}); err != nil {
		t.Fatal(err)
	}
	a.f.Close() // as the kernel does for a killed process: the lock goes, the file stays
	b, err := Acquire(context.Background(), path, 0, Record{PID: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Prev == nil || b.Prev.PID != 7 || !reflect.DeepEqual(b.Prev.NetNS, []string{"pib0", "pib1"}) {
		t.Fatalf("Prev = %+v", b.Prev)
	}
	// A daemon that could not delete a namespace keeps it recorded.
	b.SetNetNS([]string{"pib1"})
	b.Release()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("state file with a namespace left was removed: %v", err)
	}
}

// A holder that keeps serving is running, not stopping: the wait ends after the grace
// with busy's error, long before the wait's bound.
func TestAcquireBusyHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pibgw.state")
	a, err := Acquire(context.Background(), path, 0, Record{PID: 5, Control: "/x.sock"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	start := time.Now()
	_, err = Acquire(context.Background(), path, time.Minute, Record{PID: 6}, func(h Record) error {
		return fmt.Errorf("a daemon is already running at %s (pid %d)", h.Control, h.PID)
	})
	if err == nil || err.Error() != "a daemon is already running at /x.sock (pid 5)" || time.Since(start) > 5*time.Second {
		t.Fatalf("Acquire with a busy holder: %v after %v", err, time.Since(start))
	}
}
