// Command echo is an echo server and client over rdma_cm's net.Conn stream: the client
// sends each line of its standard input (or -m MESSAGE) and prints what comes back.
// With neither -s nor -c both run in this process on an in-process fabric:
//
//	echo hello | go run ./examples/echo
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

var (
	addr = flag.String("a", "10.10.0.2:7471", "server address and port")
	src  = flag.String("I", "10.10.0.1", "client source address")
	msg  = flag.String("m", "", "send this instead of standard input")
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	l, err := rdmacm.Listen(f.RDMA(), *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go serve(l)
	c, err := rdmacm.DialFrom(ctx, f.RDMA(), netip.MustParseAddr(*src), *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var in io.Reader = os.Stdin
	if *msg != "" {
		in = strings.NewReader(*msg + "\n")
	}
	r := bufio.NewReader(c)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if _, err := fmt.Fprintln(c, sc.Text()); err != nil {
			log.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(line)
	}
}

// serve echoes every connection's bytes back.
func serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}
