package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/internal/daemon/daemontest"
	"github.com/pibgw/pibgw/ipoib"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func partitionsConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load("../../configs/partitions.toml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func start(t *testing.T, cfg *config.Config, b *daemontest.Backend) *daemon.Daemon {
	t.Helper()
	d, err := daemon.Start(context.Background(), daemon.Options{Config: cfg, Logger: quiet(), Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestStartAndClose(t *testing.T) {
	b := daemontest.New("pib1") // pib1 exists already: used, not created, not deleted
	d := start(t, config.Default(), b)
	if got := b.Devices(); !reflect.DeepEqual(got, []string{"ib0", "ib1"}) {
		t.Errorf("devices %v", got)
	}
	if got := b.NetNS(); !reflect.DeepEqual(got, []string{"pib0", "pib1"}) {
		t.Errorf("namespaces %v", got)
	}
	spec := b.Device("ib0").Spec
	if spec.NetNS != "pib0" || spec.MTU != 2044 || spec.Stack != "kernel" ||
		len(spec.Addrs) != 2 || spec.Addrs[1].String() != "fe80::202:c903:0:301/64" {
		t.Errorf("ib0 spec %+v", spec)
	}
	ifs, err := d.Show("")
	if err != nil || len(ifs) != 2 {
		t.Fatalf("show: %v %v", ifs, err)
	}
	if ifs[0].Name != "ib0" || !ifs[0].Up || ifs[0].PKey != 0xffff || ifs[0].NetNS != "pib0" ||
		ifs[0].HWAddr != "00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:03:01" ||
		ifs[0].Broadcast != "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff" {
		t.Errorf("ib0 %+v", ifs[0])
	}
	// Every port is Active after the first sweep.
	for _, dev := range d.Fabric.Devices() {
		if a := dev.Ports[0].Attr; a.State != 4 || a.LID == 0 || a.SMLID != 1 {
			t.Errorf("%s port 1: state %v lid %d sm %d", dev.Name, a.State, a.LID, a.SMLID)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.Devices(); len(got) != 0 {
		t.Errorf("devices left after Close: %v", got)
	}
	if got := b.NetNS(); !reflect.DeepEqual(got, []string{"pib1"}) {
		t.Errorf("namespaces after Close %v, want only the pre-existing pib1", got)
	}
}

// A failure half-way through start-up takes down what was made.
func TestStartFailureCleansUp(t *testing.T) {
	b := daemontest.New()
	b.FailDevice = "ib1"
	_, err := daemon.Start(context.Background(), daemon.Options{Config: config.Default(), Logger: quiet(), Backend: b})
	if err == nil || !strings.Contains(err.Error(), "interface ib1: fake: cannot create ib1") {
		t.Fatalf("err %v", err)
	}
	if got := b.Devices(); len(got) != 0 {
		t.Errorf("devices left: %v", got)
	}
	if got := b.NetNS(); len(got) != 0 {
		t.Errorf("namespaces left: %v", got)
	}
}

func TestPartitionsAndChildren(t *testing.T) {
	b := daemontest.New()
	d := start(t, partitionsConfig(t), b)
	ifs, err := d.Show("")
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	for _, it := range ifs {
		s := "up"
		if !it.Up {
			s = it.Reason
		}
		state[it.Name+"@"+it.NetNS] = s
	}
	want := map[string]string{
		"ib0@hosta": "up", "ib0.8001@hosta": "up", "ib1@hostb": "up", "ib1.8001@hostb": "up",
		"ib2@hostc": "up", "ib2.8001@hostc": "P_Key 0x8001 not in the port's table",
	}
	if !reflect.DeepEqual(state, want) {
		t.Errorf("states %v\nwant %v", state, want)
	}
	// Delete A's child: the parent stays.
	if _, err := d.DelChild("ib0", 0x8001); err != nil {
		t.Fatal(err)
	}
	if b.Device("ib0.8001") != nil || b.Device("ib0") == nil {
		t.Errorf("after del: devices %v", b.Devices())
	}
	if _, err := d.DelChild("ib0", 0x8001); err == nil || err.Error() != "ib0 has no child for P_Key 0x8001 (no interface ib0.8001)" {
		t.Errorf("second del: %v", err)
	}
	// And add it back, with an address.
	name, err := d.AddChild("ib0", 0x0001, nil)
	if err != nil || name != "ib0.8001" {
		t.Fatalf("add: %q %v", name, err)
	}
	if spec := b.Device("ib0.8001").Spec; spec.NetNS != "hosta" {
		t.Errorf("child spec %+v", spec)
	}
	if _, err := d.AddChild("ib0", 0x8001, nil); err == nil || err.Error() != "child ib0.8001 already exists" {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := d.AddChild("ib0.8001", 0x8002, nil); err == nil || !strings.Contains(err.Error(), "is a child interface") {
		t.Errorf("child of child: %v", err)
	}
	if _, err := d.AddChild("ib7", 0x8002, nil); err == nil || !strings.HasPrefix(err.Error(), `unknown interface "ib7" (have ib0, `) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := d.AddChild("ib0", 0xffff, nil); err == nil || err.Error() != "ib0 already runs on P_Key 0xffff" {
		t.Errorf("parent's own P_Key: %v", err)
	}
}

// serve runs the control API for d on a socket in a temporary directory.
func serve(t *testing.T, d *daemon.Daemon) *control.Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pibgw.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &control.Server{Handler: &daemon.Handler{D: d, ControlPath: path}, Logger: quiet()}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return control.NewClient(path)
}

func TestControlProtocol(t *testing.T) {
	b := daemontest.New()
	b.Neighbors["ib0"] = []ipoib.Neighbor{daemontest.Neighbor("10.10.0.2", 0x48, 0x0002_c903_0000_0401, "REACHABLE")}
	d := start(t, config.Default(), b)
	cl := serve(t, d)
	ctx := context.Background()

	var st control.Status
	if err := cl.Do(ctx, control.Request{Verb: control.VerbStatus}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Protocol != control.Protocol || st.PID == 0 || !strings.HasSuffix(st.Control, "pibgw.sock") {
		t.Errorf("status %+v", st)
	}
	// The SA's multicast counters: the IPoIB broadcast group exists, nothing refused.
	if m := st.Multicast; m == nil || m.Groups < 1 || m.MLIDExhausted != 0 || m.SendOnlyRefused != 0 {
		t.Errorf("status multicast %+v", st.Multicast)
	}

	var ifs []control.Interface
	if err := cl.Do(ctx, control.Request{Verb: control.VerbShow, Iface: "ib1"}, &ifs); err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0].Name != "ib1" || ifs[0].HCA != "pib_1" || ifs[0].MTU != 2044 ||
		!reflect.DeepEqual(ifs[0].Addrs, []string{"10.10.0.2/24", "fe80::202:c903:0:401/64"}) {
		t.Errorf("show ib1: %+v", ifs)
	}

	var ns []control.Neighbor
	if err := cl.Do(ctx, control.Request{Verb: control.VerbNeigh}, &ns); err != nil {
		t.Fatal(err)
	}
	want := []control.Neighbor{{Iface: "ib0", IP: "10.10.0.2", QPN: 0x48, GID: "fe80::2:c903:0:401", State: "REACHABLE",
		HWAddr: "00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:04:01", AgeMS: 1500}}
	if !reflect.DeepEqual(ns, want) {
		t.Errorf("neigh\n got %+v\nwant %+v", ns, want)
	}

	var child control.Interface
	if err := cl.Do(ctx, control.Request{Verb: control.VerbChildAdd, Iface: "ib0", PKey: "8001", Addrs: []string{"10.20.0.1/24"}}, &child); err != nil {
		t.Fatal(err)
	}
	// No partition 0x8001 is configured: the child exists but is down, and says why.
	if child.Name != "ib0.8001" || child.Parent != "ib0" || child.NetNS != "pib0" || child.PKey != 0x8001 ||
		child.Up || child.Reason != "P_Key 0x8001 not in the port's table" || child.Addrs[0] != "10.20.0.1/24" {
		t.Errorf("child %+v", child)
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbChildDel, Iface: "ib0", PKey: "0x8001"}, nil); err != nil {
		t.Fatal(err)
	}

	var devs []control.Device
	if err := cl.Do(ctx, control.Request{Verb: control.VerbDevinfo}, &devs); err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[1].Name != "pib_1" || devs[1].Ports[0].Attr.LID != 3 || devs[1].Ports[0].GIDs[0].String() != "fe80::2:c903:0:401" {
		t.Errorf("devinfo %+v", devs)
	}

	// Errors come back as one line naming the value.
	for _, tc := range []struct {
		req  control.Request
		want string
	}{
		{control.Request{Verb: control.VerbShow, Iface: "ib9"}, `unknown interface "ib9" (have ib0, ib1)`},
		{control.Request{Verb: control.VerbNeigh, Iface: "ib9"}, `unknown interface "ib9" (have ib0, ib1)`},
		{control.Request{Verb: control.VerbChildAdd, Iface: "ib0", PKey: "0"}, `invalid P_Key "0": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{control.Request{Verb: control.VerbChildAdd, Iface: "ib0", PKey: "0x8000"}, `invalid P_Key "0x8000": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{control.Request{Verb: control.VerbChildAdd, Iface: "ib0", PKey: "0x10000"}, `invalid P_Key "0x10000": more than 16 bits (at most 0xffff)`},
		{control.Request{Verb: control.VerbChildAdd, Iface: "ib0", PKey: "xyz"}, `invalid P_Key "xyz": want a hexadecimal number such as 0x8001`},
		{control.Request{Verb: control.VerbChildAdd, Iface: "ib0", PKey: "8002", Addrs: []string{"10.20.0.300/24"}}, `malformed address "10.20.0.300/24": want CIDR such as 10.20.0.1/24 or fd00::1/64`},
		{control.Request{Verb: control.VerbChildDel, Iface: "ib0", PKey: "8003"}, `ib0 has no child for P_Key 0x8003 (no interface ib0.8003)`},
		{control.Request{Verb: "frobnicate"}, `unknown verb "frobnicate"`},
	} {
		err := cl.Do(ctx, tc.req, nil)
		var re *control.RemoteError
		if !errors.As(err, &re) || err.Error() != tc.want {
			t.Errorf("%+v: error %v, want %q", tc.req, err, tc.want)
		}
	}
}

func TestNoDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	err := control.NewClient(path).Do(context.Background(), control.Request{Verb: control.VerbStatus}, nil)
	if !control.IsNoDaemon(err) || err.Error() != "no daemon running at "+path+" (start one with: sudo pibgw up)" {
		t.Errorf("err %v", err)
	}
	// A stale socket file (nothing listening) is the same.
	ln, _ := net.Listen("unix", path)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if err := control.NewClient(path).Do(context.Background(), control.Request{Verb: control.VerbStatus}, nil); !control.IsNoDaemon(err) {
		t.Errorf("stale socket: %v", err)
	}
}

// A capture over the control socket records the fabric's packets as a pcap stream.
func TestCapture(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl := serve(t, d)
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := cl.Capture(context.Background(), control.Request{Count: 4}, &buf)
		done <- err
	}()
	// Make traffic: heavy sweeps send SMPs over every cable until the capture has enough.
	deadline := time.After(10 * time.Second)
	for {
		d.Fabric.SM.Resweep()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			recs, err := fabric.ReadCapture(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 4 {
				t.Errorf("%d records, want 4", len(recs))
			}
			return
		case <-deadline:
			t.Fatal("capture did not end")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Cancelling a capture (Ctrl-C in the CLI) ends it and takes the wrappers off.
func TestCaptureCancel(t *testing.T) {
	d := start(t, config.Default(), daemontest.New())
	cl := serve(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := cl.Capture(ctx, control.Request{}, &buf)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	<-d.Fabric.SM.Resweep()
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs, err := fabric.ReadCapture(&buf)
	if err != nil {
		t.Fatalf("cut capture is not a valid file: %v", err)
	}
	if len(recs) == 0 {
		t.Error("no packets captured during a sweep")
	}
}

// daemon.capture records the fabric from bring-up to shutdown.
func TestConfiguredCapture(t *testing.T) {
	cfg := config.Default()
	cfg.Daemon.Capture = filepath.Join(t.TempDir(), "all.pcap")
	d := start(t, cfg, daemontest.New())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(cfg.Daemon.Capture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := fabric.ReadCapture(f)
	if err != nil {
		t.Fatal(err)
	}
	// The SM's first sweep alone is dozens of SMPs, each seen leaving and arriving.
	if len(recs) < 50 {
		t.Errorf("%d packets captured, want the whole bring-up", len(recs))
	}
}

// A namespace a killed daemon left is adopted when the configuration uses it again (and
// deleted at Close); one removed from under the daemon is a warning at Close, not an
// error. OnNetNS follows the list the state file records.
func TestAdoptAndVanishedNetNS(t *testing.T) {
	b := daemontest.New("pib0") // left by a killed daemon
	var logs bytes.Buffer
	var recorded [][]string
	d, err := daemon.Start(context.Background(), daemon.Options{Config: config.Default(), Backend: b,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Adopt: []string{"pib0"},
		OnNetNS: func(ns []string) { recorded = append(recorded, ns) }})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="adopting namespace a killed daemon left" netns=pib0`) {
		t.Errorf("pib0 not adopted:\n%s", logs.String())
	}
	if want := [][]string{{"pib0"}, {"pib0", "pib1"}}; !reflect.DeepEqual(recorded, want) {
		t.Errorf("OnNetNS calls %v, want %v", recorded, want)
	}
	b.DeleteNetNS("pib1") // ip netns del pib1 under the running daemon
	if err := d.Close(); err != nil {
		t.Errorf("Close with a vanished namespace: %v", err)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="namespace was already removed" netns=pib1`) {
		t.Errorf("no warning for pib1:\n%s", logs.String())
	}
	if got := b.NetNS(); len(got) != 0 {
		t.Errorf("namespaces after Close: %v (the adopted pib0 must go too)", got)
	}
	if last := recorded[len(recorded)-1]; len(last) != 0 {
		t.Errorf("the state file would still record %v", last)
	}
}
