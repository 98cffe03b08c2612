// Package control is the daemon's control API: a small JSON protocol on a unix socket
// (default /run/pibgw/pibgw.sock, mode 0600), the server the daemon runs and the client
// the CLI verbs use.
//
// # Protocol
//
// One request per connection. The client connects, writes one JSON Request followed by a
// newline, and reads one JSON Response line:
//
//	→ {"verb":"show","iface":"ib0"}
//	← {"ok":true,"result":[{"name":"ib0",…}]}
//	← {"ok":false,"error":"unknown interface \"ib9\""}
//
// Verbs and their results:
//
//	status                  Status
//	show     [iface]        []Interface (all, or the one named)
//	neigh    [iface]        []Neighbor
//	child-add iface pkey [addrs]  Interface (the child)
//	child-del iface pkey    nothing
//	mode     iface mode     Interface (after the switch; mode "datagram" or "connected")
//	devinfo                 []Device (a switch process adds its switch, named "switch")
//	inspect  [kind pid]     []hca.ObjectInfo: verbs objects of the daemon and of attached
//	                        processes (kind "" for all; pid 0 for every owner)
//	inject   kind id [dev pid]  nothing: QP error (id = QPN), CQ or SRQ error (id = object id)
//	link     [cable state]  []Cable (all, or the one named; state "up"/"down" changes it)
//	fault    cable fault    Cable (after the change; an all-zero Fault removes the faults)
//	trace    [id lid kinds pid] a stream: after the OK response line, one JSON trace.Record
//	                        per line (the daemon's events and those of attached processes
//	                        that pass the filter) until the client closes the connection
//	trace-mark mark         nothing: a bookmark in the trace
//	manner                  daemon.MannerInfo: behaviour choices, pitfall mode and checks
//	perfquery [dev id]      []PerfCounters: HCA ports' PMA counters (dev "" all HCAs, id the
//	                        port, 0 all ports)
//	nodes                   []Link (the UDP links: a switch's hosts, or a host's switch)
//	counters                LinkCounters
//	partition-add pkey [members]  Partition (after the SM's sweep programmed it)
//	partition-del pkey      nothing (after the sweep)
//	partition-list          []Partition: the built-in SM's partitions
//	capture  [count snaplen] a stream: after the OK response line the connection carries
//	                        a pcap file (fabric.CaptureWriter's format) until count
//	                        packets were captured, the client closes the connection, or
//	                        the daemon stops
//
// The protocol is versioned by Status.Protocol; fields are only ever added.
package control

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Protocol is the protocol version the daemon speaks.
const Protocol = 1

// Verbs.
const (
	VerbStatus   = "status"
	VerbShow     = "show"
	VerbNeigh    = "neigh"
	VerbChildAdd = "child-add"
	VerbChildDel = "child-del"
	VerbDevinfo  = "devinfo"
	VerbCapture  = "capture"
	VerbMode     = "mode"
	VerbPS       = "ps"
	VerbInspect  = "inspect"
	VerbInject   = "inject"
	VerbLink     = "link"
	VerbFault    = "fault"
	VerbTrace    = "trace"
	VerbMark     = "trace-mark"
	VerbManner   = "manner"
	VerbPerf     = "perfquery"
	VerbNodes    = "nodes"
	VerbCounters = "counters"
	// partition-add, -del, -list: the built-in SM's partitions (pibgw partition).
	VerbPartitionAdd  = "partition-add"
	VerbPartitionDel  = "partition-del"
	VerbPartitionList = "partition-list"
)

// Link is one UDP link of a multi-host fabric: on a switch process, a host's port; on a
// host, its connection to the switch.
type Link struct {
	SwitchPort    int       `json:"switch_port"`        // the switch port it plugs into (0: none yet)
	PortGUID      string    `json:"port_guid"`          // the host port's GUID
	Addr          string    `json:"addr"`               // the far end's UDP address
	Up            bool      `json:"up"`                 // a session is open
	State         string    `json:"state"`              // the switch port's PortState (switch) or the HCA port's (host)
	LID           uint16    `json:"lid,omitempty"`      // the host port's LID (host side)
	Since         time.Time `json:"since,omitempty"`    // when the session opened
	LastRx        time.Time `json:"last_rx,omitempty"`  // the last datagram from the far end
	RxPackets     uint64    `json:"rx_packets"`         // IB packets received on the session
	TxPackets     uint64    `json:"tx_packets"`         // IB packets sent on the session
	Refusal       string    `json:"refusal,omitempty"`  // the switch's last refusal (host side)
	Attempts      uint64    `json:"attempts,omitempty"` // connects sent (host side)
	Authenticated bool      `json:"authenticated"`      // datagrams carry PSK tags
	Local         string    `json:"local,omitempty"`
	Uplink        bool      `json:"uplink,omitempty"` // this switch's port plugged into another switch process    // the local UDP address
}

