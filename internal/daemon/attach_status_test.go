package daemon_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
)

// status reports the attach socket's connections against its limits, refusals
// counted (issue 43 item 1).
func TestStatusAttachConns(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	dir := t.TempDir()
	apath := filepath.Join(dir, "attach.sock")
	aln, err := attach.Listen(apath, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	as := &attach.Server{Devices: d.Fabric.Devs, Logger: quiet(), Limits: attach.Limits{MaxProcesses: 8, MaxPerUser: 1}}
	go as.Serve(aln)
	t.Cleanup(func() { as.Close() })

	path := filepath.Join(dir, "pibgw.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &control.Server{Handler: &daemon.Handler{D: d, ControlPath: path, Attach: as, AttachPath: apath}, Logger: quiet()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := attach.Dial(ctx, apath, &attach.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = attach.Dial(ctx, apath, &attach.Options{Logger: quiet()})
	var ae *attach.Error
	if !errors.As(err, &ae) || ae.Errno != syscall.EAGAIN {
		t.Fatalf("second process of one user: %v, want EAGAIN", err)
	}
	var st control.Status
	if err := control.NewClient(path).Do(ctx, control.Request{Verb: control.VerbStatus}, &st); err != nil {
		t.Fatal(err)
	}
	want := control.AttachConns{Open: 1, MaxProcesses: 8, MaxPerUser: 1, RefusedUser: 1}
	if st.AttachConns == nil || *st.AttachConns != want {
		t.Fatalf("status attach_conns %+v, want %+v", st.AttachConns, want)
	}
}
