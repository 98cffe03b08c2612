// Package ipoib is IP over InfiniBand (RFC 4391, 4392; RFC 4755 for connected mode): an
// interface per (HCA port, P_Key) with its own UD QP and the 20-byte hardware address,
// the partition's broadcast group joined through the SA, the 4-byte encapsulation
// header, ARP and IPv6 neighbour discovery over the fabric, IP multicast mapped to
// MGIDs, and P_Key child interfaces. The IP side is a tun.Device.
package ipoib

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/tun"
)

// HWAddrLen is the length of an IPoIB hardware address (RFC 4391 §9.1.1).
const HWAddrLen = 20

// HWAddr is an IPoIB hardware address: flags (0x80 = connected mode supported), the UD
// QPN (24 bits), and the port GID.
type HWAddr [HWAddrLen]byte

// Mode is the interface's mode, as /sys/class/net/ib0/mode shows it.
type Mode int

const (
	Datagram  Mode = iota // UD QP, MTU = IB MTU − 4
	Connected             // RC QPs per neighbour (RFC 4755), MTU up to 65520
)

// Config creates an interface.
type Config struct {
	Name   string     // "ib0", "ib0.8001"
	Port   *hca.Port  // the HCA port it runs on
	PKey   uint16     // full-membership P_Key of its partition (0xFFFF for the default)
	SA     *sa.Client // path records and multicast joins
	Device tun.Device // the IP side
	Mode   Mode
	// CM is the IB CM of Port, which connected mode runs on (nil: datagram mode only).
	// The interface listens on its IPoIB-CM service IDs in either mode.
	CM *ibcm.CM
	// CMIdleTimeout closes connections idle this long (default DefaultCMIdleTimeout,
	// Linux's 512 s).
	CMIdleTimeout time.Duration
	// Addrs are the interface's IP addresses: ARP and ND answer for them.
	Addrs []netip.Prefix
	// NeighborTimeout ages neighbour entries out (default 60 s, Linux's gc_stale_time).
	NeighborTimeout time.Duration
	// MaxNeighbors bounds the neighbour table (default DefaultMaxNeighbors: Linux's
	// gc_thresh3; collection starts at half of it). MaxGroups bounds the multicast
	// groups (default DefaultMaxGroups). Overflow is counted (drop_neigh_overflow,
	// drop_group_overflow).
	MaxNeighbors int
	MaxGroups    int
	Clock        clock.Clock
	Logger       *slog.Logger
	// OnState, if set, is called with every change of the interface's State (the
	// daemon turns the TUN device's carrier on and off with it). It must not call back
	// into the interface.
	OnState func(State)
}

// State says whether an interface is up and, if not, why.
type State struct {
	Up     bool
	Reason string // e.g. "P_Key 0x8001 not in the port's table", "broadcast group not joined"
}

// Info is what `pibgw show` prints for an interface.
type Info struct {
	Name      string
	Mode      Mode
	MTU       int
	HWAddr    HWAddr
	Broadcast HWAddr
	PKey      uint16
	QPN       uint32
	QKey      uint32
	State     State
	Addrs     []netip.Prefix
	Counters  map[string]uint64 // packets/bytes in and out, drops by reason
}

// Neighbor is one entry of the neighbour cache (`pibgw neigh`).
type Neighbor struct {
	IP     netip.Addr
	HWAddr HWAddr
	State  string // "INCOMPLETE", "REACHABLE", "STALE", "FAILED" (ip-neighbour's names)
	Age    time.Duration
	// Connected mode: whether a connection to the neighbour is up, its state
	// ("connecting", "connected"; empty when there is none), our TX QPN and the peer's
	// RX QPN.
	Connected bool
	CMState   string
	QPN       uint32
	RemoteQPN uint32
}

// The interface type itself lives in interface.go:
//
//	func New(cfg Config) (*Interface, error)
//	func (*Interface) Run(ctx context.Context) error // moves packets until ctx is done or Close
//	func (*Interface) Close() error
//	func (*Interface) Info() Info
//	func (*Interface) Neighbors() []Neighbor
//	func (*Interface) SetAddrs(addrs []netip.Prefix)
//	func (*Interface) State() State
//
// All methods are safe for concurrent use.
