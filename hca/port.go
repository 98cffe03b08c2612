package hca

import (
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/wire"
)

// GUIDs of ports derive from the node GUID as pib derives them: port n = node | n.
func portGUID(node uint64, n uint8) uint64 { return node | uint64(n) }

// DefaultGIDPrefix is the link-local subnet prefix fe80::/64 (IBA 4.1.1).
const DefaultGIDPrefix = wire.DefaultGIDPrefix

// PortAttr is ibv_port_attr, plus the PortInfo fields pibgw's tools print.
type PortAttr struct {
	State         PortState
	PhysState     PhysState
	MaxMTU        MTU
	ActiveMTU     MTU
	GIDTblLen     int
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    int
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8 // IBA encoding: 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x
	ActiveSpeed   uint8 // 1 = SDR 2.5, 2 = DDR 5, 4 = QDR 10 Gb/s per lane
	LinkLayer     string
	GUID          uint64
	GIDPrefix     uint64
}

// Port capability mask bits (IBA 14.2.5.6 PortInfo:CapabilityMask).
const (
	CapIsSM                    = 1 << 1
	CapIsNoticeSupported       = 1 << 2
	CapIsTrapSupported         = 1 << 3
	CapIsAutomaticMigration    = 1 << 5
	CapIsSLMappingSupported    = 1 << 6
	CapIsSystemImageGUID       = 1 << 11
	CapIsPKeySwitchExtPortTrap = 1 << 12
	CapIsCommManagement        = 1 << 16
	CapIsSNMPTunneling         = 1 << 17
	CapIsDeviceManagement      = 1 << 19
	CapIsVendorClass           = 1 << 20
	CapIsClientReregistration  = 1 << 25
)

// portInfo is the port's management state, replaced whole on every change so that the
// packet path reads it with one atomic load.
type portInfo struct {
	state         PortState
	phys          PhysState
	lid           uint16
	lmc           uint8
	smLID         uint16
	smSL          uint8
	activeMTU     MTU
	gidPrefix     uint64
	capMask       uint32
	subnetTimeout uint8
	pkeys         [PKeyTableLen]uint16

	// PortInfo fields only the SMA reads and writes (IBA 14.2.5.6).
	mkey            uint64
	mkeyLease       uint16
	mkeyProtect     uint8
	widthEnabled    uint8 // LinkWidthEnabled bits (wire.LinkWidth*)
	widthActive     uint8
	speedEnabled    uint8 // LinkSpeedEnabled bits (wire.LinkSpeed*)
	speedActive     uint8
	linkDownDefault uint8
	operVLs         uint8
	vlHighLimit     uint8
	hoqLife         uint8
}

// What a pibgw HCA port supports (PortInfo, IBA 14.2.5.6): pib's 12X QDR link, one data
// VL (VL0) plus VL15.
const (
	portWidthSupported = 0x01 | 0x02 | 0x08 // 1X, 4X, 12X
	portWidthActive    = 0x08               // 12X
	portSpeedSupported = 0x1 | 0x2 | 0x4    // SDR, DDR, QDR
	portSpeedActive    = 0x4                // QDR
	portVLCap          = 1                  // VL0
)

// Port is one HCA port: its management state (what the SMA sets), its counters, its
// attachment to the fabric and its multicast attachments.
type Port struct {
	dev  *Device
	num  uint8
	guid uint64

	mu   sync.Mutex // serialises writers of info
	info atomic.Pointer[portInfo]
	link atomic.Pointer[linkBox]

	counters     Counters
	countersHook atomic.Pointer[func()] // SetCountersHook

	// Special QPs, created by the MAD layer.
	qp0, qp1 atomic.Pointer[QP]

	mcMu  sync.RWMutex
	mcast map[wire.GID][]*QP

	mads   madTable
	router atomic.Pointer[routerBox]
	madPSN atomic.Uint32
	tid    atomic.Uint64

	// SMA tables that are not on the packet path, and the SM's SMInfo hook (sma.go).
	smaMu  sync.Mutex
	sl2vl  [8]byte
	vlArb  [4][64]byte
	smInfo atomic.Pointer[smInfoBox]
	traps  atomic.Pointer[trapBox]
}

type linkBox struct{ l fabric.Link }

func newPort(d *Device, n uint8) *Port {
	p := &Port{dev: d, num: n, guid: portGUID(d.cfg.NodeGUID, n), mcast: make(map[wire.GID][]*QP)}
	pi := &portInfo{
		state: PortDown, phys: PhysPolling, activeMTU: MTU256,
		gidPrefix: DefaultGIDPrefix, subnetTimeout: 18,
		widthEnabled: portWidthSupported, widthActive: portWidthActive,
		speedEnabled: portSpeedSupported, speedActive: portSpeedActive,
		linkDownDefault: 2, operVLs: portVLCap,
		capMask: CapIsTrapSupported | CapIsSLMappingSupported | CapIsSystemImageGUID |
			CapIsCommManagement | CapIsDeviceManagement | CapIsVendorClass | CapIsClientReregistration,
	}
	pi.pkeys[0] = DefaultPKey
	p.info.Store(pi)
	return p
}

