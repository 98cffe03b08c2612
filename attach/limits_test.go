package attach_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
)

// A hostile local user against the attach socket (issue 43 item 1): connections that
// never say hello, more connections than descriptors, accepts that fail.

// nobody is the uid the tests' other user connects as.
const nobody = 65534

// limitServer serves an attach socket with no devices under lim, in a directory any
// user may enter (the socket is 0666, as the daemon's).
func limitServer(t *testing.T, lim attach.Limits) (*attach.Server, string, chan error) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "attach.sock")
	ln, err := attach.Listen(path, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	srv := &attach.Server{Limits: lim, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return srv, path, served
}

// dialAs connects to path with the credentials of uid, as a process of that user
// would: the connecting thread alone takes them (setresuid(2) is per thread in Linux;
// Go's wrapper would change every thread), and ends with its goroutine.
func dialAs(uid int, path string) (*net.UnixConn, error) {
	type result struct {
		c   *net.UnixConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if uid != os.Geteuid() {
			if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
				ch <- result{nil, fmt.Errorf("setresuid: %w", e)}
				return
			}
		}
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// hello says hello on c and returns the daemon's answer.
func hello(t *testing.T, c *net.UnixConn) (map[string]any, error) {
	t.Helper()
	if _, err := c.Write([]byte(`{"id":1,"op":"hello","version":` + strconv.Itoa(attach.Version) + `}`)); err != nil {
		return nil, err
	}
	r := &rawControl{c: c}
	return r.waitReply(1)
}

// attachAs connects as uid and says hello; it fails the test unless the daemon takes it.
func attachAs(t *testing.T, uid int, path string) *net.UnixConn {
	t.Helper()
	c, err := dialAs(uid, path)
	if err != nil {
		t.Fatalf("uid %d: dial: %v", uid, err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := hello(t, c)
	if err != nil || m["ok"] != true {
		t.Fatalf("uid %d: hello refused: %v %v", uid, m, err)
	}
	return c
}

// refusedAs connects as uid and expects a refusal with EAGAIN.
func refusedAs(t *testing.T, uid int, path string) {
	t.Helper()
	c, err := dialAs(uid, path)
	if err != nil {
		t.Fatalf("uid %d: dial: %v", uid, err)
	}
	defer c.Close()
	m, err := hello(t, c)
	if err != nil {
		t.Fatalf("uid %d: no refusal, %v", uid, err)
	}
	if m["ok"] == true || m["errno"] != float64(syscall.EAGAIN) {
		t.Fatalf("uid %d: got %v, want a refusal with EAGAIN", uid, m)
	}
}

// waitStats waits until cond holds of the server's counters.
func waitStats(t *testing.T, srv *attach.Server, what string, cond func(attach.Stats) bool) attach.Stats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := srv.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A connection that never says hello is closed after HelloTimeout, and counted: 500
// idle connections stayed forever.
func TestHelloTimeout(t *testing.T) {
	srv, path, _ := limitServer(t, attach.Limits{HelloTimeout: 300 * time.Millisecond})
	c, err := dialAs(os.Geteuid(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if err == nil && n > 0 {
		t.Fatalf("the daemon sent %d bytes to a connection that said nothing", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a connection without hello is still open after 20 s")
	}
	waitStats(t, srv, "hello_timeouts", func(s attach.Stats) bool { return s.HelloTimeouts == 1 && s.Connections == 0 })
	// A process that says hello in time is served, and stays past the timeout.
	a := attachAs(t, os.Geteuid(), path)
	time.Sleep(600 * time.Millisecond)
	if _, err := a.Write([]byte(`{"id":10,"op":"devices"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := (&rawControl{c: a}).waitReply(10); err != nil {
		t.Fatalf("an attached process was closed at the hello timeout: %v", err)
	}
}

// Connections are limited per user (the peer's uid) and in all; refusals are EAGAIN
// with the reason, counted; a closed connection frees its place.
func TestConnectionLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	srv, path, _ := limitServer(t, attach.Limits{MaxProcesses: 5, MaxPerUser: 3})
	var mine []*net.UnixConn
	for range 3 {
		mine = append(mine, attachAs(t, 0, path))
	}
	refusedAs(t, 0, path) // root's fourth
	attachAs(t, nobody, path)
	attachAs(t, nobody, path) // five in all
	refusedAs(t, nobody, path)
	st := waitStats(t, srv, "refusals", func(s attach.Stats) bool { return s.Refused == 1 && s.RefusedUser == 1 })
	if st.Connections != 5 || st.MaxProcesses != 5 || st.MaxPerUser != 3 {
		t.Fatalf("stats %+v", st)
	}
	mine[0].Close()
	waitStats(t, srv, "a closed connection counted out", func(s attach.Stats) bool { return s.Connections == 4 })
	attachAs(t, 0, path)
}

// An accept that fails for want of descriptors (EMFILE) is retried; once descriptors
// are free the socket answers a fresh hello. The accept loop used to end, silently, and
// the socket answered no one.
func TestAttachAcceptRetriesEMFILE(t *testing.T) {
	srv, path, served := limitServer(t, attach.Limits{})
	attachAs(t, os.Geteuid(), path) // serving
	freeOne, freeAll := exhaustFDs(t)
	freeOne() // the client's socket takes it: the server's accept has none
	// Something else in the process (the runtime, the race detector) may hold the freed
	// descriptor for a moment; wait for it, and free another only when it stays taken.
	var c *net.UnixConn
	for try := 1; ; try++ {
		var err error
		c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EMFILE) || try == 200 {
			freeAll()
			t.Fatal(err)
		}
		if try%50 == 0 {
			freeOne()
		}
		time.Sleep(time.Millisecond)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().AcceptErrors == 0 && time.Now().Before(deadline) {
		select {
		case err := <-served:
			freeAll()
			t.Fatalf("Serve returned %v on an accept without descriptors", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	failures := srv.Stats().AcceptErrors
	freeAll()
	if failures == 0 {
		t.Fatal("the accept never failed: the test did not exhaust the descriptors")
	}
	if m, err := hello(t, c); err != nil || m["ok"] != true {
		t.Fatalf("hello after descriptors were freed: %v %v", m, err)
	}
}

// exhaustFDs lowers the soft descriptor limit near what is open and opens /dev/null
// until the process has none left. freeOne frees one; freeAll frees them all and puts
// the limit back (also at the test's end).
func exhaustFDs(t *testing.T) (freeOne func(), freeAll func()) {
	t.Helper()
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := orig
	low.Cur = uint64(len(ents) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var spare []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("open: %v", err)
			}
			break
		}
		spare = append(spare, fd)
	}
	done := false
	freeAll = func() {
		if done {
			return
		}
		done = true
		for _, fd := range spare {
			syscall.Close(fd)
		}
		spare = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)
	}
	t.Cleanup(freeAll)
	freeOne = func() {
		syscall.Close(spare[len(spare)-1])
		spare = spare[:len(spare)-1]
	}
	return freeOne, freeAll
}

// abuseEnv runs the heavy variants: PIBGW_ABUSE=1 go test -run Abuse ./attach.
const abuseEnv = "PIBGW_ABUSE"

// A hog process (root) holds as many connections as it can open, none saying hello;
// meanwhile another user attaches, the daemon's descriptors stay within its limit, and
// after the hello timeout the hog's connections are gone. CI: 300 connections against
// lowered limits; PIBGW_ABUSE=1: 20,000 against the defaults (issue 43's probe).
func TestAbuseConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	n, lim := 300, attach.Limits{MaxProcesses: 100, MaxPerUser: 50, HelloTimeout: 2 * time.Second}
	if os.Getenv(abuseEnv) == "1" {
		n, lim = 20000, attach.Limits{}
	}
	srv, path, _ := limitServer(t, lim)
	fdsBefore := openFDs(t)
	hog := startHelper(t, "hog", "PIBGW_ATTACH="+path, "HOG_N="+strconv.Itoa(n))
	held := hog.line(t)
	if num(held, "held") == 0 {
		t.Fatalf("the hog holds no connection: %v", held)
	}
	st := waitStats(t, srv, "refusals", func(s attach.Stats) bool { return s.RefusedUser > 0 })
	if st.Connections > st.MaxProcesses {
		t.Fatalf("hog holds %v; stats %+v", held, st)
	}
	// Each connection not yet through hello is one descriptor; refused ones wait for
	// their hello a moment, at most 64 at once.
	if extra := openFDs(t) - fdsBefore; extra > st.MaxProcesses+64+16 {
		t.Fatalf("the daemon holds %d more descriptors under the hog (limit %d processes, 64 refusals)", extra, st.MaxProcesses)
	}
	attachAs(t, nobody, path) // an honest user still attaches
	// The hog's silent connections go at the hello timeout; root attaches again.
	waitStats(t, srv, "the hog's connections closed", func(s attach.Stats) bool { return s.Connections <= 1 && s.HelloTimeouts > 0 })
	attachAs(t, 0, path)
	t.Logf("hog: %v; stats %+v", held, srv.Stats())
}

// helperHog connects $HOG_N times to $PIBGW_ATTACH without a hello, reports how many it
// holds, and holds them until stdin closes.
func helperHog() {
	n, _ := strconv.Atoi(os.Getenv("HOG_N"))
	path := os.Getenv("PIBGW_ATTACH")
	var held []*net.UnixConn
	var failed int
	var lastErr error
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var d net.Dialer
		c, err := d.DialContext(ctx, "unixpacket", path)
		cancel()
		if err != nil {
			failed++
			lastErr = err
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				break
			}
			continue
		}
		held = append(held, c.(*net.UnixConn))
	}
	fmt.Printf("held=%d failed=%d err=%s\n", len(held), failed, strings.ReplaceAll(fmt.Sprint(lastErr), " ", "_"))
	io.Copy(io.Discard, os.Stdin)
}

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