// LinkCounters are the UDP links' counters (udplink.Counters by name: rx_datagrams,
// drop_auth, …) summed over the process's links, with the ports' of the process's
// switches (switch_port_N_xmit_discards, switch_port_N_drop_no_route …).
type LinkCounters map[string]uint64

// Request is one request. Iface, PKey, Addrs, Count and Snaplen are the verbs'
// arguments; each verb reads the ones it needs.
type Request struct {
	Verb    string   `json:"verb"`
	Iface   string   `json:"iface,omitempty"`
	PKey    string   `json:"pkey,omitempty"`  // as typed: "0x8001", "8001"
	Addrs   []string `json:"addrs,omitempty"` // CIDR
	Count   uint64   `json:"count,omitempty"`
	Snaplen int      `json:"snaplen,omitempty"`
	Mode    string   `json:"mode,omitempty"`  // mode: "datagram" or "connected"
	Kind    string   `json:"kind,omitempty"`  // inspect, inject: hca.KindQP, …
	PID     int      `json:"pid,omitempty"`   // inspect, inject: the owning process
	ID      uint32   `json:"id,omitempty"`    // inject: QPN or object id
	Dev     string   `json:"dev,omitempty"`   // inject: the device ("pib_0")
	Cable   string   `json:"cable,omitempty"` // link, fault: "pib_0/1"
	State   string   `json:"state,omitempty"` // link: "up", "down"
	Fault   *Fault   `json:"fault,omitempty"`
	LID     uint16   `json:"lid,omitempty"`   // trace: only packets from or to this LID
	Kinds   string   `json:"kinds,omitempty"` // trace: "packet,drop,…"
	Mark    string   `json:"mark,omitempty"`  // trace-mark: the bookmark's text
	// Members are partition-add's members: "ALL" or a port GUID, each with "=full"
	// (the default) or "=limited".
	Members []string `json:"members,omitempty"`
}

// Fault is the fault injection on a cable (fabric.FaultConfig): probabilities 0..1 per
// packet, a delay, and the seed of the pseudo-random decisions (each direction of the
// cable draws from its own stream, seeded from it).
type Fault struct {
	Loss      float64       `json:"loss"`
	Duplicate float64       `json:"duplicate"`
	Reorder   float64       `json:"reorder"`
	Corrupt   float64       `json:"corrupt"`
	Delay     time.Duration `json:"delay"`
	Seed      uint64        `json:"seed"`
}

// Zero reports whether f injects nothing.
func (f Fault) Zero() bool {
	return f.Loss == 0 && f.Duplicate == 0 && f.Reorder == 0 && f.Corrupt == 0 && f.Delay == 0
}

// Cable is a cable of the fabric (`pibgw link`, `pibgw fault`): named after its HCA end,
// "pib_0/1", and plugged into a port of the switch.
type Cable struct {
	Name       string `json:"name"`
	SwitchPort int    `json:"switch_port"` // of an HCA port's cable; 0 for a switch-to-switch cable or a UDP link
	Up         bool   `json:"up"`
	Fault      *Fault `json:"fault,omitempty"`
	// Counters: packets and bytes delivered toward the switch (tx) and toward the HCA
	// (rx), packets dropped while the cable was down, and what the faults did.
	Counters map[string]uint64 `json:"counters"`
}

// Response is one response.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Missing, with OK, says what the result lacks: e.g. the attached processes that did
	// not answer an inspect of all of them, whose objects are not in it.
	Missing []string `json:"missing,omitempty"`
}

// Partial is a handler's result that lacks parts: Result is answered with Missing.
type Partial struct {
	Result  any
	Missing []string
}

// IncompleteError is what Client.Do returns for an answer with Missing parts, after it
// decoded the result.
type IncompleteError struct{ Missing []string }

