package abuse

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/wire"
	"golang.org/x/sys/unix"
)

// The attackers: the test binary run again, as user nobody, in one of these modes
// (PIBGW_ABUSE_HELPER). Each prints one line starting "ready" once it holds what it took,
// then holds it until it is killed; "done" instead for the ones whose attack is over.
// Those that attach once print "attached" first.
// Nothing here checks the daemon: the test does, from outside.

const helperEnv = "PIBGW_ABUSE_HELPER"

func init() {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	modes := map[string]func([]string) error{
		"conns":   holdConns,
		"qpns":    allocQPNs,
		"bcast":   broadcastJoinExit,
		"sid":     listenServiceIDs,
		"ibsim":   starveIBSim,
		"v6flood": v6Flood,
	}
	f, ok := modes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown %s mode %q\n", helperEnv, mode)
		os.Exit(2)
	}
	if err := f(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", mode, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func hold() { select {} }

// holdConns: PATH N opens N connections to the attach socket and keeps them; every
// other one says hello, the rest say nothing. Connections the daemon refuses or closes
// stay open on this side too.
func holdConns(args []string) error {
	if len(args) != 2 {
		return errors.New("want PATH N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	addr := &net.UnixAddr{Name: args[0], Net: "unixpacket"}
	held := make([]*net.UnixConn, 0, n)
	failed, end := 0, time.Now().Add(3*time.Minute)
	for i := 0; i < n; i++ {
		c, err := net.DialUnix("unixpacket", nil, addr)
		if err != nil {
			// A full accept queue (EAGAIN): try again a little later, for a while.
			if failed++; time.Now().After(end) {
				return fmt.Errorf("after %d connections: %v", len(held), err)
			}
			time.Sleep(2 * time.Millisecond)
			i--
			continue
		}
		if i%2 == 0 {
			c.Write([]byte(`{"id":1,"op":"hello","version":` + strconv.Itoa(attach.Version) + `}`))
		}
		held = append(held, c)
	}
	fmt.Printf("ready %d connections (%d dials retried)\n", len(held), failed)
	hold()
	return nil
}

// rawSession is the attach protocol spoken by hand: one JSON request, its reply.
type rawSession struct {
	c  *net.UnixConn
	id uint64
}

func dialRaw(path string) (*rawSession, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	r := &rawSession{c: c}
	m, err := r.call(`"op":"hello","version":%d`, attach.Version)
	if err != nil {
		return nil, err
	}
	if m["ok"] != true {
		return nil, fmt.Errorf("hello refused: %v", m)
	}
	return r, nil
}

// call sends {"id":N, fields} and returns the reply to it; events and the descriptors
// that come with messages (the hello's rings) are skipped and closed.
func (r *rawSession) call(format string, a ...any) (map[string]any, error) {
	r.id++
	if _, err := fmt.Fprintf(r.c, `{"id":%d,`+format+`}`, append([]any{r.id}, a...)...); err != nil {
		return nil, err
	}
	buf, oob := make([]byte, 1<<16), make([]byte, 1024)
	r.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		n, oobn, _, _, err := r.c.ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, err
		}
		if n == 0 && oobn == 0 {
			return nil, io.EOF
		}
		if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, s := range scms {
				fds, _ := unix.ParseUnixRights(&s)
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
		var m map[string]any
		if json.Unmarshal(buf[:n], &m) != nil {
			continue
		}
		if id, ok := m["id"].(float64); ok && uint64(id) == r.id {
			return m, nil
		}
	}
}

// allocQPNs: PATH N asks for N QP numbers on device 0 and keeps those it gets.
func allocQPNs(args []string) error {
	if len(args) != 2 {
		return errors.New("want PATH N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	r, err := dialRaw(args[0])
	if err != nil {
		return err
	}
	fmt.Println("attached")
	got, refused := 0, map[float64]int{}
	for range n {
		m, err := r.call(`"op":"alloc_qpn","dev":0`)
		if err != nil {
			return fmt.Errorf("after %d QPNs: %v", got, err)
		}
		if m["ok"] == true {
			got++
		} else {
			refused[m["errno"].(float64)]++
		}
	}
	fmt.Printf("ready %d QPNs held, refused (errno: count) %v\n", got, refused)
	hold()
	return nil
}

// broadcastJoinExit: PATH ADDR N, N times: attach, join the IPoIB broadcast group of the
// device holding ADDR (the daemon's interface there is a member) and go without leaving.
func broadcastJoinExit(args []string) error {
	if len(args) != 3 {
		return errors.New("want PATH ADDR N")
	}
	a, err := netip.ParseAddr(args[1])
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		s, err := attach.Dial(ctx, args[0], nil)
		if err != nil {
			cancel()
			return fmt.Errorf("attach %d: %v", i, err)
		}
		d, err := s.RDMA().LocalDevice(a)
		if err == nil {
			_, err = s.RDMA().JoinMulticast(ctx, d, wire.IPoIBBroadcastMGID(d.PKey|0x8000), wire.IPoIBBroadcastQKey)
		}
		cancel()
		s.Close() // as the process's exit: no leave
		if err != nil {
			return fmt.Errorf("join %d: %v", i, err)
		}
	}
	fmt.Printf("done %d joins of the broadcast group, none left\n", n)
	return nil
}

// listenServiceIDs: PATH tries to listen on IPoIB connected mode's service IDs of both
// devices and keeps whatever it was given.
func listenServiceIDs(args []string) error {
	if len(args) != 1 {
		return errors.New("want PATH")
	}
	r, err := dialRaw(args[0])
	if err != nil {
		return err
	}
	fmt.Println("attached")
	refused, taken := 0, 0
	for dev := range 2 {
		for _, base := range []uint64{0x1000000000000000, 0x0100000000000000} {
			for _, qpn := range []uint64{0x48, 0x49, 0x4a, 0x4b, 0x1000} {
				m, err := r.call(`"op":"cm_listen","dev":%d,"port":1,"sid":%d`, dev, base|qpn)
				if err != nil {
					return err
				}
				if m["ok"] == true {
					taken++
				} else {
					refused++
				}
			}
		}
	}
	fmt.Printf("ready %d listens on the daemon's service IDs taken, %d refused\n", taken, refused)
	hold()
	return nil
}

var le = binary.LittleEndian

// starveIBSim: BASE NODE speaks libumad2sim's protocol to the ibsim server at @BASE:ctl
// as nobody: 300 clients that CONNECT as NODE and vanish without DISCONNECT, 2,000
// CONNECTs for a node that does not exist, and one client that sends 20,000 requests and
// never reads a reply (it stays, not reading).
func starveIBSim(args []string) error {
	if len(args) != 2 {
		return errors.New("want BASE NODE")
	}
	base, node := args[0], args[1]
	abstract := func(what string) *net.UnixAddr {
		return &net.UnixAddr{Name: "@" + base + ":" + what + "\x00", Net: "unixgram"}
	}
	ctl := abstract("ctl")
	msg := func(typ uint32, data []byte) []byte {
		var b [80]byte
		le.PutUint32(b[0:], 0xDEADBEEF)
		le.PutUint32(b[8:], typ)
		le.PutUint32(b[12:], uint32(len(data)))
		copy(b[16:], data)
		return b[:]
	}
	connect := func(pid int, host string) (uint32, error) {
		c, err := net.DialUnix("unixgram", abstract("ctl"+strconv.Itoa(pid)), ctl)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		d, err := net.ListenUnixgram("unixgram", abstract("in"+strconv.Itoa(pid)))
		if err != nil {
			return 0, err
		}
		defer d.Close() // vanish: both sockets go, no DISCONNECT
		var req [44]byte
		le.PutUint32(req[0:], uint32(pid))
		copy(req[12:43], host)
		if _, err := c.Write(msg(1, req[:])); err != nil {
			return 0, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var r [81]byte
		if _, err := c.Read(r[:]); err != nil {
			return 0, err
		}
		return le.Uint32(r[8:]), nil
	}
	pid := os.Getpid() * 10000
	vanished := 0
	for i := range 300 {
		typ, err := connect(pid+i, node)
		if err != nil {
			return fmt.Errorf("CONNECT %d: %v", i, err)
		}
		if typ == 1 {
			vanished++
		}
	}
	refused := 0
	for i := range 2000 {
		if typ, err := connect(pid+1000+i, "nosuchnode"); err == nil && typ != 1 {
			refused++
		}
	}
	bad, err := net.DialUnix("unixgram", abstract("ctlbad"+strconv.Itoa(pid)), ctl)
	if err != nil {
		return err
	}
	bad.SetWriteDeadline(time.Now().Add(10 * time.Second))
	sent := 0
	for ; sent < 20000; sent++ {
		if _, err := bad.Write(msg(5, []byte{2, 0, 0, 0})); err != nil {
			break
		}
	}
	fmt.Printf("ready %d clients vanished, %d CONNECTs refused, %d requests sent unread\n", vanished, refused, sent)
	hold()
	return nil
}

// v6Flood: IFACE N sends one UDP datagram to each of N link-local IPv6 addresses out of
// IFACE that nobody has; each is a neighbour to resolve, and its solicited-node group one
// to join send-only.
func v6Flood(args []string) error {
	if len(args) != 2 {
		return errors.New("want IFACE N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	c, err := net.ListenPacket("udp6", "[::]:0")
	if err != nil {
		return err
	}
	defer c.Close()
	for k := range n {
		ip := netip.AddrFrom16([16]byte{0xfe, 0x80, 12: 0x0a, 13: byte(k >> 16), 14: byte(k >> 8), 15: byte(k)})
		dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip.WithZone(args[0]), 9))
		c.WriteTo([]byte("anyone?"), dst) // a full device queue (ENOBUFS) is the kernel's drop
		if k%250 == 249 {
			time.Sleep(2 * time.Millisecond) // the TUN queue holds 500
		}
	}
	fmt.Printf("done %d destinations\n", n)
	return nil
}
