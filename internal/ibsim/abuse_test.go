package ibsim_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/ibsim"
)

// Issue 43 item 3: any local user can reach the server's abstract sockets, so no client
// may freeze it for the others, keep slots it no longer uses, or flood the log.

// ownServer serves the fabric's devices on a socket name unique to the test, with the
// reaper running every reap and the log going to the returned buffer.
func ownServer(t *testing.T, reap time.Duration) (*ibsim.Server, string, *lockedBuffer) {
	t.Helper()
	f, _ := testFabric(t, func(c *config.Config) { c.IBSim.Enable = false })
	base := fmt.Sprintf("pibgwtest-%d-%s-own", os.Getpid(), t.Name())
	logs := &lockedBuffer{}
	s, err := ibsim.New(ibsim.Config{SocketName: base, Devices: f.Devs, ReapInterval: reap,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, base, logs
}

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

// A client that sends control requests and never reads the replies does not hold up
// the control socket: the replies its socket cannot take are dropped and counted, and
// another client connects as usual.
func TestCtlClientNotReading(t *testing.T) {
	s, base, _ := ownServer(t, time.Hour)
	bad, err := net.DialUnix("unixgram", abstract(base, "ctlbad"), abstract(base, "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var b [80]byte
	le.PutUint32(b[0:], 0xDEADBEEF)
	le.PutUint32(b[4:], 5) // DISCONNECT of a free slot: answered "success"
	le.PutUint32(b[8:], 2)
	bad.SetWriteDeadline(time.Now().Add(3 * time.Second))
	sent := 0
	// Unread replies past the server's send buffer (8 MiB, each reply's share of it about
	// 768 bytes) made it wait for this client before.
	for ; sent < 20000; sent++ {
		if _, err := bad.Write(b[:]); err != nil {
			break // the server does not read any more: the old bug
		}
	}
	c, typ := dial(t, base, "pib_1", false)
	if typ != 1 {
		t.Fatalf("CONNECT beside a client that does not read: reply type %d", typ)
	}
	if _, data := c.ctlDo(4, nil, 0); le.Uint64(data[0:]) == 0 { // GET_GUID
		t.Error("GET_GUID: no GUID")
	}
	if st := s.Stats(); sent != 20000 || st.CtlReplyDropped == 0 || st.Clients != 1 {
		t.Errorf("sent %d of 20000 requests; stats %+v: want replies dropped, one client", sent, st)
	}
}

// procCount returns the process's threads and open descriptors.
func procCount(t *testing.T) (threads, fds int) {
	t.Helper()
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return threads, len(ents)
}

// vanish attaches n clients at pib_1 that then exit without DISCONNECT (their sockets
// closed, as a killed process's).
func vanish(t *testing.T, base string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		c, typ := dial(t, base, "pib_1", false)
		if typ != 1 {
			t.Fatalf("client %d: CONNECT reply type %d", i, typ)
		}
		c.data.Close()
		c.ctl.Close()
	}
}

// Every slot held by a client that vanished: the next CONNECT reclaims them.
func TestVanishedClientsFreeSlots(t *testing.T) {
	s, base, _ := ownServer(t, time.Hour)
	vanish(t, base, 256)
	if st := s.Stats(); st.Clients != 256 {
		t.Fatalf("%d clients attached, want 256", st.Clients)
	}
	if _, typ := dial(t, base, "pib_1", false); typ != 1 {
		t.Fatalf("CONNECT with every slot held by a vanished client: reply type %d", typ)
	}
	if st := s.Stats(); st.Clients != 1 || st.Reaped != 256 {
		t.Errorf("stats %+v: want 256 reaped, the new client attached", st)
	}
}

// Clients that vanished are detached periodically too, and leave neither their threads
// nor their descriptors behind.
func TestVanishedClientsReaped(t *testing.T) {
	s, base, _ := ownServer(t, 50*time.Millisecond)
	live, _ := dial(t, base, "pib_0", false)
	threads0, fds0 := procCount(t)
	const n = 100
	vanish(t, base, n)
	peak, _ := procCount(t)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Clients != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("vanished clients still attached: %+v", s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A thread that exits is gone from /proc a moment later.
	var threads, fds int
	for {
		threads, fds = procCount(t)
		if (threads <= threads0+n/10 && fds <= fds0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if threads > threads0+n/10 || fds > fds0 {
		t.Errorf("after %d clients came and went: threads %d -> %d (%d with them), descriptors %d -> %d", n, threads0, threads, peak, fds0, fds)
	}
	t.Logf("threads %d, %d with %d vanished clients, %d after", threads0, peak, n, threads)
	if _, data := live.ctlDo(4, nil, 0); le.Uint64(data[0:]) == 0 {
		t.Error("the live client was detached")
	}
}

// 20,000 refused CONNECTs write a warning or two, not one each.
func TestRefusedConnectsLogRateLimited(t *testing.T) {
	s, base, logs := ownServer(t, time.Hour)
	c, typ := dial(t, base, "no-such-node", false)
	if typ != 0 {
		t.Fatalf("CONNECT to an unknown node: reply type %d, want 0 (ERROR)", typ)
	}
	start := time.Now()
	const n = 20000
	var d [64]byte
	copy(d[12:], "no-such-node")
	for i := 1; i < n; i++ {
		if typ, _ := c.ctlDo(1, d[:], 44); typ != 0 {
			t.Fatalf("CONNECT %d: reply type %d", i, typ)
		}
	}
	took := time.Since(start)
	lines := strings.Count(logs.String(), "ibsim control request refused")
	if max := 2 + int(took/(10*time.Second)); lines > max {
		t.Errorf("%d refused CONNECTs in %v logged %d lines, want at most %d", n, took, lines, max)
	}
	if st := s.Stats(); st.CtlRejected != n {
		t.Errorf("CtlRejected %d, want %d", st.CtlRejected, n)
	}
}
