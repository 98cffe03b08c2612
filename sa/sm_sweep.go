package sa

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/pibgw/pibgw/wire"
)

// The heavy sweep (IBA 14.4; opensm's flow): breadth-first discovery by directed-route
// SMPs (NodeInfo through every live port, NodeDescription, SwitchInfo, PortInfo of every
// port); then LIDs, routes and P_Key tables are computed; then the switches get
// SwitchInfo:LinearFDBTop, the LFT blocks that changed and the P_Key tables, every port
// its PortInfo (LID, MasterSMLID, GIDPrefix, SubnetTimeout, NeighborMTU) with PortState
// Armed, and once every port is Armed, Active. The new Topology is published at the end.

type sweep struct {
	sm     *SM
	topo   *Topology
	byGUID map[uint64]*Node
	root   *Node
	dups   map[dupKey]bool // duplicate GUIDs found (duplicate)
	// errors counts Sets that failed; the sweep is repeated after a light-sweep period.
	errors int
}

func (sm *SM) startHeavySweep() {
	s := &sweep{sm: sm, topo: &Topology{}, byGUID: make(map[uint64]*Node)}
	sm.sw = s
	sm.enqueue(sm.newTxn(opNodeInfo, nil, 0, 0, nil))
	sm.onDrain = s.discovered
}

func (s *sweep) complete(t *txn) {
	switch t.op {
	case opNodeInfo:
		if !t.failed {
			s.nodeInfo(t)
		}
	case opNodeDesc:
		if !t.failed {
			d := t.data[:]
			if i := bytes.IndexByte(d, 0); i >= 0 {
				d = d[:i]
			}
			t.node.Description = string(d)
		}
	case opPortInfo:
		if !t.failed {
			s.portInfo(t)
		}
	case opSwitchInfo:
		if !t.failed {
			n := t.node
			copy(n.SwitchInfo[:], t.data[:])
			n.LinearFDBCap = be.Uint16(t.data[siLinearFDBCap:])
			n.MulticastFDBCap = be.Uint16(t.data[siMulticastFDBCap:])
		}
	case opPortInfoSet, opPortActive:
		p := t.node.Ports[t.port]
		if t.failed {
			s.errors++
			s.sm.log.Warn("PortInfo Set failed", "node", t.node.Description, "port", t.port, "status", t.status)
			return
		}
		copy(p.Info[:], t.data[:])
		p.decode()
	case opSwitchInfoSet:
		if t.failed {
			s.errors++
			s.sm.log.Warn("SwitchInfo Set failed", "node", t.node.Description, "status", t.status)
			return
		}
		copy(t.node.SwitchInfo[:], t.data[:])
	case opLFTSet:
		if t.failed {
			s.errors++
			s.sm.log.Warn("LinearForwardingTable Set failed", "node", t.node.Description, "block", t.mod, "status", t.status)
			// Forget what we believe is programmed, so the next sweep sends every block.
			delete(s.sm.lfts, t.node.GUID)
		}
	case opPKeySet:
		if t.failed {
			s.errors++
			s.sm.log.Warn("P_KeyTable Set failed", "node", t.node.Description, "port", t.port, "status", t.status)
			delete(s.sm.pkeys, pkeyKey{t.node.GUID, t.port})
		}
	}
}

