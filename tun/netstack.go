//go:build !pibgw_omit_netstack

package tun

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

const (
	netstackNIC = tcpip.NICID(1)
	// The stack may queue this many bytes of outbound packets (at most 4096 packets,
	// at least 256) before Read takes them; beyond that it drops, like a NIC with a
	// full transmit ring, and TCP recovers. Too short a queue loses a TCP window's
	// burst at small MTUs.
	netstackQueueBytes = 16 << 20
	// netstackBatch is the most packets one Read returns.
	netstackBatch = 128
)

// Netstack is a userspace IP stack (gVisor's netstack: IPv4, IPv6, TCP, UDP, ICMP, IGMP,
// MLD) with one interface, whose link side is the Device: Read returns the packets the
// stack sends out of the interface, Write delivers packets to it. Go programs use the
// stack through DialContext, Listen and ListenPacket.
//
// One goroutine may Read while others Write.
type Netstack struct {
	name   string
	stack  *stack.Stack
	ep     *channel.Endpoint
	ctx    context.Context // cancelled by Close, to end a blocked Read
	cancel context.CancelFunc
	closed atomic.Bool

	closeOnce sync.Once

	// Dropped counts packets lost at the link: outbound ones too large for the
	// caller's buffer, inbound ones that are not IPv4 or IPv6.
	dropped atomic.Uint64
}

var _ Device = (*Netstack)(nil)

// NewNetstack creates a userspace IP stack as cfg says. Close releases it.
func NewNetstack(cfg NetstackConfig) (*Netstack, error) {
	if cfg.Name == "" {
		cfg.Name = "netstack0"
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultNetstackMTU
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("tun: netstack %q: MTU %d out of range 68–65535", cfg.Name, cfg.MTU)
	}
	s := stack.New(stack.Options{
		NetworkProtocols: []stack.NetworkProtocolFactory{
			ipv4.NewProtocolWithOptions(ipv4.Options{IGMP: ipv4.IGMPOptions{Enabled: true}}),
			ipv6.NewProtocolWithOptions(ipv6.Options{MLD: ipv6.MLDOptions{Enabled: true}}),
		},
		TransportProtocols: []stack.TransportProtocolFactory{
			tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6,
		},
		// Connections to the stack's own addresses stay inside it.
		HandleLocal: true,
	})
	ns := &Netstack{
		name:  cfg.Name,
		stack: s,
		ep:    channel.New(min(4096, max(256, netstackQueueBytes/cfg.MTU)), uint32(cfg.MTU), ""),
	}
	ns.ctx, ns.cancel = context.WithCancel(context.Background())
	fail := func(format string, args ...any) (*Netstack, error) {
		ns.Close()
		return nil, fmt.Errorf("tun: netstack %q: "+format, append([]any{cfg.Name}, args...)...)
	}
	// SACK is off by default; it matters for throughput with any loss.
	sack := tcpip.TCPSACKEnabled(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		return fail("enable TCP SACK: %v", err)
	}
	if err := s.CreateNICWithOptions(netstackNIC, ns.ep, stack.NICOptions{Name: cfg.Name}); err != nil {
		return fail("create NIC: %v", err)
	}
	var has4, has6 bool
	for _, p := range cfg.Addrs {
		if !p.IsValid() {
			return fail("invalid address %v", p)
		}
		a := p.Addr().Unmap()
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits -= 96
		}
		proto := ipv4.ProtocolNumber
		if a.Is6() {
			if cfg.MTU < header.IPv6MinimumMTU {
				return fail("IPv6 address %v needs MTU ≥ 1280, have %d", p, cfg.MTU)
			}
			proto = ipv6.ProtocolNumber
			has6 = true
		} else {
			has4 = true
		}
		pa := tcpip.ProtocolAddress{
			Protocol:          proto,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFromSlice(a.AsSlice()), PrefixLen: bits},
		}
		if err := s.AddProtocolAddress(netstackNIC, pa, stack.AddressProperties{}); err != nil {
			return fail("add address %v: %v", p, err)
		}
		s.AddRoute(tcpip.Route{Destination: pa.AddressWithPrefix.Subnet(), NIC: netstackNIC})
	}
	// The interface is the stack's only one: the default route of each family in use.
	if has4 {
		s.AddRoute(tcpip.Route{Destination: header.IPv4EmptySubnet, NIC: netstackNIC})
	}
	if has6 {
		s.AddRoute(tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: netstackNIC})
	}
	return ns, nil
}

// Read returns packets the stack sends out of its interface, blocking until there is at
// least one. A packet larger than its buffer is dropped (and counted in Dropped).
func (ns *Netstack) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	n := 0
	for n == 0 {
		pkt := ns.ep.ReadContext(ns.ctx)
		if pkt == nil {
			return 0, ErrClosed
		}
		for pkt != nil {
			if size, ok := copyPacket(bufs[n][offset:], pkt); ok {
				sizes[n] = size
				n++
			} else {
				ns.dropped.Add(1)
			}
			pkt.DecRef()
			if n == len(bufs) {
				break
			}
			pkt = ns.ep.Read()
		}
	}
	return n, nil
}

// copyPacket copies pkt's bytes (headers and data) into dst without allocating.
func copyPacket(dst []byte, pkt *stack.PacketBuffer) (int, bool) {
	size := pkt.Size()
	if size > len(dst) {
		return 0, false
	}
	views, skip := pkt.AsViewList()
	n := 0
	for v := views.Front(); v != nil && n < size; v = v.Next() {
		b := v.AsSlice()
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		n += copy(dst[n:size], b[skip:])
		skip = 0
	}
	return n, n == size
}

