package fabric

import (
	"fmt"

	"github.com/pibgw/pibgw/mgmt"
	"github.com/pibgw/pibgw/wire"
)

// The switch's subnet management agent (IBA 14.2, 14.3): its identity, the PortInfo of
// port 0 and of each external port, SwitchInfo, P_Key, SLtoVL and VLArbitration
// tables, and the answers to SubnGet/SubnSet of every attribute a switch has. Writers
// hold sw.mmu; forwarding reads only the atomics (port state, LFT, MFT).

// Port states and physical states (PortInfo, IBA 14.2.5.6), as the switch stores them.
const (
	PortStateDown   = wire.PortStateDown
	PortStateInit   = wire.PortStateInit
	PortStateArmed  = wire.PortStateArmed
	PortStateActive = wire.PortStateActive

	PhysStatePolling  = wire.PhysStatePolling
	PhysStateDisabled = wire.PhysStateDisabled
	PhysStateLinkUp   = wire.PhysStateLinkUp
)

// What a pibgw switch port supports: 12X QDR links like pib's, VL0 only (plus VL15),
// any MTU up to 4096.
const (
	swWidthSupported = wire.LinkWidth1X | wire.LinkWidth4X | wire.LinkWidth12X
	swWidthActive    = wire.LinkWidth12X
	swSpeedSupported = wire.LinkSpeedSDR | wire.LinkSpeedDDR | wire.LinkSpeedQDR
	swSpeedActive    = wire.LinkSpeedQDR
	swMTUCap         = wire.MTU4096
	swVLCap          = wire.VLCapVL0
	swVLArbCap       = 8
	swRespTimeValue  = 8
	// Port 0's CapabilityMask (IBA 14.2.5.6): traps (trap 128 on link changes) and
	// SLtoVL mapping.
	swPort0CapMask = wire.CapIsTrapSupported | wire.CapIsSLMappingSupported
	// DefaultSwitchPKeyTableLen is the default P_Key table size of each switch port.
	DefaultSwitchPKeyTableLen = 32
)

// port0Info is the PortInfo state that only the management port has (IBA 14.2.5.6:
// on a switch, LID, M_Key, GIDPrefix, MasterSMLID… belong to port 0).
type port0Info struct {
	mkey          uint64
	gidPrefix     uint64
	lid           uint16
	lmc           uint8
	smLID         uint16
	smSL          uint8
	mkeyLease     uint16
	mkeyProtect   uint8
	subnetTimeout uint8
}

// switchInfo is SwitchInfo's writable state (IBA 14.2.5.4).
type switchInfo struct {
	lftTop          uint16
	mftTop          uint16
	defPort         uint8
	defMcastPrim    uint8
	defMcastNotPrim uint8
	lifeTime        uint8
	portStateChange bool
}

// portMgmt is one port's PortInfo state besides its state and physical state.
type portMgmt struct {
	neighborMTU     uint8
	widthEnabled    uint8
	widthActive     uint8
	speedEnabled    uint8
	speedActive     uint8
	operVLs         uint8
	vlHighLimit     uint8
	hoqLife         uint8
	linkDownDefault uint8
	pkeys           []uint16
	vlArb           [4][wire.VLArbitrationTableLen]byte
}

