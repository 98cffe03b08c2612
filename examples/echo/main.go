// Command echo is an echo server and client over rdma_cm's net.Conn stream: the client
// sends each line of its standard input (or -m MESSAGE) and prints what comes back, or
// with -n SIZE streams SIZE pseudo-random bytes and checks the echo by SHA-256.
//
// With -s (the server: echoes every connection until interrupted) or -c (the client) the
// side runs in this process on the HCAs of a running pibgw daemon, attached through its
// attach socket (-attach PATH; "" is $PIBGW_ATTACH, else /run/pibgw/attach.sock);
// addresses are the daemon's IPoIB addresses. In two terminals, against `sudo pibgw up`:
//
//	go run ./examples/echo -s -a 10.10.0.2:7471
//	go run ./examples/echo -c -a 10.10.0.2:7471 -I 10.10.0.1 -n 64M
//
// With neither, both run in this process on an in-process fabric:
//
//	echo hello | go run ./examples/echo
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/inproc"
	"github.com/pibgw/pibgw/rdmacm"
)

var (
	server   = flag.Bool("s", false, "run the server only, attached to a pibgw daemon")
	client   = flag.Bool("c", false, "run the client only, attached to a pibgw daemon")
	addr     = flag.String("a", "10.10.0.2:7471", "server address and port")
	src      = flag.String("I", "10.10.0.1", "client source address")
	msg      = flag.String("m", "", "send this instead of standard input")
	size     = flag.String("n", "", "send this many pseudo-random bytes (suffix K, M, G: KiB, MiB, GiB) and check the echo by SHA-256, instead of lines")
	attachTo = flag.String("attach", "", "with -s or -c: the pibgw daemon's attach socket (\"\": $PIBGW_ATTACH, else "+attach.DefaultPath+")")
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	n, err := parseSize(*size)
	if err != nil {
		log.Fatalf("echo: -n: %v", err)
	}
	switch {
	case *server && *client:
		log.Fatal("echo: -s and -c exclude each other (neither: both in this process)")
	case *server || *client:
		err = runAttached(n)
	default:
		err = run(n)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// parseSize reads "", "4096", "64K", "64M", "1G".
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q: want a positive number of bytes, e.g. 4096, 64K, 64M", s)
	}
	return v * mult, nil
}

// run runs both sides in this process on an in-process fabric.
func run(n int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := inproc.Start(ctx, inproc.Options{})
	if err != nil {
		return err
	}
	defer f.Close()
	l, err := rdmacm.Listen(f.RDMA(), *addr)
	if err != nil {
		return err
	}
	defer l.Close()
	go serve(l)
	return runClient(ctx, f.RDMA(), n)
}

// runAttached runs one side on the devices of the daemon serving the attach socket.
func runAttached(n int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := attach.Dial(ctx, *attachTo, nil)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	// The server runs until interrupted; the client until its data is echoed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() {
		if *server {
			l, err := rdmacm.Listen(s.RDMA(), *addr)
			if err != nil {
				done <- err
				return
			}
			go func() { <-ctx.Done(); l.Close() }()
			log.Printf("echo: listening on %s", *addr)
			serve(l)
			done <- nil
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		done <- runClient(ctx, s.RDMA(), n)
	}()
	select {
	case err := <-done:
		return err
	case <-s.Done():
		return fmt.Errorf("echo: the pibgw daemon went away: %v", s.Err())
	}
}

func runClient(ctx context.Context, h rdmacm.Host, n int64) error {
	srcAddr, err := netip.ParseAddr(*src)
	if err != nil {
		return fmt.Errorf("echo: -I: %w", err)
	}
	c, err := rdmacm.DialFrom(ctx, h, srcAddr, *addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if n > 0 {
		return bulk(c, n)
	}
	var in io.Reader = os.Stdin
	if *msg != "" {
		in = strings.NewReader(*msg + "\n")
	}
	r := bufio.NewReader(c)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if _, err := fmt.Fprintln(c, sc.Text()); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		fmt.Print(line)
	}
	return sc.Err()
}

// bulk writes n pseudo-random bytes to c while reading the echo, and compares the
// SHA-256 of what went out with that of what came back.
func bulk(c net.Conn, n int64) error {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(time.Now().UnixNano()))
	gen := rand.NewChaCha8(seed)
	sent := sha256.New()
	start := time.Now()
	werr := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		for left := n; left > 0; {
			b := buf[:min(left, int64(len(buf)))]
			gen.Read(b)
			sent.Write(b)
			if _, err := c.Write(b); err != nil {
				werr <- err
				return
			}
			left -= int64(len(b))
		}
		werr <- nil
	}()
	got := sha256.New()
	m, err := io.CopyN(got, c, n)
	if err != nil {
		return fmt.Errorf("echo: %d of %d bytes echoed: %w", m, n, err)
	}
	if err := <-werr; err != nil {
		return err
	}
	el := time.Since(start)
	a, b := sum(sent), sum(got)
	if !bytes.Equal(a, b) {
		return fmt.Errorf("echo: SHA-256 mismatch: sent %x, echoed %x", a, b)
	}
	fmt.Printf("echo: %d bytes echoed in %v (%.1f MiB/s each way), SHA-256 %x matches\n",
		n, el.Round(time.Millisecond), float64(n)/(1<<20)/el.Seconds(), a)
	return nil
}

func sum(h hash.Hash) []byte { return h.Sum(nil) }

// serve echoes every connection's bytes back until the listener closes; each connection
// is logged with its byte count and SHA-256 when it ends.
func serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && *server {
				log.Printf("echo: accept: %v", err)
			}
			return
		}
		go func() {
			defer c.Close()
			h := sha256.New()
			n, err := io.Copy(c, io.TeeReader(c, h))
			if *server {
				status := ""
				if err != nil {
					status = fmt.Sprintf(" (%v)", err)
				}
				log.Printf("echo: %v: %d bytes echoed, SHA-256 %x%s", c.RemoteAddr(), n, h.Sum(nil), status)
			}
		}()
	}
}
