// Command ucmatose is librdmacm's ucmatose in spirit: -c connections, each moving -C
// messages of -S bytes from the client to the server and back, with rdma_cm's
// net.Conn streams, all at once; it reports connections and messages per second. With
// neither -s nor -c both sides run in this process on an in-process fabric:
//
//	go run ./examples/ucmatose -c 16 -C 100
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/netip"
	"sync"
	"time"

	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

var (
	addr  = flag.String("a", "10.10.0.2", "server address")
	src   = flag.String("I", "10.10.0.1", "client source address")
	port  = flag.Int("p", 7471, "port")
	conns = flag.Int("c", 1, "connections")
	msgs  = flag.Int("C", 10, "messages per connection")
	size  = flag.Int("S", 100, "message size")
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		return err
	}
	defer f.Close()
	a := fmt.Sprintf("%s:%d", *addr, *port)
	l, err := rdmacm.Listen(f.RDMA(), a)
	if err != nil {
		return err
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	fmt.Printf("ucmatose: connecting %d\n", *conns)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rdmacm.DialFrom(ctx, f.RDMA(), netip.MustParseAddr(*src), a)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			out := bytes.Repeat([]byte{byte(i)}, *size)
			in := make([]byte, *size)
			for range *msgs {
				if _, err := c.Write(out); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, in); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(in, out) {
					errs <- fmt.Errorf("connection %d: data mismatch", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	el := time.Since(start)
	fmt.Printf("ucmatose: %d connections × %d messages of %d bytes in %v (%.0f connections/s, %.0f messages/s)\n",
		*conns, *msgs, *size, el.Round(time.Microsecond), float64(*conns)/el.Seconds(), float64(*conns**msgs*2)/el.Seconds())
	fmt.Println("test complete")
	return nil
}