func (sw *Switch) initManagement(cfg SwitchConfig) {
	sw.guid = cfg.NodeGUID
	if sw.guid == 0 {
		sw.guid = DefaultSwitchGUIDBase + switchSeq.Add(1)
	}
	sw.sysGUID = cfg.SystemImageGUID
	if sw.sysGUID == 0 {
		sw.sysGUID = sw.guid
	}
	sw.desc = cfg.NodeDesc
	if sw.desc == "" {
		sw.desc = fmt.Sprintf("pibgw switch %#016x", sw.guid)
	}
	sw.vendorID, sw.deviceID, sw.revision = cfg.VendorID&0xFFFFFF, cfg.DeviceID, cfg.Revision
	sw.pkeyCap = cfg.PKeyTableLen
	if sw.pkeyCap <= 0 {
		sw.pkeyCap = DefaultSwitchPKeyTableLen
	}
	sw.pkeyCap = (sw.pkeyCap + wire.PKeyTableBlockSize - 1) / wire.PKeyTableBlockSize * wire.PKeyTableBlockSize
	sw.managed = cfg.Managed
	sw.port0 = port0Info{gidPrefix: 0xFE80_0000_0000_0000, subnetTimeout: 18}
	sw.sl2vl = make(map[uint16][8]byte)
	for i := range sw.ports {
		p := &sw.ports[i]
		p.mi = portMgmt{
			neighborMTU: swMTUCap, widthEnabled: swWidthSupported, widthActive: swWidthActive,
			speedEnabled: swSpeedSupported, speedActive: swSpeedActive, operVLs: swVLCap,
			linkDownDefault: wire.LinkDownDefaultPolling, pkeys: make([]uint16, sw.pkeyCap),
		}
		p.mi.pkeys[0] = 0xFFFF // IBA 10.9.1.2: the default partition
		p.state.Store(PortStateDown)
		p.phys.Store(PhysStatePolling)
	}
	// Port 0 is the switch itself: always up (IBA 14.2.5.6, base port 0).
	sw.ports[0].state.Store(PortStateActive)
	sw.ports[0].phys.Store(PhysStateLinkUp)
}

// setLink follows the physical link of an external port: up, the port trains to LinkUp
// and comes up in Init (Active on an unmanaged switch); down, it goes Down/Polling. A
// change between Down and not Down sets SwitchInfo:PortStateChange (IBA 14.2.5.4),
// sends trap 128 to the SM and calls the OnPortStateChange hook.
func (p *swPort) setLink(up bool) {
	sw := p.sw
	if p.num == 0 {
		return
	}
	p.up.Store(up)
	sw.mmu.Lock()
	old := p.state.Load()
	switch {
	case up && p.phys.Load() == PhysStateDisabled:
		// The SM disabled the port: it stays down whatever the cable does.
	case up:
		p.phys.Store(PhysStateLinkUp)
		if old == PortStateDown {
			if sw.managed {
				p.state.Store(PortStateInit)
			} else {
				p.state.Store(PortStateActive)
			}
		}
	default:
		if p.phys.Load() != PhysStateDisabled {
			p.phys.Store(PhysStatePolling)
		}
		p.state.Store(PortStateDown)
	}
	changed := (old == PortStateDown) != (p.state.Load() == PortStateDown)
	if changed {
		sw.si.portStateChange = true
	}
	hook := sw.psc
	sw.mmu.Unlock()
	if changed {
		sw.sendTrap128()
		if hook != nil {
			hook(sw, p.num, up)
		}
	}
}

// NodeGUID returns the switch's node GUID (also each port's GUID).
func (sw *Switch) NodeGUID() uint64 { return sw.guid }

// NodeDesc returns the switch's NodeDescription.
func (sw *Switch) NodeDesc() string { return sw.desc }

// LID returns the LID of the switch's management port 0.
func (sw *Switch) LID() uint16 {
	sw.mmu.Lock()
	defer sw.mmu.Unlock()
	return sw.port0.lid
}

// SetLID sets port 0's LID and LMC, as a PortInfo Set does, and routes the LID to port 0
// in the LFT so LID-routed SMPs and PMA MADs reach the agent.
func (sw *Switch) SetLID(lid uint16, lmc uint8) {
	sw.mmu.Lock()
	sw.port0.lid, sw.port0.lmc = lid, lmc&7
	sw.mmu.Unlock()
	if lid != 0 {
		sw.SetLFT(lid, 0)
	}
}

