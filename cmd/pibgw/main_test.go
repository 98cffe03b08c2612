package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain points every verb at a control socket no daemon listens on, with --inproc
// (PIBGW_INPROC), so that the tests see the in-process fabric even when a pibgw daemon
// runs on this machine.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pibgw-cmd-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("PIBGW_CONTROL", filepath.Join(dir, "none.sock"))
	os.Setenv("PIBGW_INPROC", "1") // devinfo and stat show that fabric (TestInProcessNote unsets it)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
