package sa

import (
	"slices"

	"github.com/pibgw/pibgw/hca"
)

// Topology is the subnet as the SM last swept and configured it: nodes, ports, links,
// LIDs, P_Key tables and the forwarding tables the SM programmed. A Topology is never
// modified once published, so readers (the SA) keep and use it without locks; every
// heavy sweep publishes a new one (SM.Topology).
type Topology struct {
	// Generation counts heavy sweeps; it grows by one with every published Topology.
	Generation uint64
	// SMLID and SMPortGUID name the master SM's port.
	SMLID      uint16
	SMPortGUID uint64
	// GIDPrefix and SubnetTimeout are the values the SM programmed into every port.
	GIDPrefix     uint64
	SubnetTimeout uint8
	// Nodes in discovery (breadth-first) order; the SM's own node first.
	Nodes []*Node
	// Partitions is the partition configuration the P_Key tables were built from.
	Partitions []Partition

	nodeByGUID map[uint64]*Node
	portByGUID map[uint64]*Port
	portByLID  []*Port // index LID; switch LIDs map to port 0
	maxLID     uint16
}

// Node is one CA, switch or router.
type Node struct {
	Type            uint8 // NodeTypeCA, NodeTypeSwitch, NodeTypeRouter
	GUID            uint64
	SystemImageGUID uint64
	Description     string
	NumPorts        int
	VendorID        uint32
	DeviceID        uint16
	Revision        uint32
	PartitionCap    uint16
	// Ports is indexed by port number 0..NumPorts. A switch's port 0 is its management
	// port (it holds the switch's LID); a CA has no port 0 and only the ports the sweep
	// reached are set. Missing entries are nil.
	Ports []*Port
	// NodeInfo is the raw NodeInfo attribute (64 bytes, IBA 14.2.5.3) as last read.
	NodeInfo [64]byte

	// Switches only.
	// SwitchInfo is the raw SwitchInfo attribute (IBA 14.2.5.4) as last read.
	SwitchInfo      [64]byte
	LinearFDBCap    uint16
	MulticastFDBCap uint16
	// LFT is the unicast forwarding table the SM programmed, indexed by LID
	// (0..LinearFDBTop); 0xFF means drop.
	LFT []uint8

	// DRPath is the directed route from the SM's port to this node: the ports to leave
	// by at hops 1, 2, … (empty for the SM's own node). For CAs it reaches the first port
	// the sweep found; Port.DRPath has the route of each CA port.
	DRPath []uint8
}

// IsSwitch reports whether n is a switch.
func (n *Node) IsSwitch() bool { return n.Type == NodeTypeSwitch }

// LID is the switch's LID (port 0), or the LID of a CA's first known port.
func (n *Node) LID() uint16 {
	for _, p := range n.Ports {
		if p != nil && p.LID != 0 {
			return p.LID
		}
	}
	return 0
}

// Port is one port of a node.
type Port struct {
	Node *Node
	Num  uint8
	GUID uint64
	// LID and LMC: set on CA ports and switch port 0. A switch's external ports have the
	// switch's LID here too (it is the endport LID that PortInfoRecords name).
	LID       uint16
	LMC       uint8
	State     uint8 // PortState*
	PhysState uint8 // PhysState*
	MTUCap    uint8 // IBA MTU encoding (MTU256 … MTU4096)
	// NeighborMTU is the active MTU of the link the SM set (IBA encoding).
	NeighborMTU uint8
	// LinkWidthActive and LinkSpeedActive in PortInfo's encodings (width 1=1x 2=4x
	// 4=8x 8=12x; speed 1=SDR 2=DDR 4=QDR).
	LinkWidthActive uint8
	LinkSpeedActive uint8
	CapMask         uint32
	// PKeys is the P_Key table the SM programmed (full members have bit 15 set); nil
	// for switch ports without partition enforcement.
	PKeys []uint16
	// Remote is the port at the other end of the link; nil when none.
	Remote *Port
	// Info is the raw PortInfo attribute (IBA 14.2.5.6) as the SM last read or set it.
	Info [64]byte
	// DRPath is the directed route to this port's node through this port (CAs), or the
	// node's route (switches).
	DRPath []uint8
}

// Endport reports whether p is an end port (a CA or router port, or switch port 0),
// the ports that own LIDs (IBA 4.1.3).
func (p *Port) Endport() bool { return p.Node.Type != NodeTypeSwitch || p.Num == 0 }

// Node returns the node with NodeGUID guid, or nil.
func (t *Topology) Node(guid uint64) *Node { return t.nodeByGUID[guid] }

// Port returns the port with PortGUID guid, or nil. A switch's ports share its GUID;
// this returns its port 0.
func (t *Topology) Port(guid uint64) *Port { return t.portByGUID[guid] }

// PortByLID returns the end port that owns lid (a CA port, or a switch's port 0), or nil.
func (t *Topology) PortByLID(lid uint16) *Port {
	if int(lid) >= len(t.portByLID) {
		return nil
	}
	return t.portByLID[lid]
}

// LIDOf returns the base LID of the port with PortGUID guid.
func (t *Topology) LIDOf(portGUID uint64) (uint16, bool) {
	p := t.portByGUID[portGUID]
	if p == nil || p.LID == 0 {
		return 0, false
	}
	return p.LID, true
}

// MaxLID is the highest unicast LID assigned (LinearFDBTop of every switch).
func (t *Topology) MaxLID() uint16 { return t.maxLID }