// SetSM sets the master SM's LID and SL on port 0 (where traps go).
func (sw *Switch) SetSM(lid uint16, sl uint8) {
	sw.mmu.Lock()
	sw.port0.smLID, sw.port0.smSL = lid, sl&0xF
	sw.mmu.Unlock()
}

// PortState returns the logical state of port port (IBA PortInfo:PortState, 1 Down …
// 4 Active); port 0 is always Active.
func (sw *Switch) PortState(port int) uint8 {
	if port < 0 || port > sw.nports {
		return 0
	}
	return uint8(sw.ports[port].state.Load())
}

// PortPhysState returns PortInfo:PortPhysicalState of port port.
func (sw *Switch) PortPhysState(port int) uint8 {
	if port < 0 || port > sw.nports {
		return 0
	}
	return uint8(sw.ports[port].phys.Load())
}

// SetPortState sets the logical state of external port port as a PortInfo Set does
// (IBA 14.2.5.6): Armed only from Init, Active only from Armed, Down takes the link
// down (it retrains to Init at once while the cable is there). It reports whether the
// transition is allowed.
func (sw *Switch) SetPortState(port int, state uint8) bool {
	if port < 1 || port > sw.nports {
		return false
	}
	sw.mmu.Lock()
	ok, changed := sw.setPortStateLocked(&sw.ports[port], state)
	hook := sw.psc
	sw.mmu.Unlock()
	if changed {
		sw.sendTrap128()
		if hook != nil {
			hook(sw, port, sw.PortUp(port))
		}
	}
	return ok
}

// setPortStateLocked applies a PortState write; changed reports a PortStateChange.
func (sw *Switch) setPortStateLocked(p *swPort, state uint8) (ok, changed bool) {
	cur := uint8(p.state.Load())
	switch state {
	case wire.PortStateNoChange:
	case PortStateDown:
		if cur == PortStateDown {
			return true, false
		}
		// The link goes down and, the cable being there, trains again.
		if p.up.Load() && p.link.Load() != nil && p.phys.Load() != PhysStateDisabled {
			p.state.Store(PortStateInit)
		} else {
			p.state.Store(PortStateDown)
		}
		sw.si.portStateChange = true
		return true, true
	case PortStateArmed:
		if cur != PortStateInit && cur != PortStateArmed {
			return false, false
		}
		p.state.Store(PortStateArmed)
	case PortStateActive:
		if cur != PortStateArmed && cur != PortStateActive {
			return false, false
		}
		p.state.Store(PortStateActive)
	default:
		return false, false
	}
	return true, false
}

// OnPortStateChange installs f, called (outside the switch's locks, on the goroutine
// that changed the link) whenever an external port goes Down or comes up from Down — the
// events that set SwitchInfo:PortStateChange. A subnet manager in the same process uses
// it to schedule a sweep instead of polling; nil removes it.
func (sw *Switch) OnPortStateChange(f func(sw *Switch, port int, up bool)) {
	sw.mmu.Lock()
	sw.psc = f
	sw.mmu.Unlock()
}

// PortStateChange reports SwitchInfo:PortStateChange.
func (sw *Switch) PortStateChange() bool {
	sw.mmu.Lock()
	defer sw.mmu.Unlock()
	return sw.si.portStateChange
}

