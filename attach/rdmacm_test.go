package attach_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// startFabric runs the default in-process fabric serving an attach socket.
func startFabric(t testing.TB) (*inproc.Fabric, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "attach.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{Attach: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func dial(t *testing.T, path string) *attach.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := attach.Dial(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two sessions (as two processes would) connect with rdma_cm over the daemon's IPoIB
// addresses and move data both ways over the net.Conn adapter.
func TestRDMACMBetweenSessions(t *testing.T) {
	f, path := startFabric(t)
	srv, cli := dial(t, path), dial(t, path)
	if n := len(f.Attached()); n != 2 {
		t.Fatalf("%d sessions attached, want 2", n)
	}
	l, err := rdmacm.Listen(srv.RDMA(), "10.10.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 4 << 20
	data := make([]byte, n)
	rand.Read(data)
	got := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
			got <- [32]byte{}
			return
		}
		defer c.Close()
		h := sha256.New()
		io.CopyN(h, c, n)
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		c.Write([]byte("done"))
		got <- sum
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := rdmacm.DialFrom(ctx, cli.RDMA(), netip.MustParseAddr("10.10.0.1"), "10.10.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(c, ack); err != nil || !bytes.Equal(ack, []byte("done")) {
		t.Fatalf("ack %q, %v", ack, err)
	}
	if sum := <-got; sum != sha256.Sum256(data) {
		t.Fatal("SHA-256 differs")
	}
}

// Connecting to a port nobody listens on is rejected (REJ reason 8).
func TestRDMACMRejectedBetweenSessions(t *testing.T) {
	_, path := startFabric(t)
	cli := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := rdmacm.DialFrom(ctx, cli.RDMA(), netip.MustParseAddr("10.10.0.1"), "10.10.0.2:9999")
	if err == nil {
		t.Fatal("dial to a port nobody listens on succeeded")
	}
	t.Log(err)
}

// A process that goes without disconnecting (killed, or detached with connections open)
// has its connections disconnected by the daemon, as the kernel's rdma_cm does for a
// dead process: its peer's reads end instead of waiting forever.
func TestGoneProcessDisconnects(t *testing.T) {
	_, path := startFabric(t)
	srv, cli := dial(t, path), dial(t, path)
	l, err := rdmacm.Listen(srv.RDMA(), "10.10.0.2:7472")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, err = c.Write([]byte("hi"))
		}
		accepted <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := rdmacm.DialFrom(ctx, cli.RDMA(), netip.MustParseAddr("10.10.0.1"), "10.10.0.2:7472")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	srv.Close() // the server's process goes, its connection still open
	done := make(chan error, 1)
	go func() { _, err := c.Read(buf); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read after the peer went returned data")
		}
		t.Logf("client read: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the client's read still waits 10 s after its peer's process went")
	}
}

// madFunc is an hca.MADHandler.
type madFunc func(*hca.MAD)

func (f madFunc) HandleMAD(m *hca.MAD) { f(m) }

// A peer's DREQ for a connection of a process that is gone — sent before the daemon's DREQ
// for it arrived (perftest -R: both ends disconnect as they finish) — is answered with a
// DREP, as by a kernel whose CM no longer has the connection (cm_issue_drep). It used to
// be dropped, and the peer resent it for a minute before it reported DISCONNECTED
// (ib_atomic_lat -R's client hung there).
func TestDReqToGoneProcessAnswered(t *testing.T) {
	f, path := startFabric(t)
	srv := dial(t, path)
	as := f.Attached()
	if len(as) != 1 {
		t.Fatalf("%d sessions, want 1", len(as))
	}
	prefix := as[0].ID
	srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.Attached()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p0, p1 := f.Device("pib_0").Port(1), f.Device("pib_1").Port(1)
	got := make(chan []byte, 4)
	// The DREP comes back to a comm ID of prefix 0 (the daemon's): this handler, in place
	// of the daemon's CM, takes it.
	p0.RegisterMADHandler(wire.MgmtClassCM, false, madFunc(func(m *hca.MAD) {
		if wire.MAD(m.Data).AttrID() == wire.AttrCMDRep {
			got <- append([]byte(nil), m.Data...)
		}
	}))
	dreq := make([]byte, wire.MADLen)
	wire.NewCMMAD(dreq, wire.AttrCMDReq, 0x77)
	gone := prefix<<(32-ibcm.IDPrefixBits) | 5
	wire.CMDReq(dreq).SetLocalCommID(0x1234)
	wire.CMDReq(dreq).SetRemoteCommID(gone)
	if err := p0.SendMAD(hca.MADAddr{DLID: p1.LID(), QPN: 1, QKey: hca.GSIQKey}, dreq); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		d := wire.CMDRep(r)
		if d.LocalCommID() != gone || d.RemoteCommID() != 0x1234 || wire.MAD(r).TID() != 0x77 {
			t.Errorf("DREP: local %#x remote %#x tid %#x; want %#x, 0x1234, 0x77", d.LocalCommID(), d.RemoteCommID(), wire.MAD(r).TID(), gone)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no DREP for a DREQ to the gone process's connection")
	}
}
