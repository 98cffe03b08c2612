// Package config is pibgw's configuration: the TOML file `pibgw up --config FILE` reads,
// its defaults (so no file is needed) and its validation. Every error names the file, the
// field and the reason, e.g.
//
//	configs/x.toml: fabric.hcas[1].ports: 40 out of range 1..32
//
// The file's sections are daemon, fabric, sm, ibsim, manner and interfaces; docs/configuration.md documents every
// option and configs/default.toml spells the defaults out.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pibgw/pibgw/fabric/topology"
)

// Defaults.
const (
	DefaultControl      = "/run/pibgw/pibgw.sock"
	DefaultHCACount     = 2
	DefaultSwitchPorts  = 8
	DefaultNodeGUIDBase = 0x0002_c903_0000_0000 // Mellanox's OUI 00:02:c9, as pib used
	DefaultSweep        = 10 * time.Second
	// DefaultPacketLifeTime is opensm's packet_life_time default (0x12).
	DefaultPacketLifeTime = 18
	DefaultPKey           = 0xFFFF
	DefaultPartitionMTU   = 2048
	MaxHCAs               = 64
	MaxSwitchPorts        = 254
	MaxHCAPorts           = 32
	DefaultIBSimSocket    = "sim" // ibsim's and libumad2sim's IBSIM_SOCKNAME default
	DefaultIBSimClients   = 256
	// DefaultSwitchUDPPort is where pibgw switch listens (pib's pibnetd port).
	DefaultSwitchUDPPort = 8432
	DefaultKeepalive     = 250 * time.Millisecond
	DefaultLinkTimeout   = 2 * time.Second
)

// daemon.max_children: its default and its largest value. An idle P_Key child costs
// about 1 MiB (its buffers, verbs objects and TUN device), so the default keeps them
// below 100 MB.
const (
	DefaultMaxChildren = 64
	MaxChildrenLimit   = 4096
)

// sm.mode values.
const (
	SMInternal = "internal" // the built-in SM and SA run here, on sm.hca/sm.port
	// SMExternal: no built-in SM or SA in this process; the SM runs elsewhere: opensm
	// through the ibsim server, the switch process of fabric.switch, or a host of this
	// switch process (fabric.listen).
	SMExternal = "external"
)

// Interface stacks: the IP side of an interface.
const (
	StackKernel    = "kernel"    // a Linux TUN device (root)
	StackUserspace = "userspace" // a gVisor netstack inside the daemon
)

// IPoIB modes (/sys/class/net/ib0/mode's words).
const (
	ModeDatagram  = "datagram"  // the UD QP; MTU = broadcast-group MTU − 4
	ModeConnected = "connected" // RC connections per peer (RFC 4755); MTU 65520
)

// Config is a validated configuration.
type Config struct {
	// Source is the file it came from, "" for the built-in defaults.
	Source     string
	Daemon     Daemon
	Fabric     Fabric
	SM         SM
	IBSim      IBSim
	Manner     Manner
	Interfaces []Interface
}

// Manner is the [manner] section: pib's behaviour choices and pitfall checks (pib's
// behavior, manner_warn and manner_err module options), for the daemon's HCAs and those
// of attached processes (hca.Manner).
type Manner struct {
	// Pitfalls is "warn" (log the object and the rule), "strict" (also fail the verb with
	// EINVAL) or "off".
	Pitfalls string
	// LowestQPN always hands out the lowest free QP number.
	LowestQPN bool
	// RandomErrorFields fills the undefined fields of error completions with random values.
	RandomErrorFields bool
}

// manner.pitfalls values.
const (
	PitfallsWarn   = "warn"
	PitfallsStrict = "strict"
	PitfallsOff    = "off"
)

// IBSim is the [ibsim] section: the server of OFED ibsim's MAD protocol through which
// unmodified opensm and infiniband-diags (LD_PRELOAD=libumad2sim.so, or pibgw exec
// --umad) use the fabric. It is on by default.
type IBSim struct {
	Enable bool
	// SocketName is the Unix abstract sockets' base name (IBSIM_SOCKNAME): the server
	// binds @<name>:ctl and @<name>:out<N>. "" (the default) is IBSimSocketFor the
	// daemon's control socket (Name), so that two daemons never clash.
	SocketName string
	// UDP, when set ("127.0.0.1:7070"), also serves clients that set IBSIM_SERVER_NAME
	// and IBSIM_SERVER_PORT: control on that port, client N's data on port+1+N.
	UDP string
	// MaxClients bounds the clients attached at once (ibsim's limit is 10).
	MaxClients int
}

