package ibsim_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/daemon"
	"github.com/pibgw/pibgw/wire"
	"golang.org/x/sys/unix"
)

// The tests speak libumad2sim's side of the protocol (umad2sim/sim_client.c) to a server
// in a fabric built from the default configuration with the built-in SM: the MADs cross
// the fabric and are answered by its SMAs, PMAs and SA.

var le = binary.LittleEndian

// testFabric builds the fabric with the server on a socket name unique to the test.
func testFabric(t testing.TB, edit func(*config.Config)) (*daemon.Fabric, string) {
	t.Helper()
	cfg := config.Default()
	cfg.IBSim.Enable = true
	cfg.IBSim.SocketName = fmt.Sprintf("pibgwtest-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	if edit != nil {
		edit(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := daemon.BuildFabric(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f, cfg.IBSim.SocketName
}

var pidSeq = struct {
	sync.Mutex
	n int
}{n: 1000}

// simClient is a libumad2sim client: a control socket connected to @<base>:ctl and a data
// socket @<base>:in<pid> that talks to @<base>:out<id>.
type simClient struct {
	t    testing.TB
	base string
	pid  int
	ctl  *net.UnixConn
	data *net.UnixConn
	id   uint32
	node string
	out  *net.UnixAddr
}

func abstract(base, what string) *net.UnixAddr {
	return &net.UnixAddr{Name: "@" + base + ":" + what + "\x00", Net: "unixgram"}
}

// dial binds both sockets and sends CONNECT for host; it returns the reply's type.
func dial(t testing.TB, base, host string, issm bool) (*simClient, uint32) {
	t.Helper()
	pidSeq.Lock()
	pidSeq.n++
	pid := os.Getpid()*1000 + pidSeq.n
	pidSeq.Unlock()
	c := &simClient{t: t, base: base, pid: pid}
	var err error
	c.ctl, err = net.DialUnix("unixgram", abstract(base, "ctl"+strconv.Itoa(pid)), abstract(base, "ctl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ctl.Close() })
	c.data, err = net.ListenUnixgram("unixgram", abstract(base, "in"+strconv.Itoa(pid)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.data.Close() })
	var d [64]byte
	le.PutUint32(d[0:], uint32(pid))
	if issm {
		le.PutUint32(d[8:], 1)
	}
	copy(d[12:43], host)
	typ, rd := c.ctlDo(1, d[:], 44)
	if typ == 1 {
		c.id = le.Uint32(rd[0:])
		c.node = strings.TrimRight(string(rd[12:44]), "\x00")
		c.out = abstract(base, "out"+strconv.Itoa(int(c.id)))
	}
	return c, typ
}

// ctlDo sends a control message and returns the reply's type and data.
func (c *simClient) ctlDo(typ uint32, data []byte, n uint32) (uint32, []byte) {
	c.t.Helper()
	var b [80]byte
	le.PutUint32(b[0:], 0xDEADBEEF)
	le.PutUint32(b[4:], c.id)
	le.PutUint32(b[8:], typ)
	le.PutUint32(b[12:], n)
	copy(b[16:], data)
	if _, err := c.ctl.Write(b[:]); err != nil {
		c.t.Fatal(err)
	}
	c.ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	var r [81]byte
	m, err := c.ctl.Read(r[:])
	if err != nil {
		c.t.Fatalf("control %d: %v", typ, err)
	}
	if m != 80 {
		c.t.Fatalf("control reply of %d bytes", m)
	}
	return le.Uint32(r[8:]), r[16:80]
}

// send sends one sim_request carrying mad to dlid/dqp.
func (c *simClient) send(dlid uint16, dqp uint32, mad []byte) {
	c.t.Helper()
	var b [288]byte
	binary.BigEndian.PutUint16(b[0:], dlid)
	if dlid == 0xFFFF {
		binary.BigEndian.PutUint16(b[4:], 0xFFFF)
	}
	binary.BigEndian.PutUint32(b[8:], dqp)
	if dqp != 0 {
		binary.BigEndian.PutUint32(b[12:], 1)
	}
	binary.BigEndian.PutUint64(b[24:], 256)
	copy(b[32:], mad)
	if _, err := c.data.WriteToUnix(b[:], c.out); err != nil {
		c.t.Fatal(err)
	}
}

// recv waits for one datagram; ok is false after the timeout.
func (c *simClient) recv(timeout time.Duration) ([]byte, bool) {
	c.t.Helper()
	c.data.SetReadDeadline(time.Now().Add(timeout))
	b := make([]byte, 289)
	n, err := c.data.Read(b)
	if err != nil {
		return nil, false
	}
	if n != 288 {
		c.t.Fatalf("MAD datagram of %d bytes, want 288", n)
	}
	return b[:n], true
}

// smp builds a SubnGet of attr: directed route along path (path[0] unused) or, with
// path nil, LID-routed.
func smp(attr uint16, mod uint32, tid uint64, path ...byte) []byte {
	m := make([]byte, 256)
	s := wire.SMP(m)
	mad := s.MAD()
	mad.SetBaseVersion(1)
	mad.SetMgmtClass(wire.MgmtClassSubnLID)
	mad.SetClassVersion(1)
	mad.SetMethod(wire.MethodGet)
	mad.SetTID(tid)
	mad.SetAttrID(attr)
	mad.SetAttrMod(mod)
	if path != nil {
		mad.SetMgmtClass(wire.MgmtClassSubnDirected)
		s.SetHopCount(uint8(len(path) - 1))
		s.SetDrSLID(0xFFFF)
		s.SetDrDLID(0xFFFF)
		copy(s.InitialPath(), path)
	}
	return m
}

func TestControlAndSMPs(t *testing.T) {
	f, base := testFabric(t, nil)
	pib1 := f.Devs[1].Port(1)

	c, typ := dial(t, base, "pib_1", false)
	if typ != 1 || c.id != 0 || c.node != "pib_1" {
		t.Fatalf("CONNECT: type %d id %d node %q", typ, c.id, c.node)
	}
	// GET_NODEINFO: pib_1's NodeInfo in MAD layout.
	_, d := c.ctlDo(7, nil, 64)
	if ni := wire.NodeInfo(d); ni.NodeGUID() != f.Devs[1].Query().NodeGUID || ni.NodeType() != wire.NodeTypeCA || ni.LocalPortNum() != 1 {
		t.Errorf("GET_NODEINFO: guid %#x type %d port %d", ni.NodeGUID(), ni.NodeType(), ni.LocalPortNum())
	}
	// GET_PORTINFO(0): the port's LID and state as the built-in SM set them.
	_, d = c.ctlDo(8, []byte{0}, 64)
	if pi := wire.PortInfo(d); pi.LID() != pib1.LID() || pi.PortState() != 4 || pi.LocalPortNum() != 1 {
		t.Errorf("GET_PORTINFO: lid %d state %d port %d; want lid %d Active", pi.LID(), pi.PortState(), pi.LocalPortNum(), pib1.LID())
	}
	_, d = c.ctlDo(10, nil, 64)
	if k := binary.BigEndian.Uint16(d[0:]); k != 0xFFFF {
		t.Errorf("GET_PKEYS: entry 0 = %#x", k)
	}
	_, d = c.ctlDo(4, nil, 24)
	if v := le.Uint32(d[0:]); v == 0 || le.Uint64(d[16:]) != 1 {
		t.Errorf("GET_VENDOR: %x", d[:24])
	}

	// A directed-route SMP of hop count 0 is answered by the port's own SMA; of hop count
	// 1 by the switch, through the real link.
	c.send(0xFFFF, 0, smp(wire.AttrNodeInfo, 0, 0x11, 0))
	r, ok := c.recv(5 * time.Second)
	if !ok {
		t.Fatal("no answer to DR NodeInfo hop 0")
	}
	resp := wire.SMP(r[32:])
	if !resp.MAD().IsResponse() || resp.MAD().TID()&0xFFFFFFFF != 0x11 || wire.NodeInfo(resp.SMPData()).NodeGUID() != f.Devs[1].Query().NodeGUID {
		t.Errorf("DR NodeInfo hop 0: %x", r[32:96])
	}
	c.send(0xFFFF, 0, smp(wire.AttrNodeInfo, 0, 0x12, 0, 1))
	if r, ok = c.recv(5 * time.Second); !ok {
		t.Fatal("no answer to DR NodeInfo 0,1")
	}
	if ni := wire.NodeInfo(wire.SMP(r[32:]).SMPData()); ni.NodeType() != wire.NodeTypeSwitch || ni.LocalPortNum() != 2 {
		t.Errorf("DR NodeInfo 0,1: type %d local port %d; want the switch, entered by port 2", ni.NodeType(), ni.LocalPortNum())
	}
	// LID-routed to pib_0 (slid 0 = "my LID").
	pib0 := f.Devs[0].Port(1)
	c.send(pib0.LID(), 0, smp(wire.AttrPortInfo, 0, 0x13))
	if r, ok = c.recv(5 * time.Second); !ok {
		t.Fatal("no answer to LID-routed PortInfo")
	}
	if pi := wire.PortInfo(wire.SMP(r[32:]).SMPData()); pi.LID() != pib0.LID() || binary.BigEndian.Uint16(r[4:]) != pib0.LID() {
		t.Errorf("LID-routed PortInfo from %d: lid %d", binary.BigEndian.Uint16(r[4:]), pi.LID())
	}

	// A GMP: pib_0's PMA, PortCounters of port 1.
	pm := make([]byte, 256)
	m := wire.MAD(pm)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassPerfMgt)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetTID(0x14)
	m.SetAttrID(wire.AttrPortCounters)
	pm[64+1] = 1 // PortSelect
	c.send(pib0.LID(), 1, pm)
	if r, ok = c.recv(5 * time.Second); !ok {
		t.Fatal("no answer from the PMA")
	}
	if pc := wire.PortCounters(r[32+64:]); wire.MAD(r[32:]).Status() != 0 || pc.PortXmitPkts() == 0 {
		t.Errorf("PortCounters: status %#x xmit %d", wire.MAD(r[32:]).Status(), pc.PortXmitPkts())
	}

	// Bad datagrams are dropped and counted; the client keeps working.
	before := f.IBSim.Stats().BadMADs
	// Short, empty (the reader's stop looks alike, but the client is not stopping) and
	// longer than a sim_request.
	for _, n := range []int{100, 0, 400} {
		if _, err := c.data.WriteToUnix(make([]byte, n), c.out); err != nil {
			t.Fatal(err)
		}
	}
	bad := smp(wire.AttrNodeInfo, 0, 0x15, 0, 1)
	wire.SMP(bad).SetHopPointer(1)
	c.send(0xFFFF, 0, bad)
	c.send(0xFFFF, 0, smp(wire.AttrNodeInfo, 0, 0x16, 0))
	if r, ok = c.recv(5 * time.Second); !ok || wire.MAD(r[32:]).TID()&0xFFFF != 0x16 {
		t.Fatalf("after bad datagrams: %v %x", ok, r)
	}
	if n := f.IBSim.Stats().BadMADs - before; n != 4 {
		t.Errorf("BadMADs +%d, want 4", n)
	}

	// Unknown node: ERROR. DISCONNECT frees the slot; the next client takes the next slot
	// (round robin: a slot is reused after every other).
	if _, typ := dial(t, base, "nosuchnode", false); typ != 0 {
		t.Errorf("CONNECT to an unknown node: type %d, want 0 (ERROR)", typ)
	}
	c.ctlDo(2, nil, 0)
	if n := f.IBSim.Stats().Clients; n != 0 {
		t.Errorf("%d clients after DISCONNECT, want 0", n)
	}
	if c2, typ := dial(t, base, "pibgw HCA-1", false); typ != 1 || c2.id != 1 || c2.node != "pibgw HCA-1" {
		t.Errorf("CONNECT by NodeDescription after DISCONNECT: type %d id %d node %q, want id 1", typ, c2.id, c2.node)
	}
}

// TestManyClients: more clients at once than ibsim's 10, each with its own answers.
func TestManyClients(t *testing.T) {
	f, base := testFabric(t, nil)
	const n = 40
	cls := make([]*simClient, n)
	for i := range cls {
		host := []string{"pib_0", "pib_1"}[i%2]
		c, typ := dial(t, base, host, false)
		if typ != 1 || c.id != uint32(i) {
			t.Fatalf("client %d: CONNECT type %d id %d", i, typ, c.id)
		}
		cls[i] = c
	}
	if s := f.IBSim.Stats(); s.Clients != n {
		t.Errorf("Stats.Clients %d, want %d", s.Clients, n)
	}
	// Every client asks the switch for its NodeInfo at once; each gets its own answer.
	for i, c := range cls {
		c.send(0xFFFF, 0, smp(wire.AttrNodeInfo, 0, uint64(0x100+i), 0, 1))
	}
	for i, c := range cls {
		r, ok := c.recv(5 * time.Second)
		if !ok {
			t.Fatalf("client %d: no answer", i)
		}
		if tid := wire.MAD(r[32:]).TID() & 0xFFFFFFFF; tid != uint64(0x100+i) {
			t.Errorf("client %d got TID %#x", i, tid)
		}
		if _, extra := c.recv(20 * time.Millisecond); extra {
			t.Errorf("client %d got a second MAD", i)
		}
	}
}

// TestGoneClient: a client that exits without DISCONNECT loses its slot at the first MAD
// the server cannot hand it.
func TestGoneClient(t *testing.T) {
	f, base := testFabric(t, nil)
	c, _ := dial(t, base, "pib_1", false)
	c.data.Close() // the process died
	// A response for it arrives at its port: pib_0's PMA answering, say.
	resp := make([]byte, 256)
	m := wire.MAD(resp)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassPerfMgt)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGetResp)
	m.SetTID(hca.TIDExternal | 1<<60 | uint64(c.id)<<48 | 1) // slot in bits 48-59, generation (its first client: 1) in 60-62
	dst := hca.MADAddr{DLID: f.Devs[1].Port(1).LID(), QPN: 1, QKey: hca.GSIQKey}
	if err := f.Devs[0].Port(1).SendMAD(dst, resp); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.IBSim.Stats().Clients != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot still taken: %+v", f.IBSim.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUDP: ibsim's remote mode — control on the port, client N's data on port+1+N.
func TestUDP(t *testing.T) {
	ctlConn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := ctlConn.LocalAddr().(*net.UDPAddr).Port // a free port, probably still free below
	ctlConn.Close()
	f, _ := testFabric(t, func(c *config.Config) { c.IBSim.SocketName = ""; c.IBSim.UDP = fmt.Sprintf("127.0.0.1:%d", port) })
	srv := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	data, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	ctl, err := net.DialUDP("udp", nil, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	var b [80]byte
	le.PutUint32(b[0:], 0xDEADBEEF)
	le.PutUint32(b[8:], 1)
	le.PutUint32(b[12:], 44)
	le.PutUint32(b[16:], uint32(data.LocalAddr().(*net.UDPAddr).Port))
	ctl.Write(b[:])
	ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	var r [80]byte
	if n, err := ctl.Read(r[:]); err != nil || n != 80 || le.Uint32(r[8:]) != 1 {
		t.Fatalf("CONNECT over UDP: %d %v type %d", n, err, le.Uint32(r[8:]))
	}
	id := le.Uint32(r[16:])
	var req [288]byte
	binary.BigEndian.PutUint16(req[0:], 0xFFFF)
	binary.BigEndian.PutUint16(req[4:], 0xFFFF)
	binary.BigEndian.PutUint64(req[24:], 256)
	copy(req[32:], smp(wire.AttrNodeDescription, 0, 7, 0, 1))
	if _, err := data.WriteToUDP(req[:], &net.UDPAddr{IP: srv.IP, Port: port + 1 + int(id)}); err != nil {
		t.Fatal(err)
	}
	data.SetReadDeadline(time.Now().Add(5 * time.Second))
	var a [289]byte
	n, err := data.Read(a[:])
	if err != nil || n != 288 {
		t.Fatalf("answer over UDP: %d %v", n, err)
	}
	if desc := wire.NodeDescription(wire.SMP(a[32:]).SMPData()).String(); desc != f.Switch.NodeDesc() {
		t.Errorf("NodeDescription over UDP %q, want %q", desc, f.Switch.NodeDesc())
	}
}

// BenchmarkSMPRoundTrip: a directed-route NodeInfo to the switch and back, sent by a
// libumad2sim client through the server's sockets ("ibsim") and, as the baseline, by an
// in-process agent on the same port ("direct"). The difference is the server's cost per
// MAD: two datagrams, the client's queue and its writer. (The one allocation per op is
// the test client's WriteToUnix building a sockaddr; the server's path allocates nothing.)
// BenchmarkSMPRoundTrip times one directed-route NodeInfo from pib_1 to the switch and
// back, the MAD opensm's sweep is made of: "direct" from the port (the fabric alone),
// "ibsim" through a client's socket as the tests' Go client speaks it, and "raw" with a
// client that blocks in send(2) and recv(2) as libumad2sim does in opensm's threads;
// "echo" is the baseline for "raw": the same client against a thread that only echoes
// each datagram (the sockets' and wake-ups' cost, the floor any server pays).
func BenchmarkSMPRoundTrip(b *testing.B) {
	f, base := testFabric(b, nil)
	p := f.Devs[1].Port(1)
	req := smp(wire.AttrNodeInfo, 0, 1, 0, 1)
	var out [288]byte
	binary.BigEndian.PutUint16(out[0:], 0xFFFF)
	binary.BigEndian.PutUint16(out[4:], 0xFFFF)
	binary.BigEndian.PutUint64(out[24:], 256)
	copy(out[32:], req)
	b.Run("direct", func(b *testing.B) {
		got := make(chan struct{}, 1)
		p.RegisterMADHandler(wire.MgmtClassSubnDirected, true, hca.MADHandlerFunc(func(*hca.MAD) { got <- struct{}{} }))
		defer p.RegisterMADHandler(wire.MgmtClassSubnDirected, true, nil)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.SendSMP(hca.MADAddr{DLID: 0xFFFF}, req); err != nil {
				b.Fatal(err)
			}
			<-got
		}
	})
	b.Run("ibsim", func(b *testing.B) {
		c, _ := dial(b, base, "pib_1", false)
		var in [289]byte
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.data.WriteToUnix(out[:], c.out); err != nil {
				b.Fatal(err)
			}
			if n, err := c.data.Read(in[:]); err != nil || n != 288 {
				b.Fatal(n, err)
			}
		}
	})
	// pingPong reports, besides the time, the CPU client and server used per round trip
	// (the machine's load changes it far less than the time): this process's, and
	// server's (another process's: OFED's ibsim) when it is not in this one.
	pingPong := func(b *testing.B, fd int, server func() int64) {
		var in [289]byte
		b.ReportAllocs()
		cpu0, srv0 := selfCPU(), server()
		for b.Loop() {
			if err := unix.Send(fd, out[:], 0); err != nil {
				b.Fatal(err)
			}
			if n, err := unix.Read(fd, in[:]); err != nil || n != 288 {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(selfCPU()-cpu0+server()-srv0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("raw", func(b *testing.B) {
		c, _ := dial(b, base, "pib_1", false)
		pingPong(b, rawData(b, c), noCPU)
	})
	b.Run("ofed", func(b *testing.B) { // OFED's ibsim, when installed, on the 648-HCA fat tree
		topo, err := filepath.Abs(fat648)
		if _, lerr := exec.LookPath("ibsim"); lerr != nil || err != nil || fileMissing(topo) {
			b.Skip("needs ibsim (Debian ibsim-utils) and " + fat648)
		}
		sock := fmt.Sprintf("ofedbench-%d", os.Getpid())
		cmd := exec.Command("ibsim", "-s", topo)
		cmd.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock)
		stdin, _ := cmd.StdinPipe() // ibsim's console: kept open, or it exits
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
		for deadline := time.Now().Add(30 * time.Second); !abstractListening("@" + sock + ":ctl"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("ibsim did not bind its control socket")
			}
		}
		c, _ := dial(b, sock, "H-0-0", false)
		pingPong(b, rawData(b, c), func() int64 { return procCPU(cmd.Process.Pid).Nanoseconds() })
	})
	b.Run("echo", func(b *testing.B) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() { // an echo server's one thread: recv(2), send(2)
			defer close(done)
			var buf [289]byte
			for {
				n, err := unix.Read(fds[1], buf[:])
				if err != nil || n == 0 {
					return
				}
				unix.Send(fds[1], buf[:n], 0)
			}
		}()
		defer func() { unix.Shutdown(fds[1], unix.SHUT_RD); <-done; unix.Close(fds[0]); unix.Close(fds[1]) }()
		pingPong(b, fds[0], noCPU)
	})
}

func noCPU() int64 { return 0 }

// selfCPU is the user and system time the process has used, in ns.
func selfCPU() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// rawData returns c's data socket as a blocking descriptor connected to the server's, for
// the client to use with plain system calls, as libumad2sim does (c.data is not read
// through Go's poller after this).
func rawData(t testing.TB, c *simClient) int {
	t.Helper()
	sc, err := c.data.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	var serr error
	sc.Control(func(d uintptr) {
		fd = int(d)
		if serr = unix.SetNonblock(fd, false); serr == nil {
			serr = unix.Connect(fd, &unix.SockaddrUnix{Name: c.out.Name})
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return fd
}

// TestSwitchClient: a client attached to the switch's port 0 (SIM_HOST = its
// NodeDescription) discovers and queries the fabric from there.
func TestSwitchClient(t *testing.T) {
	f, base := testFabric(t, nil)
	c, typ := dial(t, base, f.Switch.NodeDesc(), false)
	if typ != 1 || c.node != f.Switch.NodeDesc() {
		t.Fatalf("CONNECT to the switch: type %d node %q", typ, c.node)
	}
	_, d := c.ctlDo(7, nil, 64)
	if ni := wire.NodeInfo(d); ni.NodeType() != wire.NodeTypeSwitch || ni.NodeGUID() != f.Switch.NodeGUID() {
		t.Errorf("GET_NODEINFO: type %d guid %#x", ni.NodeType(), ni.NodeGUID())
	}
	_, d = c.ctlDo(8, []byte{0}, 64)
	if pi := wire.PortInfo(d); pi.LID() != f.Switch.LID() || pi.PortState() != 4 || pi.LocalPortNum() != 0 {
		t.Errorf("GET_PORTINFO: lid %d state %d local port %d", pi.LID(), pi.PortState(), pi.LocalPortNum())
	}
	// Directed route: the switch itself (hop count 0), then out of port 2 to pib_1.
	c.send(0xFFFF, 0, smp(wire.AttrNodeInfo, 0, 0x21, 0))
	r, ok := c.recv(5 * time.Second)
	if !ok || wire.NodeInfo(wire.SMP(r[32:]).SMPData()).NodeGUID() != f.Switch.NodeGUID() {
		t.Fatalf("DR NodeInfo 0 from the switch: %v", ok)
	}
	c.send(0xFFFF, 0, smp(wire.AttrNodeInfo, 0, 0x22, 0, 2))
	if r, ok = c.recv(5 * time.Second); !ok {
		t.Fatal("no answer to DR NodeInfo 0,2 from the switch")
	}
	if ni := wire.NodeInfo(wire.SMP(r[32:]).SMPData()); ni.NodeGUID() != f.Devs[1].Query().NodeGUID || wire.MAD(r[32:]).TID()&0xFFFF != 0x22 {
		t.Errorf("DR NodeInfo 0,2: guid %#x", ni.NodeGUID())
	}
	// LID-routed SMP and a PMA GMP to pib_1.
	lid := f.Devs[1].Port(1).LID()
	c.send(lid, 0, smp(wire.AttrPortInfo, 0, 0x23))
	if r, ok = c.recv(5 * time.Second); !ok || wire.PortInfo(wire.SMP(r[32:]).SMPData()).LID() != lid {
		t.Fatalf("LID-routed PortInfo to %d from the switch: %v", lid, ok)
	}
	pm := make([]byte, 256)
	m := wire.MAD(pm)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassPerfMgt)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetTID(0x24)
	m.SetAttrID(wire.AttrPortCounters)
	pm[64+1] = 1
	c.send(lid, 1, pm)
	if r, ok = c.recv(5 * time.Second); !ok || wire.MAD(r[32:]).Status() != 0 || binary.BigEndian.Uint16(r[4:]) != lid {
		t.Fatalf("PortCounters of %d from the switch: %v", lid, ok)
	}
	// No SM on a switch's port 0.
	if typ, _ := c.ctlDo(9, []byte{1}, 4); typ != 0 {
		t.Errorf("SET_ISSM(1) on the switch: type %d, want ERROR", typ)
	}
}

// TestExternalSM: with sm.mode = "external", the port of the client that declares itself
// SM hands it what an SM receives — traps from the switch, SA requests, SMInfo — and its
// answers reach the requesters. The fabric is configured by hand as an SM would leave it.
func TestExternalSM(t *testing.T) {
	f, base := testFabric(t, func(c *config.Config) { c.SM.Mode = config.SMExternal })
	p0, p1 := f.Devs[0].Port(1), f.Devs[1].Port(1)
	for _, p := range []*hca.Port{p0, p1} {
		p.SetLID(uint16(p.Device().Query().NodeGUID>>8&0xFF), 0) // pib_0: 3, pib_1: 4
		p.SetSM(p0.LID(), 0)
		p.SetState(hca.PortActive)
	}
	f.Switch.SetLID(1, 0)
	f.Switch.SetSM(p0.LID(), 0)
	f.Switch.SetLFT(p0.LID(), 1)
	f.Switch.SetLFT(p1.LID(), 2)
	for port := 1; port <= 2; port++ {
		f.Switch.SetPortState(port, 3)
		f.Switch.SetPortState(port, 4)
	}

	sm, typ := dial(t, base, "pib_0", true) // SIM_SET_ISSM
	if typ != 1 {
		t.Fatalf("CONNECT with issm: type %d", typ)
	}
	if p0.Query().PortCapFlags&hca.CapIsSM == 0 {
		t.Error("IsSM not set in the SM client's port's CapabilityMask")
	}
	if _, typ := dial(t, base, "pib_0", true); typ != 0 {
		t.Errorf("a second SM on pib_0: type %d, want ERROR", typ)
	}

	// An SA request from pib_1 (an SA client's, here a diag's) reaches the SM client...
	diag, _ := dial(t, base, "pib_1", false)
	sa := make([]byte, 256)
	m := wire.MAD(sa)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassSubnAdm)
	m.SetClassVersion(2)
	m.SetMethod(wire.MethodGet)
	m.SetTID(0x31)
	m.SetAttrID(wire.AttrClassPortInfo)
	diag.send(p0.LID(), 1, sa)
	r, ok := sm.recv(5 * time.Second)
	if !ok {
		t.Fatal("the SM client got no SA request")
	}
	req := wire.MAD(r[32:])
	if req.MgmtClass() != wire.MgmtClassSubnAdm || req.TID()&0xFFFF != 0x31 || binary.BigEndian.Uint16(r[4:]) != p1.LID() {
		t.Fatalf("SA request at the SM: class %#x tid %#x slid %d", req.MgmtClass(), req.TID(), binary.BigEndian.Uint16(r[4:]))
	}
	// ...and its answer goes back to the requester by LID and QP, as opensm sends it.
	resp := append([]byte(nil), r[32:]...)
	wire.MAD(resp).SetMethod(wire.MethodGetResp)
	sm.send(p1.LID(), binary.BigEndian.Uint32(r[12:]), resp)
	if r, ok = diag.recv(5 * time.Second); !ok || wire.MAD(r[32:]).Method() != wire.MethodGetResp || wire.MAD(r[32:]).TID()&0xFFFF != 0x31 {
		t.Fatalf("the SA answer did not reach the requester: %v", ok)
	}

	// SMInfo (as sminfo sends it, LID-routed to the SM) is the SM client's too.
	diag.send(p0.LID(), 0, smp(wire.AttrSMInfo, 0, 0x32))
	if r, ok = sm.recv(5 * time.Second); !ok || wire.MAD(r[32:]).AttrID() != wire.AttrSMInfo {
		t.Fatalf("the SM client got no SMInfo: %v", ok)
	}

	// A link change makes the switch send Trap 128 to the SM's LID: the SM client gets it.
	f.Cables[1].Detach()
	if r, ok = sm.recv(5 * time.Second); !ok || wire.MAD(r[32:]).Method() != wire.MethodTrap || wire.MAD(r[32:]).AttrID() != wire.AttrNotice {
		t.Fatalf("the SM client got no trap: %v", ok)
	}

	// SET_ISSM(0): the port stops handing it SA requests, and IsSM is cleared.
	sm.ctlDo(9, []byte{0}, 4)
	if p0.Query().PortCapFlags&hca.CapIsSM != 0 {
		t.Error("IsSM still set after SET_ISSM(0)")
	}
	diag2, _ := dial(t, base, "pib_0", false)
	diag2.send(p0.LID(), 1, sa)
	if _, ok := sm.recv(100 * time.Millisecond); ok {
		t.Error("an SA request reached the client after SET_ISSM(0)")
	}
}

// TestUndeliverable: a MAD the server cannot send comes back at once with status
// ETIMEDOUT (110), as ibsim answers, so libibmad fails in a millisecond instead of
// waiting out its timeout.
func TestUndeliverable(t *testing.T) {
	f, base := testFabric(t, nil)
	c, _ := dial(t, base, "pib_0", false)
	pm := make([]byte, 256)
	m := wire.MAD(pm)
	m.SetBaseVersion(1)
	m.SetMgmtClass(wire.MgmtClassPerfMgt)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetTID(0x41)
	c.send(0, 1, pm) // to LID 0
	r, ok := c.recv(5 * time.Second)
	if !ok || binary.BigEndian.Uint32(r[16:]) != 110 || wire.MAD(r[32:]).TID()&0xFFFF != 0x41 {
		t.Fatalf("echo of an undeliverable MAD: %v %x", ok, r[:32])
	}
	if s := f.IBSim.Stats(); s.Undeliverable != 1 {
		t.Errorf("Undeliverable = %d, want 1", s.Undeliverable)
	}
}

// TestVendorClass: a request of a vendor class of range 2 (OpenIB's ping, 0x32) to a port
// reaches the servers attached there — clients that are not its SM and sent no request:
// libumad2sim hands it to its agent of that class, `ibping -S` — and their answer reaches
// the requester; with no server the port answers "unsupported" (0x000C) at once, before
// one attaches and after it left.
func TestVendorClass(t *testing.T) {
	_, base, p0, p1 := activeFabric(t, nil)
	ping := vendorPing()
	m := wire.MAD(ping)
	pinger, _ := dial(t, base, "pib_0", false)
	unsupported := func(what string, tid uint64) {
		t.Helper()
		m.SetTID(tid)
		pinger.send(p1.LID(), 1, ping)
		r, ok := pinger.recv(5 * time.Second)
		if !ok || wire.MAD(r[32:]).Method() != wire.MethodGetResp || wire.MAD(r[32:]).Status() != 0x000C {
			t.Fatalf("%s: want a GetResp with status 0x000C at once: %v %x", what, ok, r)
		}
	}
	unsupported("no client at pib_1", 0x71)
	sm, _ := dial(t, base, "pib_1", true)
	unsupported("only an SM at pib_1", 0x72)

	// A program that queries (a diag, here a PortCounters Get to pib_0) is no server.
	diag, _ := dial(t, base, "pib_1", false)
	pm := make([]byte, 256)
	wire.MAD(pm).SetBaseVersion(1)
	wire.MAD(pm).SetMgmtClass(wire.MgmtClassPerfMgt)
	wire.MAD(pm).SetClassVersion(1)
	wire.MAD(pm).SetMethod(wire.MethodGet)
	wire.MAD(pm).SetAttrID(0x12)
	diag.send(p0.LID(), 1, pm)
	if _, ok := diag.recv(5 * time.Second); !ok {
		t.Fatal("the diag got no PortCounters")
	}
	unsupported("only an SM and a diag at pib_1", 0x75)

	srv, _ := dial(t, base, "pib_1", false) // ibping -S
	m.SetTID(0x73)
	pinger.send(p1.LID(), 1, ping)
	r, ok := srv.recv(5 * time.Second)
	if !ok || wire.MAD(r[32:]).MgmtClass() != 0x32 || wire.MAD(r[32:]).TID()&0xFFFF != 0x73 {
		t.Fatalf("the client at pib_1 got no ping: %v", ok)
	}
	if _, ok := sm.recv(100 * time.Millisecond); ok {
		t.Error("the SM client got the vendor-class request too")
	}
	if _, ok := diag.recv(100 * time.Millisecond); ok {
		t.Error("a client that sent requests got the vendor-class request too")
	}
	pong := append([]byte(nil), r[32:]...)
	wire.MAD(pong).SetMethod(wire.MethodGetResp)
	srv.send(binary.BigEndian.Uint16(r[4:]), binary.BigEndian.Uint32(r[12:]), pong)
	if r, ok = pinger.recv(5 * time.Second); !ok || wire.MAD(r[32:]).Method() != wire.MethodGetResp ||
		wire.MAD(r[32:]).Status() != 0 || wire.MAD(r[32:]).TID()&0xFFFF != 0x73 {
		t.Fatalf("the pong did not reach the pinger: %v", ok)
	}

	// It answered a ping (0x32): it is that class's server, and no request of another
	// class (sysstat, 0x33) reaches it — its libumad2sim, with no agent for one, would die.
	m.SetMgmtClass(0x33)
	unsupported("a sysstat request to a port with only a ping server", 0x76)
	if _, ok := srv.recv(100 * time.Millisecond); ok {
		t.Error("the ping server got a sysstat request")
	}
	m.SetMgmtClass(0x32)

	srv.ctlDo(2, nil, 0) // DISCONNECT
	unsupported("after the client left", 0x74)
}

// activeFabric is testFabric with an external SM (none attached) and both HCA ports
// brought up by hand: LIDs 3 and 4, routed through the switch (LID 1).
func activeFabric(t *testing.T, edit func(*config.Config)) (*daemon.Fabric, string, *hca.Port, *hca.Port) {
	t.Helper()
	f, base := testFabric(t, func(c *config.Config) {
		c.SM.Mode = config.SMExternal
		if edit != nil {
			edit(c)
		}
	})
	p0, p1 := f.Devs[0].Port(1), f.Devs[1].Port(1)
	for _, p := range []*hca.Port{p0, p1} {
		p.SetLID(uint16(p.Device().Query().NodeGUID>>8&0xFF), 0)
		p.SetSM(p0.LID(), 0)
		p.SetState(hca.PortActive)
	}
	f.Switch.SetLID(1, 0)
	f.Switch.SetLFT(p0.LID(), 1)
	f.Switch.SetLFT(p1.LID(), 2)
	for port := 1; port <= 2; port++ {
		f.Switch.SetPortState(port, 3)
		f.Switch.SetPortState(port, 4)
	}
	return f, base, p0, p1
}

// vendorPing is an OpenIB ping request (vendor class 0x32, Get), as ibping sends.
func vendorPing() []byte {
	ping := make([]byte, 256)
	m := wire.MAD(ping)
	m.SetBaseVersion(1)
	m.SetMgmtClass(0x32)
	m.SetClassVersion(1)
	m.SetMethod(wire.MethodGet)
	m.SetAttrID(0x10)
	return ping
}

// TestLateResponseAfterSlotReuse: a response that arrives after its requester left — the
// SA resending the RMPP segments of a table libumad2sim never acknowledges, or an answer
// that took long — is dropped, not handed to the next client in the requester's slot:
// that client's libumad2sim has no agent for it, and its receive thread died of it
// (SIGSEGV at address 0x40 in pthread_mutex_lock; saquery, iblinkinfo, vendstat and
// ibping did, now and then). Slots are taken round robin and carry a generation in the
// TID.
func TestLateResponseAfterSlotReuse(t *testing.T) {
	f, base, _, p1 := activeFabric(t, func(c *config.Config) { c.IBSim.MaxClients = 2 })
	a, _ := dial(t, base, "pib_0", false)
	srv, _ := dial(t, base, "pib_1", false)
	a.send(p1.LID(), 1, vendorPing())
	req, ok := srv.recv(5 * time.Second)
	if !ok {
		t.Fatal("the request did not arrive")
	}
	a.ctlDo(2, nil, 0) // the requester leaves
	b, typ := dial(t, base, "pib_0", false)
	if typ != 1 || b.id != a.id {
		t.Fatalf("the next client: type %d slot %d, want %d (the only free one)", typ, b.id, a.id)
	}
	noClient := f.IBSim.Stats().NoClient
	pong := append([]byte(nil), req[32:]...)
	wire.MAD(pong).SetMethod(wire.MethodGetResp)
	srv.send(binary.BigEndian.Uint16(req[4:]), binary.BigEndian.Uint32(req[12:]), pong)
	if r, ok := b.recv(300 * time.Millisecond); ok {
		t.Fatalf("the next client in the slot got the response to its predecessor's request: %x", r[32:40])
	}
	if n := f.IBSim.Stats().NoClient - noClient; n != 1 {
		t.Errorf("NoClient +%d, want 1", n)
	}
	// The new client's own requests are answered.
	b.send(p1.LID(), 1, vendorPing())
	if req, ok = srv.recv(5 * time.Second); !ok {
		t.Fatal("the new client's request did not arrive")
	}
	pong = append(pong[:0], req[32:]...)
	wire.MAD(pong).SetMethod(wire.MethodGetResp)
	srv.send(binary.BigEndian.Uint16(req[4:]), binary.BigEndian.Uint32(req[12:]), pong)
	if _, ok := b.recv(5 * time.Second); !ok {
		t.Error("the new client got no answer to its own request")
	}
}
