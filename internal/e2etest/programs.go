package e2etest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/udplink"
)

// The test binary doubles as the programs the end-to-end tests run inside their
// namespaces (multicast sender and listener, TCP source and sink) (`ip netns exec NS TESTBINARY`), so no extra tool is needed:
// PIBGW_E2E_HELPER selects the mode, the arguments say the rest.
const HelperEnv = "PIBGW_E2E_HELPER"

func init() {
	switch os.Getenv(HelperEnv) {
	case "":
		return
	case "mcast-send":
		os.Exit(mcastSend(os.Args[1:]))
	case "mcast-listen":
		os.Exit(mcastListen(os.Args[1:]))
	case "tcp-sink":
		os.Exit(tcpSink(os.Args[1:]))
	case "tcp-source":
		os.Exit(tcpSource(os.Args[1:]))
	case "udp-flood":
		os.Exit(udpFlood(os.Args[1:]))
	case "udp-dial":
		os.Exit(udpDial(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s mode %q\n", HelperEnv, os.Getenv(HelperEnv))
		os.Exit(2)
	}
}

// mcastSend: IFACE PORT COUNT INTERVAL GROUP... sends COUNT rounds, INTERVAL apart, of
// one datagram "GROUP seq N" to each GROUP:PORT out of IFACE (IP_MULTICAST_IF: no route
// needed).
func mcastSend(args []string) int {
	if len(args) < 5 {
		fmt.Fprintln(os.Stderr, "mcast-send: want IFACE PORT COUNT INTERVAL GROUP...")
		return 2
	}
	ifi, err := net.InterfaceByName(args[0])
	port, err2 := strconv.Atoi(args[1])
	count, err3 := strconv.Atoi(args[2])
	interval, err4 := time.ParseDuration(args[3])
	if err := firstErr(err, err2, err3, err4); err != nil {
		fmt.Fprintln(os.Stderr, "mcast-send:", err)
		return 2
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptIPMreqn(int(fd), syscall.IPPROTO_IP, syscall.IP_MULTICAST_IF,
				&syscall.IPMreqn{Ifindex: int32(ifi.Index)})
		})
		return firstErr(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcast-send:", err)
		return 1
	}
	defer pc.Close()
	for i := range count {
		for _, g := range args[4:] {
			dst := &net.UDPAddr{IP: net.ParseIP(g), Port: port}
			if _, err := pc.WriteTo(fmt.Appendf(nil, "%s seq %d", g, i), dst); err != nil {
				fmt.Fprintln(os.Stderr, "mcast-send:", err)
			}
		}
		time.Sleep(interval)
	}
	return 0
}

// mcastListen: IFACE PORT WANT TIMEOUT GROUP... binds 0.0.0.0:PORT, joins each GROUP on
// IFACE, prints "ready", then "got PAYLOAD from SRC" per datagram, and exits after WANT
// datagrams or TIMEOUT.
func mcastListen(args []string) int {
	if len(args) < 5 {
		fmt.Fprintln(os.Stderr, "mcast-listen: want IFACE PORT WANT TIMEOUT GROUP...")
		return 2
	}
	ifi, err := net.InterfaceByName(args[0])
	port, err2 := strconv.Atoi(args[1])
	want, err3 := strconv.Atoi(args[2])
	timeout, err4 := time.ParseDuration(args[3])
	if err := firstErr(err, err2, err3, err4); err != nil {
		fmt.Fprintln(os.Stderr, "mcast-listen:", err)
		return 2
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, g := range args[4:] {
				m := syscall.IPMreqn{Ifindex: int32(ifi.Index)}
				copy(m.Multiaddr[:], net.ParseIP(g).To4())
				if serr = syscall.SetsockoptIPMreqn(int(fd), syscall.IPPROTO_IP, syscall.IP_ADD_MEMBERSHIP, &m); serr != nil {
					return
				}
			}
		})
		return firstErr(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcast-listen:", err)
		return 1
	}
	defer pc.Close()
	fmt.Println("ready")
	pc.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 2048)
	for got := 0; got < want; got++ {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			fmt.Println("timeout:", err)
			return 0
		}
		fmt.Printf("got %s from %v\n", buf[:n], from)
	}
	return 0
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// NSHelper starts the test binary in namespace ns in a helper mode, its stdout piped.
func NSHelper(t *testing.T, ns, mode string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, self}, args...)...)
	cmd.Env = append(os.Environ(), HelperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // ip netns exec execs the helper: this is its pid
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout)
}

// tcpSink: ADDR listens on ADDR, prints "ready", takes one connection, reads it to EOF
// and prints "got N SHA256".
func tcpSink(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "tcp-sink: want ADDR")
		return 2
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-sink:", err)
		return 1
	}
	defer ln.Close()
	fmt.Println("ready")
	c, err := ln.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-sink:", err)
		return 1
	}
	defer c.Close()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-sink:", err)
		return 1
	}
	fmt.Printf("got %d %x\n", n, h.Sum(nil))
	return 0
}

