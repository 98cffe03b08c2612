package attach_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/internal/config"
)

// Tests and benchmarks with real separate processes: the test binary runs itself again
// in a helper role chosen by $PIBGW_ATTACH_HELPER, talking to the test over its stdin and
// stdout with lines of "key=value" words.

const helperEnv = "PIBGW_ATTACH_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "daemon":
		helperDaemon()
	case "peer":
		helperPeer()
	case "hog":
		helperHog() // limits_test.go
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
		os.Exit(2)
	}
	os.Exit(0)
}

// proc is a helper process.
type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHelper(tb testing.TB, role string, env ...string) *proc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+role)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &proc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	tb.Cleanup(func() {
		p.in.Close() // the helper's signal to finish
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// line reads the helper's next line as key=value words.
func (p *proc) line(tb testing.TB) map[string]string {
	tb.Helper()
	if !p.out.Scan() {
		tb.Fatalf("helper %s ended: %v", p.cmd.Args, p.out.Err())
	}
	return words(p.out.Text())
}

func (p *proc) send(format string, a ...any) { fmt.Fprintf(p.in, format+"\n", a...) }

func words(s string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		m[k] = v
	}
	return m
}

func num(m map[string]string, k string) uint64 {
	var v uint64
	fmt.Sscan(m[k], &v)
	return v
}

// helperDaemon serves an in-process fabric on $PIBGW_ATTACH until stdin closes. It runs
// with the scheduler threads `pibgw up` uses by default (daemon.max_procs 0: half the
// CPUs), unless $GOMAXPROCS chose: on two cores, one thread for the daemon left the
// attached 8-byte SEND ping-pong's p50 at 11.4 µs against 13.5 with two at a load of 5,
// 18.2 against 19.1 at a load of 8 (medians of 8 alternating runs), RDMA WRITE 64 KiB no
// slower: with two, the daemon's ring readers spin on both cores.
func helperDaemon() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(config.AutoMaxProcs(runtime.NumCPU()))
	}
	if path := os.Getenv("PIBGW_DAEMON_CPUPROFILE"); path != "" {
		pf, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(pf) == nil {
			defer func() { pprof.StopCPUProfile(); pf.Close() }()
		}
	}
	f, err := inproc.Start(context.Background(), inproc.Options{Attach: os.Getenv("PIBGW_ATTACH")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready=1")
	io.Copy(io.Discard, os.Stdin)
	f.Close()
}

// helperPeer attaches, makes an RC (or UD) QP on $PEER_DEV with a registered buffer,
// prints "lid= qpn= addr= rkey=", reads the peer's "lid= qpn=", connects, prints
// "ready=1", then serves as $PEER_ROLE says: "target" (passive: RDMA WRITE target),
// "echo" (every SEND received is sent back), until stdin closes.
func helperPeer() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := attach.Dial(ctx, "", nil)
	cancel()
	if err != nil {
		fail(err)
	}
	typ := hca.QPTypeRC
	if os.Getenv("PEER_QP") == "ud" {
		typ = hca.QPTypeUD
	}
	e, err := newEnd(s.Device(os.Getenv("PEER_DEV")), typ, 1<<20)
	if err != nil {
		fail(err)
	}
	fmt.Printf("lid=%d qpn=%d addr=%d rkey=%d\n", e.port.LID(), e.qp.Num(), e.mr.Addr(), e.mr.RKey())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		fail(fmt.Errorf("no peer"))
	}
	peer := words(in.Text())
	if err := e.connect(uint16(num(peer, "lid")), uint32(num(peer, "qpn"))); err != nil {
		fail(err)
	}
	if os.Getenv("PEER_ROLE") == "echo" {
		for i := range 64 {
			if err := e.postRecv(uint64(i)); err != nil {
				fail(err)
			}
		}
		go e.echo(uint16(num(peer, "lid")), uint32(num(peer, "qpn")), false)
	}
	fmt.Println("ready=1")
	io.Copy(io.Discard, os.Stdin)
	s.Close()
}

// end is one side of a connection: QP, CQ, registered buffer.
type end struct {
	port *hca.Port
	pd   *hca.PD
	cq   *hca.CQ
	qp   *hca.QP
	mr   *hca.MR
	ah   *hca.AH
	buf  []byte
	// One WR and SGE each for send and postRecv, reused (the verbs copy what they are
	// given, as ibv_post_send does): no allocation per message. An end is used by one
	// goroutine at a time.
	swr  [1]hca.SendWR
	rwr  [1]hca.RecvWR
	ssge [1]hca.SGE
	rsge [1]hca.SGE
}

