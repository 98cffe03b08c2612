package hca

import (
	"sync"

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
	return p.dev.smaAttr(p, wire.MethodGet, attr, mod, req[:], out[:wire.SMPDataLen])
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
		status = p.dev.smaAttr(in, method, m.AttrID(), m.AttrMod(), req.SMPData(), resp.SMPData())
	}
	m.SetMethod(wire.MethodGetResp)
	if resp.IsDirectedRoute() {
		resp.SetD(true)
		resp.SetDRStatus(status)
	} else {
		m.SetStatus(status)
	}
}

// smaAttr answers one attribute: set is the request's SMP data, out the response's
// (holding a copy of set on entry). It returns the MAD status.
func (d *Device) smaAttr(in *Port, method uint8, attr uint16, mod uint32, set, out []byte) uint16 {
	isSet := method == wire.MethodSet
	switch attr {
	case wire.AttrNodeDescription:
		if isSet {
			return wire.StatusMethodAttrNotSupp
		}
		wire.NodeDescription(out).SetString(d.cfg.NodeDesc)
	case wire.AttrNodeInfo:
		if isSet {
			return wire.StatusMethodAttrNotSupp
		}
		d.fillNodeInfo(wire.NodeInfo(out), in)
	case wire.AttrGUIDInfo:
		// GUIDCap is 1: block 0 holds the port GUID, which the SM cannot change.
		if mod != 0 {
			return wire.StatusInvalidAttrOrModVal
		}
		clear(out[:wire.GUIDInfoLen])
		wire.GUIDInfo(out).SetGUID(0, in.guid)
	case wire.AttrPortInfo:
		// IBA 14.2.5.6: the modifier is the port number (0: the port the SMP came in on);
		// bit 31 says the SM understands extended speeds.
		n := mod &^ wire.PortInfoAttrModSMSupportsExtSpeeds
		q := in
		if n != 0 {
			if q = d.Port(int(n)); q == nil {
				return wire.StatusInvalidAttrOrModVal
			}
		}
		status := uint16(0)
		if isSet {
			status = q.setPortInfo(wire.PortInfo(set))
		}
		q.fillPortInfo(wire.PortInfo(out), in.num)
		return status
	case wire.AttrPKeyTable:
		// The table has PartitionCap = 32 entries: one block. A CA ignores the port
		// field (bits 31-16); the table is the receiving port's.
		if mod&0xFFFF != 0 {
			return wire.StatusInvalidAttrOrModVal
		}
		t := wire.PKeyTable(out)
		if isSet {
			var keys [PKeyTableLen]uint16
			for i := range keys {
				keys[i] = wire.PKeyTable(set).Entry(i)
			}
			in.SetPKeys(keys)
		}
		keys := in.PKeys()
		for i, k := range keys {
			t.SetEntry(i, k)
		}
	case wire.AttrSLtoVLMappingTable:
		in.smaMu.Lock()
		if isSet {
			copy(in.sl2vl[:], set[:wire.SLtoVLMappingTableLen])
		}
		clear(out[:wire.SMPDataLen])
		copy(out, in.sl2vl[:])
		in.smaMu.Unlock()
	case wire.AttrVLArbitrationTable:
		// Modifier bits 31-16: the block, 1-2 low-priority and 3-4 high-priority entries.
		blk := mod >> 16
		if blk < wire.VLArbLowBlock0 || blk > wire.VLArbHighBlock1 {
			return wire.StatusInvalidAttrOrModVal
		}
		in.smaMu.Lock()
		if isSet {
			copy(in.vlArb[blk-1][:], set[:wire.VLArbitrationTableLen])
		}
		copy(out, in.vlArb[blk-1][:])
		in.smaMu.Unlock()
	case wire.AttrSMInfo:
		b := in.smInfo.Load()
		if b == nil {
			return wire.StatusMethodAttrNotSupp
		}
		return b.a.SMInfo(method, mod, out)
	default:
		// SwitchInfo, the forwarding tables and everything else a CA does not have.
		return wire.StatusMethodAttrNotSupp
	}
	return 0
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
	if lid >= multicastLIDLo && lid != 0 {
		return bad
	}
	width, ok := wire.LinkEnable(s.LinkWidthEnabled(), wire.LinkWidthNoChange, wire.LinkWidthSetSupported, portWidthSupported)
	if !ok {
		return bad
	}
	speed, ok := wire.LinkEnable(s.LinkSpeedEnabled(), wire.LinkSpeedNoChange, wire.LinkSpeedSetSupported, portSpeedSupported)
	if !ok {
		return bad
	}
	mtu := MTU(s.NeighborMTU())
	if mtu != 0 && (mtu.Bytes() == 0 || mtu > p.dev.cfg.MaxMTU) {
		return bad
	}
	vls := s.OperationalVLs()
	if vls > portVLCap {
		return bad
	}
	ldd := s.LinkDownDefaultState()
	if ldd > wire.LinkDownDefaultPolling {
		return bad
	}
	phys := s.PortPhysicalState()
	if phys != wire.PhysStateNoChange && phys != wire.PhysStatePolling && phys != wire.PhysStateDisabled {
		return bad
	}
	state := PortState(s.PortState())
	linked := p.link.Load() != nil
	ok = p.updateIf(func(pi *portInfo) bool {
		// IBA 14.2.5.6 / 7.2: the SM moves a port Init → Armed → Active, or takes it
		// Down; Init is reached only by training the link. Setting the state the port
		// already has is no change.
		switch state {
		case PortNop:
		case PortDown:
			pi.state = PortDown
			if linked && pi.phys == PhysLinkUp {
				pi.state = PortInit // the link retrains at once: the cable is still there
			}
		case PortArmed:
			if pi.state != PortInit && pi.state != PortArmed {
				return false
			}
			pi.state = PortArmed
		case PortActive:
			if pi.state != PortArmed && pi.state != PortActive {
				return false
			}
			pi.state = PortActive
		default:
			return false
		}
		switch phys {
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
		if width != 0 {
			pi.widthEnabled, pi.widthActive = width, wire.WidestLinkWidth(width)
		}
		if speed != 0 {
			pi.speedEnabled, pi.speedActive = speed, wire.FastestLinkSpeed(speed)
		}
		if mtu != 0 {
			pi.activeMTU = mtu
		}
		if vls != 0 {
			pi.operVLs = vls
		}
		if ldd != 0 {
			pi.linkDownDefault = ldd
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