func (s *sweep) nodeInfo(t *txn) {
	ni := wire.NodeInfo(t.data[:])
	guid := ni.NodeGUID()
	lp := ni.LocalPortNum()
	n := s.byGUID[guid]
	if n == nil {
		n = &Node{
			Type: ni.NodeType(), GUID: guid, SystemImageGUID: ni.SystemImageGUID(),
			NumPorts: int(ni.NumPorts()), PartitionCap: ni.PartitionCap(),
			DeviceID: ni.DeviceID(), Revision: ni.Revision(), VendorID: ni.VendorID(), DRPath: t.path,
		}
		copy(n.NodeInfo[:], ni)
		n.Ports = make([]*Port, n.NumPorts+1)
		s.byGUID[guid] = n
		s.topo.Nodes = append(s.topo.Nodes, n)
		if t.parent == nil {
			s.root = n
		}
		sm := s.sm
		sm.enqueue(sm.newTxn(opNodeDesc, n, 0, 0, t.path))
		if n.IsSwitch() {
			pg := ni.PortGUID()
			for i := range n.Ports {
				n.Ports[i] = &Port{Node: n, Num: uint8(i), GUID: pg, DRPath: t.path}
			}
			sm.enqueue(sm.newTxn(opSwitchInfo, n, 0, 0, t.path))
			for i := range n.Ports {
				sm.enqueue(sm.newTxn(opPortInfo, n, uint8(i), uint32(i), t.path))
			}
		}
	}
	if int(lp) >= len(n.Ports) {
		return
	}
	p := n.Ports[lp]
	if p == nil {
		if n.IsSwitch() || lp == 0 {
			return
		}
		p = &Port{Node: n, Num: lp, GUID: ni.PortGUID(), DRPath: t.path}
		n.Ports[lp] = p
		s.sm.enqueue(s.sm.newTxn(opPortInfo, n, lp, uint32(lp), t.path))
	}
	if t.parent != nil {
		pp := t.parent.Ports[t.port]
		switch {
		case p == pp || p.Remote != nil && p.Remote != pp || pp.Remote != nil && pp.Remote != p:
			s.duplicate(p, pp)
		case pp.Remote == nil && p.Remote == nil:
			pp.Remote, p.Remote = p, pp
		}
	}
}

// duplicate notes that port p answered NodeInfo again, through pp, while it is already
// linked elsewhere (or pp is p itself: two nodes with one GUID cabled back to back):
// two ports share a GUID, and the second is left out of the subnet — not linked, so it
// gets no LID and stays Initializing. opensm reports the same (ERR 0D01, "Found
// duplicated node GUID"); here it is logged once, when a sweep first finds it.
func (s *sweep) duplicate(p, pp *Port) {
	k := dupKey{p.Node.GUID, p.Num, pp.Node.GUID, pp.Num}
	if s.dups == nil {
		s.dups = map[dupKey]bool{}
	}
	s.dups[k] = true
	if s.sm.dups[k] {
		return
	}
	first := "none"
	if p.Remote != nil {
		first = fmt.Sprintf("%q port %d", p.Remote.Node.Description, p.Remote.Num)
	}
	s.sm.log.Error("sweep: duplicate GUID: a port answered with the GUID of a port already found elsewhere; it is left unconfigured (give each host its own fabric.node_guid_base)",
		"node_guid", fmt.Sprintf("%#016x", p.Node.GUID), "port", p.Num, "found_behind", first,
		"again_behind", fmt.Sprintf("%q port %d", pp.Node.Description, pp.Num),
		"again_path", fmt.Sprint(append(slices.Clone(pp.Node.DRPath), pp.Num)))
}

func (s *sweep) portInfo(t *txn) {
	n := t.node
	p := n.Ports[t.port]
	copy(p.Info[:], t.data[:])
	p.decode()
	if p.PhysState != PhysStateLinkUp || p.Remote != nil {
		return
	}
	var probe bool
	switch {
	case n.IsSwitch():
		probe = t.port != 0
	case n == s.root:
		probe = t.port == s.sm.port.Num()
	}
	if !probe || len(n.DRPath) >= 63 {
		return
	}
	path := make([]uint8, len(n.DRPath)+1)
	copy(path, n.DRPath)
	path[len(n.DRPath)] = t.port
	q := s.sm.newTxn(opNodeInfo, nil, t.port, 0, path)
	q.parent = n
	s.sm.enqueue(q)
}

// decode fills the typed fields from Info.
func (p *Port) decode() {
	pi := wire.PortInfo(p.Info[:])
	if p.Node.Type != NodeTypeSwitch || p.Num == 0 {
		p.LID = pi.LID()
		p.LMC = pi.LMC()
	}
	p.CapMask = pi.CapabilityMask()
	p.State = pi.PortState()
	p.PhysState = pi.PortPhysicalState()
	p.MTUCap = pi.MTUCap()
	p.NeighborMTU = pi.NeighborMTU()
	p.LinkWidthActive = pi.LinkWidthActive()
	p.LinkSpeedActive = pi.LinkSpeedActive()
}

