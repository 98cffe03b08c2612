// Command rping is librdmacm's rping written on pibgw's rdmacm package: the client
// advertises a buffer, the server RDMA READs it, the client advertises a second buffer,
// the server RDMA WRITEs what it read into it; with -V the client checks the data.
// Options are rping's: -s / -c, -a ADDR, -I SRC, -p PORT (7174), -C COUNT, -S SIZE
// (100), -v (print), -V (validate), -d (debug); and -attach PATH.
//
// With -s or -c the side runs in this process on the HCAs of a running pibgw daemon,
// attached through its attach socket (-attach PATH; "" is $PIBGW_ATTACH, else
// /run/pibgw/attach.sock). The addresses are the daemon's IPoIB addresses (by default ib0
// 10.10.0.1 on pib_0 and ib1 10.10.0.2 on pib_1); no namespace is needed. In two
// terminals, against `sudo pibgw up`:
//
//	go run ./examples/rping -s -a 10.10.0.2 -C 10000 -V
//	go run ./examples/rping -c -a 10.10.0.2 -I 10.10.0.1 -C 10000 -V -d
//
// With neither -s nor -c, both sides run in this process on an in-process fabric (the
// default configuration: the server on ib1 10.10.0.2, the client on ib0 10.10.0.1):
//
//	go run ./examples/rping -C 1000 -V -v
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

var (
	server   = flag.Bool("s", false, "server")
	client   = flag.Bool("c", false, "client")
	addr     = flag.String("a", "10.10.0.2", "server address (the client connects to it, the server binds it)")
	src      = flag.String("I", "10.10.0.1", "client source address")
	port     = flag.Int("p", 7174, "port")
	count    = flag.Int("C", 10, "iterations (0: forever)")
	size     = flag.Int("S", 100, "ping data size")
	verbose  = flag.Bool("v", false, "display ping data")
	validate = flag.Bool("V", false, "validate ping data")
	debug    = flag.Bool("d", false, "debug output")
	attachTo = flag.String("attach", "", "with -s or -c: the pibgw daemon's attach socket (\"\": $PIBGW_ATTACH, else "+attach.DefaultPath+")")
)

const msgFmt = "rdma-ping-%d: "

// info is rping's struct rping_rdma_info: a buffer's address, rkey and size.
const infoLen = 16

func putInfo(b []byte, mr *hca.MR, n int) {
	binary.BigEndian.PutUint64(b, mr.Addr())
	binary.BigEndian.PutUint32(b[8:], mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(n))
}

func main() {
	log.SetFlags(0)
	flag.Parse()
	if *size < len(fmt.Sprintf(msgFmt, 0))+1 {
		log.Fatalf("rping: size %d is too small", *size)
	}
	saddr, err := parseAddrs()
	if err != nil {
		log.Fatal(err)
	}
	if *server && *client {
		log.Fatal("rping: -s and -c exclude each other (neither: both sides in this process)")
	}
	if *server || *client {
		if err := runAttached(saddr); err != nil {
			log.Fatal(err)
		}
		return
	}
	ctx := context.Background()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ready := make(chan error, 1)
	done := make(chan error, 1)
	go func() { done <- runServer(f.RDMA(), saddr, ready) }()
	if err := <-ready; err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	if err := runClient(f.RDMA(), netip.MustParseAddr(*src), saddr); err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	report(start)
}

func parseAddrs() (netip.AddrPort, error) {
	a, err := netip.ParseAddr(*addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rping: -a: %w", err)
	}
	if _, err := netip.ParseAddr(*src); err != nil {
		return netip.AddrPort{}, fmt.Errorf("rping: -I: %w", err)
	}
	return netip.AddrPortFrom(a, uint16(*port)), nil
}

// report prints, with -d, how fast the iterations went.
func report(start time.Time) {
	if *debug {
		el := time.Since(start)
		log.Printf("%d iterations in %v: %.0f/s", *count, el.Round(time.Microsecond), float64(*count)/el.Seconds())
	}
}