// sendTrap128 sends Trap(Notice 128, "link state of a port changed", IBA 14.2.5.1) to
// the master SM when the switch knows its own LID and the SM's. The SM answers with
// TrapRepress, which the agent drops; it reads PortStateChange in its sweep.
func (sw *Switch) sendTrap128() {
	sw.mmu.Lock()
	lid, smLID, smSL := sw.port0.lid, sw.port0.smLID, sw.port0.smSL
	sw.mmu.Unlock()
	if lid == 0 || smLID == 0 {
		return
	}
	mb := mgmtBufPool.Get().(*mgmtBuf)
	defer mgmtBufPool.Put(mb)
	n := wire.LRHLen + wire.BTHLen + wire.DETHLen + wire.MADLen + wire.ICRCLen
	b := mb.b[:n]
	clear(b)
	lrh := wire.LRH(b)
	lrh.SetVL(15)
	lrh.SetLVer(wire.LRHVersion)
	lrh.SetSL(smSL)
	lrh.SetLNH(wire.LNHLocal)
	lrh.SetDLID(smLID)
	lrh.SetPktLen(uint16(n / 4))
	lrh.SetSLID(lid)
	bth := wire.BTH(b[wire.LRHLen:])
	bth.SetOpCode(wire.UDSendOnly)
	bth.SetTVer(wire.BTHTVer)
	bth.SetPKey(0xFFFF)
	bth.SetDestQP(0)
	deth := wire.DETH(b[wire.LRHLen+wire.BTHLen:])
	deth.SetSrcQP(0)
	m := wire.MAD(b[wire.LRHLen+wire.BTHLen+wire.DETHLen : n-wire.ICRCLen])
	m.SetBaseVersion(wire.MADBaseVersion)
	m.SetMgmtClass(wire.MgmtClassSubnLID)
	m.SetClassVersion(wire.ClassVersionSM)
	m.SetMethod(wire.MethodTrap)
	m.SetTID(sw.tid.Add(1))
	m.SetAttrID(wire.AttrNotice)
	nt := wire.Notice(wire.SMP(m).SMPData())
	nt.SetGenericTrap(wire.NoticeTypeUrgent, wire.NodeTypeSwitch, wire.TrapLinkStateChange, lid)
	nt.SetTrap128LID(lid)
	wire.SetICRC(b)
	sw.sendFromPort0(b, mb)
}

// answerSMP turns resp (a copy of req, arrived at port in) into its response.
func (sw *Switch) answerSMP(in int, req, resp wire.SMP) {
	m := resp.MAD()
	var status uint16
	switch method := m.Method(); {
	case m.ClassVersion() != wire.ClassVersionSM:
		status = wire.StatusBadVersion
	case method != wire.MethodGet && method != wire.MethodSet:
		status = wire.StatusMethodNotSupported
	default:
		status = mgmt.AnswerSMA(swSMA{sw}, in, method, m.AttrID(), m.AttrMod(), req.SMPData(), resp.SMPData())
	}
	m.SetMethod(wire.MethodGetResp)
	if resp.IsDirectedRoute() {
		resp.SetD(true)
		resp.SetDRStatus(status)
	} else {
		m.SetStatus(status)
	}
}

// swSMA is the switch as the fabric's one SMA dispatch (mgmt.AnswerSMA) sees it: the
// rules (read-only attributes, modifiers) are mgmt's, the storage and the switch's own
// limits (LFT and MFT capacity, SwitchInfo's fields) here.
type swSMA struct{ sw *Switch }

func (x swSMA) IsSwitch() bool   { return true }
func (x swSMA) NumPorts() int    { return x.sw.nports }
func (x swSMA) NodeDesc() string { return x.sw.desc }

func (x swSMA) FillNodeInfo(n wire.NodeInfo, in int) {
	sw := x.sw
	clear(n[:wire.NodeInfoLen])
	n.SetBaseVersion(wire.MADBaseVersion)
	n.SetClassVersion(wire.ClassVersionSM)
	n.SetNodeType(wire.NodeTypeSwitch)
	n.SetNumPorts(uint8(sw.nports))
	n.SetSystemImageGUID(sw.sysGUID)
	n.SetNodeGUID(sw.guid)
	n.SetPortGUID(sw.guid)
	n.SetPartitionCap(uint16(sw.pkeyCap))
	n.SetDeviceID(sw.deviceID)
	n.SetRevision(sw.revision)
	n.SetLocalPortNum(uint8(in))
	n.SetVendorID(sw.vendorID)
}

func (x swSMA) PortGUID(int) uint64 { return x.sw.guid }

