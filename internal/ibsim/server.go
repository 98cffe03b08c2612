package ibsim

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
	"golang.org/x/sys/unix"
)

// Config configures a Server.
type Config struct {
	// SocketName is the base of the Unix abstract socket names (IBSIM_SOCKNAME, "sim"):
	// the server binds @<name>:ctl and, per client slot N, @<name>:out<N>. "" serves no
	// Unix sockets.
	SocketName string
	// UDP ("127.0.0.1:7070"), when valid, serves ibsim's remote mode too: control on
	// that address, client N's data from port+1+N.
	UDP string
	// MaxClients bounds the clients attached at once (ibsim has 10); 0 means 256.
	MaxClients int
	// Devices and Switches are the nodes clients attach to, by SIM_HOST: a device's name
	// (pib_0), "name/port" for another port than the first, a NodeDescription
	// ("pibgw switch-1": the switch's port 0), or a port GUID.
	Devices  []*hca.Device
	Switches []*fabric.Switch
	// Default is the port a client without SIM_HOST attaches to.
	Default *hca.Port
	// ExternalSM: the fabric has no built-in SM, so the port of a client that declares
	// itself the SM (SET_ISSM, opensm) hands it SA requests (class 0x03), traps and
	// SMInfo.
	ExternalSM bool
	// ReapInterval is how often the server looks for clients that went away without
	// DISCONNECT (their data socket's address no longer exists) and frees their slots;
	// 0 means 10 s. It also looks whenever every slot is taken.
	ReapInterval time.Duration
	Logger       *slog.Logger
}

// Stats counts what the server did.
type Stats struct {
	Clients       int    // attached now
	Connects      uint64 // CONNECTs accepted
	CtlRejected   uint64 // control datagrams ignored (size, magic, client id) or answered ERROR
	MADsIn        uint64 // MADs clients sent into the fabric
	MADsOut       uint64 // MADs handed to clients
	BadMADs       uint64 // client datagrams dropped by checkRequest
	Undeliverable uint64 // client MADs echoed back with status ETIMEDOUT
	NoClient      uint64 // MADs for a client that is gone or not on the arrival port
	QueueFull     uint64 // MADs dropped because a client did not read fast enough
	// CtlReplyDropped counts control replies dropped because the client's control
	// socket was full (it does not read its replies): replies never wait for a client.
	CtlReplyDropped uint64
	Reaped          uint64 // clients detached because they went away without DISCONNECT
}

// Server is a running ibsim protocol server.
type Server struct {
	cfg Config
	log *slog.Logger

	ctls []net.PacketConn
	udp  netip.AddrPort // the UDP control address, when serving UDP

	mu      sync.RWMutex
	slots   []*client // by client id; nil = free
	gens    []uint8   // each slot's generation: bumped when a client takes it
	next    int       // where the search for a free slot starts (round robin)
	nclient int
	ports   map[*hca.Port]*portAgent
	sws     []*fabric.Switch
	closed  bool

	wg   sync.WaitGroup
	quit chan struct{} // closed by Close: stops the reaper

	refusals logLimiter // the refused control requests' warnings

	connects, ctlRejected, madsIn, madsOut, badMADs, undeliverable, noClient, queueFull atomic.Uint64
	ctlReplyDropped, reaped                                                             atomic.Uint64
}

// The server puts its client's id (slot) in TID bits 48-59 of every request the client
// sends and the slot's generation in bits 60-62, with bit 63 (hca.TIDExternal) marking it;
// responses find their client by them, as ibsim finds its clients by TID >> 48
// (libumad2sim keeps its agent id in bits 32-47 and ignores the bits above). The
// generation keeps a late response — the SA resending RMPP segments of a table the
// client never acknowledged (libumad2sim does no RMPP) — from the next client in that
// slot, whose libumad2sim has no agent for it and dies of it (its receive thread takes
// the queue of an agent that is not there: SIGSEGV). Slots are also taken round robin,
// so that one is reused only after every other.
const (
	tidSlotShift = 48
	tidSlotMask  = 0xFFF
	tidGenShift  = 60
	tidGenMask   = 0x7
	maxSlots     = tidSlotMask + 1
)