// runAttached runs one side (-s or -c) on the devices of the daemon serving the attach
// socket: the session's RDMA host stands where the in-process fabric's does.
func runAttached(saddr netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := attach.Dial(ctx, *attachTo, nil)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	if *debug {
		log.Printf("rping: attached to pibgw (pid %d) as session %d", s.DaemonPID(), s.ID())
	}
	done := make(chan error, 1)
	go func() {
		if *server {
			ready := make(chan error, 1)
			done <- runServer(s.RDMA(), saddr, ready)
			return
		}
		start := time.Now()
		err := runClient(s.RDMA(), netip.MustParseAddr(*src), saddr)
		if err == nil {
			report(start)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-s.Done():
		return fmt.Errorf("rping: the pibgw daemon went away: %v", s.Err())
	}
}

// side is one end's verbs objects: a CQ polled in line, a send and a receive buffer
// for the info messages, and the RDMA buffers.
type side struct {
	id       *rdmacm.ID
	pd       *hca.PD
	cq       *hca.CQ
	cch      *hca.CompChannel
	qp       *hca.QP
	msg, rcv []byte
	msgMR    *hca.MR
	rcvMR    *hca.MR
	// early holds successful completions that came before the one waited for: under loss
	// the ACK of a SEND can arrive after the peer's answer to it (a retransmitted SEND is
	// acknowledged late), so the RECV completes first, as rping's CQ thread allows.
	early []hca.WC
}

func newSide(id *rdmacm.ID) (*side, error) {
	s := &side{id: id, msg: make([]byte, infoLen), rcv: make([]byte, infoLen)}
	ctx := id.Device().Port.Device().Open()
	var err error
	if s.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	s.cch = ctx.CreateCompChannel()
	if s.cq, err = ctx.CreateCQ(16, s.cch); err != nil {
		return nil, err
	}
	if s.qp, err = id.CreateQP(s.pd, hca.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if s.msgMR, err = s.pd.RegMR(s.msg, 0); err != nil {
		return nil, err
	}
	if s.rcvMR, err = s.pd.RegMR(s.rcv, hca.AccessLocalWrite); err != nil {
		return nil, err
	}
	return s, s.postRecv()
}

func (s *side) postRecv() error {
	_, err := s.qp.PostRecv([]hca.RecvWR{{SGL: []hca.SGE{{Addr: s.rcvMR.Addr(), Length: infoLen, LKey: s.rcvMR.LKey()}}}})
	return err
}

// wait polls the CQ for one completion of opcode op; successful completions of other
// opcodes are kept for their own wait.
func (s *side) wait(op hca.WCOpcode) (hca.WC, error) {
	for i, wc := range s.early {
		if wc.Opcode == op {
			s.early = append(s.early[:i], s.early[i+1:]...)
			return wc, nil
		}
	}
	wc := make([]hca.WC, 1)
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		if s.cq.Poll(wc) == 0 {
			// Nothing yet: arm the CQ, look once more (a completion may have come
			// before the arming), then sleep on the completion channel (rping's
			// ibv_req_notify_cq / ibv_get_cq_event).
			if err := s.cq.ReqNotify(false); err != nil {
				return hca.WC{}, err
			}
			if s.cq.Poll(wc) == 0 {
				select {
				case cq := <-s.cch.Events():
					cq.AckEvents(1)
				case <-timeout.C:
					return hca.WC{}, errors.New("rping: timed out waiting for a completion")
				}
				continue
			}
		}
		if wc[0].Status != hca.WCSuccess {
			return wc[0], fmt.Errorf("rping: completion %v: %v", wc[0].Opcode, wc[0].Status)
		}
		if wc[0].Opcode != op {
			if len(s.early) >= 4 {
				return wc[0], fmt.Errorf("rping: completion %v, want %v", wc[0].Opcode, op)
			}
			s.early = append(s.early, wc[0])
			continue
		}
		return wc[0], nil
	}
}

func (s *side) send() error {
	_, err := s.qp.PostSend([]hca.SendWR{{Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		SGL: []hca.SGE{{Addr: s.msgMR.Addr(), Length: infoLen, LKey: s.msgMR.LKey()}}}})
	if err == nil {
		_, err = s.wait(hca.WCSend)
	}
	return err
}

// recv waits for the peer's info message and re-posts the buffer.
func (s *side) recv() (addr uint64, rkey, n uint32, err error) {
	if _, err = s.wait(hca.WCRecv); err != nil {
		return
	}
	addr, rkey, n = binary.BigEndian.Uint64(s.rcv), binary.BigEndian.Uint32(s.rcv[8:]), binary.BigEndian.Uint32(s.rcv[12:])
	err = s.postRecv()
	return
}

// event waits up to 30 s for the next event, which must be want; a server waiting for
// its client (-s) waits as long as it takes.
func event(ch *rdmacm.EventChannel, want rdmacm.EventType) (*rdmacm.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if want == rdmacm.EventConnectRequest && *server {
		ctx, cancel = context.WithCancel(context.Background())
	}
	defer cancel()
	e, err := ch.GetEvent(ctx)
	if err != nil {
		return nil, fmt.Errorf("rping: waiting for %v: %w", want, err)
	}
	defer e.Ack()
	if e.Type != want {
		return e, fmt.Errorf("rping: %v (status %d), want %v", e.Type, e.Status, want)
	}
	return e, nil
}

func runServer(h rdmacm.Host, a netip.AddrPort, ready chan<- error) error {
	ch := rdmacm.CreateEventChannel()
	l, err := rdmacm.CreateID(h, ch, nil, rdmacm.PSTCP)
	if err == nil {
		err = l.BindAddr(a)
	}
	if err == nil {
		err = l.Listen(3)
	}
	ready <- err
	if err != nil {
		return err
	}
	defer l.Destroy()
	if *debug {
		log.Printf("rping: listening on %v", a)
	}
	e, err := event(ch, rdmacm.EventConnectRequest)
	if err != nil {
		return err
	}
	s, err := newSide(e.ID)
	if err != nil {
		return err
	}
	buf := make([]byte, *size)
	bufMR, err := s.pd.RegMR(buf, hca.AccessLocalWrite)
	if err != nil {
		return err
	}
	if err := e.ID.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		return err
	}
	if _, err := event(ch, rdmacm.EventEstablished); err != nil {
		return err
	}
	sge := []hca.SGE{{Addr: bufMR.Addr(), Length: uint32(*size), LKey: bufMR.LKey()}}
	for i := 0; *count == 0 || i < *count; i++ {
		// The client's source buffer: READ it.
		raddr, rkey, n, err := s.recv()
		if err != nil {
			return err
		}
		if int(n) > len(buf) {
			return fmt.Errorf("rping: the client's buffer has %d bytes, more than -S %d", n, len(buf))
		}
		sge[0].Length = n
		if _, err := s.qp.PostSend([]hca.SendWR{{Opcode: hca.WRRDMARead, SendFlags: hca.SendSignaled, SGL: sge, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			return err
		}
		if _, err := s.wait(hca.WCRDMARead); err != nil {
			return err
		}
		if *server && *verbose {
			fmt.Printf("server ping data: %s\n", bytes.TrimRight(buf[:n], "\x00"))
		}
		if err := s.send(); err != nil { // go ahead
			return err
		}
		// The client's sink buffer: WRITE it back.
		raddr, rkey, n, err = s.recv()
		if err != nil {
			return err
		}
		if int(n) > len(buf) {
			return fmt.Errorf("rping: the client's buffer has %d bytes, more than -S %d", n, len(buf))
		}
		sge[0].Length = n
		if _, err := s.qp.PostSend([]hca.SendWR{{Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: sge, RemoteAddr: raddr, RKey: rkey}}); err != nil {
			return err
		}
		if _, err := s.wait(hca.WCRDMAWrite); err != nil {
			return err
		}
		if err := s.send(); err != nil {
			return err
		}
	}
	if _, err := event(ch, rdmacm.EventDisconnected); err != nil {
		return err
	}
	e.ID.Disconnect()
	return nil
}

func runClient(h rdmacm.Host, srcAddr netip.Addr, a netip.AddrPort) error {
	ch := rdmacm.CreateEventChannel()
	id, err := rdmacm.CreateID(h, ch, nil, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer id.Destroy()
	if err := id.ResolveAddr(srcAddr, a, 2*time.Second); err != nil {
		return err
	}
	if _, err := event(ch, rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		return err
	}
	if _, err := event(ch, rdmacm.EventRouteResolved); err != nil {
		return err
	}
	s, err := newSide(id)
	if err != nil {
		return err
	}
	start, sink := make([]byte, *size), make([]byte, *size)
	startMR, err := s.pd.RegMR(start, hca.AccessRemoteRead)
	if err != nil {
		return err
	}
	sinkMR, err := s.pd.RegMR(sink, hca.AccessLocalWrite|hca.AccessRemoteWrite)
	if err != nil {
		return err
	}
	if err := id.Connect(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return err
	}
	if _, err := event(ch, rdmacm.EventEstablished); err != nil {
		return err
	}
	c := byte('A')
	for i := 0; *count == 0 || i < *count; i++ {
		k := copy(start, fmt.Sprintf(msgFmt, i))
		for j, x := k, c; j < len(start); j++ {
			start[j] = x
			if x++; x > 'z' {
				x = 'A'
			}
		}
		if c++; c > 'z' {
			c = 'A'
		}
		start[len(start)-1] = 0
		putInfo(s.msg, startMR, len(start))
		if err := s.send(); err != nil {
			return err
		}
		if _, _, _, err := s.recv(); err != nil { // the server has read it
			return err
		}
		putInfo(s.msg, sinkMR, len(sink))
		if err := s.send(); err != nil {
			return err
		}
		if _, _, _, err := s.recv(); err != nil { // the server has written it back
			return err
		}
		if *verbose {
			fmt.Printf("ping data: %s\n", bytes.TrimRight(sink, "\x00"))
		}
		if *validate && !bytes.Equal(start, sink) {
			fmt.Fprintf(os.Stderr, "data mismatch!\n")
			return fmt.Errorf("rping: iteration %d: data mismatch", i)
		}
		clear(sink)
	}
	if err := id.Disconnect(); err != nil {
		return err
	}
	_, err = event(ch, rdmacm.EventDisconnected)
	return err
}