// Write delivers packets to the stack as if they had arrived on its interface. Packets
// that are neither IPv4 nor IPv6 are dropped (and counted in Dropped); malformed ones are
// dropped and counted by the stack. The buffers may be reused as soon as Write returns.
func (ns *Netstack) Write(bufs [][]byte, offset int) (int, error) {
	if ns.closed.Load() {
		return 0, ErrClosed
	}
	for _, b := range bufs {
		p := b[offset:]
		var proto tcpip.NetworkProtocolNumber
		switch {
		case len(p) >= header.IPv4MinimumSize && p[0]>>4 == 4:
			proto = ipv4.ProtocolNumber
		case len(p) >= header.IPv6MinimumSize && p[0]>>4 == 6:
			proto = ipv6.ProtocolNumber
		default:
			ns.dropped.Add(1)
			continue
		}
		// MakeWithData copies p into the stack's pooled chunks.
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(p)})
		ns.ep.InjectInbound(proto, pkt)
		pkt.DecRef()
	}
	return len(bufs), nil
}

// MTU returns the interface's MTU.
func (ns *Netstack) MTU() int { return int(ns.ep.MTU()) }

// SetMTU changes the interface's MTU; connections keep the segment size they started
// with.
func (ns *Netstack) SetMTU(mtu int) error {
	if ns.closed.Load() {
		return ErrClosed
	}
	if mtu < 68 || mtu > 65535 {
		return fmt.Errorf("tun: netstack %q: MTU %d out of range 68–65535", ns.name, mtu)
	}
	ns.ep.SetMTU(uint32(mtu))
	return nil
}

// Name returns the interface name.
func (ns *Netstack) Name() string { return ns.name }

// BatchSize returns the most packets one Read returns.
func (ns *Netstack) BatchSize() int { return netstackBatch }

// Dropped returns how many packets the link side dropped (see Read and Write).
func (ns *Netstack) Dropped() uint64 { return ns.dropped.Load() }

// Stack returns the gVisor stack, for what the methods here do not offer.
func (ns *Netstack) Stack() *stack.Stack { return ns.stack }

// Close aborts the stack's connections and releases it; a blocked Read returns
// ErrClosed.
func (ns *Netstack) Close() error {
	ns.closeOnce.Do(func() {
		ns.closed.Store(true)
		ns.cancel()
		ns.stack.Close()
		ns.ep.Close()
		ns.stack.Wait()
	})
	return nil
}

// DialContext connects to address on network ("tcp", "tcp4", "tcp6", "udp", "udp4",
// "udp6") through the stack. The address is an IP literal and a port ("10.0.0.2:80",
// "[fe80::2]:80"); there is no name resolution.
func (ns *Netstack) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if ns.closed.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: ErrClosed}
	}
	fa, proto, err := ns.fullAddress(network, address, false)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
		return gonet.DialContextTCP(ctx, ns.stack, fa, proto)
	default:
		return gonet.DialUDP(ns.stack, nil, &fa, proto)
	}
}

// Listen listens for TCP connections on address ("10.0.0.1:80", ":80", "[::]:80")
// through the stack. network is "tcp", "tcp4" or "tcp6"; "tcp" with no host listens on
// IPv4 and IPv6.
func (ns *Netstack) Listen(network, address string) (net.Listener, error) {
	if ns.closed.Load() {
		return nil, &net.OpError{Op: "listen", Net: network, Err: ErrClosed}
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	fa, proto, err := ns.fullAddress(network, address, true)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	return gonet.ListenTCP(ns.stack, fa, proto)
}

// ListenPacket opens a UDP endpoint on address through the stack. network is "udp",
// "udp4" or "udp6".
func (ns *Netstack) ListenPacket(network, address string) (net.PacketConn, error) {
	if ns.closed.Load() {
		return nil, &net.OpError{Op: "listen", Net: network, Err: ErrClosed}
	}
	switch network {
	case "udp", "udp4", "udp6":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	fa, proto, err := ns.fullAddress(network, address, true)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	return gonet.DialUDP(ns.stack, &fa, nil, proto)
}

// fullAddress parses "host:port" for network. A listening address may leave the host
// out or unspecified; "tcp"/"udp" then bind IPv6, which takes IPv4 too.
func (ns *Netstack) fullAddress(network, address string, listen bool) (tcpip.FullAddress, tcpip.NetworkProtocolNumber, error) {
	var fa tcpip.FullAddress
	var want4, want6 bool
	switch network {
	case "tcp", "udp":
	case "tcp4", "udp4":
		want4 = true
	case "tcp6", "udp6":
		want6 = true
	default:
		return fa, 0, net.UnknownNetworkError(network)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fa, 0, err
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fa, 0, fmt.Errorf("invalid port %q", port)
	}
	fa.Port = uint16(pn)
	var ip netip.Addr
	if host != "" {
		if ip, err = netip.ParseAddr(host); err != nil {
			return fa, 0, fmt.Errorf("address %q is not an IP literal (the netstack resolves no names)", host)
		}
		ip = ip.WithZone("").Unmap()
	}
	if !ip.IsValid() || ip.IsUnspecified() {
		if !listen {
			return fa, 0, fmt.Errorf("missing address in %q", address)
		}
		if want4 || (ip.IsValid() && ip.Is4()) {
			return fa, ipv4.ProtocolNumber, nil
		}
		return fa, ipv6.ProtocolNumber, nil
	}
	if (want4 && !ip.Is4()) || (want6 && !ip.Is6()) {
		return fa, 0, &net.AddrError{Err: "address family does not match network " + network, Addr: host}
	}
	if ip.Is6() && (ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()) {
		fa.NIC = netstackNIC // link-local addresses need their interface
	}
	fa.Addr = tcpip.AddrFromSlice(ip.AsSlice())
	if ip.Is4() {
		return fa, ipv4.ProtocolNumber, nil
	}
	return fa, ipv6.ProtocolNumber, nil
}
