package attach_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/inproc"
)

// QP numbers of attached processes (issue 43 item 6): allocation and release take the
// same time however many a process holds, and a process holds at most its limit.

// qpnServer serves the default in-process fabric's HCAs under lim.
func qpnServer(t *testing.T, lim attach.Limits) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	path := filepath.Join(t.TempDir(), "attach.sock")
	ln, err := attach.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := &attach.Server{Devices: f.Devices(), Limits: lim, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

// call sends one request and returns its answer.
func (r *rawControl) call(t *testing.T, format string, a ...any) map[string]any {
	t.Helper()
	r.nextID++
	if _, err := fmt.Fprintf(r.c, `{"id":%d,`+format+`}`, append([]any{r.nextID}, a...)...); err != nil {
		t.Fatal(err)
	}
	m, err := r.waitReply(r.nextID)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// median of the durations.
func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// One process allocates n QP numbers, then frees them: the last 1000 of each take
// about as long as the first 1000 (medians of each operation: ratios, not absolute
// times, and robust to a loaded machine). Every store copied the device's whole QP
// table: 30,000 numbers took 30 s, and freeing them 21 s. CI: 10,000;
// PIBGW_ABUSE=1: 30,000.
func TestQPNAllocationConstantTime(t *testing.T) {
	n := 10000
	if os.Getenv(abuseEnv) == "1" {
		n = 30000
	}
	path := qpnServer(t, attach.Limits{MaxQPs: n})
	r := dialRaw(t, path)
	defer r.c.Close()
	took := make([]time.Duration, n)
	qpns := make([]uint32, n)
	for i := range n {
		start := time.Now()
		m := r.call(t, `"op":"alloc_qpn","dev":0`)
		took[i] = time.Since(start)
		if m["ok"] != true {
			t.Fatalf("alloc %d: %v", i, m)
		}
		qpns[i] = uint32(m["qpn"].(float64))
	}
	first, last := median(took[:1000]), median(took[n-1000:])
	t.Logf("alloc: first 1000 %v, last 1000 %v (medians)", first, last)
	if last > 3*first {
		t.Errorf("allocating: the last 1000 QPNs took %v each, the first %v: %.1f times (want at most 3)", last, first, float64(last)/float64(first))
	}
	for i, q := range qpns {
		start := time.Now()
		m := r.call(t, `"op":"free_qpn","dev":0,"qpn":%d`, q)
		took[i] = time.Since(start)
		if m["ok"] != true {
			t.Fatalf("free %#x: %v", q, m)
		}
	}
	first, last = median(took[:1000]), median(took[n-1000:])
	t.Logf("free: first 1000 %v, last 1000 %v (medians)", first, last)
	if first > 3*last {
		t.Errorf("freeing: the first 1000 QPNs took %v each, the last %v: %.1f times (want at most 3)", first, last, float64(first)/float64(last))
	}
}

// A process holds at most daemon.attach_max_qps QP numbers on a device: the next is
// ENOMEM, as uverbs' create_qp beyond the device's QPs; a freed one can be had again,
// and another process is not limited by the first one's.
func TestQPNLimitPerProcess(t *testing.T) {
	const lim = 50
	path := qpnServer(t, attach.Limits{MaxQPs: lim})
	r := dialRaw(t, path)
	defer r.c.Close()
	var qpn uint32
	for i := range lim {
		m := r.call(t, `"op":"alloc_qpn","dev":0`)
		if m["ok"] != true {
			t.Fatalf("alloc %d of %d: %v", i, lim, m)
		}
		qpn = uint32(m["qpn"].(float64))
	}
	m := r.call(t, `"op":"alloc_qpn","dev":0`)
	if m["ok"] == true || m["errno"] != float64(syscall.ENOMEM) {
		t.Fatalf("QPN %d: got %v, want ENOMEM", lim+1, m)
	}
	if m := r.call(t, `"op":"alloc_qpn","dev":1`); m["ok"] != true {
		t.Fatalf("the limit is per device: alloc on device 1: %v", m)
	}
	other := dialRaw(t, path)
	defer other.c.Close()
	if m := other.call(t, `"op":"alloc_qpn","dev":0`); m["ok"] != true {
		t.Fatalf("another process: %v", m)
	}
	if m := r.call(t, `"op":"free_qpn","dev":0,"qpn":%d`, qpn); m["ok"] != true {
		t.Fatalf("free: %v", m)
	}
	if m := r.call(t, `"op":"alloc_qpn","dev":0`); m["ok"] != true {
		t.Fatalf("alloc after a free: %v", m)
	}
}