// requestTID is tid as client c sends it: its slot and generation in bits 48-62.
func (c *client) requestTID(tid uint64) uint64 {
	return tid&^(uint64(0xFFFF)<<tidSlotShift) | hca.TIDExternal | uint64(c.gen)<<tidGenShift | uint64(c.id)<<tidSlotShift
}

// responder returns the client whose request a response with tid answers, or nil (no
// such client any more).
func (s *Server) responder(tid uint64) *client {
	c := s.client(uint32(tid>>tidSlotShift) & tidSlotMask)
	if c == nil || c.gen != uint8(tid>>tidGenShift)&tidGenMask {
		return nil
	}
	return c
}

// New starts a server. Close stops it.
func New(cfg Config) (*Server, error) {
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 256
	}
	if cfg.MaxClients > maxSlots {
		return nil, fmt.Errorf("ibsim: max clients %d > %d", cfg.MaxClients, maxSlots)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Default == nil && len(cfg.Devices) > 0 {
		cfg.Default = cfg.Devices[0].Port(1)
	}
	if cfg.Default == nil {
		return nil, errors.New("ibsim: no node to attach clients to")
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 10 * time.Second
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "ibsim"), ports: map[*hca.Port]*portAgent{},
		quit: make(chan struct{}), refusals: logLimiter{every: refusalLogInterval}}
	s.slots = make([]*client, cfg.MaxClients)
	s.gens = make([]uint8, cfg.MaxClients)
	if cfg.SocketName != "" {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.unixName("ctl"), Net: "unixgram"})
		if err != nil {
			return nil, fmt.Errorf("ibsim: control socket @%s:ctl: %w", cfg.SocketName, err)
		}
		if rc, err := c.SyscallConn(); err == nil {
			// Room for ctlUnreadMax replies to each of many clients (past wmem_max: root).
			rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, ctlSendBuffer) })
		}
		s.ctls = append(s.ctls, c)
	}
	if cfg.UDP != "" {
		ap, err := netip.ParseAddrPort(cfg.UDP)
		if err != nil {
			s.closeCtls()
			return nil, fmt.Errorf("ibsim: udp %q: %w", cfg.UDP, err)
		}
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			s.closeCtls()
			return nil, fmt.Errorf("ibsim: udp control socket: %w", err)
		}
		s.udp = ap
		s.ctls = append(s.ctls, c)
	}
	if len(s.ctls) == 0 {
		return nil, errors.New("ibsim: neither a socket name nor a UDP address to serve")
	}
	for _, d := range cfg.Devices {
		for _, p := range d.Ports() {
			a := &portAgent{s: s, port: p}
			s.ports[p] = a
			p.SetExternalMADHandler(a)
		}
	}
	for _, sw := range cfg.Switches {
		ep := switchEndpoint{sw}
		sw.SetExternal(func(m *fabric.ExternalMAD) {
			c := s.responder(wire.MAD(m.MAD).TID())
			if c == nil || c.ep != endpoint(ep) {
				s.noClient.Add(1)
				return
			}
			c.deliver(m.SLID, m.DLID, m.SrcQP, m.MAD)
		})
		s.sws = append(s.sws, sw)
	}
	for _, c := range s.ctls {
		s.wg.Add(1)
		go s.serveCtl(c)
	}
	s.wg.Add(1)
	go s.reapLoop()
	s.log.Info("ibsim server listening", "socket", cfg.SocketName, "udp", cfg.UDP, "max_clients", cfg.MaxClients)
	return s, nil
}

// unixName is the abstract socket name @<base>:<what> with the trailing NUL that
// libumad2sim counts in its address length.
func (s *Server) unixName(what string) string {
	return "@" + s.cfg.SocketName + ":" + what + "\x00"
}

func (s *Server) closeCtls() {
	for _, c := range s.ctls {
		c.Close()
	}
}

