package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
)

// inspect, inject, link and fault as a user types them, against a daemon (no root: the
// fake backend). Attached processes are covered by the end-to-end test.
func TestDebugVerbs(t *testing.T) {
	sock, d := fakeDaemon(t, config.Default(), nil)
	dev := d.Fabric.Device("pib_0")
	c := dev.Open()
	defer c.Close()
	pd, _ := c.AllocPD()
	cq, err := c.CreateCQ(128, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	mr, err := pd.RegMR(buf, hca.AccessLocalWrite|hca.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeRC, Cap: hca.QPCap{MaxSendWR: 32, MaxRecvWR: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1}, hca.QPAttrState|hca.QPAttrPort|hca.QPAttrPKeyIndex|hca.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, "inspect", "--control", sock)
	for _, want := range []string{
		`(?m)^DEVICE +OWNER +QPN +TYPE +STATE +PORT +SCQ +RCQ +SRQ +SQ +RQ +SQ_PSN`,
		`(?m)^pib_0 +daemon +0x[0-9a-f]+ +RC +INIT +1 +\d+ +\d+ +- +0/32 +0/8 `,
		`(?m)^pib_0 +daemon +0x[0-9a-f]+ +0x[0-9a-f]+ +\d+ +0x[0-9a-f]+ +8192 +LOCAL_WRITE\|REMOTE_WRITE `,
		`(?m)^pib_0 +daemon +\d+ +128 +0 +no +- +ok `,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("inspect: no line matching %q in\n%s", want, out)
		}
	}
	var objs []hca.ObjectInfo
	if err := json.Unmarshal([]byte(mustRun(t, "inspect", "mrs", "--json", "--control", sock)), &objs); err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].MR == nil || objs[0].MR.LKey != mr.LKey() || objs[0].Owner != "daemon" {
		t.Fatalf("inspect mrs --json: %+v", objs)
	}

	if out := mustRun(t, "inject", "qp", fmt.Sprintf("%#x", qp.Num()), "--dev", "pib_0", "--control", sock); !strings.Contains(out, "injected") {
		t.Errorf("inject: %q", out)
	}
	select {
	case ev := <-c.Events():
		if ev.Type != hca.EventQPFatal || qp.State() != hca.QPStateErr {
			t.Fatalf("after inject qp: event %v, state %v", ev.Type, qp.State())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no QP_FATAL after inject qp")
	}

	out = mustRun(t, "manner", "--control", sock)
	if !strings.HasPrefix(out, "pitfalls warn, lowest_qpn false, random_error_fields false\n") ||
		!regexp.MustCompile(`(?m)^psn_width +0 +a PSN is 24 bits`).MatchString(out) || strings.Count(out, "\n") != 2+1+int(hca.NumPitfalls) {
		t.Errorf("manner:\n%s", out)
	}
	out = mustRun(t, "counters", "pib_0", "1", "--control", sock)
	for _, want := range []string{
		`(?m)^# Port counters: pib_0 Lid 1 port 1 \(CapMask: 0x1200\)\nPortSelect:\.{22}1\nCounterSelect:\.{19}0x0000\nSymbolErrorCounter:\.{14}0\n`,
		`(?m)^PortXmitPkts:\.{20}[1-9]\d*\n`,
		`(?m)^# Port extended counters: pib_0 Lid 1 port 1 \(CapMask: 0x1200\)\nPortSelect:\.{22}1\nCounterSelect:\.{19}0x0000\nPortXmitData:\.{20}[1-9]`,
		`(?m)^PortMulticastRcvPkts:\.{12}\d+\n\z`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("counters pib_0 1: no match for %q in\n%s", want, out)
		}
	}
	if out := mustRun(t, "counters", "--all", "--control", sock); strings.Count(out, "# Port counters: ") != 2 {
		t.Errorf("counters --all:\n%s", out)
	}
	out = mustRun(t, "link", "--control", sock)
	if !regexp.MustCompile(`(?m)^pib_0/1 +1 +up +- `).MatchString(out) || !regexp.MustCompile(`(?m)^pib_1/1 +2 +up `).MatchString(out) {
		t.Errorf("link:\n%s", out)
	}
	if out := mustRun(t, "link", "pib_1/1", "down", "--control", sock); !regexp.MustCompile(`(?m)^pib_1/1 +2 +down `).MatchString(out) {
		t.Errorf("link down:\n%s", out)
	}
	mustRun(t, "link", "pib_1/1", "up", "--control", sock)
	out = mustRun(t, "fault", "pib_1/1", "--loss", "1%", "--delay", "1ms", "--seed", "42", "--control", sock)
	if !strings.Contains(out, "loss=1%,delay=1ms,seed=42") {
		t.Errorf("fault:\n%s", out)
	}
	if out := mustRun(t, "fault", "pib_1/1", "--control", sock); !regexp.MustCompile(`(?m)^pib_1/1 +2 +up +- `).MatchString(out) {
		t.Errorf("fault with no options does not clear:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "widgets"}, `pibgw: inspect: object kind "widgets": want contexts, pds, mrs, cqs, qps, srqs, ahs, mws or xrcds`},
		{[]string{"inject", "mr", "1"}, `pibgw: inject: object "mr": want qp, cq or srq`},
		{[]string{"inject", "qp", "zz"}, `pibgw: inject: qp number "zz": invalid syntax`},
		{[]string{"fault", "pib_0/1", "--loss", "150%"}, `pibgw: fault: --loss: 1.5 is not a probability (0..1, or 0%..100%)`},
		{[]string{"link", "pib_0/1", "sideways"}, `pibgw: link: link state "sideways": want up or down`},
		{[]string{"link", "pib_5/1"}, `pibgw: no cable "pib_5/1" (cables are named after their HCA port: pib_0/1, pib_1/1)`},
		{[]string{"inject", "cq", "4242"}, `pibgw: inject: no CQ 4242 (see pibgw inspect)`},
		{[]string{"counters", "pib_7"}, `pibgw: no HCA "pib_7" (have pib_0, pib_1)`},
		{[]string{"counters", "pib_0", "2"}, `pibgw: pib_0 has no port 2 (ports 1..1)`},
		{[]string{"counters", "pib_0", "x"}, `pibgw: counters: port "x": want a port number (1..32)`},
	} {
		_, errs, code := pibgw(t, append(tc.args, "--control", sock)...)
		first, _, _ := strings.Cut(errs, "\n")
		if code == 0 || first != tc.want {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
}

// pibgw trace streams until -c N events; --mark puts bookmarks in; bad filters are usage
// errors.
func TestTraceVerb(t *testing.T) {
	sock, _ := fakeDaemon(t, config.Default(), nil)
	type result struct {
		out, errs string
		code      int
	}
	res := make(chan result, 1)
	go func() {
		out, errs, code := pibgw(t, "trace", "--kind", "mark", "-c", "2", "--json", "--control", sock)
		res <- result{out, errs, code}
	}()
	// Bookmarks until the trace has two (the first may come before the stream runs);
	// through the control API, as the CLI's globals allow one run at a time.
	var r result
	for deadline, got := time.After(20*time.Second), false; !got; {
		if err := control.NewClient(sock).Do(context.Background(), control.Request{Verb: control.VerbMark, Mark: "bookmark one"}, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case r = <-res:
			got = true
		case <-deadline:
			t.Fatal("trace -c 2 did not end")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if r.code != 0 {
		t.Fatalf("trace: exit %d, %s", r.code, r.errs)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	var rec struct{ Kind, What, Owner string }
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &rec) != nil || rec.Kind != "mark" || rec.What != "bookmark one" || rec.Owner != "daemon" {
		t.Fatalf("trace -c 2 --json printed:\n%s", r.out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "--kind", "packets"}, `pibgw: trace: --kind: trace kind "packets": want api, packet, drop, retry, completion, event, cm, mark`},
		{[]string{"trace", "--qp", "0x1000000"}, `pibgw: trace: --qp "0x1000000": want a QP number (24 bits)`},
		{[]string{"trace", "--pid", "1"}, `pibgw: no attached process 1 (see pibgw ps)`},
	} {
		_, errs, code := pibgw(t, append(tc.args, "--control", sock)...)
		first, _, _ := strings.Cut(errs, "\n")
		if code == 0 || first != tc.want {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
}