// Num is the port number (1-based).
func (p *Port) Num() uint8 { return p.num }

// Device returns the port's device.
func (p *Port) Device() *Device { return p.dev }

// GUID is the port GUID.
func (p *Port) GUID() uint64 { return p.guid }

// GID returns entry index of the GID table: entry 0 is the subnet prefix + port GUID
// (IBA 4.1.1); pibgw has no other entries.
func (p *Port) GID(index int) (wire.GID, bool) {
	if index != 0 {
		return wire.GID{}, false
	}
	return wire.MakeGID(p.info.Load().gidPrefix, p.guid), true
}

// Query returns ibv_port_attr.
func (p *Port) Query() PortAttr {
	pi := p.info.Load()
	return PortAttr{
		State: pi.state, PhysState: pi.phys, MaxMTU: p.dev.cfg.MaxMTU, ActiveMTU: pi.activeMTU,
		GIDTblLen: GIDTableLen, PortCapFlags: pi.capMask, MaxMsgSz: MaxMsgSize,
		BadPKeyCntr:  uint32(p.counters.Get(CntPKeyViolations)),
		QKeyViolCntr: uint32(p.counters.Get(CntQKeyViolations)),
		PKeyTblLen:   PKeyTableLen, LID: pi.lid, SMLID: pi.smLID, LMC: pi.lmc, MaxVLNum: portVLCap,
		SMSL: pi.smSL, SubnetTimeout: pi.subnetTimeout, ActiveWidth: pi.widthActive, ActiveSpeed: pi.speedActive,
		LinkLayer: "InfiniBand", GUID: p.guid, GIDPrefix: pi.gidPrefix,
	}
}

// PKey returns P_Key table entry i (IBA 10.9.2).
func (p *Port) PKey(i int) (uint16, bool) {
	if i < 0 || i >= PKeyTableLen {
		return 0, false
	}
	return p.info.Load().pkeys[i], true
}

// PKeys returns a copy of the P_Key table.
func (p *Port) PKeys() [PKeyTableLen]uint16 { return p.info.Load().pkeys }

// FindPKey returns the index of the table entry equal to pkey, or -1 (ibv_get_pkey_index).
func (p *Port) FindPKey(pkey uint16) int {
	for i, k := range p.info.Load().pkeys {
		if k == pkey {
			return i
		}
	}
	return -1
}

// PKeyMatch is IBA 10.9.3's rule: the low 15 bits are equal and non-zero, and at least one
// of the two is a full member (bit 15 set). (pib compared with exact equality, which lets
// two limited members talk and stops a full and a limited member from talking.)
func PKeyMatch(a, b uint16) bool {
	return a&0x7FFF != 0 && a&0x7FFF == b&0x7FFF && (a|b)&0x8000 != 0
}

// update applies f to a copy of the port's info and publishes it, then raises the async
// events the change implies (IBA 11.6.3).
func (p *Port) update(f func(pi *portInfo)) {
	p.updateIf(func(pi *portInfo) bool { f(pi); return true })
}

// updateIf is update for a change that f may refuse (by returning false, leaving the
// port as it was): the SMA validates a PortInfo Set against the state it replaces.
func (p *Port) updateIf(f func(pi *portInfo) bool) bool {
	p.mu.Lock()
	old := p.info.Load()
	pi := *old
	if !f(&pi) {
		p.mu.Unlock()
		return false
	}
	p.info.Store(&pi)
	p.mu.Unlock()
	p.raiseChanges(old, &pi)
	p.dev.portChanged(p.num)
	return true
}

// raiseChanges raises the async events for the difference between two states.
func (p *Port) raiseChanges(old, pi *portInfo) {
	ev := func(t EventType) { p.dev.raise(AsyncEvent{Type: t, Port: p.num}) }
	if pi.state != old.state {
		if pi.state == PortActive {
			ev(EventPortActive)
		} else if old.state == PortActive {
			ev(EventPortErr)
		}
	}
	if pi.lid != old.lid || pi.lmc != old.lmc {
		ev(EventLIDChange)
	}
	if pi.pkeys != old.pkeys {
		ev(EventPKeyChange)
	}
	if pi.smLID != old.smLID || pi.smSL != old.smSL {
		ev(EventSMChange)
	}
	if pi.gidPrefix != old.gidPrefix {
		ev(EventGIDChange)
	}
}

// The management API: what the SMA calls when the subnet manager configures the port, and
// what tests call before the SM exists.

