package hcatest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
)

// AttachedEnv is the environment variable that makes NewFabric hand out attached
// devices: PIBGW_TEST_ATTACHED=1 go test ./rc ./ud runs the verbs tests through the
// attach channel, each HCA used by its own session as if by its own process.
const AttachedEnv = "PIBGW_TEST_ATTACHED"

// attachAll serves f's devices on an attach socket and replaces f.Devs by mirrors: HCA i
// from session i.
func attachAll(tb testing.TB, f *Fabric, o Options) {
	tb.Helper()
	dir, err := os.MkdirTemp("", "pibgw-attach")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "attach.sock")
	ln, err := attach.Listen(path, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	// Warnings only: a line for every session attached and detached would bury the
	// test's own output.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := &attach.Server{Devices: f.Devs, Logger: log}
	go srv.Serve(ln)
	f.Daemon = f.Devs
	f.Devs = nil
	var sessions []*attach.Session
	tb.Cleanup(func() {
		for _, s := range sessions {
			s.Close()
		}
		srv.Close()
	})
	for i := range f.Daemon {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := attach.Dial(ctx, path, &attach.Options{Clock: o.Clock, Logger: log})
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		sessions = append(sessions, s)
		d := s.Devices()[i]
		if o.Register != nil {
			o.Register(d)
		}
		f.Devs = append(f.Devs, d)
	}
	f.Sessions = sessions
	// The mirrors must see the ports Active before the test posts.
	for _, d := range f.Devs {
		deadline := time.Now().Add(5 * time.Second)
		for d.Port(1).State() != hca.PortActive && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// settleTimeout bounds Settle.
const settleTimeout = 10 * time.Second

// Settle waits until nothing is in flight between the processes and the daemon of an
// attached fabric (see Settled). Tests call it before they assert that something did not
// happen, and before they advance a fake clock, so that timers fire only on what is
// really lost, as in process. There delivery is synchronous and Settle returns at once.
// It fails tb after 10 s.
func (f *Fabric) Settle(tb testing.TB) {
	if f.Sessions == nil {
		return
	}
	tb.Helper()
	deadline := time.Now().Add(settleTimeout)
	for i := 0; !f.Settled(); i++ {
		if time.Now().After(deadline) {
			tb.Fatalf("the attach channel did not settle in %v: %s", settleTimeout, f.channelState())
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// Settled reports, without waiting, whether nothing is in flight: every session's rings
// are seen empty twice in a row with nothing written in between (the daemon has
// transmitted everything the processes sent, and the processes have taken everything it
// forwarded, with what that made them send), and every mirror port shows the state of its
// daemon port (link state, LID and P_Keys come over the control socket). It is always
// true in process.
//
// Only the rings' consumers may send meanwhile (receiving and answering); a packet sent
// by another goroutine, such as a real-time timer's, may be in flight right after.
func (f *Fabric) Settled() bool {
	if f.Sessions == nil {
		return true
	}
	empty1, written1 := f.quiet()
	if !empty1 {
		return false
	}
	empty2, written2 := f.quiet()
	return empty2 && written1 == written2 && f.portsMirrored()
}

// Sync shows the race detector what the attach channel's rings imply but it cannot see
// (they synchronize through atomics in shared memory; see attach.Session.Quiet): what a
// process did before it sent a packet the daemon has taken, or while it took one in,
// happens before what the caller does next, and what the caller did before Sync happens
// before the packets the processes take in next. A test calls it where data crosses the
// channel with no completion to carry the order: before it posts a READ or an atomic on
// memory it has just written, and before it reads memory a peer wrote before answering
// (an RDMA WRITE's target once the requester's completion shows it was acknowledged).
// In process it does nothing.
func (f *Fabric) Sync() {
	for _, s := range f.Sessions {
		s.Quiet()
	}
}

// quiet reports whether every session's rings are empty, and the bytes ever written into
// them.
func (f *Fabric) quiet() (empty bool, written uint64) {
	empty = true
	for _, s := range f.Sessions {
		e, w := s.Quiet()
		empty = empty && e
		written += w
	}
	return empty, written
}

// portsMirrored reports whether every mirror port shows what Port.Mirror copies from its
// daemon port.
func (f *Fabric) portsMirrored() bool {
	for i, d := range f.Devs {
		for _, m := range d.Ports() {
			r := f.Daemon[i].Port(int(m.Num()))
			ma, ra := m.Query(), r.Query()
			if ma.State != ra.State || ma.PhysState != ra.PhysState || ma.LID != ra.LID || ma.LMC != ra.LMC ||
				ma.SMLID != ra.SMLID || ma.GIDPrefix != ra.GIDPrefix || m.PKeys() != r.PKeys() {
				return false
			}
		}
	}
	return true
}

// channelState describes the rings and ports for a Settle failure.
func (f *Fabric) channelState() string {
	var b strings.Builder
	for i, s := range f.Sessions {
		e, w := s.Quiet()
		fmt.Fprintf(&b, "session %d: rings empty %v, %d bytes written; ", i, e, w)
	}
	fmt.Fprintf(&b, "mirror ports match the daemon's: %v", f.portsMirrored())
	return b.String()
}

// Eventually waits up to 10 s for cond to hold and reports whether it does. Attached
// devices deliver on the goroutines that read the rings, so what a test expects to have
// happened may still be on its way; in process it has happened when the call that sent
// returned, and cond holds at once.
func Eventually(cond func() bool) bool {
	deadline := time.Now().Add(settleTimeout)
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}
