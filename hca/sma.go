package hca

import (
	"sync"

	"github.com/pibgw/pibgw/mgmt"
	"github.com/pibgw/pibgw/wire"
)

// The subnet management agent of an HCA (IBA 14.2, 14.3): it answers SubnGet/SubnSet of
// NodeDescription, NodeInfo, GUIDInfo, PortInfo, P_KeyTable, SLtoVLMappingTable and
// VLArbitrationTable on every port, LID-routed (class 0x01) and directed-route (class
// 0x81), and hands SMInfo to the subnet manager running on the port (SetSMInfoAgent). It
// runs on the goroutine that delivers the SMP and replies synchronously from a pooled
// buffer: no goroutine, no allocation per SMP.

// PartitionCap is NodeInfo:PartitionCap, the size of each port's P_Key table.
const PartitionCap = PKeyTableLen

// NodeInfo constants a pibgw HCA reports.
const (
	smaGUIDCap       = 1 // one GUID per port: entry 0 of GUIDInfo block 0
	smaVLArbCap      = 8 // VLArbitrationHighCap / LowCap entries
	smaRespTimeValue = 8 // PortInfo:RespTimeValue: 4.096 µs × 2^8 ≈ 1 ms
)

// SMInfoAgent answers SMInfo (IBA 14.2.5.13) for the subnet manager that runs on a port.
// Without one, the SMA answers SMInfo with status 0x000C (attribute not supported), as a
// port without an SM does.
type SMInfoAgent interface {
	// SMInfo handles a SubnGet (method wire.MethodGet) or SubnSet (wire.MethodSet; mod is
	// the SMInfo attribute modifier, IBA 14.4.1: handover, acknowledge, disable, standby,
	// discover) of SMInfo that arrived at the port. data is the 64-byte SMP data area: the
	// request's on entry; the agent writes the response's into it. It returns the MAD
	// status (0, or a wire.Status* code). It runs on the delivering goroutine and must
	// not block.
	SMInfo(method uint8, mod uint32, data []byte) uint16
}

// SMInfoFunc adapts a function to an SMInfoAgent.
type SMInfoFunc func(method uint8, mod uint32, data []byte) uint16

// SMInfo implements SMInfoAgent.
func (f SMInfoFunc) SMInfo(method uint8, mod uint32, data []byte) uint16 {
	return f(method, mod, data)
}

type smInfoBox struct{ a SMInfoAgent }

// SetSMInfoAgent installs the agent that answers SMInfo on this port (the subnet manager
// running here); nil removes it.
func (p *Port) SetSMInfoAgent(a SMInfoAgent) {
	if a == nil {
		p.smInfo.Store(nil)
		return
	}
	p.smInfo.Store(&smInfoBox{a})
}

// SetSMInfoHandler installs h, which receives the SMInfo requests (IBA 14.2.5.13) that
// arrive at this port while no SMInfoAgent is installed: an SM outside the daemon (opensm
// through the ibsim server) answers them itself with its own GetResp. A directed-route
// request arrives with its hop pointer and return path as the SMA would answer it. nil
// removes it.
func (p *Port) SetSMInfoHandler(h MADHandler) {
	if h == nil {
		p.mads.smFwd.Store(nil)
		return
	}
	p.mads.smFwd.Store(&madHandlerBox{h})
}

// SMAGet runs a SubnGet of attr with modifier mod on the port's SMA as if it had arrived
// at this port, writing the 64-byte attribute into out; it returns the MAD status. The
// ibsim server's control messages (GET_NODEINFO, GET_PORTINFO, GET_PKEYS) read it.
func (p *Port) SMAGet(attr uint16, mod uint32, out []byte) uint16 {
	if len(out) < wire.SMPDataLen {
		return wire.StatusInvalidAttrOrModVal
	}
	var req [wire.SMPDataLen]byte
	return mgmt.AnswerSMA(smaNode{p.dev}, int(p.num), wire.MethodGet, attr, mod, req[:], out[:wire.SMPDataLen])
}

type trapBox struct{ h MADHandler }

// SetTrapHandler installs the handler of Trap(Notice) SMPs (IBA 14.2.5.1, method 0x05)
// that arrive at this port — switches send trap 128 to the master SM's LID when a port's
// link changes. The subnet manager on the port installs it and answers with
// TrapRepress itself; without a handler, traps are dropped. nil removes it.
func (p *Port) SetTrapHandler(h MADHandler) {
	if h == nil {
		p.traps.Store(nil)
		return
	}
	p.traps.Store(&trapBox{h})
}

