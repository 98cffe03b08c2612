package verbs

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
	"github.com/pibgw/pibgw/trace"
)

// traceCollector follows `pibgw trace` (the control API's stream) into a slice.
type traceCollector struct {
	mu   sync.Mutex
	recs []trace.Record
	stop context.CancelFunc
	done chan error
}

// startTrace starts a trace stream and waits until it runs (a bookmark comes through).
func startTrace(t *testing.T, d *e2etest.Daemon, req control.Request) *traceCollector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tc := &traceCollector{stop: cancel, done: make(chan error, 1)}
	go func() {
		tc.done <- control.NewClient(d.Sock).Trace(ctx, req, func(r trace.Record) error {
			tc.mu.Lock()
			tc.recs = append(tc.recs, r)
			tc.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-tc.done })
	mark := fmt.Sprintf("start-%d", time.Now().UnixNano())
	for deadline := time.Now().Add(10 * time.Second); !tc.has(func(r trace.Record) bool { return r.Kind == "mark" && r.What == mark }); {
		d.MustPibgw("trace", "--mark", mark)
		if time.Now().After(deadline) {
			t.Fatal("the trace stream did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return tc
}

func (tc *traceCollector) has(ok func(trace.Record) bool) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, r := range tc.recs {
		if ok(r) {
			return true
		}
	}
	return false
}

func (tc *traceCollector) records() []trace.Record {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]trace.Record(nil), tc.recs...)
}

// inOrder checks that steps match records of owner in order, printing them if not.
func traceInOrder(t *testing.T, recs []trace.Record, owner string, steps []traceStep) {
	t.Helper()
	i := 0
	var mine []string
	for _, r := range recs {
		if r.Owner != owner {
			continue
		}
		mine = append(mine, r.Text)
		if i < len(steps) && steps[i].ok(r) {
			i++
		}
	}
	if i < len(steps) {
		if len(mine) > 300 {
			mine = mine[:300]
		}
		t.Fatalf("trace of %s lacks %q (after %d of %d steps); its records:\n%s", owner, steps[i].desc, i, len(steps), strings.Join(mine, "\n"))
	}
}

type traceStep struct {
	desc string
	ok   func(trace.Record) bool
}

func cmStep(dir, msg string) traceStep {
	return traceStep{"cm " + dir + " " + msg, func(r trace.Record) bool {
		return r.Kind == "cm" && r.Dir == dir && strings.Contains(r.Text, " CM "+msg+" ")
	}}
}

func pktStep(dir, opcode string) traceStep {
	return traceStep{"packet " + dir + " " + opcode, func(r trace.Record) bool {
		return r.Kind == "packet" && r.Dir == dir && r.Headers != nil && r.Headers.Opcode.String() == opcode
	}}
}

func wcStep(opcode string) traceStep {
	return traceStep{"completion " + opcode, func(r trace.Record) bool {
		return r.Kind == "completion" && r.What == "SUCCESS" && r.Aux == "IBV_WC_"+opcode
	}}
}

