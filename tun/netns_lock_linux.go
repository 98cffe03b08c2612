package tun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// NetNSLockDir is where the daemons using a named namespace hold its lock file.
const NetNSLockDir = "/run/pibgw/netns"

// createdMark is the lock file's content once a daemon created (or adopted) the
// namespace: the last daemon to let go of it deletes it.
const createdMark = "created by pibgw\n"

// NetNSLock is a daemon's use of a named network namespace: a shared flock(2) on
// NetNSLockDir/NAME.lock, held while the daemon has interfaces in it, so that another
// daemon configured with the same namespace does not delete it from under this one.
// The namespace is deleted by whichever daemon lets go of it last, and only if a pibgw
// daemon created it (MarkCreated): one made with `ip netns add` is left alone.
type NetNSLock struct {
	name, path string
	f          *os.File
}

// NetNSRelease says what Release did with the namespace.
type NetNSRelease int

const (
	NetNSDeleted NetNSRelease = iota // the last user, and pibgw created it: deleted
	NetNSInUse                       // another daemon still uses it: left to that one
	NetNSKept                        // not created by pibgw (or not asked to delete): left
	NetNSGone                        // already removed (ip netns del)
)

// LockNetNS takes a shared hold on the namespace name, waiting while a daemon that is
// letting go of it deletes it. dir is NetNSLockDir but for tests.
func LockNetNS(dir, name string) (*NetNSLock, error) {
	if err := checkNetNSName(name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tun: lock netns %q: %w", name, err)
	}
	path := filepath.Join(dir, name+".lock")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("tun: lock netns %q: %w", name, err)
		}
		if err := flock(f, unix.LOCK_SH); err != nil {
			f.Close()
			return nil, fmt.Errorf("tun: lock netns %q: %w", name, err)
		}
		// The daemon that held it exclusively may have removed the file meanwhile: then
		// this lock is on a file nobody else will see; start again on a new one.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(path, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			return &NetNSLock{name: name, path: path, f: f}, nil
		}
		f.Close()
	}
}

// MarkCreated records that pibgw created the namespace, so that the last daemon to let
// go of it deletes it.
func (l *NetNSLock) MarkCreated() error {
	if _, err := l.f.WriteAt([]byte(createdMark), 0); err != nil {
		return fmt.Errorf("tun: mark netns %q: %w", l.name, err)
	}
	return nil
}

// Created reports whether a pibgw daemon created the namespace (MarkCreated).
func (l *NetNSLock) Created() bool {
	b := make([]byte, len(createdMark))
	n, _ := l.f.ReadAt(b, 0)
	return string(b[:n]) == createdMark
}

// Release lets go of the namespace. With del, the last user of a namespace pibgw
// created deletes it; with other users left it stays (NetNSInUse).
func (l *NetNSLock) Release(del bool) (NetNSRelease, error) {
	defer l.f.Close()
	// Converting the shared lock may drop it before failing; of two daemons letting go
	// at once the one that asks second gets it.
	if err := flock(l.f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return NetNSInUse, nil
		}
		return NetNSKept, fmt.Errorf("tun: release netns %q: %w", l.name, err)
	}
	created := l.Created()
	os.Remove(l.path) // ours alone now; LockNetNS notices a removed file
	switch {
	case !NetNSExists(l.name):
		return NetNSGone, nil
	case !del || !created:
		return NetNSKept, nil
	}
	if err := DeleteNetNS(l.name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return NetNSGone, nil
		}
		return NetNSKept, err
	}
	return NetNSDeleted, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
