// Command ucmatose is librdmacm's ucmatose in spirit: -c connections, each moving -C
// messages of -S bytes from the client to the server and back, with rdma_cm's
// net.Conn streams, all at once; it reports connections and messages per second.
//
// With -s (the server) or -client (the client; -c is ucmatose's connection count) the side
// runs in this process on the HCAs of a running pibgw daemon, attached through its attach
// socket (-attach PATH; "" is $PIBGW_ATTACH, else /run/pibgw/attach.sock); addresses are
// the daemon's IPoIB addresses. The server serves -c connections and exits. In two
// terminals, against `sudo pibgw up`:
//
//	go run ./examples/ucmatose -s -c 16
//	go run ./examples/ucmatose -client -c 16 -C 100
//
// With neither, both sides run in this process on an in-process fabric:
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
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

var (
	server   = flag.Bool("s", false, "run the server only, attached to a pibgw daemon")
	client   = flag.Bool("client", false, "run the client only, attached to a pibgw daemon")
	addr     = flag.String("a", "10.10.0.2", "server address")
	src      = flag.String("I", "10.10.0.1", "client source address")
	port     = flag.Int("p", 7471, "port")
	conns    = flag.Int("c", 1, "connections")
	msgs     = flag.Int("C", 10, "messages per connection")
	size     = flag.Int("S", 100, "message size")
	attachTo = flag.String("attach", "", "with -s or -client: the pibgw daemon's attach socket (\"\": $PIBGW_ATTACH, else "+attach.DefaultPath+")")
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	var err error
	switch {
	case *server && *client:
		log.Fatal("ucmatose: -s and -client exclude each other (neither: both sides in this process)")
	case *server || *client:
		err = runAttached()
	default:
		err = run()
	}
	if err != nil {
		log.Fatal(err)
	}
}

// run runs both sides in this process on an in-process fabric.
func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		return err
	}
	defer f.Close()
	l, err := rdmacm.Listen(f.RDMA(), serverAddr())
	if err != nil {
		return err
	}
	defer l.Close()
	go serve(l, -1)
	return runClient(ctx, f.RDMA())
}

func serverAddr() string { return fmt.Sprintf("%s:%d", *addr, *port) }

// runAttached runs one side on the devices of the daemon serving the attach socket.
func runAttached() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := attach.Dial(ctx, *attachTo, nil)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		if *server {
			done <- runServer(s.RDMA())
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		done <- runClient(ctx, s.RDMA())
	}()
	select {
	case err := <-done:
		return err
	case <-s.Done():
		return fmt.Errorf("ucmatose: the pibgw daemon went away: %v", s.Err())
	}
}

// runServer listens, echoes -c connections and returns once they have all closed.
func runServer(h rdmacm.Host) error {
	l, err := rdmacm.Listen(h, serverAddr())
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Printf("ucmatose: starting server on %s\n", serverAddr())
	n, err := serve(l, *conns)
	if err != nil {
		return err
	}
	fmt.Printf("ucmatose: %d connections served, %d bytes echoed\n", *conns, n)
	fmt.Println("test complete")
	return nil
}

// serve echoes every connection's bytes back; with max ≥ 0 it accepts max connections,
// waits for them to close and returns the bytes echoed.
func serve(l net.Listener, max int) (int64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for i := 0; max < 0 || i < max; i++ {
		c, err := l.Accept()
		if err != nil {
			mu.Lock()
			defer mu.Unlock()
			return total, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			n, _ := io.Copy(c, c)
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, nil
}

// runClient makes -c connections at once, each sending -C messages and checking what
// comes back.
func runClient(ctx context.Context, h rdmacm.Host) error {
	srcAddr, err := netip.ParseAddr(*src)
	if err != nil {
		return fmt.Errorf("ucmatose: -I: %w", err)
	}
	a := serverAddr()
	fmt.Printf("ucmatose: connecting %d\n", *conns)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rdmacm.DialFrom(ctx, h, srcAddr, a)
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
