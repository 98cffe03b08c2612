package hcatest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
)

// AttachedEnv is the environment variable that makes NewFabric hand out attached
// devices: PIBGW_TEST_ATTACHED=1 go test ./rc ./ud runs the verbs tests through the
// attach channel, each HCA used by its own session as if by its own process.
const AttachedEnv = "PIBGW_TEST_ATTACHED"

// attachAll serves f's devices on an attach socket and replaces f.Devs by mirrors: HCA i
// from session i.
func attachAll(tb testing.TB, f *Fabric, o Options) {
	tb.Helper()
	dir, err := os.MkdirTemp("", "pibgw-attach")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "attach.sock")
	ln, err := attach.Listen(path, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	srv := &attach.Server{Devices: f.Devs}
	go srv.Serve(ln)
	f.Daemon = f.Devs
	f.Devs = nil
	var sessions []*attach.Session
	tb.Cleanup(func() {
		for _, s := range sessions {
			s.Close()
		}
		srv.Close()
	})
	for i := range f.Daemon {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := attach.Dial(ctx, path, &attach.Options{Clock: o.Clock})
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		sessions = append(sessions, s)
		d := s.Devices()[i]
		if o.Register != nil {
			o.Register(d)
		}
		f.Devs = append(f.Devs, d)
	}
	f.Sessions = sessions
	// The mirrors must see the ports Active before the test posts.
	for _, d := range f.Devs {
		deadline := time.Now().Add(5 * time.Second)
		for d.Port(1).State() != hca.PortActive && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}