func (x swSMA) PortInfo(n, in int, set, out wire.PortInfo) uint16 {
	status := uint16(0)
	if set != nil {
		status = x.sw.setPortInfo(n, set)
	}
	x.sw.fillPortInfo(n, in, out)
	return status
}

func (x swSMA) PKeyCap(int) int { return x.sw.pkeyCap }

func (x swSMA) PKeyBlock(n, blk int, set, out wire.PKeyTable) {
	sw := x.sw
	sw.mmu.Lock()
	keys := sw.ports[n].mi.pkeys[blk*wire.PKeyTableBlockSize : (blk+1)*wire.PKeyTableBlockSize]
	for i := range keys {
		if set != nil {
			keys[i] = set.Entry(i)
		}
		out.SetEntry(i, keys[i])
	}
	sw.mmu.Unlock()
}

func (x swSMA) SL2VL(inPort, outPort int, set, out []byte) {
	sw := x.sw
	key := uint16(inPort<<8 | outPort)
	sw.mmu.Lock()
	if set != nil {
		var t [8]byte
		copy(t[:], set[:wire.SLtoVLMappingTableLen])
		sw.sl2vl[key] = t
	}
	t := sw.sl2vl[key]
	sw.mmu.Unlock()
	clear(out[:wire.SMPDataLen])
	copy(out, t[:])
}

func (x swSMA) VLArb(n int, blk uint32, set, out []byte) {
	sw := x.sw
	sw.mmu.Lock()
	t := &sw.ports[n].mi.vlArb[blk-1]
	if set != nil {
		copy(t[:], set[:wire.VLArbitrationTableLen])
	}
	copy(out, t[:])
	sw.mmu.Unlock()
}

// SMInfo: no SM runs on a switch.
func (x swSMA) SMInfo(int, uint8, uint32, []byte) (uint16, bool) { return 0, false }

func (x swSMA) SwitchInfo(set, out []byte) uint16 {
	sw := x.sw
	sw.mmu.Lock()
	defer sw.mmu.Unlock()
	if set != nil {
		s := wire.SwitchInfo(set)
		if int(s.LinearFDBTop()) >= LFTCap || int(s.DefaultPort()) > sw.nports && s.DefaultPort() != PortDrop {
			sw.fillSwitchInfo(wire.SwitchInfo(out))
			return wire.StatusInvalidAttrOrModVal
		}
		sw.si.lftTop = s.LinearFDBTop()
		sw.si.defPort = s.DefaultPort()
		sw.si.defMcastPrim = s.DefaultMulticastPrimaryPort()
		sw.si.defMcastNotPrim = s.DefaultMulticastNotPrimaryPort()
		sw.si.lifeTime = s.LifeTimeValue()
		if t := s.MulticastFDBTop(); t == 0 || int(t-LIDMulticastMin) < sw.mftCap {
			sw.si.mftTop = t
		}
		// IBA 14.2.5.4: writing 1 to PortStateChange clears it; 0 leaves it.
		if s.PortStateChange() {
			sw.si.portStateChange = false
		}
	}
	sw.fillSwitchInfo(wire.SwitchInfo(out))
	return 0
}

func (x swSMA) LFTBlock(blk int, set, out []byte) uint16 {
	sw := x.sw
	if (blk+1)*LFTBlockSize > LFTCap {
		return wire.StatusInvalidAttrOrModVal
	}
	if set != nil {
		var e [LFTBlockSize]uint8
		copy(e[:], set[:LFTBlockSize])
		sw.SetLFTBlock(blk, e)
	}
	e := sw.LFTBlock(blk)
	copy(out, e[:])
	return 0
}