// StartAgents registers the SMA (classes 0x01 and 0x81) and the PMA (class 0x04) on
// every port of the device.
func (d *Device) StartAgents() {
	for _, p := range d.ports {
		p.StartAgents()
	}
}

// StartAgents registers the SMA and the PMA on this port. A subnet manager on the port
// registers its own response handlers for the SMP classes; requests stay with the SMA.
func (p *Port) StartAgents() {
	h := smaHandler{p}
	p.RegisterMADHandler(wire.MgmtClassSubnLID, false, h)
	p.RegisterMADHandler(wire.MgmtClassSubnDirected, false, h)
	p.RegisterMADHandler(wire.MgmtClassPerfMgt, false, pmaHandler{p})
}

type smaHandler struct{ p *Port }

func (h smaHandler) HandleMAD(m *MAD) { h.p.handleSMP(m) }

// madScratch is a pooled 256-byte MAD the agents build responses in.
type madScratch struct{ b [wire.MADLen]byte }

var madScratchPool = sync.Pool{New: func() any { return new(madScratch) }}

// handleSMP answers one SMP request that arrived at p from the fabric.
func (p *Port) handleSMP(m *MAD) {
	req := wire.SMP(m.Data)
	if req.MAD().Method() == wire.MethodTrap {
		if t := p.traps.Load(); t != nil {
			t.h.HandleMAD(m)
		} else {
			p.counters.Inc(CntDropNoQP)
		}
		return
	}
	a := MADAddr{DLID: m.From.SLID, SL: m.From.SL, QPN: m.From.QPN}
	var hp uint8
	if req.IsDirectedRoute() {
		// IBA 14.2.2.2 at a CA: only the end of the path is for us; a CA forwards nothing.
		hc := req.HopCount()
		hp = req.HopPointer()
		if req.D() || hc == 0 || hc > wire.SMPMaxHops {
			// Returning SMPs belong to an SM's response handler; a hop count of 0 never
			// leaves the node that sent it (C14-9:3).
			p.counters.Inc(CntDropMalformed)
			return
		}
		if hp == 0 && hc == 1 && req.DrSLID() == permissiveLID {
			// The sender's SMI did not advance the hop pointer (C14-9:1); do it for it.
			hp = 1
		}
		switch {
		case hp == hc && req.DrDLID() == permissiveLID:
			// C14-9:3: the end of a directed route. The response goes back out of this
			// port with the hop pointer at the hop count (C14-13:1), its return path
			// recording where the request arrived.
			a.DLID = permissiveLID
		case hp == hc+1:
			// C14-9:4: the request came over a LID-routed last segment (DrDLID); the
			// response goes back to the switch that sent it, LID routed.
		default:
			// C14-9:2 (a CA is never an intermediate hop) and C14-9:5.
			p.counters.Inc(CntDropMalformed)
			return
		}
	}
	s := madScratchPool.Get().(*madScratch)
	if req.MAD().AttrID() == wire.AttrSMInfo && p.smInfo.Load() == nil {
		if f := p.mads.smFwd.Load(); f != nil {
			// An SM outside the daemon answers SMInfo itself; a directed-route request
			// reaches it with its return path complete, as the SMA's answer would be.
			fwd := wire.SMP(s.b[:])
			copy(fwd, req)
			if fwd.IsDirectedRoute() {
				fwd.SetHopPointer(hp)
				if a.DLID == permissiveLID {
					fwd.ReturnPath()[hp] = p.num
				}
			}
			in := madPool.Get().(*MAD)
			*in = MAD{Port: m.Port, From: m.From, Data: fwd}
			f.h.HandleMAD(in)
			*in = MAD{}
			madPool.Put(in)
			madScratchPool.Put(s)
			return
		}
	}
	resp := wire.SMP(s.b[:])
	copy(resp, req)
	p.answerSMP(m.Port, req, resp)
	if resp.IsDirectedRoute() {
		resp.SetHopPointer(hp)
		if a.DLID == permissiveLID {
			resp.ReturnPath()[hp] = p.num
		}
	}
	_ = p.SendMAD(a, resp)
	madScratchPool.Put(s)
}

