package attach_test

import (
	"syscall"
	"testing"

	"github.com/pibgw/pibgw/rdmacm"
)

// Service IDs (issue 43 item 5): an attached process cannot listen on the daemon's —
// IPoIB connected mode's, or one the daemon's rdma_cm listens on — and one service ID
// has one listener across the processes, as in the kernel's CM; a listen ends with its
// process.

func listenSID(t *testing.T, r *rawControl, dev int, sid uint64) map[string]any {
	t.Helper()
	return r.call(t, `"op":"cm_listen","dev":%d,"port":1,"sid":%d`, dev, sid)
}

func wantErrno(t *testing.T, what string, m map[string]any, e syscall.Errno) {
	t.Helper()
	if m["ok"] == true || m["errno"] != float64(e) {
		t.Fatalf("%s: got %v, want %v (%d)", what, m, e, int(e))
	}
}

func TestServiceIDs(t *testing.T) {
	f, path := startFabric(t)
	a := dialRaw(t, path)
	defer a.c.Close()

	// IPoIB-CM's service IDs (0x1000000000000000 | UD QPN and the other form) are the
	// daemon's, on every device, QPN in use or not: ib_cm_listen's EBUSY.
	for _, sid := range []uint64{0x1000000000000048, 0x1000000000000049, 0x0100000000000048, 0x10000000003FFFFF} {
		for dev := range 2 {
			wantErrno(t, "IPoIB-CM service ID", listenSID(t, a, dev, sid), syscall.EBUSY)
		}
	}
	// A port the daemon's rdma_cm listens on (ib1, 10.10.0.2, pib_1): EADDRINUSE, as
	// rdma_listen on a port in use.
	l, err := rdmacm.Listen(f.RDMA(), "10.10.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sid7471 := rdmacm.ServiceID(rdmacm.PSTCP, 7471)
	wantErrno(t, "the daemon's rdma_cm port", listenSID(t, a, 1, sid7471), syscall.EADDRINUSE)

	// A process's listen is the service ID's one listener: another process is refused,
	// and so is the daemon's rdma_cm.
	sid7472 := rdmacm.ServiceID(rdmacm.PSTCP, 7472)
	if m := listenSID(t, a, 0, sid7472); m["ok"] != true {
		t.Fatalf("listen on a free port: %v", m)
	}
	if m := listenSID(t, a, 0, 0x12345); m["ok"] != true {
		t.Fatalf("listen on a free service ID: %v", m)
	}
	b := dialRaw(t, path)
	defer b.c.Close()
	wantErrno(t, "another process's rdma_cm port", listenSID(t, b, 0, sid7472), syscall.EADDRINUSE)
	wantErrno(t, "another process's service ID", listenSID(t, b, 0, 0x12345), syscall.EBUSY)
	if l2, err := rdmacm.Listen(f.RDMA(), "10.10.0.1:7472"); err == nil {
		l2.Close()
		t.Fatal("the daemon's rdma_cm listened on a port an attached process listens on")
	}

	// Unlisten, or the process's end, frees the service ID for the others.
	a.call(t, `"op":"cm_unlisten","dev":0,"port":1,"sid":%d`, 0x12345)
	if m := listenSID(t, b, 0, 0x12345); m["ok"] != true {
		t.Fatalf("listen after the other's unlisten: %v", m)
	}
	a.c.Close()
	deadline := 200
	for {
		m := listenSID(t, b, 0, sid7472)
		if m["ok"] == true {
			break
		}
		if deadline--; deadline == 0 {
			t.Fatalf("the port stayed taken after its process went: %v", m)
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 10e6}, nil)
	}
	b.call(t, `"op":"cm_unlisten","dev":0,"port":1,"sid":%d`, sid7472)
	waitListen(t, f.RDMA(), "10.10.0.1:7472")
}

// waitListen listens with the daemon's rdma_cm on address, which must be free.
func waitListen(t *testing.T, h rdmacm.Host, address string) {
	t.Helper()
	l, err := rdmacm.Listen(h, address)
	if err != nil {
		t.Fatalf("the daemon's rdma_cm on %s, freed by the process: %v", address, err)
	}
	l.Close()
}
