package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
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
	} {
		_, errs, code := pibgw(t, append(tc.args, "--control", sock)...)
		first, _, _ := strings.Cut(errs, "\n")
		if code == 0 || first != tc.want {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
}
