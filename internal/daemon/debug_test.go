package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/trace"
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
	// Fabric.Observed (attached processes' direct rings) follows pulled cables and faults
	// and says so through OnObserved.
	var changes atomic.Int32
	d.Fabric.OnObserved = func() { changes.Add(1) }
	observed := func(when string, want bool) {
		t.Helper()
		if got := d.Fabric.Observed(); got != want || changes.Swap(0) == 0 {
			t.Errorf("%s: Observed %v, want %v (or no OnObserved call)", when, got, want)
		}
	}
	if d.Fabric.Observed() {
		t.Error("a plain fabric is Observed")
	}
	var cb control.Cable
	if err := cl.Do(ctx, control.Request{Verb: control.VerbLink, Cable: "pib_1/1", State: "down"}, &cb); err != nil {
		t.Fatal(err)
	}
	if cb.Up || port.State() != hca.PortDown {
		t.Fatalf("after link down: cable %+v, port %v", cb, port.State())
	}
	observed("cable down", true)
	if err := cl.Do(ctx, control.Request{Verb: control.VerbLink, Cable: "pib_1/1", State: "up"}, &cb); err != nil {
		t.Fatal(err)
	}
	if !cb.Up || port.State() == hca.PortDown {
		t.Fatalf("after link up: cable %+v, port %v", cb, port.State())
	}
	observed("cable up", false)
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
	observed("fault", true)
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
	observed("fault cleared", false)
	cw := d.Fabric.StartCapture(io.Discard, fabric.CaptureOptions{})
	observed("capture", true)
	d.Fabric.StopCapture(cw)
	observed("capture stopped", false)
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

// The trace stream carries the daemon's events that pass the filter, and bookmarks.
func TestTraceStream(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl := serve(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := make(chan trace.Record, 1024)
	done := make(chan error, 1)
	go func() {
		done <- cl.Trace(ctx, control.Request{Kinds: "api,mark"}, func(r trace.Record) error {
			recs <- r
			return nil
		})
	}()
	// The stream runs once a bookmark comes through.
	next := func(what string, ok func(trace.Record) bool) trace.Record {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case r := <-recs:
				if ok(r) {
					return r
				}
			case <-timeout:
				t.Fatalf("no %s in the trace", what)
			}
		}
	}
	started := false
	for deadline := time.Now().Add(10 * time.Second); !started; {
		if err := cl.Do(context.Background(), control.Request{Verb: control.VerbMark, Mark: "go"}, nil); err != nil {
			t.Fatal(err)
		}
		wait := time.After(100 * time.Millisecond)
		for !started {
			select {
			case r := <-recs:
				if r.Kind == "mark" && r.What == "go" {
					if r.Owner != "daemon" || r.PID != os.Getpid() {
						t.Fatalf("bookmark %+v", r)
					}
					started = true
				}
				continue
			case <-wait:
			}
			break
		}
		if !started && time.Now().After(deadline) {
			t.Fatal("the trace stream did not start")
		}
	}
	own := makeObjects(t, d.Fabric.Device("pib_0"))
	r := next("modify_qp", func(r trace.Record) bool { return r.Kind == "api" && r.What == "modify_qp" })
	if r.QPN != own.qp.Num() || r.Aux != "RESET->INIT" || r.Dev != "pib_0" || !strings.Contains(r.Text, "modify_qp RESET->INIT") {
		t.Fatalf("modify_qp record %+v", r)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, bad := range []control.Request{{Kinds: "bogus"}, {PID: 1}} {
		if err := cl.Trace(context.Background(), bad, func(trace.Record) error { return nil }); err == nil {
			t.Errorf("trace %+v succeeded", bad)
		}
	}
}

