package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDevNodes: `pibgw devnodes` makes uverbs0…N-1 as the kernel's character devices
// (231:192+N, mode 0666), leaves them be when they are there, refuses to replace a file
// that is not one, and --remove takes away only the nodes (and the directory they leave
// empty). In a temporary directory (the hidden --dir): mknod needs root.
func TestDevNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	dir := filepath.Join(t.TempDir(), "infiniband")
	out, errs, code := pibgw(t, "devnodes", "--dir", dir, "--count", "2")
	if code != 0 || errs != "" {
		t.Fatalf("devnodes: exit %d, %s", code, errs)
	}
	for i, name := range []string{"uverbs0", "uverbs1"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 231 || unix.Minor(st.Rdev) != uint32(192+i) || st.Mode&0o777 != 0o666 {
			t.Errorf("%s: mode %o, device %d:%d; want a character device 231:%d, mode 666", name, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), 192+i)
		}
	}
	if !strings.Contains(out, "uverbs1: created (c 231:193)") {
		t.Errorf("output:\n%s", out)
	}
	if out, _, code := pibgw(t, "devnodes", "--dir", dir, "--count", "2"); code != 0 || strings.Count(out, "already there") != 2 {
		t.Errorf("again: exit %d:\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "uverbs2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := pibgw(t, "devnodes", "--dir", dir, "--count", "3"); code == 0 || !strings.Contains(errs, "uverbs2 exists and is not character device 231:194") {
		t.Errorf("over a file: exit %d, %s", code, errs)
	}
	if _, errs, code := pibgw(t, "devnodes", "--dir", dir, "--count", "65"); code == 0 || !strings.Contains(errs, "--count 65") {
		t.Errorf("--count 65: exit %d, %s", code, errs)
	}
	if _, _, code := pibgw(t, "devnodes", "--dir", dir, "--remove"); code != 0 {
		t.Fatalf("remove: exit %d", code)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "uverbs2" {
		t.Errorf("after --remove: %v, want only the file uverbs2", ents)
	}
	os.Remove(filepath.Join(dir, "uverbs2"))
	if _, _, code := pibgw(t, "devnodes", "--dir", dir, "--remove"); code != 0 {
		t.Fatalf("remove: exit %d", code)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the emptied directory is still there: %v", err)
	}
}