// Daemon is the [daemon] section.
type Daemon struct {
	Control  string     // control socket path
	LogLevel slog.Level // log_level
	Capture  string     // pcap file capturing every cable from start to stop; "" for none
	// MaxProcs is how many CPUs run pibgw's Go code at once (GOMAXPROCS); 0 means
	// AutoMaxProcs.
	MaxProcs int
	// State is the daemon's state file (its pid and the namespaces it created, locked
	// for its life); "" is the control socket's path with .state for .sock.
	State string
	// Attach is the attach socket through which other processes use the daemon's HCAs
	// (attach.Dial, pibgw exec); "" is attach.sock next to the control socket, "none"
	// turns it off.
	Attach string
	// AttachMode is the attach socket's permission bits (attach_mode, default 0666: any
	// local user may attach, as to /dev/infiniband/uverbs*; the daemon polices them).
	AttachMode os.FileMode
	// AttachMaxProcesses bounds the processes attached (or connecting) at once,
	// AttachMaxPerUser those of one user (uid); AttachHelloTimeout is how long a new
	// connection may take to say hello; AttachMaxQPs bounds one process's QPs on a
	// device. docs/security.md.
	AttachMaxProcesses int
	AttachMaxPerUser   int
	AttachHelloTimeout time.Duration
	AttachMaxQPs       int
	// Metrics is the address of the Prometheus metrics endpoint (GET /metrics), e.g.
	// "127.0.0.1:9464"; "" (the default) serves none.
	Metrics string
	// MaxChildren bounds the P_Key children the daemon runs at once, configured ones
	// and those `pibgw child add` made (max_children; 0 allows none).
	MaxChildren int
}

// AttachPath returns the attach socket the daemon serves, "" for none: daemon.attach, or
// attach.sock in the control socket's directory (/run/pibgw/attach.sock by default).
func (d Daemon) AttachPath() string {
	switch d.Attach {
	case "":
		return filepath.Join(filepath.Dir(d.Control), "attach.sock")
	case "none":
		return ""
	}
	return d.Attach
}

// AutoMaxProcs is max_procs = 0: half the CPUs, at least one. Most of the work a packet
// costs is the kernel's (TUN reads and writes run the IP stack in pibgw's system calls),
// and the programs using the interfaces need CPUs too; measured on two cores, one
// scheduler thread moves iperf3's TCP 5–20 % faster than two, with 15 % less CPU per
// byte, because idle Go threads no longer spin looking for work on the other core.
func AutoMaxProcs(ncpu int) int { return max(1, ncpu/2) }

// Fabric is the [fabric] section: HCAs pib_0…pib_{n-1} cabled, port by port, to ports
// 1, 2, … of one managed switch.
//
// With Switch set the fabric's switch is another process (pibgw switch): every HCA port
// is plugged into it over a UDP link instead of into a switch of this process.
type Fabric struct {
	NodeGUIDBase uint64
	SwitchPorts  int
	HCAs         []HCA

	Switch string // HOST:PORT of the switch process; "" for the built-in switch
	Listen string // [HOST]:PORT where this fabric's switch serves other processes (pibgw switch)
	// TopologyFile is fabric.topology: an ibsim net file of switches and links built
	// instead of the one switch; Topology is its contents.
	TopologyFile string
	Topology     *topology.Topology
	// Uplinks plug ports of this process's switch into other switch processes, so that
	// switches in several processes make one fabric.
	Uplinks     []Uplink
	PSKFile     string         // psk_file as configured
	PSK         []byte         // its key; nil: no authentication, Allow applies
	Allow       []netip.Prefix // sources accepted without a PSK (nil: loopback; the switch is always)
	Keepalive   time.Duration  // keepalive interval of UDP links
	LinkTimeout time.Duration  // a UDP link silent this long is down
	// NodeDesc is fabric.node_desc, the HCAs' NodeDescription format (NodeDescription);
	// "" for the default.
	NodeDesc string
}

// NodeDescription returns HCA i's NodeDescription (IBA 14.2.5.2, at most 64 bytes) under
// fabric.node_desc: rdma-ndd's format, %h the host name and %d the device name (pib_0),
// %% a per cent sign. Unset, a host of a multi-host fabric uses rdma-ndd's default "%h %d",
// so that each host's HCAs are told apart in ibnetdiscover; one-process fabrics and
// switch processes keep pib's "pibgw HCA-<i+1>".
func (f *Fabric) NodeDescription(i int, hostname string) string {
	format := f.NodeDesc
	if format == "" {
		if f.Switch == "" {
			return fmt.Sprintf("pibgw HCA-%d", i+1)
		}
		format = "%h %d"
	}
	var b strings.Builder
	for k := 0; k < len(format); k++ {
		if format[k] != '%' || k+1 == len(format) {
			b.WriteByte(format[k])
			continue
		}
		k++
		switch format[k] {
		case 'h':
			b.WriteString(hostname)
		case 'd':
			b.WriteString(f.HCAs[i].Name)
		default:
			b.WriteByte(format[k])
		}
	}
	d := b.String()
	if len(d) > NodeDescLen {
		d = d[:NodeDescLen]
	}
	return d
}

// NodeDescLen is the size of a NodeDescription (IBA 14.2.5.2).
const NodeDescLen = 64