// [manner] reaches the HCAs; pibgw manner shows it and counts the pitfalls.
func TestMannerVerb(t *testing.T) {
	cfg, err := config.Parse("m.toml", []byte("[manner]\npitfalls = \"strict\"\nlowest_qpn = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, cfg, daemontest.New())
	cl := serve(t, d)
	dev := d.Fabric.Device("pib_0")
	if m := dev.Manner(); m.Pitfalls != hca.PitfallsStrict || !m.LowestQPN {
		t.Fatalf("HCA manner %+v", m)
	}
	c := dev.Open()
	defer c.Close()
	cq, _ := c.CreateCQ(4, c.CreateCompChannel())
	cq.ReqNotify(false)
	cq.Push(&hca.WC{}, false)
	if err := cq.Destroy(); err == nil {
		t.Fatal("strict: destroying a CQ with an unacknowledged event succeeded")
	}
	var m daemon.MannerInfo
	if err := cl.Do(context.Background(), control.Request{Verb: control.VerbManner}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Pitfalls != "strict" || !m.LowestQPN || m.RandomErrorFields || len(m.Checks) != int(hca.NumPitfalls) {
		t.Fatalf("manner %+v", m)
	}
	for _, ch := range m.Checks {
		want := uint64(0)
		if ch.Name == "destroy_unacked_cq" {
			want = 1
		}
		if ch.Count != want || ch.Rule == "" {
			t.Errorf("check %+v, want count %d", ch, want)
		}
	}
}

// daemon.metrics serves every port's and interface's counters to Prometheus.
func TestMetricsEndpoint(t *testing.T) {
	cfg, err := config.Parse("m.toml", []byte("[daemon]\nmetrics = \"127.0.0.1:0\"\n[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nstack = \"userspace\"\naddresses = [\"10.10.0.1/24\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, cfg, daemontest.New())
	if d.Metrics == nil {
		t.Fatal("no metrics endpoint")
	}
	resp, err := http.Get("http://" + d.Metrics.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	out := string(body)
	// The exposition format: HELP and TYPE lines, then samples name{labels} value.
	line := regexp.MustCompile(`^(# HELP [a-z_][a-z0-9_]* .+|# TYPE [a-z_][a-z0-9_]* counter|[a-z_][a-z0-9_]*\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\} \d+)$`)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !line.MatchString(l) {
			t.Fatalf("malformed line %q", l)
		}
	}
	xmit := d.Fabric.Device("pib_0").Port(1).Counters().Get(hca.CntXmitPkts)
	for _, want := range []string{
		`(?m)^pibgw_port_xmit_packets_total\{ca="pib_0",port="1"\} (\d+)$`,
		`(?m)^pibgw_port_drop_icrc_total\{ca="pib_1",port="1"\} 0$`,
		`(?m)^pibgw_ipoib_tx_packets_total\{iface="ib0"\} \d+$`,
		`(?m)^pibgw_pitfalls_total\{ca="pib_0",check="psn_width"\} 0$`,
		`(?m)^pibgw_sa_mlid_exhausted_total\{sm="pib_0"\} 0$`,
	} {
		m := regexp.MustCompile(want).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no line matching %q in\n%s", want, out)
			continue
		}
		if len(m) > 1 {
			if n, _ := strconv.ParseUint(m[1], 10, 64); n == 0 || n > xmit {
				t.Errorf("pib_0 port 1 xmit packets %s, the port counted %d", m[1], xmit)
			}
		}
	}
	if _, err := config.Parse("m.toml", []byte("[daemon]\nmetrics = \"9464\"\n")); err == nil || !strings.Contains(err.Error(), "daemon.metrics") {
		t.Errorf("bad metrics address: %v", err)
	}
}

// pibgw manner sums the pitfalls attached processes ran into.
func TestMannerCountsAttached(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl, s := serveAttached(t, d)
	c := s.Device("pib_0").Open()
	defer c.Close()
	cq, err := c.CreateCQ(4, c.CreateCompChannel())
	if err != nil {
		t.Fatal(err)
	}
	cq.ReqNotify(false)
	cq.Push(&hca.WC{}, false)
	cq.Destroy() // with its event not acknowledged: destroy_unacked_cq, in the process
	// The process's report is a message on its session, which the daemon reads on its own
	// goroutine: ask until it has counted it (or 10 s).
	var m daemon.MannerInfo
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m = daemon.MannerInfo{}
		if err := cl.Do(context.Background(), control.Request{Verb: control.VerbManner}, &m); err != nil {
			t.Fatal(err)
		}
		counted := false
		for _, ch := range m.Checks {
			counted = counted || ch.Name == "destroy_unacked_cq" && ch.Attached > 0
		}
		if counted || time.Now().After(deadline) {
			break
		}
	}
	for _, ch := range m.Checks {
		want := uint64(0)
		if ch.Name == "destroy_unacked_cq" {
			want = 1
		}
		if ch.Attached != want || ch.Count != 0 {
			t.Errorf("check %s: daemon %d, attached %d; want 0 and %d", ch.Name, ch.Count, ch.Attached, want)
		}
	}
}