// Close stops serving, detaches every client and waits for the server's goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	var cls []*client
	for i, c := range s.slots {
		if c != nil {
			cls = append(cls, c)
			s.slots[i] = nil
		}
	}
	s.nclient = 0
	s.mu.Unlock()
	close(s.quit)
	s.closeCtls()
	for _, c := range cls {
		s.detach(c)
	}
	for p := range s.ports {
		p.SetExternalMADHandler(nil)
		s.serveVendorClasses(hcaEndpoint{p}) // no clients now: unregistered
	}
	for _, sw := range s.sws {
		sw.SetExternal(nil)
	}
	s.wg.Wait()
}

// CAs returns the names of the HCAs clients can attach to, the default node's first:
// the devices a libibumad of the server's clients lists (pibgw exec --umad).
func (s *Server) CAs() []string {
	var out []string
	if s.cfg.Default != nil {
		out = append(out, s.cfg.Default.Device().Name())
	}
	for _, d := range s.cfg.Devices {
		if !slices.Contains(out, d.Name()) {
			out = append(out, d.Name())
		}
	}
	return out
}

// Stats snapshots the counters.
func (s *Server) Stats() Stats {
	s.mu.RLock()
	n := s.nclient
	s.mu.RUnlock()
	return Stats{
		Clients: n, Connects: s.connects.Load(), CtlRejected: s.ctlRejected.Load(),
		MADsIn: s.madsIn.Load(), MADsOut: s.madsOut.Load(), BadMADs: s.badMADs.Load(),
		Undeliverable: s.undeliverable.Load(), NoClient: s.noClient.Load(), QueueFull: s.queueFull.Load(),
		CtlReplyDropped: s.ctlReplyDropped.Load(), Reaped: s.reaped.Load(),
	}
}

// serveCtl answers control datagrams until c is closed. Replies leave from c, as
// libumad2sim's control socket is connected to it.
func (s *Server) serveCtl(c net.PacketConn) {
	defer s.wg.Done()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		s.log.Error("ibsim control socket", "err", err)
		return
	}
	buf := make([]byte, ctlLen+1) // one more: a longer datagram must not pass for 80 bytes
	unread := map[string]int{}
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Debug("control read", "err", err)
			continue
		}
		msg, err := parseCtl(buf[:n])
		if err != nil {
			// ibsim answers nothing to these, so neither does the server.
			s.ctlRejected.Add(1)
			s.log.Debug("control message dropped", "err", err)
			continue
		}
		if !s.handleCtl(&msg, from) {
			s.ctlRejected.Add(1)
			continue
		}
		s.reply(rc, buf[:ctlLen], from, unread)
	}
}

// A client's control socket is connected to the server's (libumad2sim's is), and Linux
// then queues every reply for it, however many it leaves unread (unix_dgram_sendmsg
// checks the receive queue's length only for a socket not connected to the sender), each
// charged to the server's socket's send buffer — which every client's replies share. So
// one client that does not read would, with its unread replies, leave none for the
// others. The server therefore sends at most ctlUnreadMax replies to one address while
// the socket has replies in flight (SIOCOUTQ: sent, not yet read); when every reply has
// been read the counts start again. A libumad2sim client reads each reply before it
// sends its next request, so it has one in flight at most.
const (
	ctlUnreadMax   = 16
	ctlUnreadAddrs = 4096 // addresses counted at once; more are not replied to until all is read
	ctlSendBuffer  = 4 << 20
)

// reply sends a control reply to from without waiting: the control socket is shared by
// every client, so one that does not read its replies (its socket's queue full) must not
// hold up the others' — its reply is dropped and counted, as a datagram can be.
func (s *Server) reply(rc syscall.RawConn, b []byte, from net.Addr, unread map[string]int) {
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		var sa unix.Sockaddr
		switch a := from.(type) {
		case *net.UnixAddr:
			if n, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil && n == 0 {
				clear(unread)
			}
			k, ok := unread[a.Name]
			if k >= ctlUnreadMax || (!ok && len(unread) >= ctlUnreadAddrs) {
				serr = unix.EAGAIN
				return true
			}
			unread[a.Name] = k + 1
			// Go cuts an abstract name at its first NUL; libumad2sim bound it with one.
			sa = &unix.SockaddrUnix{Name: a.Name + "\x00"}
		case *net.UDPAddr:
			// In the socket's family: Go opens a wildcard address as an IPv6 socket.
			ap := a.AddrPort()
			if own, _ := unix.Getsockname(int(fd)); ap.Addr().Unmap().Is4() {
				if _, v4 := own.(*unix.SockaddrInet4); v4 {
					sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
					break
				}
			}
			sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		default:
			return true
		}
		serr = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		return true // never wait for the socket to take it
	}); err != nil {
		serr = err
	}
	switch {
	case serr == unix.EAGAIN:
		s.ctlReplyDropped.Add(1)
	case serr != nil:
		s.log.Debug("control reply", "to", from, "err", serr)
	}
}