// CheckNodeDesc reports what is wrong with a fabric.node_desc format: only %h, %d and %%
// may follow a per cent sign.
func CheckNodeDesc(format string) error {
	for k := 0; k < len(format); k++ {
		if format[k] != '%' {
			continue
		}
		if k+1 == len(format) {
			return errors.New("ends in a lone %")
		}
		k++
		if c := format[k]; c != 'h' && c != 'd' && c != '%' {
			return fmt.Errorf("%%%c: only %%h (host name), %%d (device name) and %%%% are known", c)
		}
	}
	return nil
}

// Uplink is one [[fabric.uplinks]] entry: switch port Port plugs into the switch process
// at Switch (HOST:PORT) as a host port would.
type Uplink struct {
	Port   int
	Switch string
}

// HCA is one soft HCA.
type HCA struct {
	Name     string // pib_N
	Ports    int
	NodeGUID uint64 // port n's GUID is NodeGUID | n
}

// PortGUID is the GUID of port n.
func (h HCA) PortGUID(n int) uint64 { return h.NodeGUID | uint64(n) }

// SM is the [sm] section: the built-in subnet manager and SA.
type SM struct {
	// Mode is SMInternal (the built-in SM and SA run here) or SMExternal (not here:
	// opensm through the ibsim server, or the switch process of a multi-host fabric;
	// HCA and Port still name the default ibsim node). The default is SMInternal, and
	// SMExternal on a host whose fabric.switch is another process.
	Mode          string
	HCA           string // device the SM runs on
	Port          int
	Priority      uint8
	SweepInterval time.Duration // 0: no periodic light sweep
	// PacketLifeTime is what the SA reports on paths (4.096 µs × 2^n): opensm's
	// packet_life_time, default DefaultPacketLifeTime.
	PacketLifeTime uint8
	Partitions     []Partition
}

// Partition is one [[sm.partitions]] entry (opensm partitions.conf in TOML).
type Partition struct {
	Name    string
	PKey    uint16 // 15-bit partition number | 0x8000
	Members []Member
	IPoIB   bool // pre-create the IPoIB broadcast group
	MTU     int  // broadcast-group MTU in bytes
	QKey    uint32
}

// Member is a partition member: a port GUID or every port.
type Member struct {
	All  bool
	GUID uint64
	Full bool
}

// Interface is one [[interfaces]] entry.
type Interface struct {
	Name   string
	Parent string // for a P_Key child: the parent interface's name
	HCA    string
	Port   int
	PKey   uint16 // full-membership form (0x8000 set)
	NetNS  string // "" for the daemon's own namespace (kernel stack only)
	Addrs  []netip.Prefix
	Mode   string
	Stack  string
	MTU    int // 0: from the broadcast group (IB MTU − 4)
	// MaxNeighbors bounds the neighbour table (Linux's gc_thresh3; 0 = 1024) and
	// MaxGroups the multicast groups (0 = 1024).
	MaxNeighbors int
	MaxGroups    int
}

// HCA returns the HCA named name.
func (c *Config) HCA(name string) (HCA, bool) {
	for _, h := range c.Fabric.HCAs {
		if h.Name == name {
			return h, true
		}
	}
	return HCA{}, false
}

// Interface returns the interface named name.
func (c *Config) Interface(name string) (Interface, bool) {
	for _, i := range c.Interfaces {
		if i.Name == name {
			return i, true
		}
	}
	return Interface{}, false
}

// NodeGUID is HCA i's node GUID as pib derives it: base | (3+i)<<8, leaving the low byte
// for port numbers and 0x02 of that byte for the system image GUID.
func NodeGUID(base uint64, i int) uint64 { return base | uint64(i+3)<<8 }

// HCAName is HCA i's device name.
func HCAName(i int) string { return fmt.Sprintf("pib_%d", i) }

// Default returns the configuration `pibgw up` runs with no file.
func Default() *Config {
	c, err := Parse("", nil)
	if err != nil {
		panic("config: defaults invalid: " + err.Error())
	}
	return c
}

// Name is the ibsim server's socket name for a daemon whose control socket is control:
// SocketName, or IBSimSocketFor(control).
func (s IBSim) Name(control string) string {
	if s.SocketName != "" {
		return s.SocketName
	}
	return IBSimSocketFor(control)
}

// IBSimSocketFor derives the ibsim socket name from a daemon's control socket path:
// "sim" (ibsim's and libumad2sim's own default) for DefaultControl, else "pibgw-" and
// 12 hex digits of the path's SHA-256 — a name of its own for every control socket,
// as each daemon has one.
func IBSimSocketFor(control string) string {
	if control == "" || control == DefaultControl {
		return DefaultIBSimSocket
	}
	if abs, err := filepath.Abs(control); err == nil {
		control = abs
	}
	h := sha256.Sum256([]byte(control))
	return "pibgw-" + hex.EncodeToString(h[:6])
}
