// Package lifecycle is what a pibgw daemon leaves on the host between its start and its
// exit: a state file that records the daemon's pid and the network namespaces it
// created, locked (flock) for the daemon's whole life. A daemon killed with SIGKILL
// cannot clean up; the next one finds its record, takes the namespaces back as its own,
// and removes them when it stops. Two daemons never run on one state file: a new one
// waits, bounded, for the old one's lock (`kill -TERM OLD; pibgw up` with no pause), so
// the old one's cleanup cannot delete what the new one made.
package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Record is the state file's content (JSON).
type Record struct {
	PID     int       `json:"pid"`
	Control string    `json:"control,omitempty"`
	Started time.Time `json:"started"`
	// NetNS are the named network namespaces the daemon created and will delete.
	NetNS []string `json:"netns,omitempty"`
}

// State is a daemon's locked state file.
type State struct {
	path string
	f    *os.File
	rec  Record
	// Prev is what a daemon that exited without cleaning up (killed) recorded, or nil.
	Prev *Record
}

// PathFor is the default state file of the daemon serving control socket path: the
// socket's name with ".state" for ".sock" (/run/pibgw/pibgw.sock → /run/pibgw/pibgw.state).
func PathFor(control string) string {
	return strings.TrimSuffix(control, ".sock") + ".state"
}

// pollEvery is how often Acquire retries a lock held by another daemon.
const pollEvery = 20 * time.Millisecond

// busyGrace is how long a holder may go on serving before Acquire believes it is not
// stopping: a daemon that got SIGTERM closes its control socket within milliseconds.
const busyGrace = time.Second

// Acquire locks the state file at path, waiting up to wait for a daemon that holds it
// to exit, and records rec in it. The error names the holder's pid when the wait runs
// out. busy, if not nil, is asked about the holder while Acquire waits: an error from it
// (the holder still serves, so it is not stopping) that persists for a second ends the
// wait with that error. Prev is set when the file held another daemon's record (that
// daemon is gone: it no longer holds the lock).
func Acquire(ctx context.Context, path string, wait time.Duration, rec Record, busy func(holder Record) error) (*State, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	deadline := time.Now().Add(wait)
	var busySince time.Time
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("state file %s: %w", path, err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			// The holder before us may have unlinked the file between our open and our
			// lock: then the lock is on a dead inode, and we start over on the new file.
			if same(f, path) {
				s := &State{path: path, f: f, rec: rec}
				if prev, ok := readRecord(f); ok {
					s.Prev = &prev
				}
				if err := s.write(); err != nil {
					f.Close()
					return nil, err
				}
				return s, nil
			}
			f.Close()
			continue
		}
		holder, _ := readRecord(f)
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state file %s: lock: %w", path, err)
		}
		if busy != nil {
			if err := busy(holder); err == nil {
				busySince = time.Time{}
			} else if busySince.IsZero() {
				busySince = time.Now()
			} else if time.Since(busySince) >= busyGrace {
				return nil, err
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("another pibgw daemon (pid %d) holds %s and did not exit within %v; stop it first", holder.PID, path, wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// same reports whether f is still the file at path.
func same(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func readRecord(f *os.File) (Record, bool) {
	var r Record
	b := make([]byte, 64<<10)
	n, _ := f.ReadAt(b, 0)
	if n == 0 || json.Unmarshal(b[:n], &r) != nil {
		return Record{}, false
	}
	return r, true
}

func (s *State) write() error {
	b, err := json.MarshalIndent(s.rec, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("state file %s: %w", s.path, err)
	}
	if _, err := s.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("state file %s: %w", s.path, err)
	}
	return nil
}

// Path is the state file's path.
func (s *State) Path() string { return s.path }

// SetNetNS records the namespaces the daemon created (and must delete).
func (s *State) SetNetNS(ns []string) error {
	s.rec.NetNS = append([]string(nil), ns...)
	return s.write()
}

// Release ends the daemon's claim: the state file is removed when nothing is left to
// clean up (a namespace the daemon could not delete stays recorded for the next one),
// then the lock is released.
func (s *State) Release() error {
	var err error
	if len(s.rec.NetNS) == 0 {
		if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}
