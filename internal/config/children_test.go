package config

import (
	"strings"
	"testing"
)

// daemon.max_children: 64 by default, 0–4096, and configured children count against it.
func TestMaxChildren(t *testing.T) {
	c, err := Parse("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Daemon.MaxChildren != DefaultMaxChildren || DefaultMaxChildren != 64 {
		t.Errorf("default max_children %d, want 64", c.Daemon.MaxChildren)
	}
	for _, v := range []string{"-1", "4097"} {
		_, err := Parse("t.toml", []byte("[daemon]\nmax_children = "+v+"\n"))
		if err == nil || !strings.Contains(err.Error(), "daemon.max_children: "+v+" out of range 0..4096") {
			t.Errorf("max_children = %s: %v", v, err)
		}
	}
	const two = `
[daemon]
max_children = 1
[[interfaces]]
name = "ib0"
hca = "pib_0"
netns = "a"
[[interfaces]]
parent = "ib0"
pkey = 0x8001
[[interfaces]]
parent = "ib0"
pkey = 0x8002
`
	_, err = Parse("t.toml", []byte(two))
	if err == nil || !strings.Contains(err.Error(), "interfaces[2].parent: one child more than daemon.max_children (1) allows") {
		t.Errorf("two children under max_children = 1: %v", err)
	}
	if _, err := Parse("t.toml", []byte(strings.Replace(two, "max_children = 1", "max_children = 2", 1))); err != nil {
		t.Errorf("two children under max_children = 2: %v", err)
	}
}