// handleCtl runs one control message, rewriting msg's datagram into the reply (type 0 on
// failure). It reports false when no reply must be sent.
func (s *Server) handleCtl(msg *ctlMsg, from net.Addr) bool {
	fail := func(format string, args ...any) bool {
		// Any local user can send these, as fast as they like: at most one line per
		// refusalLogInterval, which counts the ones not shown.
		if ok, more := s.refusals.allow(time.Now()); ok {
			s.log.Warn("ibsim control request refused", "type", msg.typ, "client", msg.clientID, "reason", fmt.Sprintf(format, args...),
				"more_refused_since_last_line", more)
		}
		s.ctlRejected.Add(1)
		le.PutUint32(msg.raw[8:], ctlError)
		return true
	}
	if msg.typ == ctlConnect {
		if err := s.connect(msg, from); err != nil {
			return fail("%v", err)
		}
		return true
	}
	c := s.client(msg.clientID)
	if c == nil {
		if msg.clientID >= uint32(s.cfg.MaxClients) {
			return false // ibsim: no reply to a client id out of range
		}
		if msg.typ == ctlDisconnect {
			return true // ibsim: disconnecting a free slot succeeds
		}
		return fail("client %d is not connected", msg.clientID)
	}
	p := c.ep
	d := msg.data
	switch msg.typ {
	case ctlDisconnect:
		s.remove(c, "disconnect")
	case ctlGetPort:
		// struct sim_port { uint16_t lid; uint8_t state; }
		clear(d)
		le.PutUint16(d[0:], p.lid())
		d[2] = p.state()
	case ctlGetVendor:
		var ni [wire.SMPDataLen]byte
		p.smaGet(wire.AttrNodeInfo, 0, ni[:])
		n := wire.NodeInfo(ni[:])
		clear(d)
		le.PutUint32(d[0:], n.VendorID())
		le.PutUint32(d[4:], uint32(n.DeviceID()))
		le.PutUint32(d[8:], n.Revision())
		le.PutUint64(d[16:], 1) // fw_ver, as ibsim
	case ctlGetGID:
		clear(d)
		le.PutUint64(d[0:], p.gidPrefix())
		le.PutUint64(d[8:], p.nodeGUID())
	case ctlGetGUID:
		clear(d)
		le.PutUint64(d[0:], p.nodeGUID())
	case ctlGetNodeInfo:
		clear(d)
		if st := p.smaGet(wire.AttrNodeInfo, 0, d); st != 0 {
			return fail("NodeInfo: status %#x", st)
		}
	case ctlGetPortInfo:
		n := uint32(d[0])
		if int(n) > p.numPorts() {
			n = 0 // ibsim: out of range means the client's own port
		}
		clear(d)
		if st := p.smaGet(wire.AttrPortInfo, n, d); st != 0 {
			return fail("PortInfo %d: status %#x", n, st)
		}
	case ctlSetIsSM:
		if !s.setIsSM(c, le.Uint32(d[0:]) != 0) {
			return fail("no SM on a switch's port 0")
		}
	case ctlGetPKeys:
		clear(d)
		if st := p.smaGet(wire.AttrPKeyTable, 0, d); st != 0 {
			return fail("P_KeyTable: status %#x", st)
		}
	default:
		return fail("unknown type %d", msg.typ)
	}
	return true
}