func (x swSMA) MFTBlock(pos, blk int, set, out []byte) uint16 {
	sw := x.sw
	if (blk+1)*wire.MulticastForwardingTableBlockSize > sw.mftCap {
		return wire.StatusInvalidAttrOrModVal
	}
	t := wire.MulticastForwardingTable(out)
	sw.mmu.Lock()
	defer sw.mmu.Unlock()
	for i := 0; i < wire.MulticastForwardingTableBlockSize; i++ {
		mlid := uint16(LIDMulticastMin + blk*wire.MulticastForwardingTableBlockSize + i)
		m := sw.MFT(mlid)
		if set != nil {
			v := wire.MulticastForwardingTable(set).PortMask(i)
			for j := 0; j < 16; j++ {
				if v>>j&1 != 0 {
					m.Set(pos*16 + j)
				} else if pos*16+j < len(m)*64 {
					m.Clear(pos*16 + j)
				}
			}
			sw.SetMFT(mlid, m)
			m = sw.MFT(mlid)
		}
		var v uint16
		for j := 0; j < 16; j++ {
			if q := pos*16 + j; q <= sw.nports && m.Has(q) {
				v |= 1 << j
			}
		}
		t.SetPortMask(i, v)
	}
	return 0
}

func (sw *Switch) fillSwitchInfo(s wire.SwitchInfo) {
	clear(s[:wire.SwitchInfoLen])
	s.SetLinearFDBCap(LFTCap)
	s.SetMulticastFDBCap(uint16(sw.mftCap))
	s.SetLinearFDBTop(sw.si.lftTop)
	s.SetDefaultPort(sw.si.defPort)
	s.SetDefaultMulticastPrimaryPort(sw.si.defMcastPrim)
	s.SetDefaultMulticastNotPrimaryPort(sw.si.defMcastNotPrim)
	s.SetLifeTimeValue(sw.si.lifeTime)
	s.SetPortStateChange(sw.si.portStateChange)
	s.SetPartitionEnforcementCap(uint16(sw.pkeyCap))
	s.SetMulticastFDBTop(sw.si.mftTop)
}

// fillPortInfo writes PortInfo of port n (0 = the management port) as seen by an SMP
// that arrived at port in.
func (sw *Switch) fillPortInfo(n, in int, o wire.PortInfo) {
	p := &sw.ports[n]
	sw.mmu.Lock()
	defer sw.mmu.Unlock()
	clear(o[:wire.PortInfoLen])
	mi := &p.mi
	if n == 0 {
		p0 := &sw.port0
		o.SetMKey(p0.mkey)
		o.SetGIDPrefix(p0.gidPrefix)
		o.SetLID(p0.lid)
		o.SetMasterSMLID(p0.smLID)
		o.SetCapabilityMask(swPort0CapMask)
		o.SetMKeyLeasePeriod(p0.mkeyLease)
		o.SetMKeyProtectBits(p0.mkeyProtect)
		o.SetLMC(p0.lmc)
		o.SetMasterSMSL(p0.smSL)
		o.SetGUIDCap(1)
		o.SetSubnetTimeOut(p0.subnetTimeout)
		o.SetRespTimeValue(swRespTimeValue)
	}
	o.SetLocalPortNum(uint8(in))
	o.SetLinkWidthEnabled(mi.widthEnabled)
	o.SetLinkWidthSupported(swWidthSupported)
	o.SetLinkWidthActive(mi.widthActive)
	o.SetLinkSpeedSupported(swSpeedSupported)
	o.SetPortState(uint8(p.state.Load()))
	o.SetPortPhysicalState(uint8(p.phys.Load()))
	o.SetLinkDownDefaultState(mi.linkDownDefault)
	o.SetLinkSpeedActive(mi.speedActive)
	o.SetLinkSpeedEnabled(mi.speedEnabled)
	o.SetNeighborMTU(mi.neighborMTU)
	o.SetVLCap(swVLCap)
	o.SetVLHighLimit(mi.vlHighLimit)
	o.SetVLArbitrationHighCap(swVLArbCap)
	o.SetVLArbitrationLowCap(swVLArbCap)
	o.SetMTUCap(swMTUCap)
	o.SetHOQLife(mi.hoqLife)
	o.SetOperationalVLs(mi.operVLs)
}

