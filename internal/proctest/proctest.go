// Package proctest has helpers for tests that run other programs: whether one listens.
package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TCPListening reports whether process pid has a TCP socket in LISTEN in the caller's
// network namespace: its descriptors' socket inodes against /proc/net/tcp and tcp6
// (proc(5): sl local rem st tx:rx tr:when retrnsmt uid timeout inode).
func TCPListening(pid int) bool {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	if len(inodes) == 0 {
		return false
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fs := strings.Fields(line); len(fs) > 9 && fs[3] == "0A" && inodes[fs[9]] {
				return true
			}
		}
	}
	return false
}
