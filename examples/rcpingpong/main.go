// Command rcpingpong is libibverbs' ibv_rc_pingpong written on pibgw's verbs (package
// hca), with no rdma_cm: each side opens a device of a running pibgw daemon through the
// attach socket, creates an RC QP, tells its peer its LID, QPN, PSN and GID, moves the QP
// to RTR and RTS by hand, and then the two SEND -s bytes back and forth -n times. Every
// message is checked (its sequence number and contents); any completion error ends the
// program with status 1. It prints ibv_rc_pingpong's lines:
//
//	  local address:  LID 0x0001, QPN 0x000049, PSN 0x5b3c1d, GID ::
//	  remote address: LID 0x0002, QPN 0x00004a, PSN 0x2e96a0, GID ::
//	8192000 bytes in 0.09 seconds = 728.18 Mbit/sec
//	1000 iters in 0.09 seconds = 90.00 usec/iter
//
// As with ibv_rc_pingpong the addresses travel over TCP, port 18515: the server
// (`rcpingpong`) waits on the loopback address, the client (`rcpingpong SERVERNAME`)
// connects to it (retrying for up to 10 s) — attached processes share a host with their
// daemon. In two terminals,
// against `sudo pibgw up`:
//
//	go run ./examples/rcpingpong -d pib_1
//	go run ./examples/rcpingpong -d pib_0 localhost
//
// With -pipe, the addresses go over standard input and output instead (connect each
// side's output to the other's input; the report then goes to standard error), and the
// side with the lower LID and QPN sends first.
//
// Options are ibv_rc_pingpong's: -p PORT, -d DEV (default: the first device), -i PORT
// (1), -s SIZE (4096), -m MTU (1024), -r RX_DEPTH (500), -n ITERS (1000), -l SL, -e
// (sleep on completion events instead of polling), -g GID_INDEX (use a GRH); and -attach
// PATH ("" is $PIBGW_ATTACH, else /run/pibgw/attach.sock).
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

var (
	tcpPort  = flag.Int("p", 18515, "listen on/connect to port `PORT` (TCP, loopback)")
	devName  = flag.String("d", "", "use IB device `DEV` (default: the first device)")
	ibPort   = flag.Int("i", 1, "use port `PORT` of the IB device")
	size     = flag.Int("s", 4096, "size of message to exchange")
	mtu      = flag.Int("m", 1024, "path MTU (256, 512, 1024, 2048, 4096)")
	rxDepth  = flag.Int("r", 500, "number of receives to post at a time")
	iters    = flag.Int("n", 1000, "number of exchanges")
	sl       = flag.Int("l", 0, "service level value")
	events   = flag.Bool("e", false, "sleep on CQ events (default: poll)")
	gidIdx   = flag.Int("g", -1, "local port GID index (≥ 0: use a GRH)")
	pipe     = flag.Bool("pipe", false, "exchange addresses over standard input and output instead of TCP")
	attachTo = flag.String("attach", "", "the pibgw daemon's attach socket (\"\": $PIBGW_ATTACH, else "+attach.DefaultPath+")")
)

func init() {
	// ibv_rc_pingpong's long options.
	flag.IntVar(tcpPort, "port", 18515, "same as -p")
	flag.StringVar(devName, "ib-dev", "", "same as -d")
	flag.IntVar(ibPort, "ib-port", 1, "same as -i")
	flag.IntVar(size, "size", 4096, "same as -s")
	flag.IntVar(mtu, "mtu", 1024, "same as -m")
	flag.IntVar(rxDepth, "rx-depth", 500, "same as -r")
	flag.IntVar(iters, "iters", 1000, "same as -n")
	flag.IntVar(sl, "sl", 0, "same as -l")
	flag.BoolVar(events, "events", false, "same as -e")
	flag.IntVar(gidIdx, "gid-idx", -1, "same as -g")
}

// Work request IDs: the kind in the low byte (the pending bits, as ibv_rc_pingpong's),
// the receive buffer's slot above it.
const (
	recvWRID = 1
	sendWRID = 2
)

// Receives land in a ring of slots; ibv_rc_pingpong points them all at one buffer.
const maxSlots = 16