func newEnd(d *hca.Device, typ hca.QPType, size int) (*end, error) {
	if d == nil {
		return nil, fmt.Errorf("no such device")
	}
	e := &end{port: d.Port(1), buf: make([]byte, size)}
	ctx := d.Open()
	var err error
	if e.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = ctx.CreateCQ(4096, nil); err != nil {
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(hca.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: typ,
		Cap: hca.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		return nil, err
	}
	e.mr, err = e.pd.RegMR(e.buf, hca.AccessLocalWrite|hca.AccessRemoteWrite|hca.AccessRemoteRead)
	return e, err
}

// connect brings the QP to RTS toward the peer (RC: timeout 12 ≈ 17 ms, 7 retries, so a
// dead peer is noticed within a fraction of a second, a loaded machine's delays are not
// taken for one; UD: an AH toward it).
func (e *end) connect(lid uint16, qpn uint32) error {
	if e.qp.Type() == hca.QPTypeUD {
		a := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QKey: testQKey}
		if err := e.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey); err != nil {
			return err
		}
		if err := e.qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTR}, hca.QPAttrState); err != nil {
			return err
		}
		if err := e.qp.Modify(&hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 1}, hca.QPAttrState|hca.QPAttrSQPSN); err != nil {
			return err
		}
		var err error
		e.ah, err = e.pd.CreateAH(hca.AHAttr{DLID: lid, PortNum: 1})
		return err
	}
	a := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite | hca.AccessRemoteRead}
	if err := e.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags); err != nil {
		return err
	}
	a = hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: hca.MTU4096, DestQPNum: qpn, RQPSN: 1,
		AHAttr: hca.AHAttr{DLID: lid, PortNum: 1}, MaxDestRdAtomic: 16, MinRNRTimer: 1}
	if err := e.qp.Modify(&a, hca.QPAttrState|hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|hca.QPAttrRQPSN|
		hca.QPAttrMaxDestRdAtomic|hca.QPAttrMinRNRTimer); err != nil {
		return err
	}
	a = hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: 1, Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	return e.qp.Modify(&a, hca.QPAttrState|hca.QPAttrSQPSN|hca.QPAttrTimeout|hca.QPAttrRetryCnt|hca.QPAttrRNRRetry|hca.QPAttrMaxQPRdAtomic)
}

func (e *end) sge(off, n int) []hca.SGE {
	return []hca.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

func (e *end) postRecv(id uint64) error {
	e.rsge[0] = hca.SGE{Addr: e.mr.Addr() + (id%64)*4096, Length: 4096 + 40, LKey: e.mr.LKey()}
	e.rwr[0] = hca.RecvWR{WRID: id, SGL: e.rsge[:]}
	_, err := e.qp.PostRecv(e.rwr[:])
	return err
}

// send posts a signaled SEND of n bytes (UD: to the peer's QP through the AH).
func (e *end) send(id uint64, n int, qpn uint32) error {
	e.ssge[0] = hca.SGE{Addr: e.mr.Addr() + 1<<19, Length: uint32(n), LKey: e.mr.LKey()}
	e.swr[0] = hca.SendWR{WRID: id, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: e.ssge[:]}
	wr := &e.swr[0]
	if n <= 64 {
		wr.SendFlags |= hca.SendInline
	}
	if e.ah != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = e.ah, qpn, testQKey
	}
	_, err := e.qp.PostSend(e.swr[:])
	return err
}

// echo sends back every message received, until the QP fails. It busy-polls the CQ, as
// ib_send_lat's server does (perftest's ctx_recv/ctx_poll loops): an empty poll of an
// attached device yields the processor to other processes now and then by itself
// (attach.Session's pollRx). It must not call runtime.Gosched between polls: Gosched
// wakes an idle P's thread each time (the runtime's wakep), which then spins looking
// for work on the other core, and on a machine where the three processes of a round
// trip share two cores that thread takes the core the daemon or the peer needs
// (measured, loaded 2-core VM, alternating runs: p50 20–36 µs with Gosched, 13–23
// without). After a long idle stretch it sleeps, so that a finished benchmark's peer
// stops burning a core. shared says the fabric runs in this very process (the
// in-process baseline): then an empty poll does yield to its goroutines.
func (e *end) echo(lid uint16, qpn uint32, shared bool) {
	var wcs [32]hca.WC
	idle := 0
	for {
		n := e.cq.Poll(wcs[:])
		if n == 0 {
			if idle++; idle >= 1<<20 {
				time.Sleep(100 * time.Microsecond)
			} else if shared {
				// The fabric runs in this process (the in-process baseline): its
				// goroutines (RC timers, ACKs) need a P that two spinning pollers
				// would hold, so an empty poll lets them run.
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		for _, wc := range wcs[:n] {
			if wc.Status != hca.WCSuccess {
				return
			}
			if wc.Opcode == hca.WCRecv {
				e.postRecv(wc.WRID)
				l := int(wc.ByteLen)
				if e.ah != nil {
					l -= 40
				}
				e.send(wc.WRID, l, qpn)
			}
		}
	}
}

// startDaemonProc runs an in-process fabric serving the attach socket in a helper
// process and returns the socket's path.
func startDaemonProc(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "attach.sock")
	d := startHelper(tb, "daemon", "PIBGW_ATTACH="+path)
	if d.line(tb)["ready"] != "1" {
		tb.Fatal("daemon helper not ready")
	}
	return path
}

// startPeer attaches a helper process with a QP on dev and connects it to e.
func startPeer(tb testing.TB, path, dev, qpType, role string, e *end) (*proc, map[string]string) {
	tb.Helper()
	p := startHelper(tb, "peer", "PIBGW_ATTACH="+path, "PEER_DEV="+dev, "PEER_QP="+qpType, "PEER_ROLE="+role)
	info := p.line(tb)
	p.send("lid=%d qpn=%d", e.port.LID(), e.qp.Num())
	if err := e.connect(uint16(num(info, "lid")), uint32(num(info, "qpn"))); err != nil {
		tb.Fatal(err)
	}
	if p.line(tb)["ready"] != "1" {
		tb.Fatal("peer not ready")
	}
	return p, info
}
