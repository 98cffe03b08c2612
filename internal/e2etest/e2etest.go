// Package e2etest holds what pibgw's end-to-end tests (the packages under e2e/) share: the
// pibgw binary, built once per test binary; a running `pibgw up` with the test's own
// namespaces and control socket; the programs the test binary doubles as inside a
// namespace; and the attach, iperf3 and libumad helpers.
package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/lifecycle"
)

// Helpers of the end-to-end tests (root, kernel TUN devices, network namespaces): they
// build the pibgw binary, run `pibgw up` with a configuration whose namespaces are the
// test's own, talk to it over its control socket, and stop it with SIGTERM — and, in a
// cleanup that runs whatever happened, stop it and delete the namespaces it may have
// left.

// Require skips the test, saying why, unless it runs as root with /dev/net/tun and
// the tools it needs (ip always).
func Require(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end test needs root (TUN devices and network namespaces); run with sudo")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("end-to-end test needs /dev/net/tun: %v", err)
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("end-to-end test needs %s: %v", tool, err)
		}
	}
}

// NetNS returns a namespace name unique to this process and test: pibgwe2e-PID-x.
func NetNS(x string) string { return fmt.Sprintf("pibgwe2e-%d-%s", os.Getpid(), x) }

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// BuildPibgw builds the pibgw binary, once per test binary, into a temporary directory
// that Main removes.
func BuildPibgw(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "pibgw-e2e-bin")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "pibgw")
		build.out, build.err = exec.Command("go", "build", "-o", build.bin, "github.com/pibgw/pibgw/cmd/pibgw").CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("go build: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// Main runs the tests of an end-to-end package (its TestMain) and removes the binary
// BuildPibgw built.
func Main(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// Root is the source tree's top directory (the one holding go.mod), found upwards from
// the working directory: the test's package directory.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// KernelVerbsDir is where the kernel lists its uverbs devices when it has any.
const KernelVerbsDir = "/sys/class/infiniband_verbs"

// FindUmad2sim is libumad2sim.so: $PIBGW_UMAD2SIM, else where Debian's and other
// distributions' packages put it; "" if none is there (as pibgw exec looks for it).
func FindUmad2sim() string {
	cands := []string{os.Getenv("PIBGW_UMAD2SIM")}
	m, _ := filepath.Glob("/usr/lib/*/umad2sim/libumad2sim.so")
	cands = append(cands, m...)
	cands = append(cands, "/usr/lib64/umad2sim/libumad2sim.so", "/usr/lib/umad2sim/libumad2sim.so", "/usr/local/lib/umad2sim/libumad2sim.so")
	for _, p := range cands {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// SyncBuffer is a bytes.Buffer the daemon's output goroutine and the test share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Daemon is a running `pibgw up` (or `pibgw switch`: Verb).
type Daemon struct {
	t      *testing.T
	Bin    string // the pibgw binary
	Sock   string // its control socket
	Config string // its configuration file
	Verb   string // "up" (the default) or "switch"
	NetNS  []string
	Cmd    *exec.Cmd
	Exited chan error // the exit status, once; put back by whoever takes it
	logs   *SyncBuffer
}

// StartDaemon builds pibgw and runs `pibgw up` with a configuration made of a [daemon]
// table (the test's control socket, debug logging, and the daemon lines given) and body,
// and waits until it answers on its socket. netns lists the namespaces the
// configuration names, which the cleanup deletes if the daemon left them.
func StartDaemon(t *testing.T, daemonLines, body string, netns ...string) *Daemon {
	t.Helper()
	bin := BuildPibgw(t)
	dir := t.TempDir()
	d := &Daemon{
		t: t, Bin: bin, Sock: filepath.Join(dir, "run", "pibgw.sock"), Config: filepath.Join(dir, "e2e.toml"),
		NetNS: netns, Exited: make(chan error, 1), logs: &SyncBuffer{},
	}
	for _, ns := range netns {
		if exec.Command("ip", "netns", "pids", ns).Run() == nil {
			t.Fatalf("namespace %s exists already", ns)
		}
	}
	cfg := fmt.Sprintf("[daemon]\ncontrol = %q\nlog_level = \"debug\"\n%s\n%s", d.Sock, daemonLines, body)
	if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	return d
}

// StartConfig runs `pibgw VERB --config config` (verb "up" or "switch") with a
// configuration file as it is, whose control socket is sock and whose namespaces are
// netns (the cleanup deletes those the process left), and waits until it answers on
// sock.
func StartConfig(t *testing.T, verb, config, sock string, netns ...string) *Daemon {
	t.Helper()
	d := &Daemon{
		t: t, Bin: BuildPibgw(t), Sock: sock, Config: config, Verb: verb,
		NetNS: netns, Exited: make(chan error, 1), logs: &SyncBuffer{},
	}
	for _, ns := range netns {
		if exec.Command("ip", "netns", "pids", ns).Run() == nil {
			t.Fatalf("namespace %s exists already", ns)
		}
	}
	d.start()
	return d
}

// start launches d, arranges its cleanup and waits until it answers.
func (d *Daemon) start() {
	t := d.t
	t.Helper()
	d.Launch()
	t.Cleanup(func() {
		// Whatever happened: stop the daemon and remove what it may have left.
		select {
		case err := <-d.Exited:
			d.Exited <- err
		default:
			d.Cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-d.Exited:
				d.Exited <- err
			case <-time.After(10 * time.Second):
				d.Cmd.Process.Kill()
			}
		}
		for _, ns := range d.NetNS {
			if exec.Command("ip", "netns", "pids", ns).Run() == nil {
				exec.Command("ip", "netns", "del", ns).Run()
			}
		}
		if t.Failed() {
			t.Logf("daemon log (%s):\n%s", d.Config, d.logs.String())
		}
	})
	d.WaitAlive()
}

// Launch starts `pibgw up` with d's configuration as d's process.
func (d *Daemon) Launch() {
	d.t.Helper()
	verb := d.Verb
	if verb == "" {
		verb = "up"
	}
	d.Cmd = exec.Command(d.Bin, verb, "--config", d.Config)
	d.Cmd.Stdout, d.Cmd.Stderr = d.logs, d.logs
	// TestMain's PIBGW_CONTROL would override the file's daemon.control.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIBGW_CONTROL=") {
			d.Cmd.Env = append(d.Cmd.Env, kv)
		}
	}
	if err := d.Cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	exited := make(chan error, 1)
	d.Exited = exited
	cmd := d.Cmd
	go func() { exited <- cmd.Wait() }()
}

// WaitAlive waits until d's process (not a previous daemon still stopping) answers on
// its control socket.
func (d *Daemon) WaitAlive() {
	d.t.Helper()
	t := d.t
	deadline := time.Now().Add(30 * time.Second)
	alive := func() bool {
		var st control.Status
		err := control.NewClient(d.Sock).Do(context.Background(), control.Request{Verb: control.VerbStatus}, &st)
		return err == nil && st.PID == d.Cmd.Process.Pid
	}
	for !alive() {
		select {
		case err := <-d.Exited:
			d.Exited <- err
			t.Fatalf("pibgw up exited: %v\n%s", err, d.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pibgw up did not answer on %s in 30 s\n%s", d.Sock, d.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Logs returns what the daemon wrote so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// run runs a command and returns its combined output.
func RunCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// Pibgw runs a CLI verb against the daemon: stdout, stderr and the error.
func (d *Daemon) Pibgw(args ...string) (string, string, error) {
	cmd := exec.Command(d.Bin, append(args, "--control", d.Sock)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// MustPibgw runs a CLI verb that must succeed and returns its stdout.
func (d *Daemon) MustPibgw(args ...string) string {
	d.t.Helper()
	out, errs, err := d.Pibgw(args...)
	if err != nil {
		d.t.Fatalf("pibgw %v: %v\n%s%s", args, err, out, errs)
	}
	return out
}

// JSON runs a verb with --json and decodes its output into v.
func (d *Daemon) JSON(v any, args ...string) {
	d.t.Helper()
	out := d.MustPibgw(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("pibgw %v --json: %v\n%s", args, err, out)
	}
}

// Show returns `pibgw show --json` by interface name.
func (d *Daemon) Show() map[string]control.Interface {
	d.t.Helper()
	var ifs []control.Interface
	d.JSON(&ifs, "show")
	m := make(map[string]control.Interface, len(ifs))
	for _, i := range ifs {
		m[i.Name] = i
	}
	return m
}

// PingNS pings addr from namespace ns count times (0.2 s apart, 2 s to wait for each
// reply) and reports whether there was no loss, with ping's output.
func PingNS(ns, addr string, count int) (bool, string) {
	out, err := RunCmd("ip", "netns", "exec", ns, "ping", "-c", fmt.Sprint(count), "-i", "0.2", "-W", "2", addr)
	return err == nil && strings.Contains(out, " 0% packet loss"), out
}

// UnreachableNS reports whether no echo of two (one second to wait for each) comes back
// from addr, pinged from ns.
func UnreachableNS(ns, addr string) (bool, string) {
	out, err := RunCmd("ip", "netns", "exec", ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", addr)
	return err != nil && !strings.Contains(out, "bytes from"), out
}

// Stop sends SIGTERM and waits for the daemon to exit, which it must do with status 0.
func (d *Daemon) Stop() {
	d.t.Helper()
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.Exited:
		d.Exited <- err
		if err != nil {
			d.t.Errorf("pibgw up after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		d.t.Fatal("pibgw up did not stop within 15 s of SIGTERM")
	}
}

// StopAndCheckClean checks that the daemon's interfaces (name → namespace) exist in
// their namespaces, stops the daemon with SIGTERM, and checks that it left no
// namespace, no TUN device of those names and no control socket behind.
func (d *Daemon) StopAndCheckClean(ifaces map[string]string) {
	d.t.Helper()
	out, _ := RunCmd("ip", "netns", "list")
	for _, ns := range d.NetNS {
		if !strings.Contains(out, ns) {
			d.t.Errorf("namespace %s missing while the daemon runs:\n%s", ns, out)
		}
	}
	for name, ns := range ifaces {
		if out, err := RunCmd("ip", "-n", ns, "-d", "link", "show", name); err != nil || !strings.Contains(out, "link/infiniband") {
			d.t.Errorf("ip -n %s link show %s while the daemon runs: %v\n%s", ns, name, err, out)
		}
	}
	d.Stop()
	out, _ = RunCmd("ip", "netns", "list")
	for _, ns := range d.NetNS {
		if strings.Contains(out, ns) {
			d.t.Errorf("namespace %s left after SIGTERM:\n%s", ns, out)
		}
	}
	for name, ns := range ifaces {
		if out, err := RunCmd("ip", "-n", ns, "link", "show", name); err == nil {
			d.t.Errorf("%s still in namespace %s after SIGTERM:\n%s", name, ns, out)
		}
	}
	// Nor did a device fall back into this namespace when its namespace went.
	out, _ = RunCmd("ip", "-o", "link", "show")
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "link/infiniband") {
			continue
		}
		for name := range ifaces {
			if strings.Contains(line, ": "+name+":") || strings.Contains(line, ": "+name+"@") {
				d.t.Errorf("TUN device left after SIGTERM: %s", line)
			}
		}
	}
	if _, err := os.Lstat(d.Sock); !os.IsNotExist(err) {
		d.t.Errorf("control socket left after SIGTERM: %v", err)
	}
	if _, err := os.Lstat(lifecycle.PathFor(d.Sock)); !os.IsNotExist(err) {
		d.t.Errorf("state file left after SIGTERM: %v", err)
	}
}

// InterfaceTOML is an [[interfaces]] table: name on hca's port 1 in namespace netns with
// the addresses given.
func InterfaceTOML(name, hca, netns string, addrs ...string) string {
	q := make([]string, len(addrs))
	for k, a := range addrs {
		q[k] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf("\n[[interfaces]]\nname = %q\nhca = %q\nnetns = %q\naddresses = [%s]\n",
		name, hca, netns, strings.Join(q, ", "))
}

// Capture is a running `pibgw capture -w Path -c N` against a test daemon.
type Capture struct {
	Path string
	Err  SyncBuffer // its stderr
	done chan error
}

// StartCapture starts `pibgw capture` of count packets into name in a temporary
// directory (PIBGW_KEEP_CAPTURE names a file to keep instead) and waits until the
// daemon has written the pcap header, which it does once the capture is on the cables.
// The cleanup kills a capture still running.
func StartCapture(t *testing.T, d *Daemon, name string, count int) *Capture {
	t.Helper()
	c := &Capture{Path: filepath.Join(t.TempDir(), name), done: make(chan error, 1)}
	if p := os.Getenv("PIBGW_KEEP_CAPTURE"); p != "" {
		c.Path = p // to look at it afterwards
	}
	cmd := exec.Command(d.Bin, "capture", "-w", c.Path, "-c", fmt.Sprint(count), "--control", d.Sock)
	cmd.Stderr = &c.Err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			cmd.Process.Kill()
			<-c.done
		}
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(c.Path); err == nil && fi.Size() >= 24 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture did not start: %s", c.Err.String())
		}
	}
}

// Wait waits up to timeout for the capture to end; ended is false if it did not.
func (c *Capture) Wait(timeout time.Duration) (err error, ended bool) {
	select {
	case err := <-c.done:
		c.done <- err
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// Oversubscribed reports whether the machine has more runnable work than processors (its
// 1-minute load average above the CPU count), and says what it read. A rate or latency a
// test asserts beside its baseline on a quiet machine says nothing about the code there:
// every round trip of two spinning processes waits for a processor (rping between
// attached processes ran at 422/s beside two CPU-bound processes, 16,000/s quietly).
func Oversubscribed() (bool, string) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return false, err.Error()
	}
	var load float64
	if _, err := fmt.Sscanf(string(b), "%f", &load); err != nil {
		return false, err.Error()
	}
	n := runtime.NumCPU()
	return load > float64(n), fmt.Sprintf("load average %.2f on %d CPUs", load, n)
}