func (e *IncompleteError) Error() string {
	return "incomplete answer: " + strings.Join(e.Missing, "; ")
}

// Status describes the running daemon.
type Status struct {
	Protocol int       `json:"protocol"`
	PID      int       `json:"pid"`
	Config   string    `json:"config"` // the file, "" for the defaults
	Started  time.Time `json:"started"`
	Control  string    `json:"control"`
	Attach   string    `json:"attach,omitempty"` // the attach socket, "" when off
	// IBSim is the ibsim server's socket base name (IBSIM_SOCKNAME), "" when it is off;
	// IBSimUDP its UDP address, "" when it serves none.
	IBSim    string `json:"ibsim,omitempty"`
	IBSimUDP string `json:"ibsim_udp,omitempty"`
	// IBSimCAs names the HCAs its clients attach to, the default (the SM's) first.
	IBSimCAs []string `json:"ibsim_cas,omitempty"`
	// LogWriteErrors counts the daemon's log lines it could not write (its stderr a
	// pipe whose reader exited, say).
	LogWriteErrors uint64 `json:"log_write_errors,omitempty"`
	// AttachConns are the attach socket's connections and refusals (nil when it is
	// off; docs/security.md).
	AttachConns *AttachConns `json:"attach_conns,omitempty"`
	// Multicast is the SA's count of multicast groups and refused joins (nil when this
	// daemon runs no SA; docs/security.md).
	Multicast *MulticastStatus `json:"multicast,omitempty"`
}

// MulticastStatus counts the SA's multicast groups and the joins it refused for want of
// multicast LIDs.
type MulticastStatus struct {
	Groups          int    `json:"groups"`            // groups now
	SendOnlyGroups  int    `json:"send_only_groups"`  // groups none of whose members receives
	MLIDExhausted   uint64 `json:"mlid_exhausted"`    // joins refused: no free multicast LID
	SendOnlyRefused uint64 `json:"send_only_refused"` // send-only joins refused: too many groups without receivers
}

// AttachConns counts the attach socket's connections against its limits.
type AttachConns struct {
	Open          int    `json:"open"`           // attached processes and connections saying hello
	MaxProcesses  int    `json:"max_processes"`  // the limit in force
	MaxPerUser    int    `json:"max_per_user"`   // likewise, per user
	Refused       uint64 `json:"refused"`        // refused: max_processes reached
	RefusedUser   uint64 `json:"refused_user"`   // refused: the user's max_per_user reached
	HelloTimeouts uint64 `json:"hello_timeouts"` // closed without a hello in time
	AcceptErrors  uint64 `json:"accept_errors"`  // failed accepts (EMFILE …), retried
}

// Interface is one IPoIB interface (`pibgw show`).
type Interface struct {
	Name      string            `json:"name"`
	Parent    string            `json:"parent,omitempty"`
	HCA       string            `json:"hca"`
	Port      int               `json:"port"`
	NetNS     string            `json:"netns"`
	Stack     string            `json:"stack"` // kernel, userspace
	Mode      string            `json:"mode"`
	MTU       int               `json:"mtu"`
	HWAddr    string            `json:"hwaddr"`    // 20 bytes, colon-separated as ip link prints
	Broadcast string            `json:"broadcast"` // likewise
	PKey      uint16            `json:"pkey"`      // a number, as ip -j prints it
	QPN       uint32            `json:"qpn"`
	QKey      uint32            `json:"qkey"`
	Up        bool              `json:"up"`
	Reason    string            `json:"reason,omitempty"` // why it is not up
	Addrs     []string          `json:"addrs"`
	Counters  map[string]uint64 `json:"counters"`
	// MTURefused is the last MTU `ip link set mtu` asked for above the mode's maximum,
	// which the daemon put back: "mtu 4000 refused: …; put back 1500".
	MTURefused string `json:"mtu_refused,omitempty"`
}

// Neighbor is one neighbour cache entry (`pibgw neigh`).
type Neighbor struct {
	Iface  string `json:"iface"`
	IP     string `json:"ip"`
	HWAddr string `json:"hwaddr"`
	QPN    uint32 `json:"qpn"`
	GID    string `json:"gid"`
	State  string `json:"state"`
	AgeMS  int64  `json:"age_ms"`
	// Connected mode: the connection toward the neighbour, if any — its state
	// ("connecting", "connected"), our TX QPN and the peer's RX QPN.
	CM        string `json:"cm,omitempty"`
	CMQPN     uint32 `json:"cm_qpn,omitempty"`
	CMRemoteQ uint32 `json:"cm_remote_qpn,omitempty"`
}

