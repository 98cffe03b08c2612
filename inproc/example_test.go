package inproc_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

// Example connects ib0 (10.10.0.1) to ib1 (10.10.0.2) of the default fabric with
// rdma_cm and moves a message over the RC connection, then does the same over TCP on
// the interfaces' userspace netstacks (IPoIB underneath). No root, no kernel module, no
// cgo.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		panic(err)
	}
	defer f.Close()

	// rdma_cm: a listener on ib1, a connection from ib0.
	l, err := rdmacm.Listen(f.RDMA(), "10.10.0.2:7471")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	c, err := rdmacm.DialFrom(ctx, f.RDMA(), netip.MustParseAddr("10.10.0.1"), "10.10.0.2:7471")
	if err != nil {
		panic(err)
	}
	s, err := l.Accept()
	if err != nil {
		panic(err)
	}
	go func() { c.Write([]byte("hello over RC")); c.Close() }()
	msg, _ := io.ReadAll(s)
	fmt.Printf("%s from %v\n", msg, s.RemoteAddr().(rdmacm.Addr).Addr())

	// IP over IB: TCP between the two netstacks.
	ib0, _ := f.Netstack("ib0")
	ib1, _ := f.Netstack("ib1")
	tl, err := ib1.Listen("tcp", "10.10.0.2:8080")
	if err != nil {
		panic(err)
	}
	go func() {
		conn, err := tl.Accept()
		if err == nil {
			conn.Write([]byte("hello over IPoIB"))
			conn.Close()
		}
	}()
	tc, err := ib0.DialContext(ctx, "tcp", "10.10.0.2:8080")
	if err != nil {
		panic(err)
	}
	msg, _ = io.ReadAll(tc)
	fmt.Printf("%s\n", msg)
	// Output:
	// hello over RC from 10.10.0.1
	// hello over IPoIB
}
