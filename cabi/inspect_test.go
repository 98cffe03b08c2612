package cabi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// An unmodified C program's verbs objects, in its own process through libibverbs.so.1,
// answer inspection like a Go program's (the library links the same attach client):
// ibv_rc_pingpong's server, waiting for its client, has its context, PD, MR, CQ and RC QP.
func TestInspectCProgram(t *testing.T) {
	requireTools(t, "ibv_rc_pingpong")
	fb := startFabric(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	s := fb.command(ctx, "ibv_rc_pingpong", "-d", "pib_1", "-g", "0", "-p", freePort(t), "-s", "8192")
	s.Stdout, s.Stderr = &out, &out
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { s.Process.Kill(); s.Wait() }()
	pid := s.Process.Pid
	var objs []hca.ObjectInfo
	for {
		var err error
		objs, err = fb.f.Inspect(ctx, pid, "")
		kinds := map[string]int{}
		ready := false // the QP in INIT with its receives posted: it is made in RESET first
		for _, o := range objs {
			kinds[o.Kind]++
			ready = ready || o.QP != nil && o.QP.State == "INIT" && o.QP.RecvPosted > 0
		}
		if err == nil && ready && kinds[hca.KindQP] == 1 && kinds[hca.KindMR] == 1 && kinds[hca.KindCQ] == 1 && kinds[hca.KindPD] == 1 && kinds[hca.KindContext] == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("objects of ibv_rc_pingpong (pid %d): %+v, %v\n%s", pid, objs, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, o := range objs {
		if o.PID != pid || o.Device != "pib_1" {
			t.Errorf("object %+v: want pid %d on pib_1", o, pid)
		}
		switch {
		case o.QP != nil:
			if o.QP.Type != "RC" || o.QP.State != "INIT" || o.QP.RecvPosted == 0 {
				t.Errorf("ibv_rc_pingpong's QP: %+v", *o.QP)
			}
		case o.MR != nil:
			if o.MR.Length != 8192 || o.MR.Access != "LOCAL_WRITE" {
				t.Errorf("ibv_rc_pingpong's MR: %+v", *o.MR)
			}
		}
	}
}