// linked reports whether p has a live link to a discovered port.
func (p *Port) linked() bool { return p.Remote != nil && p.PhysState == PhysStateLinkUp }

// discovered runs when discovery has drained: compute, then program the switches.
func (s *sweep) discovered() {
	sm := s.sm
	if s.root == nil {
		sm.log.Warn("sweep: the SM's own port did not answer NodeInfo")
		s.finish()
		return
	}
	sm.assignLIDs(s)
	sm.route(s.topo.Nodes)
	sm.assignPKeys(s)
	for _, n := range s.topo.Nodes {
		if !n.IsSwitch() {
			continue
		}
		// SwitchInfo Set: LinearFDBTop, and PortStateChange written 1 to clear it.
		t := sm.newTxn(opSwitchInfoSet, n, 0, 0, n.DRPath)
		t.data = n.SwitchInfo
		be.PutUint16(t.data[siLinearFDBTop:], s.topo.maxLID)
		t.data[siLifeTimePSC] |= siPortStateChange
		sm.enqueue(t)
		sm.programLFT(n)
	}
	for _, n := range s.topo.Nodes {
		for _, p := range n.Ports {
			if p != nil && p.PKeys != nil {
				sm.programPKeys(p)
			}
		}
	}
	sm.onDrain = s.configurePorts
}

// programLFT sends the LinearForwardingTable blocks of n that differ from what the SM
// programmed before.
func (sm *SM) programLFT(n *Node) {
	old := sm.lfts[n.GUID]
	for b := 0; b*lftBlockLen < len(n.LFT); b++ {
		lo, hi := b*lftBlockLen, min((b+1)*lftBlockLen, len(n.LFT))
		if hi <= len(old) && slices.Equal(old[lo:hi], n.LFT[lo:hi]) {
			continue
		}
		t := sm.newTxn(opLFTSet, n, 0, uint32(b), n.DRPath)
		t.data = lftBlockDrop
		copy(t.data[:], n.LFT[lo:hi])
		sm.enqueue(t)
	}
	sm.lfts[n.GUID] = n.LFT // never modified once computed
}

// lftBlockDrop is an LFT block of 0xFF (drop) entries, the SMP data of a last block's
// LIDs beyond the table.
var lftBlockDrop = func() (b [wire.SMPDataLen]byte) {
	for i := range b {
		b[i] = 0xFF
	}
	return b
}()

// programPKeys sends p's P_Key table if it differs from what the SM programmed before.
func (sm *SM) programPKeys(p *Port) {
	k := pkeyKey{p.Node.GUID, p.Num}
	if slices.Equal(sm.pkeys[k], p.PKeys) {
		return
	}
	for b := 0; b*pkeyBlockLen < len(p.PKeys); b++ {
		mod := uint32(b)
		if p.Node.IsSwitch() {
			mod |= uint32(p.Num) << 16
		}
		t := sm.newTxn(opPKeySet, p.Node, p.Num, mod, p.DRPath)
		for i := 0; i < pkeyBlockLen && b*pkeyBlockLen+i < len(p.PKeys); i++ {
			be.PutUint16(t.data[2*i:], p.PKeys[b*pkeyBlockLen+i])
		}
		sm.enqueue(t)
	}
	sm.pkeys[k] = clonePKeys(p.PKeys)
}

// configurePorts sends PortInfo Sets: LIDs and subnet parameters, NeighborMTU, and
// PortState Armed for ports in Init.
func (s *sweep) configurePorts() {
	sm := s.sm
	for _, n := range s.topo.Nodes {
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			var want [64]byte
			if !sm.portInfoFor(p, s.topo.maxLID, &want) {
				continue
			}
			t := sm.newTxn(opPortInfoSet, n, p.Num, uint32(p.Num), p.DRPath)
			t.data = want
			sm.enqueue(t)
		}
	}
	sm.onDrain = s.activatePorts
}

