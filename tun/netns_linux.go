package tun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetNSDir is where named network namespaces live, as `ip netns` keeps them.
const NetNSDir = "/var/run/netns"

// CreateNetNS creates the named network namespace name, like `ip netns add`: a new
// network namespace bind-mounted on NetNSDir/name, so that it outlives this process and
// `ip -n name` and `ip netns exec name` reach it.
func CreateNetNS(name string) error {
	if err := checkNetNSName(name); err != nil {
		return err
	}
	if err := os.MkdirAll(NetNSDir, 0o755); err != nil {
		return nsError("create netns", name, err)
	}
	if err := shareNetNSDir(); err != nil {
		return nsError("create netns", name, err)
	}
	path := filepath.Join(NetNSDir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("tun: create netns %q: it already exists: %w", name, fs.ErrExist)
		}
		return nsError("create netns", name, err)
	}
	f.Close()
	err = onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		// The thread is now in the new namespace; pin it on the file.
		return unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
	})
	if err != nil {
		os.Remove(path)
		return nsError("create netns", name, err)
	}
	// As `ip netns add` leaves it, lo is down; a namespace made for an interface gets it
	// up, so that the programs run in it can reach their own addresses.
	if err := loUp(name); err != nil {
		DeleteNetNS(name)
		return nsError("create netns", name, fmt.Errorf("bringing lo up: %w", err))
	}
	return nil
}

// loUp brings the loopback device of the named namespace up.
func loUp(name string) error {
	ns, err := openNetNS(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	return h.LinkSetUp(lo)
}

// shareNetNSDir makes NetNSDir a shared mount point (bind-mounting it on itself first if
// it is not a mount point), as iproute2 does, so that namespaces mounted later are seen
// by processes in other mount namespaces (`ip netns exec` makes one).
func shareNetNSDir() error {
	err := unix.Mount("", NetNSDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil || !errors.Is(err, unix.EINVAL) {
		return err
	}
	if err := unix.Mount(NetNSDir, NetNSDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return unix.Mount("", NetNSDir, "none", unix.MS_SHARED|unix.MS_REC, "")
}

// DeleteNetNS deletes the named network namespace, like `ip netns delete`. The namespace
// itself goes away when nothing else holds it (processes, open handles, devices' sockets).
func DeleteNetNS(name string) error {
	if err := checkNetNSName(name); err != nil {
		return err
	}
	path := filepath.Join(NetNSDir, name)
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tun: delete netns %q: no such network namespace: %w", name, fs.ErrNotExist)
		}
		return nsError("delete netns", name, err)
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return nsError("delete netns", name, err)
	}
	if err := os.Remove(path); err != nil {
		return nsError("delete netns", name, err)
	}
	return nil
}

// NetNSExists reports whether name is a named network namespace (a mounted namespace
// file under NetNSDir).
func NetNSExists(name string) bool {
	if checkNetNSName(name) != nil {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(NetNSDir, name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// InNetNS runs f on an OS thread that has entered the named network namespace, and
// returns f's error. Sockets and devices f creates belong to that namespace and stay
// there; goroutines f starts do not run in it. With name "" f runs in the current
// namespace.
func InNetNS(name string, f func() error) error {
	if name == "" {
		return f()
	}
	ns, err := openNetNS(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	return inNetNS(ns, f)
}

// openNetNS opens a handle on the named network namespace.
func openNetNS(name string) (netns.NsHandle, error) {
	if err := checkNetNSName(name); err != nil {
		return -1, err
	}
	ns, err := netns.GetFromPath(filepath.Join(NetNSDir, name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return -1, fmt.Errorf("tun: netns %q: no such network namespace (create it with `ip netns add %s`): %w", name, name, fs.ErrNotExist)
		}
		return -1, nsError("open netns", name, err)
	}
	return ns, nil
}

// inNetNS runs f on a locked OS thread inside ns.
func inNetNS(ns netns.NsHandle, f func() error) error {
	var ferr error
	err := onLockedThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		ferr = f()
		return nil
	})
	if err != nil {
		return fmt.Errorf("tun: enter netns: %w", err)
	}
	return ferr
}

// onLockedThread runs f in a new goroutine locked to its OS thread, and afterwards puts
// the thread back into the process's original network namespace. If that fails the
// thread is left locked, so the runtime destroys it when the goroutine exits instead of
// reusing a thread in the wrong namespace.
func onLockedThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		err = f()
		if rerr := netns.Set(orig); rerr != nil {
			done <- errors.Join(err, fmt.Errorf("restore thread's netns: %w", rerr))
			return // still locked: the thread dies with this goroutine
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

func checkNetNSName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return fmt.Errorf("tun: invalid netns name %q", name)
	}
	return nil
}

// nsError wraps err from op on netns name, explaining permission errors.
func nsError(op, name string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("tun: %s %q: %w (needs root or CAP_SYS_ADMIN and CAP_NET_ADMIN)", op, name, err)
	}
	return fmt.Errorf("tun: %s %q: %w", op, name, err)
}
