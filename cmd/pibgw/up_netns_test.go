package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/lifecycle"
	"github.com/pibgw/pibgw/tun"
)

// A namespace a killed daemon created and another running daemon now uses is left to
// that daemon by the next `pibgw up` (issue 43 item 10), not deleted from under it; one
// nobody uses is deleted.
func TestCleanPreviousSharedNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (named namespaces)")
	}
	used, free := fmt.Sprintf("pibcu%d", os.Getpid()), fmt.Sprintf("pibcf%d", os.Getpid())
	for _, ns := range []string{used, free} {
		if err := tun.CreateNetNS(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if tun.NetNSExists(ns) {
				tun.DeleteNetNS(ns)
			}
		})
	}
	hold, err := tun.LockNetNS(tun.NetNSLockDir, used) // the other daemon's hold
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release(false)
	path := filepath.Join(t.TempDir(), "pibgw.state")
	rec := fmt.Sprintf(`{"pid":7,"started":"2026-01-01T00:00:00Z","netns":[%q,%q]}`, used, free)
	if err := os.WriteFile(path, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := lifecycle.Acquire(context.Background(), path, 0, lifecycle.Record{PID: os.Getpid()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	cfg := config.Default()
	cfg.Interfaces = nil
	cleanPrevious(st, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !tun.NetNSExists(used) {
		t.Errorf("namespace %s deleted while another daemon holds it", used)
	}
	if tun.NetNSExists(free) {
		t.Errorf("namespace %s, which nobody uses, left", free)
	}
}
