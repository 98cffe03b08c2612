package attach_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// An attached process sees the daemon's port changes as they happen: the mirror port
// takes the new state and the process's contexts get the async events an HCA raises.
func TestPortChangesReachProcess(t *testing.T) {
	f, path := startFabric(t)
	s := dial(t, path)
	d := s.Device("pib_0")
	if d == nil || d.NumPorts() != 1 {
		t.Fatalf("devices %v", s.Devices())
	}
	daemonPort, mirror := f.Device("pib_0").Port(1), d.Port(1)
	if got, want := mirror.Query(), daemonPort.Query(); got.LID != want.LID || got.State != hca.PortActive || got.GUID != want.GUID || got.ActiveMTU != want.ActiveMTU {
		t.Fatalf("mirror port %+v, daemon's %+v", got, want)
	}
	if g1, _ := mirror.GID(0); g1 != func() [16]byte { g, _ := daemonPort.GID(0); return g }() {
		t.Fatalf("GID %x", g1)
	}
	ctx := d.Open()
	defer ctx.Close()
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen in 5 s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	event := func(want hca.EventType) {
		t.Helper()
		select {
		case ev := <-ctx.Events():
			if ev.Type != want || ev.Port != 1 {
				t.Fatalf("event %v port %d, want %v", ev.Type, ev.Port, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %v event", want)
		}
	}
	if err := daemonPort.SetPKey(5, 0x8123); err != nil {
		t.Fatal(err)
	}
	wait("P_Key 0x8123 at index 5", func() bool { k, _ := mirror.PKey(5); return k == 0x8123 })
	event(hca.EventPKeyChange)
	daemonPort.SetState(hca.PortArmed)
	wait("port Armed", func() bool { return mirror.State() == hca.PortArmed })
	event(hca.EventPortErr)
	daemonPort.SetState(hca.PortActive)
	wait("port Active", func() bool { return mirror.State() == hca.PortActive })
	event(hca.EventPortActive)
}
