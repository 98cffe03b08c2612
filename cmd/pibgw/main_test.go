package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain points every verb at a control socket no daemon listens on, so that the tests
// see the in-process fabric even when a pibgw daemon runs on this machine.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pibgw-cmd-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("PIBGW_CONTROL", filepath.Join(dir, "none.sock"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
