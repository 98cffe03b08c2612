// Package umem checks that a range of this process's memory can back a memory region, as
// the kernel's ib_umem_get does when ibv_reg_mr pins the pages: every page must be mapped
// and readable, and writable too when the region is (LOCAL_WRITE, REMOTE_WRITE,
// REMOTE_ATOMIC or MW_BIND: ib_access_writable), else the registration fails with EFAULT
// (get_user_pages, FOLL_WRITE for a writable region). pibgw's HCAs read and write a
// region's memory from the process itself, so a region over memory that is not there
// would otherwise fault the program later, at the first access, with no error to report.
package umem

import (
	"bytes"
	"os"
	"syscall"
	"unsafe"
)

// MapsPath is where the process's mappings are read (tests point it elsewhere).
var MapsPath = "/proc/self/maps"

// Check reports nil when [addr, addr+length) lies in mappings that are readable, and also
// writable when write is set; EINVAL for an empty range or one past the end of the
// address space (ib_umem_get's overflow check), EFAULT otherwise, or the error reading
// the mappings.
func Check(addr, length uintptr, write bool) error {
	end := addr + length
	if length == 0 || end < addr {
		return syscall.EINVAL
	}
	maps, err := os.ReadFile(MapsPath)
	if err != nil {
		return err
	}
	return check(maps, addr, end, write)
}

// check walks the mappings (sorted by address, as the kernel lists them) over [addr, end).
func check(maps []byte, addr, end uintptr, write bool) error {
	at := addr
	for len(maps) > 0 {
		line := maps
		if i := bytes.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		lo, hi, perms, ok := parse(line)
		if !ok || hi <= at {
			continue
		}
		if lo > at {
			return syscall.EFAULT // a hole before the next mapping
		}
		if perms[0] != 'r' || write && perms[1] != 'w' {
			return syscall.EFAULT
		}
		if hi >= end {
			return nil
		}
		at = hi
	}
	return syscall.EFAULT
}

// parse reads "lo-hi perms …", the start of a line of /proc/PID/maps.
func parse(line []byte) (lo, hi uintptr, perms []byte, ok bool) {
	dash := bytes.IndexByte(line, '-')
	sp := bytes.IndexByte(line, ' ')
	if dash < 0 || sp < dash || len(line) < sp+3 {
		return 0, 0, nil, false
	}
	l, ok1 := hex(line[:dash])
	h, ok2 := hex(line[dash+1 : sp])
	if !ok1 || !ok2 || h <= l {
		return 0, 0, nil, false
	}
	return l, h, line[sp+1 : sp+3], true
}

// hex parses a non-empty run of lower-case hexadecimal digits that fits an address.
func hex(b []byte) (uintptr, bool) {
	if len(b) == 0 || len(b) > 2*int(unsafe.Sizeof(uintptr(0))) {
		return 0, false
	}
	var v uintptr
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			return 0, false
		}
		v = v<<4 | uintptr(c)
	}
	return v, true
}