// setPortInfo applies a SubnSet(PortInfo) to port n (IBA 14.2.5.6). Every field is
// checked first; an invalid one leaves the port unchanged and returns 0x001C. On port 0
// it sets the switch's LID, SM, M_Key and GID prefix (the port-state fields do not
// apply: port 0 is always Active); on an external port the link fields and state.
func (sw *Switch) setPortInfo(n int, s wire.PortInfo) uint16 {
	const bad = wire.StatusInvalidAttrOrModVal
	set, ok := mgmt.CheckPortInfoSet(s, mgmt.PortCaps{
		WidthSupported: swWidthSupported, SpeedSupported: swSpeedSupported, VLCap: swVLCap, MTUCap: swMTUCap,
	})
	if !ok {
		return bad
	}
	p := &sw.ports[n]
	if n == 0 {
		lid := s.LID()
		if !mgmt.ValidUnicastLID(lid) {
			return bad
		}
		sw.mmu.Lock()
		old := sw.port0.lid
		sw.port0 = port0Info{
			mkey: s.MKey(), gidPrefix: s.GIDPrefix(), lid: lid, lmc: s.LMC(),
			smLID: s.MasterSMLID(), smSL: s.MasterSMSL(), mkeyLease: s.MKeyLeasePeriod(),
			mkeyProtect: s.MKeyProtectBits(), subnetTimeout: s.SubnetTimeOut(),
		}
		sw.mmu.Unlock()
		// Port 0's LID reaches the agent: the LFT entry of a switch's own LID is 0.
		if lid != 0 && lid != old {
			sw.SetLFT(lid, 0)
		}
		return 0
	}
	sw.mmu.Lock()
	// Validate the state change before touching anything.
	st := set.PortState
	if _, ok := mgmt.NextPortState(uint8(p.state.Load()), st); !ok {
		sw.mmu.Unlock()
		return bad
	}
	mi := &p.mi
	if set.WidthEnabled != 0 {
		mi.widthEnabled, mi.widthActive = set.WidthEnabled, set.WidthActive
	}
	if set.SpeedEnabled != 0 {
		mi.speedEnabled, mi.speedActive = set.SpeedEnabled, set.SpeedActive
	}
	if set.NeighborMTU != 0 {
		mi.neighborMTU = set.NeighborMTU
	}
	if set.OperVLs != 0 {
		mi.operVLs = set.OperVLs
	}
	if set.LinkDownDefault != 0 {
		mi.linkDownDefault = set.LinkDownDefault
	}
	mi.vlHighLimit, mi.hoqLife = s.VLHighLimit(), s.HOQLife()
	changed := false
	switch set.PhysState {
	case wire.PhysStateDisabled:
		if p.phys.Swap(PhysStateDisabled) != PhysStateDisabled {
			if p.state.Swap(PortStateDown) != PortStateDown {
				changed = true
			}
		}
	case wire.PhysStatePolling:
		if p.phys.Load() == PhysStateDisabled {
			// Re-enabled: the link trains if the cable is there.
			if p.up.Load() && p.link.Load() != nil {
				p.phys.Store(PhysStateLinkUp)
				if sw.managed {
					p.state.Store(PortStateInit)
				} else {
					p.state.Store(PortStateActive)
				}
				changed = true
			} else {
				p.phys.Store(PhysStatePolling)
			}
		}
	}
	_, c := sw.setPortStateLocked(p, st)
	changed = changed || c
	if changed {
		sw.si.portStateChange = true
	}
	hook := sw.psc
	sw.mmu.Unlock()
	if changed {
		sw.sendTrap128()
		if hook != nil {
			hook(sw, n, sw.PortUp(n))
		}
	}
	return 0
}