// portInfoFor builds the PortInfo Set for p into want, and reports whether one is needed.
func (sm *SM) portInfoFor(p *Port, maxLID uint16, want *[64]byte) bool {
	endport := p.Endport()
	if !endport && !p.linked() {
		return false
	}
	if p.Node.Type != NodeTypeSwitch && !p.linked() {
		return false
	}
	*want = p.Info
	w := want[:]
	if endport {
		be.PutUint64(w[piGIDPrefix:], sm.cfg.GIDPrefix)
		be.PutUint16(w[piLID:], p.LID)
		be.PutUint16(w[piMasterSMLID:], sm.smLID)
		w[piLMC] &^= 7
		w[piSubnetTimeout] = w[piSubnetTimeout]&^0x1F | sm.cfg.SubnetTimeout&0x1F
	}
	if p.linked() {
		mtu := min(p.MTUCap, p.Remote.MTUCap)
		if mtu == 0 {
			mtu = MTU2048
		}
		w[piNeighMTUSMSL] = mtu<<4 | w[piNeighMTUSMSL]&0xF
		if !endport && sm.cfg.PartitionEnforcement && p.PKeys != nil {
			w[piOperVLs] |= 0x0C // PartitionEnforcementInbound, Outbound
		}
	}
	state := p.State
	// IBA 14.2.5.6: PortState 0 and PortPhysicalState 0 mean "no change".
	w[piSpeedState] &^= 0xF
	w[piPhysDown] = 0
	if state == PortStateInit && (p.linked() || (endport && p.Node.IsSwitch())) {
		w[piSpeedState] |= PortStateArmed
	}
	if state == PortStateInit || state == PortStateArmed {
		return true
	}
	// Already Armed/Active: set only what differs.
	cur := p.Info
	cur[piSpeedState] &^= 0xF
	cur[piPhysDown] = 0
	return cur != *want
}

// activatePorts moves every Armed port to Active (IBA 7.2: after the routes are in).
func (s *sweep) activatePorts() {
	sm := s.sm
	for _, n := range s.topo.Nodes {
		for _, p := range n.Ports {
			if p == nil || p.State != PortStateArmed {
				continue
			}
			t := sm.newTxn(opPortActive, n, p.Num, uint32(p.Num), p.DRPath)
			t.data = p.Info
			t.data[piSpeedState] = t.data[piSpeedState]&^0xF | PortStateActive
			t.data[piPhysDown] = 0
			sm.enqueue(t)
		}
	}
	sm.onDrain = s.finish
}

// finish publishes the Topology, reprograms multicast and wakes the waiters.
func (s *sweep) finish() {
	sm := s.sm
	sm.sw = nil
	if s.root != nil {
		t := s.topo
		t.Generation = sm.sweeps.Load() + 1
		t.SMLID = sm.smLID
		t.SMPortGUID = sm.port.GUID()
		t.GIDPrefix = sm.cfg.GIDPrefix
		t.SubnetTimeout = sm.cfg.SubnetTimeout
		t.Partitions = sm.cfg.Partitions
		t.index()
		sm.topo.Store(t)
		sm.firstRun = false
	}
	sm.dups = s.dups
	sm.dupCount.Store(int64(len(s.dups)))
	sm.sweeps.Add(1)
	if s.errors > 0 {
		sm.log.Warn("sweep finished with errors", "errors", s.errors)
	}
	ws := sm.curWait
	sm.curWait = nil
	if s.root != nil {
		sm.startMulticast(func() { wake(ws) })
		return
	}
	wake(ws)
}

func wake(ws []chan struct{}) {
	for _, w := range ws {
		close(w)
	}
}

// startLightSweep reads SwitchInfo of every switch; PortStateChange set, or no answer,
// asks for a heavy sweep (IBA 14.4.1; opensm's light sweep).
func (sm *SM) startLightSweep() {
	t := sm.topo.Load()
	for _, n := range t.Nodes {
		if n.IsSwitch() {
			sm.enqueue(sm.newTxn(opLightSwitchInfo, n, 0, 0, n.DRPath))
		}
	}
	sm.light.Add(1)
}

func (sm *SM) lightDone(t *txn) {
	if t.failed || t.data[siLifeTimePSC]&siPortStateChange != 0 {
		sm.mu.Lock()
		sm.wantHeavy = true
		sm.mu.Unlock()
	}
}