// SendSMP sends an SMP the way the originating node's SMI does (IBA 14.2.2.1, C14-9:1 and
// C14-9:3): a directed-route SMP with hop count 0 is answered by this port's own SMA and
// the response delivered to the port's response handler for the class, without touching
// the link; one with a hop count leaves with its hop pointer advanced to 1 and must name
// this port as InitialPath[1]. Other MADs go out as SendMAD sends them. The MAD is
// copied; the caller keeps mad.
func (p *Port) SendSMP(a MADAddr, mad []byte) error {
	const op = "send_smp"
	if len(mad) != wire.MADLen {
		return errorf(op, EINVAL, "MAD is %d bytes, want %d", len(mad), wire.MADLen)
	}
	req := wire.SMP(mad)
	if !req.IsDirectedRoute() || req.D() || req.DrSLID() != permissiveLID {
		return p.SendMAD(a, mad)
	}
	hc := req.HopCount()
	if hc > wire.SMPMaxHops {
		return errorf(op, EINVAL, "hop count %d exceeds %d", hc, wire.SMPMaxHops)
	}
	s := madScratchPool.Get().(*madScratch)
	defer madScratchPool.Put(s)
	out := wire.SMP(s.b[:])
	if hc == 0 {
		if req.MAD().IsResponse() || req.DrDLID() != permissiveLID {
			return errorf(op, EINVAL, "directed-route SMP with hop count 0 must be a request to the permissive DrDLID")
		}
		copy(out, req)
		p.answerSMP(p, req, out)
		// C14-9:3 advanced the hop pointer to 1 for the SMA; C14-13:3 takes it back to 0
		// and hands the response to the SM.
		out.SetHopPointer(0)
		h := p.responseHandler(wire.MgmtClassSubnDirected, out.MAD().TID())
		if h == nil {
			p.counters.Inc(CntDropNoQP)
			return nil
		}
		in := madPool.Get().(*MAD)
		in.Port = p
		in.Data = out
		in.From = MADAddr{DLID: permissiveLID, SLID: permissiveLID, QPN: 0}
		h.HandleMAD(in)
		*in = MAD{}
		madPool.Put(in)
		return nil
	}
	copy(out, req)
	if out.HopPointer() == 0 {
		out.SetHopPointer(1)
	}
	if out.HopPointer() != 1 || out.InitialPath()[1] != p.num {
		return errorf(op, EINVAL, "directed route must start at hop pointer 0 and leave by port %d (InitialPath[1] = %d)",
			p.num, out.InitialPath()[1])
	}
	a.DLID = permissiveLID
	return p.SendMAD(a, out)
}

// answerSMP turns resp, a copy of the request req that arrived at port in, into its
// response: GetResp with the attribute's value and the status (IBA 13.4.5, 14.2.1).
func (p *Port) answerSMP(in *Port, req, resp wire.SMP) {
	m := resp.MAD()
	var status uint16
	switch method := m.Method(); {
	case m.ClassVersion() != wire.ClassVersionSM:
		status = wire.StatusBadVersion
	case method != wire.MethodGet && method != wire.MethodSet:
		status = wire.StatusMethodNotSupported
	default:
		status = mgmt.AnswerSMA(smaNode{p.dev}, int(in.num), method, m.AttrID(), m.AttrMod(), req.SMPData(), resp.SMPData())
	}
	m.SetMethod(wire.MethodGetResp)
	if resp.IsDirectedRoute() {
		resp.SetD(true)
		resp.SetDRStatus(status)
	} else {
		m.SetStatus(status)
	}
}

// smaNode is the device as the fabric's one SMA dispatch (mgmt.AnswerSMA) sees it: the
// rules (read-only attributes, modifiers, what a CA has) are mgmt's, the storage here.
type smaNode struct{ d *Device }

func (x smaNode) IsSwitch() bool   { return false }
func (x smaNode) NumPorts() int    { return len(x.d.ports) }
func (x smaNode) NodeDesc() string { return x.d.cfg.NodeDesc }

func (x smaNode) FillNodeInfo(n wire.NodeInfo, in int) { x.d.fillNodeInfo(n, x.d.Port(in)) }

func (x smaNode) PortGUID(in int) uint64 { return x.d.Port(in).guid }

func (x smaNode) PortInfo(n, in int, set, out wire.PortInfo) uint16 {
	q := x.d.Port(n)
	status := uint16(0)
	if set != nil {
		status = q.setPortInfo(set)
	}
	q.fillPortInfo(out, uint8(in))
	return status
}

