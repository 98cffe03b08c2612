package config

import (
	"testing"
	"time"
)

// The attach socket's limits: defaults, values, and an error naming the field and the
// range for each value out of bounds.
func TestAttachLimits(t *testing.T) {
	d := Default().Daemon
	if d.AttachMaxProcesses != 1024 || d.AttachMaxPerUser != 256 || d.AttachHelloTimeout != 5*time.Second || d.AttachMaxQPs != 16384 {
		t.Fatalf("defaults %+v", d)
	}
	c, err := Parse("x.toml", []byte("[daemon]\nattach_max_processes = 64\nattach_max_per_user = 8\nattach_hello_timeout = \"2s\"\nattach_max_qps = 100\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Daemon; d.AttachMaxProcesses != 64 || d.AttachMaxPerUser != 8 || d.AttachHelloTimeout != 2*time.Second || d.AttachMaxQPs != 100 {
		t.Fatalf("parsed %+v", d)
	}
	// Only the total set, below the default per user: the per-user limit follows it.
	c, err = Parse("x.toml", []byte("[daemon]\nattach_max_processes = 10\n"))
	if err != nil || c.Daemon.AttachMaxPerUser != 10 {
		t.Fatalf("max_per_user %d, %v", c.Daemon.AttachMaxPerUser, err)
	}
	for _, tc := range []struct{ toml, want string }{
		{"[daemon]\nattach_max_processes = 0\n", "x.toml: daemon.attach_max_processes: 0 out of range 1..4095"},
		{"[daemon]\nattach_max_processes = 5000\n", "x.toml: daemon.attach_max_processes: 5000 out of range 1..4095"},
		{"[daemon]\nattach_max_per_user = \"many\"\n", "x.toml: daemon.attach_max_per_user: want an integer, got a string"},
		{"[daemon]\nattach_max_processes = 10\nattach_max_per_user = 20\n", "x.toml: daemon.attach_max_per_user: 20 is more than daemon.attach_max_processes (10): want at most that"},
		{"[daemon]\nattach_hello_timeout = \"1ns\"\n", "x.toml: daemon.attach_hello_timeout: \"1ns\": want a duration from 100ms to 1m0s, such as \"5s\""},
		{"[daemon]\nattach_max_qps = 200000\n", "x.toml: daemon.attach_max_qps: 200000 out of range 1..131072"},
	} {
		_, err := Parse("x.toml", []byte(tc.toml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.toml, err, tc.want)
		}
	}
}
