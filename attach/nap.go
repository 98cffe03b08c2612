package attach

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The receive goroutine's wait while the program polls its CQs (rxLoop): it looks at the
// rings again after the grace, or at once when kicked (a CQ armed, a spinning waiter
// gone). A Go timer cannot be that wait: below a millisecond it fires after about 1.1 ms
// (the network poller's epoll timeout is in milliseconds — measured: time.Timer of 10,
// 50 or 200 µs, 1.09–1.12 ms median), and every RDMA WRITE that reaches a program that
// stopped polling to spin on its memory (ib_write_lat, and the RDMA programs built the
// same way) waited that long. ppoll(2) on an eventfd waits as long as asked, to within
// the thread's timer slack, which the nap sets to napSlack first (the default, 50 µs,
// is as long as a typical grace).

// napSlack is the timer slack of the thread a nap sleeps on (prctl PR_SET_TIMERSLACK).
const napSlack = 2 * time.Microsecond

// napper is a session's kick doorbell for the receive goroutine's naps.
type napper struct {
	fd  int // eventfd, non-blocking; -1 if none could be made (naps then sleep out)
	pfd [1]unix.PollFd
	mu  sync.Mutex // kick against close: the fd's number must not be reused under a kick
}

func newNapper() *napper {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		fd = -1
	}
	n := &napper{fd: fd}
	n.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	return n
}

// nap sleeps for d or until kick; it reports whether it was kicked.
func (n *napper) nap(d time.Duration) bool {
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(napSlack), 0, 0, 0)
	ts := unix.NsecToTimespec(int64(d))
	n.pfd[0].Revents = 0
	k, err := unix.Ppoll(n.pfd[:], &ts, nil)
	if err != nil || k == 0 || n.fd < 0 {
		return false
	}
	var b [8]byte
	unix.Read(n.fd, b[:])
	return true
}

// kick ends a nap, or the next one at once.
func (n *napper) kick() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		return
	}
	one := [8]byte{1}
	unix.Write(n.fd, one[:])
}

// close closes the doorbell once nothing naps on it any more.
func (n *napper) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
}
