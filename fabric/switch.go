package fabric

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/wire"
)

// LID ranges (IBA 4.1.3, 7.11.1).
const (
	LIDUnicastMin   = 0x0001
	LIDUnicastMax   = 0xBFFF
	LIDMulticastMin = 0xC000
	LIDMulticastMax = 0xFFFE
	LIDPermissive   = 0xFFFF
)

// Switch table sizes.
const (
	// LFTCap is the number of LIDs the linear forwarding table covers: every unicast LID
	// (IBA 14.2.5.10, SwitchInfo:LinearFDBCap).
	LFTCap = 49152
	// LFTBlockSize is the number of entries in one LinearForwardingTable attribute block.
	LFTBlockSize = 64
	// DefaultMFTCap is the number of MLIDs from 0xC000 the multicast forwarding table
	// covers by default (SwitchInfo:MulticastFDBCap).
	DefaultMFTCap = 1024
	// MaxSwitchPorts is the most external ports a switch has (port numbers 1..254; 255 is
	// the LFT's "drop" entry).
	MaxSwitchPorts = 254
	// PortDrop is the LFT entry that discards a packet (IBA 14.2.5.10).
	PortDrop = 0xFF
)

// PortMask is a set of switch ports, bit i standing for port i (port 0 is the switch's
// management port). It holds the MulticastForwardingTable entry of one MLID
// (IBA 14.2.5.11).
type PortMask [4]uint64

// Set adds port i.
func (m *PortMask) Set(i int) { m[i>>6] |= 1 << (i & 63) }

// Clear removes port i.
func (m *PortMask) Clear(i int) { m[i>>6] &^= 1 << (i & 63) }

// Has reports whether port i is in the mask.
func (m PortMask) Has(i int) bool { return m[i>>6]&(1<<(i&63)) != 0 }

// IsZero reports whether the mask is empty.
func (m PortMask) IsZero() bool { return m == PortMask{} }

// Ports returns the ports in the mask in increasing order.
func (m PortMask) Ports() []int {
	var ps []int
	for w, x := range m {
		for x != 0 {
			b := bits.TrailingZeros64(x)
			ps = append(ps, w*64+b)
			x &^= 1 << b
		}
	}
	return ps
}

// MakePortMask returns the mask of the given ports.
func MakePortMask(ports ...int) PortMask {
	var m PortMask
	for _, p := range ports {
		m.Set(p)
	}
	return m
}

// DropReason says why a switch discarded a packet.
type DropReason int

