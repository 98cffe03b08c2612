package ibsim

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvBatchLen is how many datagrams one recvmmsg(2) takes: opensm keeps 4 SMPs
// outstanding by default (max_wire_smps), libibmad's tools one.
const recvBatchLen = 8

// mmsghdr is struct mmsghdr (linux/socket.h) on 64-bit platforms.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// recvBatch is a reader's recvmmsg(2) state, made once per client: the headers point
// into bufs, so a read allocates nothing.
type recvBatch struct {
	msgs [recvBatchLen]mmsghdr
	iovs [recvBatchLen]unix.Iovec
	bufs [recvBatchLen][reqLen + 1]byte // one more: a longer datagram must not pass for a MAD
}

func newRecvBatch() *recvBatch {
	b := new(recvBatch)
	for i := range b.msgs {
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(len(b.bufs[i]))
		b.msgs[i].hdr.Iov = &b.iovs[i]
		b.msgs[i].hdr.Iovlen = 1
	}
	return b
}

// recv waits for at least one datagram on the blocking socket fd and takes up to
// recvBatchLen (MSG_WAITFORONE: the rest only if already queued).
func (b *recvBatch) recv(fd int) (int, error) {
	for i := range b.msgs {
		b.msgs[i].n = 0
		b.msgs[i].hdr.Flags = 0
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.msgs[0])),
		recvBatchLen, unix.MSG_WAITFORONE, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// datagram returns the i-th datagram of the last recv.
func (b *recvBatch) datagram(i int) []byte {
	return b.bufs[i][:b.msgs[i].n]
}

// sendNow sends b on the connected socket fd without waiting (MSG_DONTWAIT: EAGAIN when
// the client's socket is full). It cannot block, so it skips the Go scheduler's
// system-call hand-off (entersyscall/exitsyscall), which a reply on every MAD would pay.
func sendNow(fd int, b []byte) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