// SetState sets the logical port state.
func (p *Port) SetState(s PortState) { p.update(func(pi *portInfo) { pi.state = s }) }

// SetPhysState sets the physical port state.
func (p *Port) SetPhysState(s PhysState) { p.update(func(pi *portInfo) { pi.phys = s }) }

// SetLID sets the base LID and LMC.
func (p *Port) SetLID(lid uint16, lmc uint8) {
	p.update(func(pi *portInfo) { pi.lid, pi.lmc = lid, lmc&7 })
}

// SetSM sets the master SM's LID and SL.
func (p *Port) SetSM(lid uint16, sl uint8) {
	p.update(func(pi *portInfo) { pi.smLID, pi.smSL = lid, sl&0xF })
}

// SetActiveMTU sets the active (neighbour) MTU, capped at the port's maximum.
func (p *Port) SetActiveMTU(m MTU) {
	if m.Bytes() == 0 {
		return
	}
	if m > p.dev.cfg.MaxMTU {
		m = p.dev.cfg.MaxMTU
	}
	p.update(func(pi *portInfo) { pi.activeMTU = m })
}

// SetGIDPrefix sets the subnet prefix of GID entry 0.
func (p *Port) SetGIDPrefix(prefix uint64) { p.update(func(pi *portInfo) { pi.gidPrefix = prefix }) }

// SetCapMask sets PortInfo:CapabilityMask.
func (p *Port) SetCapMask(m uint32) { p.update(func(pi *portInfo) { pi.capMask = m }) }

// SetSubnetTimeout sets PortInfo:SubnetTimeOut.
func (p *Port) SetSubnetTimeout(t uint8) {
	p.update(func(pi *portInfo) { pi.subnetTimeout = t & 0x1F })
}

// SetPKey sets P_Key table entry i.
func (p *Port) SetPKey(i int, pkey uint16) error {
	if i < 0 || i >= PKeyTableLen {
		return errorf("set_pkey", EINVAL, "index %d out of range 0..%d", i, PKeyTableLen-1)
	}
	p.update(func(pi *portInfo) { pi.pkeys[i] = pkey })
	return nil
}

// SetPKeys replaces the whole P_Key table.
func (p *Port) SetPKeys(t [PKeyTableLen]uint16) { p.update(func(pi *portInfo) { pi.pkeys = t }) }

// Attach gives the port the link it transmits on (fabric.Port); nil unplugs it. Plugging
// brings the physical state to LinkUp and the logical state to Init, as a real port
// training with its neighbour does; unplugging takes it Down.
func (p *Port) Attach(l fabric.Link) {
	if l == nil {
		p.link.Store(nil)
		p.update(func(pi *portInfo) { pi.state, pi.phys = PortDown, PhysPolling })
		return
	}
	p.link.Store(&linkBox{l})
	p.update(func(pi *portInfo) {
		pi.phys = PhysLinkUp
		if pi.state == PortDown {
			pi.state = PortInit
		}
	})
}

// Counters returns the port's counters (after the counters hook ran).
func (p *Port) Counters() *Counters {
	p.refreshCounters()
	return &p.counters
}

// SetCountersHook sets f to run before the port's counters are read (Counters, its PMA):
// a source that counts the port's traffic elsewhere — the attach channel's direct rings,
// which carry packets between processes past the port — adds its counts then. nil
// removes it. f must not read the port's counters through Counters.
func (p *Port) SetCountersHook(f func()) {
	if f == nil {
		p.countersHook.Store(nil)
		return
	}
	p.countersHook.Store(&f)
}

func (p *Port) refreshCounters() {
	if f := p.countersHook.Load(); f != nil {
		(*f)()
	}
}

// State is the logical port state.
func (p *Port) State() PortState { return p.info.Load().state }

// LID is the port's base LID.
func (p *Port) LID() uint16 { return p.info.Load().lid }

// LMC is the port's LID mask control.
func (p *Port) LMC() uint8 { return p.info.Load().lmc }

// ActiveMTU is the port's active MTU.
func (p *Port) ActiveMTU() MTU { return p.info.Load().activeMTU }

// MaxMTU is the port's maximum MTU.
func (p *Port) MaxMTU() MTU { return p.dev.cfg.MaxMTU }

// LinkStateChanged follows the physical link (fabric.LinkStateReceiver): a cable pulled
// takes the port Down/Polling, plugged back it trains to LinkUp and logical Init, and
// waits for the SM to make it Active again (IBA 7.2).
func (p *Port) LinkStateChanged(up bool) {
	p.update(func(pi *portInfo) {
		if up {
			pi.phys = PhysLinkUp
			if pi.state == PortDown {
				pi.state = PortInit
			}
		} else {
			pi.state, pi.phys = PortDown, PhysPolling
		}
	})
}
