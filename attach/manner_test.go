package attach_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
)

// lockedBuffer is a log's output, read while the log writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// psnWidthPitfall takes a UD QP of the session's device to RTS with a 25-bit sq_psn: the
// psn_width check fires once.
func psnWidthPitfall(t *testing.T, s *attach.Session) {
	t.Helper()
	c := s.Devices()[0].Open()
	t.Cleanup(func() { c.Close() })
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeUD, Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    hca.QPAttr
		mask hca.QPAttrMask
	}{
		{hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: 0x11}, hca.QPAttrState | hca.QPAttrPort | hca.QPAttrPKeyIndex | hca.QPAttrQKey},
		{hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState},
		{hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 0x1000001}, hca.QPAttrState | hca.QPAttrSQPSN},
	} {
		if err := qp.Modify(&m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// An attached process's pitfall warnings go to the daemon's log, with its pid, and not
// to the process's own (a C program's standard error) — unless PIBGW_MANNER_STDERR=1
// asks for them there too. The process still counts them, and the daemon counts them for
// pibgw manner after the process has gone (it asked the processes attached then).
func TestPitfallWarningsGoToDaemon(t *testing.T) {
	for _, toStderr := range []bool{false, true} {
		d, err := hca.NewDevice(hca.Config{Name: "pib_0", NodeGUID: 0x0002c90300000300})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "attach.sock")
		ln, err := attach.Listen(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		var daemonLog, processLog lockedBuffer
		srv := &attach.Server{Devices: []*hca.Device{d}, Logger: slog.New(slog.NewTextHandler(&daemonLog, nil))}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		if toStderr {
			t.Setenv(attach.MannerStderrEnv, "1")
		} else {
			t.Setenv(attach.MannerStderrEnv, "")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := attach.Dial(ctx, path, &attach.Options{Logger: slog.New(slog.NewTextHandler(&processLog, nil))})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		psnWidthPitfall(t, s)
		for end := time.Now().Add(5 * time.Second); !strings.Contains(daemonLog.String(), "pitfall=psn_width"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("stderr %v: the daemon logged no psn_width warning:\n%s", toStderr, daemonLog.String())
			}
		}
		if l := daemonLog.String(); !strings.Contains(l, "sq_psn 0x1000001 is wider than 24 bits") || !strings.Contains(l, "dev=pib_0") || !strings.Contains(l, "pid=") {
			t.Errorf("the daemon's log:\n%s", l)
		}
		if got := strings.Contains(processLog.String(), "pitfall"); got != toStderr {
			t.Errorf("%s=%v: the process's log has the warning: %v\n%s", attach.MannerStderrEnv, toStderr, got, processLog.String())
		}
		if n := s.Devices()[0].PitfallCounts()["psn_width"]; n != 1 {
			t.Errorf("the process counted psn_width %d times, want 1", n)
		}
		// pibgw manner's ATTACHED column: the daemon's count, the process gone too.
		s.Close()
		if c, err := srv.PitfallCounts(context.Background()); err != nil || c["psn_width"] != 1 {
			t.Errorf("the daemon counts %v (%v), want psn_width 1", c, err)
		}
	}
}