// TestE2EDebug runs the debugging verbs against `pibgw up` with attached processes (the
// rping example): a trace of an rping run shows the CM exchange, the RDMA READ and WRITE
// packets and the completions in order, of both processes; with 1 % loss on a cable the
// trace shows the retries; inspect lists the processes' QPs and inject puts one in error,
// which the program sees.
func TestE2EDebug(t *testing.T) {
	e2etest.Require(t)
	binDir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", binDir+"/", "github.com/pibgw/pibgw/examples/rping").CombinedOutput(); err != nil {
		t.Fatalf("go build rping: %v\n%s", err, out)
	}
	rping := filepath.Join(binDir, "rping")
	nsA, nsB := e2etest.NetNS("dba"), e2etest.NetNS("dbb")
	body := e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/24") + e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/24")
	d := e2etest.StartDaemon(t, "", body, nsA, nsB)
	sock := filepath.Join(filepath.Dir(d.Sock), "attach.sock")
	pair := func(t *testing.T, count string) (srv, cli *e2etest.AttachProc) {
		srv = e2etest.StartAttached(t, sock, exec.Command(rping, "-s", "-a", "10.10.0.2", "-C", count, "-V"))
		e2etest.WaitPS(t, d, srv, "the rping server listening", func(ss []attach.SessionInfo) bool {
			s := e2etest.SessionOf(ss, srv.Cmd.Process.Pid)
			return s != nil && s.Listens == 1
		})
		cli = e2etest.StartAttached(t, sock, exec.Command(rping, "-c", "-a", "10.10.0.2", "-I", "10.10.0.1", "-C", count, "-V"))
		return srv, cli
	}

	// gone kills the processes and waits until the daemon has let go of them (their
	// listens), so that the next pair can listen on rping's port.
	gone := func(t *testing.T, ps ...*e2etest.AttachProc) {
		for _, p := range ps {
			p.Cmd.Process.Kill()
			<-p.Done
		}
		e2etest.WaitPS(t, d, nil, "no session", func(ss []attach.SessionInfo) bool { return len(ss) == 0 })
	}

	t.Run("trace-rping", func(t *testing.T) {
		tc := startTrace(t, d, control.Request{})
		srv, cli := pair(t, "5")
		cli.MustSucceed(t, time.Minute)
		srv.MustSucceed(t, 30*time.Second)
		defer gone(t)
		sp, cp := strconv.Itoa(srv.Cmd.Process.Pid), strconv.Itoa(cli.Cmd.Process.Pid)
		// The processes sent their records as they closed their sessions; the daemon
		// passes them on as they come.
		for deadline := time.Now().Add(10 * time.Second); !tc.has(func(r trace.Record) bool {
			return r.Owner == cp && r.Kind == "cm" && strings.Contains(r.Text, "CM DREQ")
		}); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the client's DREQ is not in the trace")
			}
		}
		recs := tc.records()
		// The server: the CM exchange, then per ping RDMA READ of the client's buffer and
		// RDMA WRITE into its other buffer, each completed.
		traceInOrder(t, recs, sp, []traceStep{
			cmStep("rx", "REQ"), cmStep("tx", "REP"), cmStep("rx", "RTU"),
			wcStep("RECV"),
			pktStep("tx", "RCRDMAReadRequest"), pktStep("rx", "RCRDMAReadResponseOnly"), wcStep("RDMA_READ"),
			wcStep("RECV"),
			pktStep("tx", "RCRDMAWriteOnly"), pktStep("rx", "RCAcknowledge"), wcStep("RDMA_WRITE"),
		})
		// The client: its side of the exchange, and its SENDs completed.
		traceInOrder(t, recs, cp, []traceStep{
			cmStep("tx", "REQ"), cmStep("rx", "REP"), cmStep("tx", "RTU"),
			{"post_send SEND", func(r trace.Record) bool { return r.Kind == "api" && r.What == "post_send" && r.Aux == "SEND" }},
			pktStep("tx", "RCSendOnly"), pktStep("rx", "RCRDMAReadRequest"), pktStep("tx", "RCRDMAReadResponseOnly"),
			wcStep("SEND"),
		})
		// The daemon saw the packets cross its ports.
		if !tc.has(func(r trace.Record) bool { return r.Owner == "daemon" && r.Kind == "packet" && r.Dir == "rx" }) {
			t.Error("no packet of the daemon's in the trace")
		}
		t.Logf("%d records; the client's CM REQ: %s", len(recs), func() string {
			for _, r := range recs {
				if r.Owner == cp && r.Kind == "cm" {
					return r.Text
				}
			}
			return ""
		}())
	})

	t.Run("trace-loss", func(t *testing.T) {
		// The loss starts once the connection is up and stops before it is torn down:
		// this shows RC's retries, not the CM's.
		tc := startTrace(t, d, control.Request{Kinds: "retry,mark"})
		srv, cli := pair(t, "0")
		e2etest.WaitPS(t, d, cli, "the rping client with its QP", func(ss []attach.SessionInfo) bool {
			s := e2etest.SessionOf(ss, cli.Cmd.Process.Pid)
			return s != nil && len(s.QPs) > 0
		})
		d.MustPibgw("fault", "pib_1/1", "--loss", "1%", "--seed", "3")
		for deadline := time.Now().Add(time.Minute); !tc.has(func(r trace.Record) bool { return r.Kind == "retry" }); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no retry in the trace of rping over a 1%% lossy cable\nclient: %s\nserver: %s", cli.Stderr.String(), srv.Stderr.String())
			}
		}
		var cables []control.Cable
		d.JSON(&cables, "link", "pib_1/1")
		t.Logf("pibgw link:\n%s", d.MustPibgw("link"))
		d.MustPibgw("fault", "pib_1/1")
		n := 0
		for _, r := range tc.records() {
			if r.Kind != "retry" && r.Kind != "mark" {
				t.Fatalf("--kind retry,mark passed %+v", r)
			}
			if r.Kind == "retry" {
				if n == 0 {
					t.Logf("first retry: %s %s", r.Owner, r.Text)
				}
				n++
			}
		}
		if cables[0].Fault == nil || cables[0].Counters["fault_lost"] == 0 {
			t.Errorf("the cable with the fault: %+v", cables[0])
		}
		t.Logf("%d retries by then; %d packets lost on pib_1/1", n, cables[0].Counters["fault_lost"])
		if cli.Exited() || srv.Exited() {
			// The example's rping wants its SEND's completion before the next RECV's; a
			// lost ACK delays the first behind the second, which IBA allows.
			t.Logf("rping ended over the lossy cable\nclient: %s\nserver: %s", cli.Stderr.String(), srv.Stderr.String())
		}
		gone(t, cli, srv)
	})

	t.Run("inspect-inject", func(t *testing.T) {
		srv, cli := pair(t, "0")
		pid := cli.Cmd.Process.Pid
		e2etest.WaitPS(t, d, cli, "the rping client with its QP", func(ss []attach.SessionInfo) bool {
			s := e2etest.SessionOf(ss, pid)
			return s != nil && len(s.QPs) > 0
		})
		var qp *hca.ObjectInfo
		for deadline := time.Now().Add(20 * time.Second); qp == nil; time.Sleep(50 * time.Millisecond) {
			var objs []hca.ObjectInfo
			d.JSON(&objs, "inspect", "qps", "--pid", strconv.Itoa(pid))
			for i, o := range objs {
				if o.PID != pid || o.Owner != strconv.Itoa(pid) {
					t.Fatalf("inspect --pid %d listed %+v", pid, o)
				}
				if o.QP != nil && o.QP.Type == "RC" && o.QP.State == "RTS" && o.QP.Transport != nil {
					qp = &objs[i]
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no RC QP in RTS of the rping client: %+v", objs)
			}
		}
		out := d.MustPibgw("inspect", "--pid", strconv.Itoa(pid))
		for _, want := range []string{"CONTEXT", "LKEY", "CQE", "QPN", fmt.Sprintf("%#x", qp.ID)} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect --pid %d lacks %q:\n%s", pid, want, out)
			}
		}
		t.Logf("pibgw inspect --pid %d:\n%s", pid, out)
		if _, errs, err := d.Pibgw("inject", "qp", fmt.Sprintf("%#x", qp.ID), "--dev", qp.Device); err != nil {
			t.Fatalf("pibgw inject: %v %s\nrping client: exited %v\n%s\nrping server:\n%s", err, errs, cli.Exited(), cli.Stderr.String(), srv.Stderr.String())
		}
		if err := cli.Wait(t, 30*time.Second); err == nil {
			t.Fatalf("the rping client went on after its QP was put in error:\n%s", cli.Stderr.String())
		}
		if !strings.Contains(cli.Stderr.String(), "WR_FLUSH_ERR") && !strings.Contains(cli.Stderr.String(), "QP_FATAL") {
			t.Errorf("the rping client's error:\n%s", cli.Stderr.String())
		}
		t.Logf("rping client after inject: %s", strings.TrimSpace(cli.Stderr.String()))
		gone(t, cli, srv)
	})
}