func main() {
	flag.Usage = usage
	// Options may follow SERVERNAME, as getopt allows.
	var args []string
	rest := os.Args[1:]
	for {
		flag.CommandLine.Parse(rest)
		rest = flag.Args()
		if len(rest) == 0 {
			break
		}
		args, rest = append(args, rest[0]), rest[1:]
	}
	if len(args) > 1 || (*pipe && len(args) > 0) || *size < 1 || *iters < 1 || *rxDepth < 2 || *tcpPort < 0 || *tcpPort > 65535 {
		usage()
		os.Exit(1)
	}
	out := os.Stdout
	if *pipe {
		out = os.Stderr // standard output carries the exchange
	}
	servername := ""
	if len(args) == 1 {
		servername = args[0]
	}
	if err := run(out, servername); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func usage() {
	w := flag.CommandLine.Output()
	fmt.Fprintf(w, "Usage:\n")
	fmt.Fprintf(w, "  rcpingpong            start a server and wait for connection\n")
	fmt.Fprintf(w, "  rcpingpong <host>     connect to server at <host>\n")
	fmt.Fprintf(w, "  rcpingpong -pipe      exchange addresses with a peer over standard input and output\n\n")
	fmt.Fprintf(w, "Options:\n")
	flag.PrintDefaults()
}

// dest is ibv_rc_pingpong's struct pingpong_dest.
type dest struct {
	lid      uint16
	qpn, psn uint32
	gid      wire.GID
}

// msgLen is the exchange message's size: "LLLL:QQQQQQ:PPPPPP:GGG…G" and a NUL, as
// ibv_rc_pingpong sends it.
const msgLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

func (d dest) message() []byte {
	b := fmt.Appendf(nil, "%04x:%06x:%06x:%x", d.lid, d.qpn, d.psn, d.gid[:])
	return append(b, 0)
}

func parseDest(b []byte) (dest, error) {
	var d dest
	s := string(bytes.TrimRight(b, "\x00"))
	if len(s) != msgLen-1 || s[4] != ':' || s[11] != ':' || s[18] != ':' {
		return d, fmt.Errorf("malformed remote address %q", s)
	}
	lid, err1 := strconv.ParseUint(s[0:4], 16, 16)
	qpn, err2 := strconv.ParseUint(s[5:11], 16, 32)
	psn, err3 := strconv.ParseUint(s[12:18], 16, 32)
	var gid []byte
	_, err4 := fmt.Sscanf(s[19:], "%x", &gid)
	if err := errors.Join(err1, err2, err3, err4); err != nil || len(gid) != 16 {
		return d, fmt.Errorf("malformed remote address %q", s)
	}
	d.lid, d.qpn, d.psn = uint16(lid), uint32(qpn), uint32(psn)
	copy(d.gid[:], gid)
	return d, nil
}

func (d dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %v", d.lid, d.qpn, d.psn, d.gid)
}

// pingpong is ibv_rc_pingpong's struct pingpong_context.
type pingpong struct {
	sess           *attach.Session
	port           *hca.Port
	ch             *hca.CompChannel
	pd             *hca.PD
	cq             *hca.CQ
	qp             *hca.QP
	sendBuf, rbufs []byte
	sendMR, recvMR *hca.MR
	slots, posted  int
}

func run(out io.Writer, servername string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := attach.Dial(ctx, *attachTo, nil)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	devs := s.Devices()
	var dev *hca.Device
	switch {
	case *devName != "":
		if dev = s.Device(*devName); dev == nil {
			return fmt.Errorf("IB device %s not found", *devName)
		}
	case len(devs) == 0:
		return errors.New("No IB devices found")
	default:
		dev = devs[0]
	}
	pathMTU := hca.MTUFromBytes(*mtu)
	if pathMTU == 0 {
		return fmt.Errorf("invalid MTU %d (256, 512, 1024, 2048 or 4096)", *mtu)
	}
	pp, err := initCtx(s, dev)
	if err != nil {
		return err
	}
	if err := pp.postRecv(*rxDepth); err != nil {
		return fmt.Errorf("Couldn't post receive: %w", err)
	}
	if *events {
		if err := pp.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	attr := pp.port.Query()
	if attr.LID == 0 {
		return errors.New("Couldn't get local LID")
	}
	if mtu := pathMTU.Bytes(); mtu > attr.ActiveMTU.Bytes() {
		return fmt.Errorf("MTU %d is above the port's active MTU %d", mtu, attr.ActiveMTU.Bytes())
	}
	my := dest{lid: attr.LID, qpn: pp.qp.Num(), psn: rand.Uint32() & 0xffffff}
	if *gidIdx >= 0 {
		g, ok := pp.port.GID(*gidIdx)
		if !ok {
			return fmt.Errorf("can't read sgid of index %d", *gidIdx)
		}
		my.gid = g
	}
	fmt.Fprintf(out, "  local address:  %v\n", my)

	var rem dest
	first := servername != ""
	connect := func(rem dest) error { return pp.connect(pathMTU, my.psn, rem) }
	switch {
	case *pipe:
		rem, err = exchangePipe(my, connect)
		first = my.lid < rem.lid || (my.lid == rem.lid && my.qpn < rem.qpn)
	case servername != "":
		rem, err = exchangeClient(servername, my, connect)
	default:
		rem, err = exchangeServer(my, connect)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  remote address: %v\n", rem)

	pending := recvWRID
	if first {
		if err := pp.postSend(0); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
		pending |= sendWRID
	}
	start := time.Now()
	rcnt, scnt, routs := 0, 0, *rxDepth
	wc := make([]hca.WC, 2)
	for rcnt < *iters || scnt < *iters {
		ne, err := pp.poll(wc)
		if err != nil {
			return err
		}
		for _, w := range wc[:ne] {
			if w.Status != hca.WCSuccess {
				return fmt.Errorf("Failed status %v (%d) for wr_id %d", w.Status, w.Status, w.WRID&0xff)
			}
			kind := int(w.WRID & 0xff)
			switch kind {
			case sendWRID:
				scnt++
			case recvWRID:
				if err := pp.check(w, rcnt); err != nil {
					return err
				}
				if routs--; routs <= 1 {
					if err := pp.postRecv(*rxDepth - routs); err != nil {
						return fmt.Errorf("Couldn't post receive: %w", err)
					}
					routs = *rxDepth
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", w.WRID)
			}
			// The next SEND once both the last one and the peer's answer completed;
			// message k is the k-th this side sends.
			pending &^= kind
			if scnt < *iters && pending == 0 {
				if err := pp.postSend(scnt); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	el := time.Since(start)
	usec := float64(el.Nanoseconds()) / 1e3
	nbytes := int64(*size) * int64(*iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", nbytes, usec/1e6, float64(nbytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", *iters, usec/1e6, usec/float64(*iters))
	return nil
}

// initCtx opens the device and makes the verbs objects, the QP in INIT (pp_init_ctx).
func initCtx(s *attach.Session, dev *hca.Device) (*pingpong, error) {
	pp := &pingpong{sess: s, port: dev.Port(*ibPort)}
	if pp.port == nil {
		return nil, fmt.Errorf("%s has no port %d", dev.Name(), *ibPort)
	}
	// The mirror learns the port's state from the daemon just after attaching.
	for deadline := time.Now().Add(5 * time.Second); pp.port.State() != hca.PortActive; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s port %d is not active (%v)", dev.Name(), *ibPort, pp.port.State())
		}
	}
	c := dev.Open()
	var err error
	if *events {
		pp.ch = c.CreateCompChannel()
	}
	if pp.pd, err = c.AllocPD(); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	pp.slots = min(*rxDepth, maxSlots)
	pp.sendBuf = make([]byte, *size)
	pp.rbufs = make([]byte, *size*pp.slots)
	if pp.sendMR, err = pp.pd.RegMR(pp.sendBuf, hca.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.recvMR, err = pp.pd.RegMR(pp.rbufs, hca.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.cq, err = c.CreateCQ(*rxDepth+1, pp.ch); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	// ibv_rc_pingpong asks for one send WR; pibgw's RC send queue of depth 1 does not
	// send (rc: the full ring's tail meets its next-to-send index), so two.
	pp.qp, err = pp.pd.CreateQP(hca.QPInitAttr{SendCQ: pp.cq, RecvCQ: pp.cq, QPType: hca.QPTypeRC,
		Cap: hca.QPCap{MaxSendWR: 2, MaxRecvWR: uint32(*rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	a := hca.QPAttr{QPState: hca.QPStateInit, PKeyIndex: 0, PortNum: uint8(*ibPort)}
	if err := pp.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags); err != nil {
		return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return pp, nil
}

// connect moves the QP to RTR toward rem and then to RTS (pp_connect_ctx).
func (pp *pingpong) connect(m hca.MTU, myPSN uint32, rem dest) error {
	a := hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: m, DestQPNum: rem.qpn, RQPSN: rem.psn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: hca.AHAttr{DLID: rem.lid, SL: uint8(*sl), PortNum: uint8(*ibPort)}}
	if rem.gid.InterfaceID() != 0 {
		a.AHAttr.IsGlobal = true
		a.AHAttr.GRH = hca.GlobalRoute{DGID: rem.gid, SGIDIndex: uint8(max(*gidIdx, 0)), HopLimit: 1}
	}
	if err := pp.qp.Modify(&a, hca.QPAttrState|hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|
		hca.QPAttrRQPSN|hca.QPAttrMaxDestRdAtomic|hca.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	a.QPState, a.Timeout, a.RetryCnt, a.RNRRetry, a.SQPSN, a.MaxRdAtomic = hca.QPStateRTS, 14, 7, 7, myPSN, 1
	if err := pp.qp.Modify(&a, hca.QPAttrState|hca.QPAttrTimeout|hca.QPAttrRetryCnt|hca.QPAttrRNRRetry|
		hca.QPAttrSQPSN|hca.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

func (pp *pingpong) postRecv(n int) error {
	wrs := make([]hca.RecvWR, n)
	for i := range wrs {
		slot := pp.posted % pp.slots
		pp.posted++
		wrs[i] = hca.RecvWR{WRID: recvWRID | uint64(slot)<<8, SGL: []hca.SGE{{
			Addr: pp.recvMR.Addr() + uint64(slot**size), Length: uint32(*size), LKey: pp.recvMR.LKey()}}}
	}
	_, err := pp.qp.PostRecv(wrs)
	return err
}

// fill writes message k: its number, then bytes that depend on it.
func fill(b []byte, k int) {
	for j := range b {
		b[j] = byte(k*7 + j)
	}
	if len(b) >= 4 {
		binary.BigEndian.PutUint32(b, uint32(k))
	}
}

func (pp *pingpong) postSend(k int) error {
	fill(pp.sendBuf, k)
	_, err := pp.qp.PostSend([]hca.SendWR{{WRID: sendWRID, Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		SGL: []hca.SGE{{Addr: pp.sendMR.Addr(), Length: uint32(*size), LKey: pp.sendMR.LKey()}}}})
	return err
}

// check verifies that the receive w holds message k, as the peer's fill wrote it.
func (pp *pingpong) check(w hca.WC, k int) error {
	if int(w.ByteLen) != *size {
		return fmt.Errorf("message %d: %d bytes, want %d", k, w.ByteLen, *size)
	}
	slot := int(w.WRID >> 8)
	got := pp.rbufs[slot**size : (slot+1)**size]
	want := make([]byte, *size)
	fill(want, k)
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		return fmt.Errorf("message %d: invalid data at byte %d (0x%02x, want 0x%02x)", k, i, got[i], want[i])
	}
	return nil
}

// noProgress bounds the wait for a completion: ibv_rc_pingpong would wait forever for a
// peer that died.
const noProgress = 30 * time.Second

// spinPolls is how often poll looks at an empty CQ before it starts giving the CPU away
// between looks: the "HCA" is the daemon, a process that needs a CPU to move the packets.
const spinPolls = 256

// yield gives the CPU to another runnable thread, if there is one (sched_yield(2)).
func yield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// poll returns the next completions: by spinning on the CQ, or with -e by sleeping on
// the completion channel, re-arming, and polling once.
func (pp *pingpong) poll(wc []hca.WC) (int, error) {
	if *events {
		t := time.NewTimer(noProgress)
		defer t.Stop()
		select {
		case cq := <-pp.ch.Events():
			cq.AckEvents(1)
		case <-pp.sess.Done():
			return 0, fmt.Errorf("the pibgw daemon went away: %v", pp.sess.Err())
		case <-t.C:
			return 0, fmt.Errorf("Failed to get cq_event: none for %v", noProgress)
		}
		if err := pp.cq.ReqNotify(false); err != nil {
			return 0, fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
		return pp.cq.Poll(wc), nil
	}
	var since time.Time
	for spins := 0; ; spins++ {
		if n := pp.cq.Poll(wc); n > 0 {
			return n, nil
		}
		if spins >= spinPolls {
			yield()
		}
		if spins%4096 == 4095 {
			select {
			case <-pp.sess.Done():
				return 0, fmt.Errorf("the pibgw daemon went away: %v", pp.sess.Err())
			default:
			}
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > noProgress {
				return 0, fmt.Errorf("no completion for %v", noProgress)
			}
		}
	}
}

// exchangeClient is pp_client_exch_dest: send ours, read the server's (its QP is then in
// RTR), connect ours, say "done".
func exchangeClient(servername string, my dest, connect func(dest) error) (dest, error) {
	addr := net.JoinHostPort(servername, strconv.Itoa(*tcpPort))
	// Unlike ibv_rc_pingpong, wait up to 10 s for the server to listen, so that the two
	// may start together.
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err = net.DialTimeout("tcp", addr, 10*time.Second); err == nil {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return dest{}, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
		}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(noProgress))
	if _, err := c.Write(my.message()); err != nil {
		return dest{}, fmt.Errorf("Couldn't send local address: %w", err)
	}
	msg := make([]byte, msgLen)
	if _, err := io.ReadFull(c, msg); err != nil {
		return dest{}, fmt.Errorf("Couldn't read remote address: %w", err)
	}
	rem, err := parseDest(msg)
	if err != nil {
		return dest{}, err
	}
	if err := connect(rem); err != nil {
		return dest{}, err
	}
	if _, err := c.Write([]byte("done\x00")); err != nil {
		return dest{}, fmt.Errorf("Couldn't write done: %w", err)
	}
	return rem, nil
}

// exchangeServer is pp_server_exch_dest: accept one client on the loopback address,
// read its address, connect our QP, send ours, wait for "done".
func exchangeServer(my dest, connect func(dest) error) (dest, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("localhost", strconv.Itoa(*tcpPort)))
	if err != nil {
		return dest{}, fmt.Errorf("Couldn't listen to port %d: %w", *tcpPort, err)
	}
	c, err := l.Accept()
	l.Close()
	if err != nil {
		return dest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(noProgress))
	return exchangeServerSide(c, c, my, connect)
}

func exchangeServerSide(r io.Reader, w io.Writer, my dest, connect func(dest) error) (dest, error) {
	msg := make([]byte, msgLen)
	if _, err := io.ReadFull(r, msg); err != nil {
		return dest{}, fmt.Errorf("Couldn't read remote address: %w", err)
	}
	rem, err := parseDest(msg)
	if err != nil {
		return dest{}, err
	}
	if err := connect(rem); err != nil {
		return dest{}, fmt.Errorf("Couldn't connect to remote QP: %w", err)
	}
	if _, err := w.Write(my.message()); err != nil {
		return dest{}, fmt.Errorf("Couldn't send local address: %w", err)
	}
	done := make([]byte, len("done\x00"))
	if _, err := io.ReadFull(r, done); err != nil || string(done) != "done\x00" {
		return dest{}, fmt.Errorf("Couldn't read done: %q, %v", done, err)
	}
	return rem, nil
}

// exchangePipe swaps addresses with the peer at the other end of standard input and
// output: both send theirs, connect, and say "done", so that neither sends before the
// other's QP is ready to receive.
func exchangePipe(my dest, connect func(dest) error) (dest, error) {
	if _, err := os.Stdout.Write(my.message()); err != nil {
		return dest{}, fmt.Errorf("Couldn't send local address: %w", err)
	}
	msg := make([]byte, msgLen)
	if _, err := io.ReadFull(os.Stdin, msg); err != nil {
		return dest{}, fmt.Errorf("Couldn't read remote address: %w", err)
	}
	rem, err := parseDest(msg)
	if err != nil {
		return dest{}, err
	}
	if err := connect(rem); err != nil {
		return dest{}, err
	}
	if _, err := os.Stdout.Write([]byte("done\x00")); err != nil {
		return dest{}, fmt.Errorf("Couldn't write done: %w", err)
	}
	done := make([]byte, len("done\x00"))
	if _, err := io.ReadFull(os.Stdin, done); err != nil || string(done) != "done\x00" {
		return dest{}, fmt.Errorf("Couldn't read done: %q, %v", done, err)
	}
	return rem, nil
}