// PKeyCap: PartitionCap = 32 entries, one block.
func (x smaNode) PKeyCap(int) int { return PKeyTableLen }

func (x smaNode) PKeyBlock(n, _ int, set, out wire.PKeyTable) {
	p := x.d.Port(n)
	if set != nil {
		var keys [PKeyTableLen]uint16
		for i := range keys {
			keys[i] = set.Entry(i)
		}
		p.SetPKeys(keys)
	}
	for i, k := range p.PKeys() {
		out.SetEntry(i, k)
	}
}

func (x smaNode) SL2VL(inPort, _ int, set, out []byte) {
	p := x.d.Port(inPort)
	p.smaMu.Lock()
	if set != nil {
		copy(p.sl2vl[:], set[:wire.SLtoVLMappingTableLen])
	}
	clear(out[:wire.SMPDataLen])
	copy(out, p.sl2vl[:])
	p.smaMu.Unlock()
}

func (x smaNode) VLArb(n int, blk uint32, set, out []byte) {
	p := x.d.Port(n)
	p.smaMu.Lock()
	if set != nil {
		copy(p.vlArb[blk-1][:], set[:wire.VLArbitrationTableLen])
	}
	copy(out, p.vlArb[blk-1][:])
	p.smaMu.Unlock()
}

func (x smaNode) SMInfo(in int, method uint8, mod uint32, out []byte) (uint16, bool) {
	b := x.d.Port(in).smInfo.Load()
	if b == nil {
		return 0, false // no SM on the port: attribute not supported
	}
	return b.a.SMInfo(method, mod, out), true
}

// A CA has no SwitchInfo or forwarding tables; mgmt.AnswerSMA never asks it for them.
func (x smaNode) SwitchInfo(_, _ []byte) uint16 { return wire.StatusMethodAttrNotSupp }
func (x smaNode) LFTBlock(int, []byte, []byte) uint16 {
	return wire.StatusMethodAttrNotSupp
}
func (x smaNode) MFTBlock(int, int, []byte, []byte) uint16 {
	return wire.StatusMethodAttrNotSupp
}

// fillNodeInfo writes NodeInfo (IBA 14.2.5.3) as seen through port in.
func (d *Device) fillNodeInfo(n wire.NodeInfo, in *Port) {
	clear(n[:wire.NodeInfoLen])
	n.SetBaseVersion(wire.MADBaseVersion)
	n.SetClassVersion(wire.ClassVersionSM)
	n.SetNodeType(wire.NodeTypeCA)
	n.SetNumPorts(uint8(len(d.ports)))
	n.SetSystemImageGUID(d.cfg.SysImageGUID)
	n.SetNodeGUID(d.cfg.NodeGUID)
	n.SetPortGUID(in.guid)
	n.SetPartitionCap(PartitionCap)
	n.SetDeviceID(uint16(d.cfg.VendorPartID))
	n.SetRevision(d.cfg.HWVer)
	n.SetLocalPortNum(in.num)
	n.SetVendorID(d.cfg.VendorID & 0xFFFFFF)
}

func sat16(v uint64) uint16 {
	if v > 0xFFFF {
		return 0xFFFF
	}
	return uint16(v)
}

// fillPortInfo writes the port's PortInfo (IBA 14.2.5.6); localPort is the port the SMP
// arrived at (LocalPortNum).
func (p *Port) fillPortInfo(o wire.PortInfo, localPort uint8) {
	pi := p.info.Load()
	clear(o[:wire.PortInfoLen])
	o.SetMKey(pi.mkey)
	o.SetGIDPrefix(pi.gidPrefix)
	o.SetLID(pi.lid)
	o.SetMasterSMLID(pi.smLID)
	o.SetCapabilityMask(pi.capMask)
	o.SetMKeyLeasePeriod(pi.mkeyLease)
	o.SetLocalPortNum(localPort)
	o.SetLinkWidthEnabled(pi.widthEnabled)
	o.SetLinkWidthSupported(portWidthSupported)
	o.SetLinkWidthActive(pi.widthActive)
	o.SetLinkSpeedSupported(portSpeedSupported)
	o.SetPortState(uint8(pi.state))
	o.SetPortPhysicalState(uint8(pi.phys))
	o.SetLinkDownDefaultState(pi.linkDownDefault)
	o.SetMKeyProtectBits(pi.mkeyProtect)
	o.SetLMC(pi.lmc)
	o.SetLinkSpeedActive(pi.speedActive)
	o.SetLinkSpeedEnabled(pi.speedEnabled)
	o.SetNeighborMTU(uint8(pi.activeMTU))
	o.SetMasterSMSL(pi.smSL)
	o.SetVLCap(portVLCap)
	o.SetVLHighLimit(pi.vlHighLimit)
	o.SetVLArbitrationHighCap(smaVLArbCap)
	o.SetVLArbitrationLowCap(smaVLArbCap)
	o.SetMTUCap(uint8(p.dev.cfg.MaxMTU))
	o.SetHOQLife(pi.hoqLife)
	o.SetOperationalVLs(pi.operVLs)
	o.SetPKeyViolations(sat16(p.counters.Get(CntPKeyViolations)))
	o.SetQKeyViolations(sat16(p.counters.Get(CntQKeyViolations)))
	o.SetGUIDCap(smaGUIDCap)
	o.SetSubnetTimeOut(pi.subnetTimeout)
	o.SetRespTimeValue(smaRespTimeValue)
}