// Device is an HCA as ibv_query_device and ibv_query_port see it: what `pibgw devinfo`
// and `pibgw stat` print.
type Device struct {
	Name     string         `json:"name"`
	NodeDesc string         `json:"node_desc"`
	Attr     hca.DeviceAttr `json:"attr"`
	Ports    []Port         `json:"ports"`
	// HCAType and BoardID are the driver's sysfs attributes hca_type and board_id (an
	// mlx5 HCA's "MT4115" and "MT_2180110032"): what ibstat prints as "CA type" and
	// ibv_devinfo as board_id.
	HCAType string `json:"hca_type,omitempty"`
	BoardID string `json:"board_id,omitempty"`
}

// Port is one port of a Device.
type Port struct {
	Num  int          `json:"num"`
	Attr hca.PortAttr `json:"attr"`
	// GIDs is the GID table (GIDTblLen entries; unused ones zero).
	GIDs []wire.GID `json:"gids"`
	// PKeys is the P_Key table (PKeyTblLen entries; unused ones zero).
	PKeys []uint16 `json:"pkeys,omitempty"`
}

// SnapshotDevice captures d's attributes now.
func SnapshotDevice(d *hca.Device) Device {
	out := Device{Name: d.Name(), NodeDesc: d.NodeDesc(), Attr: d.Query()}
	out.HCAType, out.BoardID = HCAType(out.Attr), BoardID(out.Attr)
	for _, p := range d.Ports() {
		pa := p.Query()
		gids := make([]wire.GID, pa.GIDTblLen)
		for i := range gids {
			gids[i], _ = p.GID(i)
		}
		pkeys := make([]uint16, pa.PKeyTblLen)
		for i := range pkeys {
			pkeys[i], _ = p.PKey(i)
		}
		out.Ports = append(out.Ports, Port{Num: int(p.Num()), Attr: pa, GIDs: gids, PKeys: pkeys})
	}
	return out
}

// HCAType is a pibgw HCA's hca_type: "PIB" and its vendor part ID, as mlx4 and mlx5
// name theirs "MT" and the PCI device ID (mlx5_ib's hca_type_show).
func HCAType(a hca.DeviceAttr) string { return fmt.Sprintf("PIB%d", a.VendorPartID) }

// BoardID is a pibgw HCA's board_id (mlx5's is the PSID, "MT_2180110032").
func BoardID(a hca.DeviceAttr) string { return fmt.Sprintf("PIB_%010d", a.VendorPartID) }

// HWAddrString prints a hardware address as ip link does: bytes in hex, colon-separated.
func HWAddrString(b []byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 3*len(b))
	for i, c := range b {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// PKeyString prints a P_Key as the kernel's sysfs pkey file does: 0x%04x.
func PKeyString(k uint16) string { return fmt.Sprintf("0x%04x", k) }

// PerfCounters is an HCA port's PMA counters as perfquery shows them (`pibgw counters
// CA [PORT]`): PortCounters and PortCountersExtended, in the attributes' field order
// and with infiniband-diags' names.
type PerfCounters struct {
	CA       string        `json:"ca"`
	Port     int           `json:"port"`
	LID      uint16        `json:"lid"`
	CapMask  uint16        `json:"cap_mask"` // the PMA's ClassPortInfo:CapabilityMask
	Counters []PerfCounter `json:"counters"`
	Extended []PerfCounter `json:"extended"`
}

// PerfCounter is one field. Hex is the number of hex digits perfquery prints it with
// (CounterSelect, CounterSelect2), 0 for decimal.
type PerfCounter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
	Hex   int    `json:"hex,omitempty"`
}

// Partition is one partition of the built-in SM (pibgw partition list).
type Partition struct {
	Name    string   `json:"name"`
	PKey    uint16   `json:"pkey"`    // 15 bits
	Members []string `json:"members"` // "ALL=full", "0x0002c90300000301=limited", …
	IPoIB   bool     `json:"ipoib"`   // its IPoIB broadcast group is pre-created
}