// findEndpoint resolves SIM_HOST: a device name (its first port), "name/port", a
// NodeDescription (a device's first port, a switch's port 0), or a port GUID.
func (s *Server) findEndpoint(id string) (endpoint, error) {
	if id == "" {
		return hcaEndpoint{s.cfg.Default}, nil
	}
	name, num := id, 1
	if i := strings.LastIndexByte(id, '/'); i > 0 {
		if n, err := strconv.Atoi(id[i+1:]); err == nil {
			name, num = id[:i], n
		}
	}
	for _, d := range s.cfg.Devices {
		if d.Name() == name || d.NodeDesc() == name {
			if p := d.Port(num); p != nil {
				return hcaEndpoint{p}, nil
			}
			return nil, fmt.Errorf("node %q has no port %d", name, num)
		}
	}
	g, gerr := strconv.ParseUint(strings.TrimPrefix(id, "0x"), 16, 64)
	for _, sw := range s.cfg.Switches {
		if sw.NodeDesc() == id || (gerr == nil && sw.NodeGUID() == g) {
			return switchEndpoint{sw}, nil
		}
	}
	if gerr == nil {
		for _, d := range s.cfg.Devices {
			for _, p := range d.Ports() {
				if p.GUID() == g {
					return hcaEndpoint{p}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("unknown node %q", id)
}

// connect attaches a new client (CONNECT): a free slot, its data socket connected to
// the client's, and the reply's client id and node id.
func (s *Server) connect(msg *ctlMsg, from net.Addr) error {
	ci := parseClientInfo(msg.data)
	ep, err := s.findEndpoint(ci.nodeID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	slot := -1
	for try := 0; ; try++ {
		if s.closed {
			s.mu.Unlock()
			return errors.New("server closing")
		}
		for k := range s.slots {
			if i := (s.next + k) % len(s.slots); s.slots[i] == nil {
				slot = i
				break
			}
		}
		if slot >= 0 {
			break
		}
		s.mu.Unlock()
		if try > 0 || s.reap() == 0 {
			return fmt.Errorf("all %d client slots are taken", s.cfg.MaxClients)
		}
		s.mu.Lock()
	}
	if ci.issm != 0 && s.smClientLocked(ep) != nil {
		s.mu.Unlock()
		return fmt.Errorf("an SM is already attached at %v", ep)
	}
	s.next = (slot + 1) % len(s.slots)
	s.gens[slot] = (s.gens[slot] + 1) & tidGenMask
	c := newClient(s, slot, ep, ci.id)
	c.gen = s.gens[slot]
	s.slots[slot] = c // reserved while the socket is made
	s.nclient++
	s.mu.Unlock()
	fd, peer, err := s.dialClient(slot, ci.id, from)
	if err == nil {
		c.peer = peer
		err = c.start(fd)
	}
	if err != nil {
		s.mu.Lock()
		s.slots[slot] = nil
		s.nclient--
		s.mu.Unlock()
		return err
	}
	if ci.issm != 0 && !s.setIsSM(c, true) {
		s.remove(c, "no SM on a switch's port 0")
		return errors.New("no SM on a switch's port 0")
	}
	s.connects.Add(1)
	s.serveVendorClasses(ep)
	s.log.Info("ibsim client attached", "client", slot, "pid", ci.id, "at", fmt.Sprint(ep), "issm", ci.issm != 0)
	ci.id = uint32(slot)
	if ci.nodeID == "" {
		ci.nodeID = ep.name()
	}
	ci.put(msg.data)
	return nil
}

// dialClient makes client slot's data socket, bound where libumad2sim connects its own
// (@<base>:out<slot>, or UDP port+1+slot) and connected to the client's
// (@<base>:in<pid>, or the client's address with its data port). The socket is the
// server's own blocking descriptor, outside Go's network poller: the client's reader
// waits for it in recvmmsg(2) (client.readLoop).
func (s *Server) dialClient(slot int, id uint32, from net.Addr) (int, unix.Sockaddr, error) {
	var family int
	var local, remote unix.Sockaddr
	switch a := from.(type) {
	case *net.UnixAddr:
		family = unix.AF_UNIX
		local = &unix.SockaddrUnix{Name: s.unixName("out" + strconv.Itoa(slot))}
		remote = &unix.SockaddrUnix{Name: s.unixName("in" + strconv.Itoa(int(id)))}
	case *net.UDPAddr:
		lp := int(s.udp.Port()) + 1 + slot
		if lp > 0xFFFF || id == 0 || id > 0xFFFF {
			return -1, nil, fmt.Errorf("data port for client %d out of range", slot)
		}
		ra, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return -1, nil, fmt.Errorf("client address %v", a)
		}
		la, ra := s.udp.Addr().Unmap(), ra.Unmap()
		switch {
		case la.Is4() && ra.Is4():
			family = unix.AF_INET
			local = &unix.SockaddrInet4{Port: lp, Addr: la.As4()}
			remote = &unix.SockaddrInet4{Port: int(id), Addr: ra.As4()}
		case la.Is6() && ra.Is6():
			family = unix.AF_INET6
			local = &unix.SockaddrInet6{Port: lp, Addr: la.As16()}
			remote = &unix.SockaddrInet6{Port: int(id), Addr: ra.As16()}
		default:
			return -1, nil, fmt.Errorf("client %v and server %v differ in address family", a, s.udp)
		}
	default:
		return -1, nil, fmt.Errorf("control message from %v", from)
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("data socket for client %d: %w", slot, err)
	}
	if err := unix.Bind(fd, local); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("data socket for client %d: bind: %w", slot, err)
	}
	if err := unix.Connect(fd, remote); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("data socket for client %d: connect: %w", slot, err)
	}
	return fd, remote, nil
}

// client returns the attached client with id, or nil.
func (s *Server) client(id uint32) *client {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if id >= uint32(len(s.slots)) {
		return nil
	}
	return s.slots[id]
}

// remove detaches c if it is still attached.
func (s *Server) remove(c *client, why string) {
	s.mu.Lock()
	if s.slots[c.id] != c {
		s.mu.Unlock()
		return
	}
	s.slots[c.id] = nil
	s.nclient--
	s.mu.Unlock()
	s.log.Info("ibsim client detached", "client", c.id, "pid", c.pid, "why", why)
	s.detach(c)
	s.serveVendorClasses(c.ep)
}

// detach stops c's goroutines and gives up its SM role.
func (s *Server) detach(c *client) {
	if c.issm.Load() {
		s.setIsSM(c, false)
	}
	c.stop()
}

func (s *Server) smClientLocked(ep endpoint) *client {
	for _, c := range s.slots {
		if c != nil && c.ep == ep && c.issm.Load() {
			return c
		}
	}
	return nil
}

// setIsSM records whether c is its port's SM (SET_ISSM; opensm sends 1 when it opens the
// issm device and 0 at exit): PortInfo:CapabilityMask.IsSM (IBA 14.2.5.6) follows, and
// with an external SM the port hands it SA requests, traps and SMInfo. It reports false
// for a switch's port 0, where pibgw runs no SM.
func (s *Server) setIsSM(c *client, on bool) bool {
	he, ok := c.ep.(hcaEndpoint)
	if !ok {
		return !on
	}
	c.issm.Store(on)
	s.mu.RLock()
	sm := s.smClientLocked(c.ep)
	s.mu.RUnlock()
	he.setIsSM(sm != nil)
	s.serveVendorClasses(c.ep)
	if !s.cfg.ExternalSM {
		return true
	}
	p := he.p
	agent := s.ports[p]
	if sm != nil {
		p.SetTrapHandler(agent)
		p.SetSMInfoHandler(agent)
		p.RegisterMADHandler(wire.MgmtClassSubnAdm, false, agent)
	} else {
		p.SetTrapHandler(nil)
		p.SetSMInfoHandler(nil)
		p.RegisterMADHandler(wire.MgmtClassSubnAdm, false, nil)
	}
	return true
}

// Vendor-specific classes of range 2 (IBA 13.4.4, table 102: 0x30–0x4F), whose MADs carry
// an OUI: user programs serve them through umad_register_oui — OpenIB's ping (0x32,
// `ibping -S`) and sysstat (0x33, `ibsysstat -S`) agents.
const (
	vendorRange2First = 0x30
	vendorRange2Last  = 0x4F
)

// serveVendorClasses has an HCA port hand requests of the vendor classes of range 2 to the
// servers attached there — clients that are not its SM and have sent no request, as
// `ibping -S` and `ibsysstat -S`, which only answer — while there are any. libumad2sim
// does not tell the server which classes a program registered, so each server gets every
// such request: an `ibping -S` attached at pib_1 answers `ibping` pings to pib_1's LID.
// Programs that send requests (infiniband-diags' queries, opensm) get none: libumad2sim's
// receive thread dies of a MAD for a class its program has no agent for — as does a
// second server of another class at the same port (ibsysstat -S beside ibping -S).
// Without a server the port answers these requests "unsupported" at once (hca's unmatched
// MADs).
func (s *Server) serveVendorClasses(ep endpoint) {
	he, ok := ep.(hcaEndpoint)
	if !ok {
		return
	}
	s.mu.RLock()
	a, serve := s.ports[he.p], len(s.serversLocked(he.p, nil)) > 0
	s.mu.RUnlock()
	if a == nil {
		return
	}
	var h hca.MADHandler
	if serve {
		h = vendorAgent{a}
	}
	for class := vendorRange2First; class <= vendorRange2Last; class++ {
		he.p.RegisterMADHandler(uint8(class), false, h)
	}
}

// serversLocked appends to buf the servers attached at port p: clients that are not its
// SM and have sent no request.
func (s *Server) serversLocked(p *hca.Port, buf []*client) []*client {
	for _, c := range s.slots {
		if c != nil && c.ep == endpoint(hcaEndpoint{p}) && !c.issm.Load() && c.requests.Load() == 0 {
			buf = append(buf, c)
		}
	}
	return buf
}

// vendorAgent takes the vendor-class requests arriving at a port for its servers.
type vendorAgent struct{ a *portAgent }

// HandleMAD runs on the fabric's goroutine: it only queues, a copy for each server that
// answered a request of the class before, or, when none did, for each server that has
// answered none yet; with neither, a Get or Set is answered "unsupported" (status
// 0x000C), as the port answers it without servers. A server that answered requests of
// other classes only gets none of this one: its libumad2sim would die of it.
func (v vendorAgent) HandleMAD(m *hca.MAD) {
	var buf, fresh [8]*client
	bit := uint32(1) << (wire.MAD(m.Data).MgmtClass() - vendorRange2First)
	v.a.s.mu.RLock()
	cs := v.a.s.serversLocked(v.a.port, buf[:0])
	v.a.s.mu.RUnlock()
	known, unknown := cs[:0], fresh[:0]
	for _, c := range cs {
		switch served := c.served.Load(); {
		case served&bit != 0:
			known = append(known, c)
		case served == 0:
			unknown = append(unknown, c)
		}
	}
	if len(known) == 0 {
		known = unknown
	}
	if len(known) == 0 {
		v.a.s.noClient.Add(1)
		if meth := wire.MAD(m.Data).Method(); meth == wire.MethodGet || meth == wire.MethodSet {
			hca.ReplyUnsupported(m)
		}
		return
	}
	for _, c := range known {
		c.deliver(m.From.SLID, m.From.DLID, m.From.QPN, m.Data)
	}
}

// portAgent receives, at one port, what belongs to the server's clients there: the
// responses to their requests (by TID), and, for the port's SM client, traps, SMInfo and
// SA requests.
type portAgent struct {
	s    *Server
	port *hca.Port
}

// HandleMAD runs on the fabric's goroutine: it only queues.
func (a *portAgent) HandleMAD(m *hca.MAD) {
	mad := wire.MAD(m.Data)
	var c *client
	if mad.IsResponse() || mad.Method() == wire.MethodTrapRepress {
		tid := mad.TID()
		if tid&hca.TIDExternal != 0 {
			c = a.s.responder(tid)
		}
	} else {
		a.s.mu.RLock()
		c = a.s.smClientLocked(hcaEndpoint{a.port})
		a.s.mu.RUnlock()
	}
	if c == nil || c.ep != endpoint(hcaEndpoint{m.Port}) {
		a.s.noClient.Add(1)
		return
	}
	c.deliver(m.From.SLID, m.From.DLID, m.From.QPN, m.Data)
}