// setPortInfo applies a SubnSet(PortInfo) (IBA 14.2.5.6). Every field is checked before
// any is applied: an invalid value leaves the port unchanged and returns 0x001C. The
// CapabilityMask is the port's own (IsSM comes from the SM on the port, not over the
// wire) and is ignored, as are the violation counters and read-only fields.
func (p *Port) setPortInfo(s wire.PortInfo) uint16 {
	const bad = wire.StatusInvalidAttrOrModVal
	lid := s.LID()
	if !mgmt.ValidUnicastLID(lid) {
		return bad
	}
	set, ok := mgmt.CheckPortInfoSet(s, mgmt.PortCaps{
		WidthSupported: portWidthSupported, SpeedSupported: portSpeedSupported,
		VLCap: portVLCap, MTUCap: uint8(p.dev.cfg.MaxMTU),
	})
	if !ok {
		return bad
	}
	linked := p.link.Load() != nil
	ok = p.updateIf(func(pi *portInfo) bool {
		// The SM moves a port Init → Armed → Active, or takes it Down (mgmt.NextPortState).
		next, ok := mgmt.NextPortState(uint8(pi.state), set.PortState)
		if !ok {
			return false
		}
		pi.state = PortState(next)
		if set.PortState == wire.PortStateDown && linked && pi.phys == PhysLinkUp {
			pi.state = PortInit // the link retrains at once: the cable is still there
		}
		switch set.PhysState {
		case wire.PhysStateDisabled:
			pi.state, pi.phys = PortDown, PhysDisabled
		case wire.PhysStatePolling:
			if linked {
				if pi.phys != PhysLinkUp || pi.state > PortInit {
					pi.state = PortInit
				}
				pi.phys = PhysLinkUp
			} else {
				pi.phys = PhysPolling
			}
		}
		pi.mkey = s.MKey()
		pi.gidPrefix = s.GIDPrefix()
		pi.lid = lid
		pi.smLID = s.MasterSMLID()
		pi.mkeyLease = s.MKeyLeasePeriod()
		pi.mkeyProtect = s.MKeyProtectBits()
		pi.lmc = s.LMC()
		pi.smSL = s.MasterSMSL()
		pi.subnetTimeout = s.SubnetTimeOut()
		pi.vlHighLimit = s.VLHighLimit()
		pi.hoqLife = s.HOQLife()
		if set.WidthEnabled != 0 {
			pi.widthEnabled, pi.widthActive = set.WidthEnabled, set.WidthActive
		}
		if set.SpeedEnabled != 0 {
			pi.speedEnabled, pi.speedActive = set.SpeedEnabled, set.SpeedActive
		}
		if set.NeighborMTU != 0 {
			pi.activeMTU = MTU(set.NeighborMTU)
		}
		if set.OperVLs != 0 {
			pi.operVLs = set.OperVLs
		}
		if set.LinkDownDefault != 0 {
			pi.linkDownDefault = set.LinkDownDefault
		}
		return true
	})
	if !ok {
		return bad
	}
	// IBA 14.2.5.6 ClientReregister: the SM asks the port's clients to register again
	// (multicast joins, service records): IBV_EVENT_CLIENT_REREGISTER.
	if s.ClientReregister() {
		p.dev.raise(AsyncEvent{Type: EventClientReregister, Port: p.num})
	}
	return 0
}
