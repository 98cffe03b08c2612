package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
)

// serveAttached runs the control API with an attach socket, and attaches a session.
func serveAttached(t *testing.T, d *daemon.Daemon) (*control.Client, *attach.Session) {
	t.Helper()
	dir := t.TempDir()
	ap := filepath.Join(dir, "attach.sock")
	aln, err := attach.Listen(ap, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	as := &attach.Server{Devices: d.Fabric.Devs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go as.Serve(aln)
	path := filepath.Join(dir, "pibgw.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &control.Server{Handler: &daemon.Handler{D: d, ControlPath: path, Attach: as, AttachPath: ap}, Logger: quiet()}
	go srv.Serve(ln)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := attach.Dial(ctx, ap, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		srv.Close()
		as.Close()
	})
	return control.NewClient(path), s
}

type verbsSet struct {
	c  *hca.Context
	cq *hca.CQ
	qp *hca.QP
	sq *hca.SRQ
}

func makeObjects(t *testing.T, d *hca.Device) verbsSet {
	t.Helper()
	c := d.Open()
	t.Cleanup(func() { c.Close() })
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq, err := pd.CreateSRQ(hca.SRQInitAttr{MaxWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeRC, Cap: hca.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite},
		hca.QPAttrState|hca.QPAttrPort|hca.QPAttrPKeyIndex|hca.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy(); sq.Destroy(); cq.Destroy(); pd.Dealloc() })
	return verbsSet{c, cq, qp, sq}
}

func nextEvent(t *testing.T, c *hca.Context, want hca.EventType) {
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

// pibgw inspect and inject reach the daemon's objects and an attached process's.
func TestInspectInject(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl, s := serveAttached(t, d)
	ctx := context.Background()
	own := makeObjects(t, d.Fabric.Device("pib_0"))
	att := makeObjects(t, s.Device("pib_1"))

	var objs []hca.ObjectInfo
	if err := cl.Do(ctx, control.Request{Verb: control.VerbInspect, Kind: hca.KindQP}, &objs); err != nil {
		t.Fatal(err)
	}
	var sawOwn, sawAtt bool
	for _, o := range objs {
		if o.Kind != hca.KindQP || o.QP == nil {
			t.Fatalf("inspect qp listed %+v", o)
		}
		switch {
		case o.Owner == "daemon" && o.Device == "pib_0" && o.ID == own.qp.Num():
			sawOwn = o.QP.Type == "RC" && o.QP.State == "INIT" && o.QP.Access == "REMOTE_WRITE" && o.QP.Transport != nil
		case o.Owner != "daemon" && o.Device == "pib_1" && o.ID == att.qp.Num():
			sawAtt = o.PID == os.Getpid() && o.QP.Type == "RC" && o.QP.MaxSendWR == 16
		}
	}
	if !sawOwn || !sawAtt {
		t.Fatalf("daemon's RC QP %v, attached RC QP %v in %+v", sawOwn, sawAtt, objs)
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbInspect, Kind: "qps"}, &objs); err == nil || !strings.Contains(err.Error(), "unknown object kind") {
		t.Errorf("inspect of kind qps: %v", err)
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbInspect, PID: 1}, &objs); err == nil {
		t.Error("inspect of pid 1 succeeded")
	}

	inject := func(kind, dev string, id uint32) error {
		return cl.Do(ctx, control.Request{Verb: control.VerbInject, Kind: kind, Dev: dev, ID: id}, nil)
	}
	// QPs by number, wherever they live (QPNs are per HCA: the same number on two of
	// them needs --dev).
	if own.qp.Num() == att.qp.Num() {
		if err := inject(hca.KindQP, "", own.qp.Num()); err == nil || !strings.Contains(err.Error(), "choose one with --dev") {
			t.Errorf("inject of QPN %#x on two HCAs: %v", own.qp.Num(), err)
		}
	}
	if err := inject(hca.KindQP, "pib_0", own.qp.Num()); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, own.c, hca.EventQPFatal)
	if err := inject(hca.KindQP, "pib_1", att.qp.Num()); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, att.c, hca.EventQPFatal)
	if att.qp.State() != hca.QPStateErr || own.qp.State() != hca.QPStateErr {
		t.Fatalf("after inject: attached QP %v, daemon's %v", att.qp.State(), own.qp.State())
	}
	// CQs and SRQs by id, the daemon's by default.
	if err := inject(hca.KindCQ, "pib_0", own.cq.ID()); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, own.c, hca.EventCQErr)
	if err := inject(hca.KindSRQ, "pib_0", own.sq.ID()); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, own.c, hca.EventSRQErr)
	for _, bad := range []struct {
		kind, dev string
		id        uint32
		want      string
	}{
		{hca.KindQP, "", 0xABCDEF, "no QP 0xabcdef"},
		{hca.KindCQ, "pib_0", 99999, "no CQ 99999"},
		{hca.KindMR, "", 1, "want qp, cq or srq"},
		{hca.KindCQ, "pib_7", 1, `no HCA "pib_7"`},
	} {
		if err := inject(bad.kind, bad.dev, bad.id); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("inject %s %s %d: %v, want %q", bad.kind, bad.dev, bad.id, err, bad.want)
		}
	}
}

