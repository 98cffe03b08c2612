package attach_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
)

// debugServer serves one daemon device (no fabric: inspection and injection need none).
func debugServer(t *testing.T) (*attach.Server, string) {
	t.Helper()
	d, err := hca.NewDevice(hca.Config{Name: "pib_0", NodeGUID: 0x0002c90300000300})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "attach.sock")
	ln, err := attach.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := &attach.Server{Devices: []*hca.Device{d}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, path
}

// The daemon lists an attached process's objects and injects errors into them through
// the attach channel: the process owns them, the daemon only asks.
func TestInspectAndInjectAttached(t *testing.T) {
	srv, path := debugServer(t)
	s := dial(t, path)
	d := s.Devices()[0]
	c := d.Open()
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(32, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeUD, Cap: hca.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: 0x11}, hca.QPAttrState|hca.QPAttrPort|hca.QPAttrPKeyIndex|hca.QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(hca.SRQInitAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Enough MRs that the answer needs several messages.
	const nMR = 400
	buf := make([]byte, nMR*64)
	for i := range nMR {
		if _, err := pd.RegMR(buf[i*64:(i+1)*64], hca.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	objs, err := srv.Inspect(ctx, os.Getpid(), "")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, o := range objs {
		count[o.Kind]++
		if o.PID != os.Getpid() || o.Device != "pib_0" {
			t.Fatalf("object %+v: want pid %d on pib_0", o, os.Getpid())
		}
		if o.Kind == hca.KindQP && (o.ID != qp.Num() || o.QP == nil || o.QP.Type != "UD" || o.QP.State != "INIT" || o.QP.MaxSendWR != 8) {
			t.Errorf("qp %+v %+v", o, o.QP)
		}
	}
	if count[hca.KindMR] != nMR || count[hca.KindQP] != 1 || count[hca.KindCQ] != 1 || count[hca.KindPD] != 1 || count[hca.KindContext] != 1 || count[hca.KindSRQ] != 1 {
		t.Fatalf("objects by kind %v", count)
	}
	only, err := srv.Inspect(ctx, 0, hca.KindCQ)
	if err != nil || len(only) != 1 || only[0].ID != cq.ID() || only[0].CQ.CQE != 32 {
		t.Fatalf("Inspect(cq) = %+v, %v", only, err)
	}
	if _, err := srv.Inspect(ctx, 1, ""); err == nil {
		t.Error("Inspect of pid 1 (not attached) succeeded")
	}

	if got := srv.OwnerOfQPN(0, qp.Num()); got != os.Getpid() {
		t.Fatalf("OwnerOfQPN(%#x) = %d", qp.Num(), got)
	}
	event := func(want hca.EventType) {
		t.Helper()
		select {
		case ev := <-c.Events():
			if ev.Type != want {
				t.Fatalf("event %v, want %v", ev.Type, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %v event", want)
		}
	}
	pid := os.Getpid()
	if err := srv.Inject(ctx, pid, 0, hca.KindQP, qp.Num()); err != nil {
		t.Fatal(err)
	}
	event(hca.EventQPFatal)
	if qp.State() != hca.QPStateErr {
		t.Fatalf("QP state %v after inject, want ERR", qp.State())
	}
	if err := srv.Inject(ctx, pid, 0, hca.KindCQ, cq.ID()); err != nil {
		t.Fatal(err)
	}
	event(hca.EventCQErr)
	if err := srv.Inject(ctx, pid, 0, hca.KindSRQ, srq.ID()); err != nil {
		t.Fatal(err)
	}
	event(hca.EventSRQErr)
	if err := srv.Inject(ctx, pid, 0, hca.KindCQ, 99999); err == nil {
		t.Error("inject into a CQ that does not exist succeeded")
	}
	if err := srv.Inject(ctx, pid, 0, hca.KindMR, 1); err == nil {
		t.Error("inject into an MR succeeded")
	}
}

// An attached process's devices take the daemon's manner.
func TestMannerReachesProcess(t *testing.T) {
	srv, path := debugServer(t)
	want := hca.Manner{Pitfalls: hca.PitfallsStrict, LowestQPN: true, RandomErrorFields: true}
	srv.Devices[0].SetManner(want)
	s := dial(t, path)
	if got := s.Devices()[0].Manner(); got != want {
		t.Fatalf("mirror manner %+v, want %+v", got, want)
	}
}

// An inspect of every process lists the objects of those that answer when one does not
// (here: stopped, as under a debugger), and names the silent one; asked for by pid alone,
// the silent process is an error.
func TestInspectWithSilentProcess(t *testing.T) {
	f, path := startFabric(t)
	s := dial(t, path)
	e, err := newEnd(s.Device("pib_1"), hca.QPTypeRC, 4096)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := startPeer(t, path, "pib_0", "rc", "target", e)
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	// kill(2) returns before the process stops: until /proc says it has (state T), it may
	// still answer the daemon.
	for deadline := time.Now().Add(5 * time.Second); !stopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	objs, err := f.Inspect(ctx, 0, hca.KindQP)
	var partial *attach.PartialError
	if !errors.As(err, &partial) || len(partial.Errs) != 1 || !strings.Contains(err.Error(), fmt.Sprintf("process %d did not answer", pid)) {
		t.Fatalf("Inspect of all with process %d stopped: error %v, want a PartialError naming it", pid, err)
	}
	if len(objs) != 1 || objs[0].PID != os.Getpid() || objs[0].ID != e.qp.Num() {
		t.Fatalf("objects %+v: want this process's QP %#x alone", objs, e.qp.Num())
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := f.Inspect(ctx, pid, ""); err == nil || errors.As(err, &partial) {
		t.Fatalf("Inspect of the stopped process %d alone: %v, want a plain error", pid, err)
	}
}

// stopped reports whether process pid is stopped by a signal (state T in /proc/PID/stat).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	return err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T'
}
