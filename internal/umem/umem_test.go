package umem

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestCheck maps memory with each protection, makes a hole, and checks what a region over
// each may be: as ib_umem_get, EFAULT where the kernel would refuse to pin the pages.
func TestCheck(t *testing.T) {
	page := uintptr(unix.Getpagesize())
	mapAt := func(prot int) uintptr {
		b, err := unix.Mmap(-1, 0, int(4*page), prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return uintptr(unsafe.Pointer(&b[0]))
	}
	rw, ro, none := mapAt(unix.PROT_READ|unix.PROT_WRITE), mapAt(unix.PROT_READ), mapAt(unix.PROT_NONE)
	holed := mapAt(unix.PROT_READ | unix.PROT_WRITE)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, holed+page, page, 0); e != 0 {
		t.Fatal(e)
	}
	gone := mapAt(unix.PROT_READ | unix.PROT_WRITE)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, gone, 4*page, 0); e != 0 {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		name         string
		addr, length uintptr
		write        bool
		want         error
	}{
		{"read-write, writable region", rw + 10, 3 * page, true, nil},
		{"read-write, whole", rw, 4 * page, false, nil},
		{"read-only, read-only region", ro, 4 * page, false, nil},
		{"read-only, writable region", ro, 100, true, syscall.EFAULT},
		{"PROT_NONE", none + 8, 8, false, syscall.EFAULT},
		{"unmapped", gone, page, false, syscall.EFAULT},
		{"a hole inside", holed, 3 * page, false, syscall.EFAULT},
		{"before the hole", holed, page, true, nil},
		{"after the hole", holed + 2*page, 2 * page, true, nil},
		{"running into the hole", holed + page - 8, 16, false, syscall.EFAULT},
		{"empty", rw, 0, false, syscall.EINVAL},
		{"wrapping", ^uintptr(0) - 10, 100, false, syscall.EINVAL},
		{"page zero", 0x1000, 16, false, syscall.EFAULT},
	} {
		if err := Check(tc.addr, tc.length, tc.write); !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestCheckAdjacent: a range across two adjoining mappings (as the kernel lists two
// regions of different protection side by side) is checked in each.
func TestCheckAdjacent(t *testing.T) {
	maps := []byte("1000-3000 rw-p 00000000 00:00 0\n3000-5000 r--p 00000000 00:00 0 [x]\n" +
		"garbage line\n6000-7000 rw-p 00000000 00:00 0\n")
	for _, tc := range []struct {
		lo, hi uintptr
		write  bool
		want   error
	}{
		{0x1000, 0x5000, false, nil},
		{0x2000, 0x4000, true, syscall.EFAULT},
		{0x2000, 0x3000, true, nil},
		{0x4000, 0x6800, false, syscall.EFAULT},
		{0x6000, 0x7000, true, nil},
		{0x6800, 0x7001, false, syscall.EFAULT},
	} {
		if err := check(maps, tc.lo, tc.hi, tc.write); err != tc.want {
			t.Errorf("[%#x, %#x) write %v: %v, want %v", tc.lo, tc.hi, tc.write, err, tc.want)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	buf := make([]byte, 1<<20)
	addr := uintptr(unsafe.Pointer(&buf[0]))
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(addr, uintptr(len(buf)), true); err != nil {
			b.Fatal(err)
		}
	}
}