// pibgw link pulls and plugs cables; pibgw fault puts faults on them.
func TestLinkAndFault(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl := serve(t, d)
	ctx := context.Background()
	var cables []control.Cable
	if err := cl.Do(ctx, control.Request{Verb: control.VerbLink}, &cables); err != nil {
		t.Fatal(err)
	}
	if len(cables) != 2 || cables[0].Name != "pib_0/1" || cables[1].Name != "pib_1/1" || cables[1].SwitchPort != 2 || !cables[0].Up {
		t.Fatalf("cables %+v", cables)
	}
	port := d.Fabric.Device("pib_1").Port(1)
	var cb control.Cable
	if err := cl.Do(ctx, control.Request{Verb: control.VerbLink, Cable: "pib_1/1", State: "down"}, &cb); err != nil {
		t.Fatal(err)
	}
	if cb.Up || port.State() != hca.PortDown {
		t.Fatalf("after link down: cable %+v, port %v", cb, port.State())
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbLink, Cable: "pib_1/1", State: "up"}, &cb); err != nil {
		t.Fatal(err)
	}
	if !cb.Up || port.State() == hca.PortDown {
		t.Fatalf("after link up: cable %+v, port %v", cb, port.State())
	}
	<-d.Fabric.SM.Resweep()
	if port.State() != hca.PortActive {
		t.Fatalf("port %v after the SM's sweep, want Active", port.State())
	}

	// Every packet toward pib_1 lost: the SM's sweep loses its SMPs there.
	ft := control.Fault{Loss: 1, Seed: 7}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbFault, Cable: "pib_1/1", Fault: &ft}, &cb); err != nil {
		t.Fatal(err)
	}
	if cb.Fault == nil || cb.Fault.Loss != 1 {
		t.Fatalf("cable after fault %+v", cb)
	}
	<-d.Fabric.SM.Resweep()
	if err := cl.Do(ctx, control.Request{Verb: control.VerbLink, Cable: "pib_1/1"}, &cables); err != nil {
		t.Fatal(err)
	}
	if len(cables) != 1 || cables[0].Counters["fault_lost"] == 0 {
		t.Fatalf("after a sweep through a lossy cable: %+v", cables)
	}
	cb = control.Cable{}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbFault, Cable: "pib_1/1", Fault: &control.Fault{}}, &cb); err != nil {
		t.Fatal(err)
	}
	if cb.Fault != nil {
		t.Fatalf("fault still on after clearing: %+v", cb)
	}
	for _, bad := range []struct {
		req  control.Request
		want string
	}{
		{control.Request{Verb: control.VerbFault, Cable: "pib_1/1", Fault: &control.Fault{Loss: 1.5}}, "not a probability"},
		{control.Request{Verb: control.VerbFault, Cable: "pib_1/1", Fault: &control.Fault{Delay: -1}}, "negative"},
		{control.Request{Verb: control.VerbFault, Cable: "pib_9/1", Fault: &control.Fault{Loss: 0.1}}, "pib_0/1, pib_1/1"},
		{control.Request{Verb: control.VerbLink, Cable: "pib_0/1", State: "sideways"}, "want up or down"},
	} {
		if err := cl.Do(ctx, bad.req, nil); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want %q", bad.req, err, bad.want)
		}
	}
}
