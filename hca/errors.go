package hca

import (
	"fmt"
	"syscall"
)

// Verbs calls fail with errno values, as libibverbs' do; test them with errors.Is.
var (
	EINVAL     = syscall.EINVAL
	ENOMEM     = syscall.ENOMEM
	EPERM      = syscall.EPERM
	EBUSY      = syscall.EBUSY
	ENOENT     = syscall.ENOENT
	EAGAIN     = syscall.EAGAIN
	ENOSYS     = syscall.ENOSYS
	EOPNOTSUPP = syscall.EOPNOTSUPP
	EACCES     = syscall.EACCES
	EIO        = syscall.EIO
	ENODATA    = syscall.ENODATA
)

// Error is a verbs failure: the call, why, and the errno it maps to.
type Error struct {
	Op     string
	Reason string
	Errno  syscall.Errno
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Op, e.Reason, e.Errno.Error())
}

func (e *Error) Unwrap() error { return e.Errno }

func errorf(op string, errno syscall.Errno, format string, args ...any) error {
	return &Error{Op: op, Reason: fmt.Sprintf(format, args...), Errno: errno}
}

// Errorf builds an *Error; transports use it for errors they detect at post time.
func Errorf(op string, errno syscall.Errno, format string, args ...any) error {
	return errorf(op, errno, format, args...)
}