const (
	DropMalformed    DropReason = iota // shorter than an LRH, or PktLen disagrees with its length
	DropLID0                           // DLID 0 is reserved (IBA 4.1.3)
	DropPermissive                     // DLID 0xFFFF and no management agent to take it
	DropNoRoute                        // LFT entry 0xFF, unset, or beyond the table
	DropNoMFT                          // MLID beyond the MFT, or no port in its mask but the one it came in on
	DropRawLNH                         // LNH 00 (Raw): no IBA transport; pibgw does not forward it
	DropPortDown                       // the out port has no cable or its cable is down
	DropNoManagement                   // addressed to port 0 and no management agent set
	DropBadPort                        // LFT entry names a port the switch does not have
	DropPortState                      // a data packet on a port that is not Active (IBA 7.2): only SMPs pass
	DropManagement                     // to the switch's agent, but not an SMP or PMA MAD it answers, or a directed route that ends nowhere
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{
	"malformed", "lid0", "permissive", "no-route", "no-mft", "raw-lnh", "port-down",
	"no-management", "bad-port", "port-state", "management",
}

func (r DropReason) String() string {
	if r >= 0 && r < numDropReasons {
		return dropReasonNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", int(r))
}

// PortCounters is a snapshot of one switch port's counters. The first fields follow
// IBA PortCounters (16.1.3.5): data counts are in 4-byte words, counted over the packet
// from the LRH through the ICRC.
type PortCounters struct {
	XmitPkts     uint64
	RcvPkts      uint64
	XmitData     uint64
	RcvData      uint64
	XmitDiscards uint64 // packets for this out port dropped: it was down, or not Active for data
	RcvErrors    uint64 // malformed packets received on this port
	// Unicast and multicast packets (PortCountersExtended, IBA 16.1.4.11).
	UnicastXmitPkts, UnicastRcvPkts, MulticastXmitPkts, MulticastRcvPkts uint64
	// Drops counts packets received on this port and discarded, by reason.
	Drops [numDropReasons]uint64
}

// Dropped returns the count for one reason.
func (c PortCounters) Dropped(r DropReason) uint64 { return c.Drops[r] }

// SwitchConfig configures NewSwitch.
type SwitchConfig struct {
	// Ports is the number of external ports, numbered 1..Ports (at most 254). Default 8.
	Ports int
	// MFTCap is the number of MLIDs from 0xC000 the MFT covers; default 1024.
	MFTCap int

	// Identity the switch's subnet management agent reports (NodeInfo, IBA 14.2.5.3).
	// NodeGUID is also every port's GUID; zero picks a process-unique GUID
	// (DefaultSwitchGUIDBase + n). SystemImageGUID defaults to NodeGUID, NodeDesc to
	// "pibgw switch <GUID>".
	NodeGUID        uint64
	SystemImageGUID uint64
	NodeDesc        string
	VendorID        uint32 // 24 bits
	DeviceID        uint16
	Revision        uint32
	// PKeyTableLen is the number of P_Key entries of port 0 (NodeInfo:PartitionCap) and
	// of each external port (SwitchInfo:PartitionEnforcementCap); default 32.
	PKeyTableLen int
	// Managed makes the ports behave as under a subnet manager (IBA 7.2, 14.2.5.6): a
	// port whose link trains comes up in Init and forwards only SMPs (VL15) until the SM
	// sets it Armed and then Active. When false, ports go Active as soon as their link is
	// up, for fabrics without an SM (tests, static configurations).
	Managed bool
}

// DefaultSwitchGUIDBase is where the GUIDs of switches configured without one start.
const DefaultSwitchGUIDBase = 0x0002_C9FF_FE00_0000

var switchSeq atomic.Uint64

// Switch forwards packets between its ports by DLID (IBA 18.2.4): unicast through the
// linear forwarding table, multicast through the multicast forwarding table.
//
// Forwarding takes no lock: the tables are arrays of atomic words, so the subnet manager
// can update entries while packets flow, and each lookup is one atomic load.
type Switch struct {
	nports int
	ports  []swPort // index 0 is the management port

	// lft packs four one-byte port entries per word: LID l is byte l&3 of word l>>2.
	lft []atomic.Uint32
	// mft holds mftWords words per MLID.
	mft      []atomic.Uint64
	mftCap   int
	mftWords int

	mgmt    atomic.Pointer[mgmtBox]
	mbCache [2]atomic.Pointer[mgmtBuf]  // buffers of the SMI (getMgmtBuf)
	ext     atomic.Pointer[externalBox] // the external management client on port 0 (external.go)

	// Management state (sma.go): identity is fixed at creation, the rest changes under mmu.
	guid, sysGUID uint64
	desc          string
	vendorID      uint32
	deviceID      uint16
	revision      uint32
	pkeyCap       int
	managed       bool
	tid           atomic.Uint64

	mmu   sync.Mutex
	port0 port0Info
	si    switchInfo
	sl2vl map[uint16][8]byte // SLtoVLMappingTable by in<<8|out; absent = all SLs to VL0
	psc   func(sw *Switch, port int, up bool)
}

type mgmtBox struct{ h ManagementHandler }

// ManagementHandler takes packets addressed to the switch itself (its management port
// 0), with the external port each arrived on.
type ManagementHandler interface {
	HandleManagement(inPort int, pkts [][]byte)
}

// ManagementFunc adapts a function to a ManagementHandler.
type ManagementFunc func(inPort int, pkts [][]byte)

// HandleManagement implements ManagementHandler.
func (f ManagementFunc) HandleManagement(inPort int, pkts [][]byte) { f(inPort, pkts) }

// swPort is one port of a switch, and the Port a cable plugs into.
type swPort struct {
	sw   *Switch
	num  int
	link atomic.Pointer[linkBox]
	up   atomic.Bool

	// state is the logical PortState (IBA 14.2.5.6): forwarding reads it once per run
	// of packets. phys is PortPhysicalState.
	state, phys atomic.Uint32

	xmitPkts, rcvPkts, xmitData, rcvData, xmitDiscards, rcvErrors atomic.Uint64
	mcXmit, mcRcv                                                 atomic.Uint64
	// Unicast counts are derived, total − multicast + adj, to keep the unicast fast
	// path free of extra atomics; a PMA reset moves adj (pma.go).
	ucXmitAdj, ucRcvAdj atomic.Int64
	drops               [numDropReasons]atomic.Uint64

	mi portMgmt // under sw.mmu
	_  [64]byte // keep ports on separate cache lines
}

// NewSwitch returns a switch with empty forwarding tables: every LFT entry is 0xFF (drop)
// and every MFT mask is empty.
func NewSwitch(cfg SwitchConfig) *Switch {
	n := cfg.Ports
	if n <= 0 {
		n = 8
	}
	if n > MaxSwitchPorts {
		n = MaxSwitchPorts
	}
	mftCap := cfg.MFTCap
	if mftCap <= 0 {
		mftCap = DefaultMFTCap
	}
	if mftCap > LIDMulticastMax-LIDMulticastMin+1 {
		mftCap = LIDMulticastMax - LIDMulticastMin + 1
	}
	sw := &Switch{
		nports:   n,
		ports:    make([]swPort, n+1),
		lft:      make([]atomic.Uint32, LFTCap/4),
		mftCap:   mftCap,
		mftWords: (n + 1 + 63) / 64,
	}
	sw.mft = make([]atomic.Uint64, mftCap*sw.mftWords)
	for i := range sw.lft {
		sw.lft[i].Store(0xFFFFFFFF)
	}
	for i := range sw.ports {
		sw.ports[i].sw, sw.ports[i].num = sw, i
	}
	sw.initManagement(cfg)
	sw.mgmt.Store(&mgmtBox{agent{sw}})
	return sw
}

// NumPorts returns the number of external ports.
func (sw *Switch) NumPorts() int { return sw.nports }

// Port returns external port i (1..NumPorts) for plugging a cable.
func (sw *Switch) Port(i int) Port {
	if i < 1 || i > sw.nports {
		panic(fmt.Sprintf("fabric: switch has no port %d (ports 1..%d)", i, sw.nports))
	}
	return &sw.ports[i]
}

// SetManagement replaces the handler of packets addressed to the switch itself: those
// whose LFT entry is port 0, multicast whose mask holds port 0, and permissive-DLID
// packets (directed-route SMPs, IBA 14.2.2). A new switch has its own agent installed
// (Agent: the SMI that forwards directed-route SMPs, the SMA and the PMA); nil removes
// every handler, and such packets are then dropped.
func (sw *Switch) SetManagement(h ManagementHandler) {
	if h == nil {
		sw.mgmt.Store(nil)
		return
	}
	sw.mgmt.Store(&mgmtBox{h})
}

// Agent returns the switch's own management agent, to reinstall it with SetManagement
// or to wrap it.
func (sw *Switch) Agent() ManagementHandler { return agent{sw} }

// SendFromPort transmits pkts out of external port port, as the switch's management
// agent does when it answers. Packets are dropped and counted when the port is down.
func (sw *Switch) SendFromPort(port int, pkts [][]byte) {
	if port < 1 || port > sw.nports {
		return
	}
	sw.ports[port].transmit(pkts, false)
}

// SetLFT sets the out port of unicast LID lid. Port 0 means the switch itself; 0xFF drops.
func (sw *Switch) SetLFT(lid uint16, port uint8) {
	if int(lid) >= LFTCap {
		return
	}
	w := &sw.lft[lid>>2]
	shift := 8 * uint(lid&3)
	for {
		old := w.Load()
		nw := old&^(0xFF<<shift) | uint32(port)<<shift
		if w.CompareAndSwap(old, nw) {
			return
		}
	}
}

// LFT returns the out port of lid; 0xFF when there is none.
func (sw *Switch) LFT(lid uint16) uint8 {
	if int(lid) >= LFTCap {
		return PortDrop
	}
	return uint8(sw.lft[lid>>2].Load() >> (8 * uint(lid&3)))
}

// SetLFTBlock sets LIDs block*64 .. block*64+63, as a LinearForwardingTable SMP does
// (IBA 14.2.5.10: the attribute modifier is the block number).
func (sw *Switch) SetLFTBlock(block int, entries [LFTBlockSize]uint8) {
	if block < 0 || (block+1)*LFTBlockSize > LFTCap {
		return
	}
	base := block * LFTBlockSize / 4
	for i := 0; i < LFTBlockSize/4; i++ {
		e := entries[4*i : 4*i+4]
		sw.lft[base+i].Store(uint32(e[0]) | uint32(e[1])<<8 | uint32(e[2])<<16 | uint32(e[3])<<24)
	}
}

// LFTBlock returns block block of the LFT.
func (sw *Switch) LFTBlock(block int) [LFTBlockSize]uint8 {
	var out [LFTBlockSize]uint8
	for i := range out {
		out[i] = PortDrop
	}
	if block < 0 || (block+1)*LFTBlockSize > LFTCap {
		return out
	}
	// Sixteen words of four entries each (as SetLFTBlock stores them), not 64 lookups:
	// the SM's every LFT Set is answered with the block.
	base := block * LFTBlockSize / 4
	for i := 0; i < LFTBlockSize/4; i++ {
		w := sw.lft[base+i].Load()
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = uint8(w), uint8(w>>8), uint8(w>>16), uint8(w>>24)
	}
	return out
}

// MFTCap returns the number of MLIDs, from 0xC000, that the MFT covers.
func (sw *Switch) MFTCap() int { return sw.mftCap }

// SetMFT sets the ports multicast LID mlid is forwarded to. Bits for ports the switch
// does not have are ignored.
func (sw *Switch) SetMFT(mlid uint16, ports PortMask) {
	i, ok := sw.mftIndex(mlid)
	if !ok {
		return
	}
	for w := 0; w < sw.mftWords; w++ {
		x := ports[w]
		if w == sw.mftWords-1 && (sw.nports+1)%64 != 0 {
			x &= 1<<((sw.nports+1)%64) - 1
		}
		sw.mft[i+w].Store(x)
	}
}

// MFT returns the ports mlid is forwarded to.
func (sw *Switch) MFT(mlid uint16) PortMask {
	var m PortMask
	i, ok := sw.mftIndex(mlid)
	if !ok {
		return m
	}
	for w := 0; w < sw.mftWords; w++ {
		m[w] = sw.mft[i+w].Load()
	}
	return m
}

func (sw *Switch) mftIndex(mlid uint16) (int, bool) {
	if mlid < LIDMulticastMin || int(mlid-LIDMulticastMin) >= sw.mftCap {
		return 0, false
	}
	return int(mlid-LIDMulticastMin) * sw.mftWords, true
}

// Counters returns a snapshot of port port's counters (0 is the management port).
func (sw *Switch) Counters(port int) PortCounters {
	var c PortCounters
	if port < 0 || port > sw.nports {
		return c
	}
	p := &sw.ports[port]
	c.XmitPkts, c.RcvPkts = p.xmitPkts.Load(), p.rcvPkts.Load()
	c.XmitData, c.RcvData = p.xmitData.Load(), p.rcvData.Load()
	c.XmitDiscards, c.RcvErrors = p.xmitDiscards.Load(), p.rcvErrors.Load()
	c.MulticastXmitPkts, c.MulticastRcvPkts = p.mcXmit.Load(), p.mcRcv.Load()
	c.UnicastXmitPkts = derived(c.XmitPkts, c.MulticastXmitPkts, p.ucXmitAdj.Load())
	c.UnicastRcvPkts = derived(c.RcvPkts, c.MulticastRcvPkts, p.ucRcvAdj.Load())
	for i := range c.Drops {
		c.Drops[i] = p.drops[i].Load()
	}
	return c
}

// PortUp reports whether external port port has a cable that is up.
func (sw *Switch) PortUp(port int) bool {
	if port < 1 || port > sw.nports {
		return false
	}
	p := &sw.ports[port]
	return p.up.Load() && p.link.Load() != nil
}

// Attach implements Port.
func (p *swPort) Attach(l Link) {
	if l == nil {
		p.link.Store(nil)
		p.setLink(false)
		return
	}
	p.link.Store(&linkBox{l})
	p.setLink(true)
}

// LinkStateChanged implements LinkStateReceiver.
func (p *swPort) LinkStateChanged(up bool) { p.setLink(up) }

// transmit sends pkts out of p, counting them, or drops them when p is down.
func (p *swPort) transmit(pkts [][]byte, mcast bool) {
	lb := p.link.Load()
	if lb == nil || !p.up.Load() {
		p.xmitDiscards.Add(uint64(len(pkts)))
		return
	}
	n := uint64(len(pkts))
	p.xmitPkts.Add(n)
	p.xmitData.Add(words(pkts))
	if mcast {
		p.mcXmit.Add(n)
	}
	lb.l.Send(pkts)
}

// derived is a unicast count: all packets less the multicast ones, plus the adjustment
// PMA resets leave (never below zero under a racing reset).
func derived(total, mcast uint64, adj int64) uint64 {
	v := int64(total-mcast) + adj
	if v < 0 {
		return 0
	}
	return uint64(v)
}

func words(pkts [][]byte) uint64 {
	var n int
	for _, q := range pkts {
		n += len(q)
	}
	return uint64(n / 4)
}

// A route is a packet's forwarding decision, packed so that consecutive packets with
// equal routes are forwarded together as one sub-slice.
type route uint32

const (
	routeUnicast   route = 1 << 24 // | out port (0 = management)
	routeMulticast route = 2 << 24 // | MLID
	routeDrop      route = 3 << 24 // | DropReason
	routeMgmt      route = 4 << 24 // permissive DLID to the management agent
	routeKindMask  route = 0xFF << 24
	// routeVL15 marks unicast and multicast routes of VL15 packets (SMPs), which pass
	// ports that are not Active (IBA 7.6.5).
	routeVL15      route = 1 << 23
	routeValueMask route = 0xFFFF
)

func (sw *Switch) route(pkt []byte) route {
	if len(pkt) < wire.LRHLen {
		return routeDrop | route(DropMalformed)
	}
	lrh := wire.LRH(pkt)
	// PktLen counts 4-byte words from the LRH through the ICRC (IBA 7.7.8); a packet
	// on a Link carries no VCRC, so the two must agree exactly.
	if int(lrh.PktLen())*4 != len(pkt) {
		return routeDrop | route(DropMalformed)
	}
	// A Raw packet (LNH 00, IBA 7.7.7) has no IBA transport header and cannot leave the
	// subnet. Dropping it is pibgw's policy, not IBA's (hardware switches forward it by
	// DLID): nothing in pibgw sends or receives raw packets, so one on a link is a bug.
	// Raw IPv6 packets (LNH 01) are forwarded like any other.
	if lrh.LNH() == wire.LNHRaw {
		return routeDrop | route(DropRawLNH)
	}
	dlid := lrh.DLID()
	switch {
	case dlid == 0:
		return routeDrop | route(DropLID0)
	case dlid < LIDMulticastMin:
		if int(dlid) >= LFTCap {
			return routeDrop | route(DropNoRoute)
		}
		port := uint8(sw.lft[dlid>>2].Load() >> (8 * uint(dlid&3)))
		if port == PortDrop {
			return routeDrop | route(DropNoRoute)
		}
		if int(port) > sw.nports {
			return routeDrop | route(DropBadPort)
		}
		if lrh.VL() == 15 {
			return routeUnicast | routeVL15 | route(port)
		}
		return routeUnicast | route(port)
	case dlid == LIDPermissive:
		return routeMgmt
	default:
		if _, ok := sw.mftIndex(dlid); !ok {
			return routeDrop | route(DropNoMFT)
		}
		if lrh.VL() == 15 {
			return routeMulticast | routeVL15 | route(dlid)
		}
		return routeMulticast | route(dlid)
	}
}

// Receive implements Port: the switch forwards what arrives on this port. Runs of
// consecutive packets with the same route go out as one sub-slice of pkts.
func (p *swPort) Receive(pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	sw := p.sw
	p.rcvPkts.Add(uint64(len(pkts)))
	p.rcvData.Add(words(pkts))
	// IBA 7.2: a port that is not Active passes only SMPs (VL15); one load per batch.
	active := p.state.Load() == portActive
	r := sw.route(pkts[0])
	for i := 0; i < len(pkts); {
		j := i + 1
		var next route
		for ; j < len(pkts); j++ {
			if next = sw.route(pkts[j]); next != r {
				break
			}
		}
		p.forward(r, pkts[i:j], active)
		i, r = j, next
	}
}

const portActive = 4 // PortInfo:PortState Active

func (p *swPort) forward(r route, run [][]byte, active bool) {
	sw := p.sw
	kind := r & routeKindMask
	data := r&routeVL15 == 0
	if kind == routeMulticast {
		p.mcRcv.Add(uint64(len(run)))
	}
	if data && !active && (kind == routeUnicast || kind == routeMulticast) {
		p.drops[DropPortState].Add(uint64(len(run)))
		return
	}
	switch kind {
	case routeUnicast:
		out := int(r & routeValueMask)
		if out == 0 {
			p.toManagement(run)
			return
		}
		op := &sw.ports[out]
		if op.link.Load() == nil || !op.up.Load() {
			p.drops[DropPortDown].Add(uint64(len(run)))
		} else if data && op.state.Load() != portActive {
			p.drops[DropPortState].Add(uint64(len(run)))
			op.xmitDiscards.Add(uint64(len(run)))
			return
		}
		op.transmit(run, false)
	case routeMulticast:
		mlid := uint16(r & routeValueMask)
		i, _ := sw.mftIndex(mlid)
		sent := false
		for w := 0; w < sw.mftWords; w++ {
			x := sw.mft[i+w].Load()
			if w == p.num>>6 {
				// IBA 18.2.4: a multicast packet never goes back out of its ingress port.
				x &^= 1 << (p.num & 63)
			}
			for x != 0 {
				b := bits.TrailingZeros64(x)
				x &^= 1 << b
				sent = true
				out := w*64 + b
				if out == 0 {
					p.toManagement(run)
					continue
				}
				op := &sw.ports[out]
				if data && op.state.Load() != portActive {
					op.xmitDiscards.Add(uint64(len(run)))
					continue
				}
				op.transmit(run, true)
			}
		}
		if !sent {
			p.drops[DropNoMFT].Add(uint64(len(run)))
		}
	case routeMgmt:
		if sw.mgmt.Load() == nil {
			p.drops[DropPermissive].Add(uint64(len(run)))
			return
		}
		p.toManagement(run)
	default:
		reason := DropReason(r & routeValueMask)
		p.drops[reason].Add(uint64(len(run)))
		if reason == DropMalformed {
			p.rcvErrors.Add(uint64(len(run)))
		}
	}
}

func (p *swPort) toManagement(run [][]byte) {
	m := p.sw.mgmt.Load()
	if m == nil {
		p.drops[DropNoManagement].Add(uint64(len(run)))
		return
	}
	mp := &p.sw.ports[0]
	mp.xmitPkts.Add(uint64(len(run)))
	mp.xmitData.Add(words(run))
	m.h.HandleManagement(p.num, run)
}