// Endports returns every end port with a LID, in LID order.
func (t *Topology) Endports() []*Port {
	var out []*Port
	for _, p := range t.portByLID {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// Switches returns the switches in discovery order.
func (t *Topology) Switches() []*Node {
	var out []*Node
	for _, n := range t.Nodes {
		if n.IsSwitch() {
			out = append(out, n)
		}
	}
	return out
}

// PKeys returns the P_Key table of the port with PortGUID guid (nil if unknown).
func (t *Topology) PKeys(portGUID uint64) []uint16 {
	if p := t.portByGUID[portGUID]; p != nil {
		return p.PKeys
	}
	return nil
}

// Hop is one switch a unicast packet passes: it arrives on InPort and leaves by OutPort.
type Hop struct {
	Switch  *Node
	InPort  uint8
	OutPort uint8
}

// Route follows the programmed LFTs from the end port with LID slid to LID dlid and
// returns the switches passed, in order. ok is false when some switch has no route or
// the route loops. The route from a port to itself, or between two CAs cabled
// back to back, is empty.
func (t *Topology) Route(slid, dlid uint16) (hops []Hop, ok bool) {
	src, dst := t.PortByLID(slid), t.PortByLID(dlid)
	if src == nil || dst == nil {
		return nil, false
	}
	if src == dst {
		return nil, true
	}
	var sw *Node
	var in uint8
	if src.Node.IsSwitch() {
		sw, in = src.Node, 0
	} else {
		if src.Remote == nil {
			return nil, false
		}
		if src.Remote == dst {
			return nil, true
		}
		sw, in = src.Remote.Node, src.Remote.Num
		if !sw.IsSwitch() {
			return nil, false
		}
	}
	for len(hops) <= 64 {
		if int(dlid) >= len(sw.LFT) {
			return hops, false
		}
		out := sw.LFT[dlid]
		hops = append(hops, Hop{Switch: sw, InPort: in, OutPort: out})
		if out == 0 {
			return hops, dst.Node == sw
		}
		if int(out) >= len(sw.Ports) || sw.Ports[out] == nil || sw.Ports[out].Remote == nil {
			return hops, false
		}
		r := sw.Ports[out].Remote
		if !r.Node.IsSwitch() {
			return hops, r == dst
		}
		sw, in = r.Node, r.Num
	}
	return hops, false
}

// HopCount is the number of links between two end ports along the programmed route, or
// -1 when there is none.
func (t *Topology) HopCount(slid, dlid uint16) int {
	hops, ok := t.Route(slid, dlid)
	if !ok {
		return -1
	}
	src, dst := t.PortByLID(slid), t.PortByLID(dlid)
	n := len(hops) + 1
	if src.Node.IsSwitch() {
		n--
	}
	if dst.Node.IsSwitch() {
		n--
	}
	if src == dst {
		return 0
	}
	return n
}

// PathMTU is the smallest NeighborMTU (IBA encoding) of the links on the route from
// slid to dlid, and PathRate the smallest LinkWidthActive×LinkSpeedActive in Gb/s×10
// (SDR 4x = 100). ok is false when there is no route.
func (t *Topology) PathMTU(slid, dlid uint16) (mtu uint8, ok bool) {
	mtu = MTU4096
	ok = t.walkLinks(slid, dlid, func(p *Port) {
		if p.NeighborMTU != 0 && p.NeighborMTU < mtu {
			mtu = p.NeighborMTU
		}
	})
	return mtu, ok
}

// PathRate returns the slowest link's rate on the route, in units of 100 Mb/s
// (4x QDR = 400), or ok false when there is no route.
func (t *Topology) PathRate(slid, dlid uint16) (rate int, ok bool) {
	rate = 1 << 30
	ok = t.walkLinks(slid, dlid, func(p *Port) {
		if r := LinkRate(p.LinkWidthActive, p.LinkSpeedActive); r < rate {
			rate = r
		}
	})
	if rate == 1<<30 {
		rate = 0
	}
	return rate, ok
}

// LinkRate converts PortInfo's LinkWidthActive and LinkSpeedActive to units of
// 100 Mb/s (data rate before 8b/10b encoding: 4x SDR = 100, 4x QDR = 400).
func LinkRate(width, speed uint8) int { return hca.LinkRateMbps(width, speed) / 100 }

// walkLinks calls f with the sending port of every link on the route.
func (t *Topology) walkLinks(slid, dlid uint16, f func(*Port)) bool {
	hops, ok := t.Route(slid, dlid)
	if !ok {
		return false
	}
	src := t.PortByLID(slid)
	if !src.Node.IsSwitch() && src != t.PortByLID(dlid) {
		f(src)
	}
	for _, h := range hops {
		if h.OutPort != 0 {
			f(h.Switch.Ports[h.OutPort])
		}
	}
	return true
}

// index fills the lookup maps after the nodes are built.
func (t *Topology) index() {
	t.nodeByGUID = make(map[uint64]*Node, len(t.Nodes))
	t.portByGUID = make(map[uint64]*Port)
	t.maxLID = 0
	for _, n := range t.Nodes {
		t.nodeByGUID[n.GUID] = n
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			if n.IsSwitch() && p.Num != 0 {
				continue
			}
			t.portByGUID[p.GUID] = p
			if p.LID > t.maxLID {
				t.maxLID = p.LID
			}
		}
	}
	t.portByLID = make([]*Port, int(t.maxLID)+1)
	for _, n := range t.Nodes {
		for _, p := range n.Ports {
			if p != nil && p.Endport() && p.LID != 0 {
				t.portByLID[p.LID] = p
			}
		}
	}
}

// clonePKeys copies a P_Key table.
func clonePKeys(k []uint16) []uint16 { return slices.Clone(k) }
