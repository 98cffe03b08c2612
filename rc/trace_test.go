package rc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/trace"
	"github.com/pibgw/pibgw/wire"
)

// step is one expected event of a trace, matched in order (other events may come
// between).
type step struct {
	desc string
	ok   func(ev *trace.Event) bool
}

// inOrder checks that steps occur in evs in that order, and prints the trace if not.
func inOrder(t *testing.T, evs []trace.Event, steps []step) {
	t.Helper()
	i := 0
	for k := range evs {
		if i < len(steps) && steps[i].ok(&evs[k]) {
			i++
		}
	}
	if i < len(steps) {
		var b strings.Builder
		for k := range evs {
			r := evs[k].ToRecord("", 0)
			fmt.Fprintf(&b, "%d %s\n", r.Seq, r.Text)
		}
		t.Fatalf("trace lacks %q (after %d of %d steps):\n%s", steps[i].desc, i, len(steps), b.String())
	}
}

func readAll(from uint64) []trace.Event {
	var out []trace.Event
	buf := make([]trace.Event, 256)
	for {
		n, next, _ := trace.Read(from, buf)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
		from = next
	}
}

// The trace of an RDMA WRITE shows the post, the request leaving one HCA and arriving
// at the other, the ACK coming back and the completion; when the request is lost on the
// cable, the retry after the local ACK timeout, the resent request and its completion.
func TestTraceRCWriteAndRetry(t *testing.T) {
	clk := newFakeClock()
	var lossy *fabric.FaultLink
	wrap := func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if i == 0 && d == fabric.AtoB {
			lossy = fabric.NewFaultLink(l, fabric.FaultConfig{Seed: 1, Clock: clk})
			return lossy
		}
		return l
	}
	f, a, r := connect(t, connOpts{bufLen: 8192, timeout: 6, retry: 7, wrap: wrap, clk: clk})
	disable := trace.Enable()
	defer disable()
	start := trace.Next()
	write := func(id uint64) hca.SendWR {
		return hca.SendWR{WRID: id, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled,
			SGL: []hca.SGE{a.sge(0, 4096)}, RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()}
	}
	a.post(t, write(1))
	if wc := waitWC(t, a.scq, clk); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	trace.Mark("lossy")
	lossy.SetConfig(fabric.FaultConfig{Loss: 1, Clock: clk})
	a.post(t, write(2))
	f.Settle(t)
	lossy.SetConfig(fabric.FaultConfig{Clock: clk})
	if wc := waitWC(t, a.scq, clk); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	evs := readAll(start)

	da, dr, qa := f.Devs[0].Name(), f.Devs[1].Name(), a.qp.Num()
	pkt := func(dev string, dir trace.Dir, op wire.Opcode) func(*trace.Event) bool {
		return func(ev *trace.Event) bool {
			return ev.Kind == trace.KindPacket && ev.Dev == dev && ev.Dir == dir && ev.Pkt.Opcode == op && ev.Pkt.Valid
		}
	}
	posted := func(id uint64) func(*trace.Event) bool {
		return func(ev *trace.Event) bool {
			return ev.Kind == trace.KindAPI && ev.What == "post_send" && ev.QPN == qa && ev.A == id && ev.B == 4096 && ev.Aux == "RDMA_WRITE"
		}
	}
	completed := func(id uint64) func(*trace.Event) bool {
		return func(ev *trace.Event) bool {
			return ev.Kind == trace.KindCompletion && ev.QPN == qa && ev.A == id && ev.What == "SUCCESS" && ev.Aux == "IBV_WC_RDMA_WRITE"
		}
	}
	inOrder(t, evs, []step{
		{"post_send WR 1", posted(1)},
		{"WRITE leaves " + da, func(ev *trace.Event) bool {
			return pkt(da, trace.DirTx, wire.RCRDMAWriteOnly)(ev) && ev.Pkt.DQPN == r.qp.Num() && ev.Pkt.HasRETH && ev.Pkt.RKey == r.mr.RKey() && ev.Pkt.DMALen == 4096
		}},
		{"WRITE arrives at " + dr, pkt(dr, trace.DirRx, wire.RCRDMAWriteOnly)},
		{"ACK leaves " + dr, func(ev *trace.Event) bool { return pkt(dr, trace.DirTx, wire.RCAcknowledge)(ev) && ev.Pkt.HasAETH }},
		{"ACK arrives at " + da, pkt(da, trace.DirRx, wire.RCAcknowledge)},
		{"completion of WR 1", completed(1)},
		{"bookmark", func(ev *trace.Event) bool { return ev.Kind == trace.KindMark && ev.What == "lossy" }},
		{"post_send WR 2", posted(2)},
		{"retry on the ACK timeout", func(ev *trace.Event) bool {
			return ev.Kind == trace.KindRetry && ev.QPN == qa && ev.What == "timeout" && ev.B == 6
		}},
		{"resent WRITE arrives at " + dr, pkt(dr, trace.DirRx, wire.RCRDMAWriteOnly)},
		{"completion of WR 2", completed(2)},
	})
	// The text a person reads.
	for k := range evs {
		if evs[k].Kind == trace.KindRetry {
			if txt := evs[k].ToRecord("daemon", 1).Text; !strings.HasPrefix(txt, fmt.Sprintf("retry %s qp %#x timeout from psn %#x, 6 retries left", da, qa, 0x100+qa+1)) {
				t.Errorf("retry text %q", txt)
			}
		}
	}
}