// tcpSource: ADDR N dials ADDR, sends N pseudo-random bytes, closes, and prints
// "sent N SHA256".
func tcpSource(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "tcp-source: want ADDR N")
		return 2
	}
	size, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-source:", err)
		return 2
	}
	c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-source:", err)
		return 1
	}
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(chachaReader{rand.NewChaCha8([32]byte{4})}, size), h)
	n, err := io.CopyBuffer(c, src, make([]byte, 256<<10))
	if err == nil {
		err = c.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp-source:", err)
		return 1
	}
	fmt.Printf("sent %d %x\n", n, h.Sum(nil))
	return 0
}

type chachaReader struct{ r *rand.ChaCha8 }

func (c chachaReader) Read(b []byte) (int, error) { return c.r.Read(b) }

// udpFlood: ADDR COUNT MAXSIZE sends COUNT datagrams of random bytes, each of a random
// size 0..MAXSIZE, to ADDR, and prints "sent COUNT".
func udpFlood(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "udp-flood: want ADDR COUNT MAXSIZE")
		return 2
	}
	count, err1 := strconv.Atoi(args[1])
	maxSize, err2 := strconv.Atoi(args[2])
	c, err3 := net.Dial("udp", args[0])
	if err := firstErr(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, "udp-flood:", err)
		return 2
	}
	r := rand.New(rand.NewChaCha8([32]byte{15}))
	buf := make([]byte, maxSize)
	for i := 0; i < count; i++ {
		b := buf[:r.IntN(maxSize+1)]
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if i%2 == 0 && len(b) >= udplink.HeaderLen {
			b[0], b[1] = udplink.Version, byte(1+i%6) // well-formed headers too
		}
		c.Write(b) // ECONNREFUSED from an earlier ICMP error is fine
		if i%256 == 0 {
			time.Sleep(time.Millisecond) // let the switch's socket buffer drain a little
		}
	}
	fmt.Printf("sent %d\n", count)
	return 0
}

// udpDial: ADDR PSK GUID WAIT plugs a port (no HCA behind it) into the switch at ADDR
// with key PSK and prints "up" or "down" after WAIT.
func udpDial(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "udp-dial: want ADDR PSK GUID WAIT")
		return 2
	}
	guid, err1 := strconv.ParseUint(strings.TrimPrefix(args[2], "0x"), 16, 64)
	wait, err2 := time.ParseDuration(args[3])
	if err := firstErr(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "udp-dial:", err)
		return 2
	}
	d, err := udplink.Dial(args[0], guid, udplink.NewJack(nullPort{}).UDP(), udplink.Config{PSK: []byte(args[1])})
	if err != nil {
		fmt.Fprintln(os.Stderr, "udp-dial:", err)
		return 1
	}
	time.Sleep(wait)
	if d.Status().Up {
		fmt.Println("up")
	} else {
		fmt.Println("down")
	}
	d.Close()
	return 0
}

// nullPort is a port that drops what it receives.
type nullPort struct{}

func (nullPort) Receive([][]byte)   {}
func (nullPort) Attach(fabric.Link) {}

// IperfIn runs `iperf3 -c addr -t secs` from nsClient against a one-shot server in
// nsServer; during, if set, runs while the client is at it.
func IperfIn(t *testing.T, nsClient, nsServer, addr, port string, secs int, during func()) IperfResult {
	t.Helper()
	server := exec.Command("ip", "netns", "exec", nsServer, "iperf3", "-s", "-1", "-B", addr, "-p", port)
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- server.Wait() }()
	defer func() {
		select {
		case <-srvDone:
		case <-time.After(5 * time.Second):
			server.Process.Kill()
			<-srvDone
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "exec", nsServer, "ss", "-ltnH", "sport", "= :"+port).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("iperf3 server did not start in 10 s")
		}
	}
	client := exec.Command("ip", "netns", "exec", nsClient, "iperf3", "-c", addr, "-p", port, "-t", fmt.Sprint(secs), "-J")
	var out SyncBuffer
	client.Stdout = &out
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	err := client.Wait()
	var res IperfResult
	if jerr := json.Unmarshal([]byte(out.String()), &res); err != nil || jerr != nil || res.Error != "" {
		t.Fatalf("iperf3 -c %s: %v %v %s\n%s", addr, err, jerr, res.Error, out.String())
	}
	return res
}

// IperfResult is the part of `iperf3 -J` the test reads.
type IperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumSent struct {
			Bytes         int64   `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   int64   `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         int64   `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}
