package wire

import "encoding/binary"

// Subnet management attributes (IBA 14.2.5), each a view over the 64-byte
// SMP data area (SMP.SMPData) or the part of it the attribute uses. Bit
// offsets in the layout comments follow the IBA attribute tables: bit 0 is
// the most significant bit of byte 0. Callers hand a view at least the
// attribute's *Len long; a shorter one panics.

// smGetBits returns the w-bit field (w ≤ 32) at IBA bit offset off of b.
func smGetBits(b []byte, off, w int) uint32 {
	first, last := off>>3, (off+w-1)>>3
	var v uint64
	for i := first; i <= last; i++ {
		v = v<<8 | uint64(b[i])
	}
	return uint32(v >> uint((last+1)*8-off-w) & (1<<uint(w) - 1))
}

// smSetBits stores the low w bits of v (w ≤ 32) at IBA bit offset off of
// b, leaving every other bit as it was.
func smSetBits(b []byte, off, w int, v uint32) {
	first, last := off>>3, (off+w-1)>>3
	shift := uint((last+1)*8 - off - w)
	mask := (uint64(1)<<uint(w) - 1) << shift
	var cur uint64
	for i := first; i <= last; i++ {
		cur = cur<<8 | uint64(b[i])
	}
	cur = cur&^mask | uint64(v)<<shift&mask
	for i := last; i >= first; i-- {
		b[i] = byte(cur)
		cur >>= 8
	}
}

// smBool converts a flag to a one-bit field value.
func smBool(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

// Attribute sizes within the SMP data area.
const (
	NodeDescriptionLen          = 64
	NodeInfoLen                 = 40
	SwitchInfoLen               = 20
	GUIDInfoLen                 = 64
	PortInfoLen                 = 64
	PKeyTableLen                = 64
	SLtoVLMappingTableLen       = 8
	VLArbitrationTableLen       = 64
	LinearForwardingTableLen    = 64
	MulticastForwardingTableLen = 64
	SMInfoLen                   = 21
	// NoticeLen is the full Notice (IBA 13.4.8.2). An SMP Trap carries
	// only its first NoticeSMPLen bytes, without IssuerGID.
	NoticeLen    = 80
	NoticeSMPLen = SMPDataLen
)

// Entries per attribute block (the attribute modifier selects the block).
const (
	GUIDInfoBlockSize                 = 8  // IBA 14.2.5.5
	PKeyTableBlockSize                = 32 // IBA 14.2.5.7
	VLArbitrationTableBlockSize       = 32 // IBA 14.2.5.9
	LinearForwardingTableBlockSize    = 64 // IBA 14.2.5.10
	MulticastForwardingTableBlockSize = 32 // IBA 14.2.5.12
)

// ---------------------------------------------------------------------
// NodeDescription (IBA 14.2.5.2)

// NodeDescription is 64 bytes of UTF-8 text, NUL-padded when shorter.
type NodeDescription []byte

// Text returns the description up to its first NUL, as a subslice (no
// copy).
func (d NodeDescription) Text() []byte {
	d = d[:NodeDescriptionLen]
	for i, c := range d {
		if c == 0 {
			return d[:i]
		}
	}
	return d
}

// String returns the description as a Go string (this allocates).
func (d NodeDescription) String() string { return string(d.Text()) }

// SetString stores s, truncated to 64 bytes and NUL-padded.
func (d NodeDescription) SetString(s string) {
	n := copy(d[:NodeDescriptionLen], s)
	clear(d[n:NodeDescriptionLen])
}

// ---------------------------------------------------------------------
// NodeInfo (IBA 14.2.5.3)

// Node types (IBA 14.2.5.3, NodeType).
const (
	NodeTypeCA     = 1
	NodeTypeSwitch = 2
	NodeTypeRouter = 3
)

// NodeInfo describes a node (IBA 14.2.5.3):
//
//	byte 0:      BaseVersion
//	byte 1:      ClassVersion
//	byte 2:      NodeType
//	byte 3:      NumPorts
//	bytes 4-11:  SystemImageGUID
//	bytes 12-19: NodeGUID
//	bytes 20-27: PortGUID
//	bytes 28-29: PartitionCap
//	bytes 30-31: DeviceID
//	bytes 32-35: Revision
//	byte 36:     LocalPortNum
//	bytes 37-39: VendorID
type NodeInfo []byte

// BaseVersion returns the MAD base version the node supports.
func (n NodeInfo) BaseVersion() uint8 { return n[0] }

// ClassVersion returns the SM class version the node supports.
func (n NodeInfo) ClassVersion() uint8 { return n[1] }

// NodeType returns NodeTypeCA, NodeTypeSwitch or NodeTypeRouter.
func (n NodeInfo) NodeType() uint8 { return n[2] }

// NumPorts returns the number of physical ports.
func (n NodeInfo) NumPorts() uint8 { return n[3] }

// SystemImageGUID returns the system image GUID.
func (n NodeInfo) SystemImageGUID() uint64 { return binary.BigEndian.Uint64(n[4:]) }

// NodeGUID returns the node GUID.
func (n NodeInfo) NodeGUID() uint64 { return binary.BigEndian.Uint64(n[12:]) }

// PortGUID returns the GUID of the port the SMP arrived on (a switch has
// one, the GUID of port 0).
func (n NodeInfo) PortGUID() uint64 { return binary.BigEndian.Uint64(n[20:]) }

// PartitionCap returns the number of P_Key table entries (of a CA port or
// switch port 0).
func (n NodeInfo) PartitionCap() uint16 { return binary.BigEndian.Uint16(n[28:]) }

// DeviceID returns the manufacturer's device ID.
func (n NodeInfo) DeviceID() uint16 { return binary.BigEndian.Uint16(n[30:]) }

// Revision returns the device revision.
func (n NodeInfo) Revision() uint32 { return binary.BigEndian.Uint32(n[32:]) }

// LocalPortNum returns the number of the port the SMP arrived on.
func (n NodeInfo) LocalPortNum() uint8 { return n[36] }

// VendorID returns the 24-bit IEEE OUI of the manufacturer.
func (n NodeInfo) VendorID() uint32 { return smGetBits(n, 296, 24) }

// SetBaseVersion sets BaseVersion.
func (n NodeInfo) SetBaseVersion(v uint8) { n[0] = v }

// SetClassVersion sets ClassVersion.
func (n NodeInfo) SetClassVersion(v uint8) { n[1] = v }

// SetNodeType sets NodeType.
func (n NodeInfo) SetNodeType(v uint8) { n[2] = v }

// SetNumPorts sets NumPorts.
func (n NodeInfo) SetNumPorts(v uint8) { n[3] = v }

// SetSystemImageGUID sets SystemImageGUID.
func (n NodeInfo) SetSystemImageGUID(v uint64) { binary.BigEndian.PutUint64(n[4:], v) }

// SetNodeGUID sets NodeGUID.
func (n NodeInfo) SetNodeGUID(v uint64) { binary.BigEndian.PutUint64(n[12:], v) }

// SetPortGUID sets PortGUID.
func (n NodeInfo) SetPortGUID(v uint64) { binary.BigEndian.PutUint64(n[20:], v) }

// SetPartitionCap sets PartitionCap.
func (n NodeInfo) SetPartitionCap(v uint16) { binary.BigEndian.PutUint16(n[28:], v) }

// SetDeviceID sets DeviceID.
func (n NodeInfo) SetDeviceID(v uint16) { binary.BigEndian.PutUint16(n[30:], v) }

// SetRevision sets Revision.
func (n NodeInfo) SetRevision(v uint32) { binary.BigEndian.PutUint32(n[32:], v) }

// SetLocalPortNum sets LocalPortNum.
func (n NodeInfo) SetLocalPortNum(v uint8) { n[36] = v }

// SetVendorID sets the 24-bit VendorID.
func (n NodeInfo) SetVendorID(v uint32) { smSetBits(n, 296, 24, v) }

// ---------------------------------------------------------------------
// SwitchInfo (IBA 14.2.5.4)

// SwitchInfo describes a switch (IBA 14.2.5.4):
//
//	bytes 0-1:   LinearFDBCap
//	bytes 2-3:   RandomFDBCap
//	bytes 4-5:   MulticastFDBCap
//	bytes 6-7:   LinearFDBTop
//	byte 8:      DefaultPort
//	byte 9:      DefaultMulticastPrimaryPort
//	byte 10:     DefaultMulticastNotPrimaryPort
//	byte 11:     LifeTimeValue(5) PortStateChange(1) OptimizedSLtoVLMappingProgramming(2)
//	bytes 12-13: LIDsPerPort
//	bytes 14-15: PartitionEnforcementCap
//	byte 16:     InboundEnforcementCap(1) OutboundEnforcementCap(1)
//	             FilterRawInboundCap(1) FilterRawOutboundCap(1) EnhancedPort0(1) Reserved(3)
//	byte 17:     Reserved
//	bytes 18-19: MulticastFDBTop
type SwitchInfo []byte

// LinearFDBCap returns the number of LFT entries the switch supports.
func (s SwitchInfo) LinearFDBCap() uint16 { return binary.BigEndian.Uint16(s[0:]) }

// RandomFDBCap returns the number of random FDB entries supported.
func (s SwitchInfo) RandomFDBCap() uint16 { return binary.BigEndian.Uint16(s[2:]) }

// MulticastFDBCap returns the number of MFT entries supported.
func (s SwitchInfo) MulticastFDBCap() uint16 { return binary.BigEndian.Uint16(s[4:]) }

// LinearFDBTop returns the highest LID the LFT holds a valid entry for.
func (s SwitchInfo) LinearFDBTop() uint16 { return binary.BigEndian.Uint16(s[6:]) }

// DefaultPort returns the port for unicast LIDs not in the random FDB.
func (s SwitchInfo) DefaultPort() uint8 { return s[8] }

// DefaultMulticastPrimaryPort returns the default primary multicast port.
func (s SwitchInfo) DefaultMulticastPrimaryPort() uint8 { return s[9] }

// DefaultMulticastNotPrimaryPort returns the default port for multicast
// packets that arrived on DefaultMulticastPrimaryPort.
func (s SwitchInfo) DefaultMulticastNotPrimaryPort() uint8 { return s[10] }

// LifeTimeValue returns the 5-bit switch packet lifetime exponent.
func (s SwitchInfo) LifeTimeValue() uint8 { return uint8(smGetBits(s, 88, 5)) }

// PortStateChange reports whether a port changed state since the bit was
// last cleared (an SM clears it by writing 1, IBA 14.2.5.4).
func (s SwitchInfo) PortStateChange() bool { return smGetBits(s, 93, 1) != 0 }

// OptimizedSLtoVLMappingProgramming returns the 2-bit capability field.
func (s SwitchInfo) OptimizedSLtoVLMappingProgramming() uint8 {
	return uint8(smGetBits(s, 94, 2))
}

// LIDsPerPort returns the number of LIDs per port (random FDB only).
func (s SwitchInfo) LIDsPerPort() uint16 { return binary.BigEndian.Uint16(s[12:]) }

// PartitionEnforcementCap returns the P_Key table size of the external
// ports.
func (s SwitchInfo) PartitionEnforcementCap() uint16 { return binary.BigEndian.Uint16(s[14:]) }

// InboundEnforcementCap reports inbound partition enforcement support.
func (s SwitchInfo) InboundEnforcementCap() bool { return smGetBits(s, 128, 1) != 0 }

// OutboundEnforcementCap reports outbound partition enforcement support.
func (s SwitchInfo) OutboundEnforcementCap() bool { return smGetBits(s, 129, 1) != 0 }

// FilterRawInboundCap reports inbound raw-packet filtering support.
func (s SwitchInfo) FilterRawInboundCap() bool { return smGetBits(s, 130, 1) != 0 }

// FilterRawOutboundCap reports outbound raw-packet filtering support.
func (s SwitchInfo) FilterRawOutboundCap() bool { return smGetBits(s, 131, 1) != 0 }

// EnhancedPort0 reports an enhanced switch port 0.
func (s SwitchInfo) EnhancedPort0() bool { return smGetBits(s, 132, 1) != 0 }

// MulticastFDBTop returns the highest multicast LID with a valid MFT
// entry.
func (s SwitchInfo) MulticastFDBTop() uint16 { return binary.BigEndian.Uint16(s[18:]) }

// SetLinearFDBCap sets LinearFDBCap.
func (s SwitchInfo) SetLinearFDBCap(v uint16) { binary.BigEndian.PutUint16(s[0:], v) }

// SetRandomFDBCap sets RandomFDBCap.
func (s SwitchInfo) SetRandomFDBCap(v uint16) { binary.BigEndian.PutUint16(s[2:], v) }

// SetMulticastFDBCap sets MulticastFDBCap.
func (s SwitchInfo) SetMulticastFDBCap(v uint16) { binary.BigEndian.PutUint16(s[4:], v) }

// SetLinearFDBTop sets LinearFDBTop.
func (s SwitchInfo) SetLinearFDBTop(v uint16) { binary.BigEndian.PutUint16(s[6:], v) }

// SetDefaultPort sets DefaultPort.
func (s SwitchInfo) SetDefaultPort(v uint8) { s[8] = v }

// SetDefaultMulticastPrimaryPort sets DefaultMulticastPrimaryPort.
func (s SwitchInfo) SetDefaultMulticastPrimaryPort(v uint8) { s[9] = v }

// SetDefaultMulticastNotPrimaryPort sets DefaultMulticastNotPrimaryPort.
func (s SwitchInfo) SetDefaultMulticastNotPrimaryPort(v uint8) { s[10] = v }

// SetLifeTimeValue sets the 5-bit LifeTimeValue.
func (s SwitchInfo) SetLifeTimeValue(v uint8) { smSetBits(s, 88, 5, uint32(v)) }

// SetPortStateChange sets the PortStateChange bit.
func (s SwitchInfo) SetPortStateChange(v bool) { smSetBits(s, 93, 1, smBool(v)) }

// SetOptimizedSLtoVLMappingProgramming sets the 2-bit field.
func (s SwitchInfo) SetOptimizedSLtoVLMappingProgramming(v uint8) {
	smSetBits(s, 94, 2, uint32(v))
}

// SetLIDsPerPort sets LIDsPerPort.
func (s SwitchInfo) SetLIDsPerPort(v uint16) { binary.BigEndian.PutUint16(s[12:], v) }

// SetPartitionEnforcementCap sets PartitionEnforcementCap.
func (s SwitchInfo) SetPartitionEnforcementCap(v uint16) { binary.BigEndian.PutUint16(s[14:], v) }

// SetInboundEnforcementCap sets InboundEnforcementCap.
func (s SwitchInfo) SetInboundEnforcementCap(v bool) { smSetBits(s, 128, 1, smBool(v)) }

// SetOutboundEnforcementCap sets OutboundEnforcementCap.
func (s SwitchInfo) SetOutboundEnforcementCap(v bool) { smSetBits(s, 129, 1, smBool(v)) }

// SetFilterRawInboundCap sets FilterRawInboundCap.
func (s SwitchInfo) SetFilterRawInboundCap(v bool) { smSetBits(s, 130, 1, smBool(v)) }

// SetFilterRawOutboundCap sets FilterRawOutboundCap.
func (s SwitchInfo) SetFilterRawOutboundCap(v bool) { smSetBits(s, 131, 1, smBool(v)) }

// SetEnhancedPort0 sets EnhancedPort0.
func (s SwitchInfo) SetEnhancedPort0(v bool) { smSetBits(s, 132, 1, smBool(v)) }

// SetMulticastFDBTop sets MulticastFDBTop.
func (s SwitchInfo) SetMulticastFDBTop(v uint16) { binary.BigEndian.PutUint16(s[18:], v) }

// ---------------------------------------------------------------------
// GUIDInfo (IBA 14.2.5.5)

// GUIDInfo is one block of eight port GUIDs; the attribute modifier is the
// block number (IBA 14.2.5.5). Entry 0 of block 0 is the port GUID.
type GUIDInfo []byte

// GUID returns entry i (0-7).
func (g GUIDInfo) GUID(i int) uint64 { return binary.BigEndian.Uint64(g[i*8:]) }

// SetGUID sets entry i (0-7).
func (g GUIDInfo) SetGUID(i int, v uint64) { binary.BigEndian.PutUint64(g[i*8:], v) }

// ---------------------------------------------------------------------
// PortInfo (IBA 14.2.5.6)

// Port states (PortInfo PortState, IBA 14.2.5.6). Writing 0 means no
// change.
const (
	PortStateNoChange    = 0
	PortStateDown        = 1
	PortStateInit        = 2
	PortStateArmed       = 3
	PortStateActive      = 4
	PortStateActiveDefer = 5
)

// Port physical states (PortInfo PortPhysicalState, IBA 14.2.5.6).
const (
	PhysStateNoChange                  = 0
	PhysStateSleep                     = 1
	PhysStatePolling                   = 2
	PhysStateDisabled                  = 3
	PhysStatePortConfigurationTraining = 4
	PhysStateLinkUp                    = 5
	PhysStateLinkErrorRecovery         = 6
	PhysStatePhyTest                   = 7
)

// LinkDownDefaultState values (IBA 14.2.5.6).
const (
	LinkDownDefaultNoChange = 0
	LinkDownDefaultSleep    = 1
	LinkDownDefaultPolling  = 2
)

// Link width bits (LinkWidthSupported/Enabled/Active, IBA 14.2.5.6).
// LinkWidthEnabled also takes LinkWidthNoChange and LinkWidthSetSupported.
const (
	LinkWidth1X  = 0x01
	LinkWidth4X  = 0x02
	LinkWidth8X  = 0x04
	LinkWidth12X = 0x08
	LinkWidth2X  = 0x10

	LinkWidthNoChange     = 0
	LinkWidthSetSupported = 0xff
)

// Link speed bits (LinkSpeedSupported/Enabled/Active, IBA 14.2.5.6).
// LinkSpeedEnabled also takes LinkSpeedNoChange and LinkSpeedSetSupported.
const (
	LinkSpeedSDR = 0x1 // 2.5 Gb/s per lane
	LinkSpeedDDR = 0x2 // 5.0 Gb/s
	LinkSpeedQDR = 0x4 // 10.0 Gb/s

	LinkSpeedNoChange     = 0
	LinkSpeedSetSupported = 0xf
)

// Extended link speed bits (LinkSpeedExtSupported/Enabled/Active, IBA
// 14.2.5.6). LinkSpeedExtEnabled also takes LinkSpeedExtDisable and
// LinkSpeedExtSetSupported.
const (
	LinkSpeedExtNone = 0x0 // Active only: no extended speed
	LinkSpeedExtFDR  = 0x1 // 14.0625 Gb/s
	LinkSpeedExtEDR  = 0x2 // 25.78125 Gb/s
	LinkSpeedExtHDR  = 0x4 // 53.125 Gb/s
	LinkSpeedExtNDR  = 0x8 // 106.25 Gb/s

	LinkSpeedExtNoChange     = 0
	LinkSpeedExtDisable      = 30
	LinkSpeedExtSetSupported = 31
)

// MTU encodings (NeighborMTU, MTUCap; also PathRecord and MCMemberRecord,
// IBA 14.2.5.6, 15.2.5.16).
const (
	MTU256  = 1
	MTU512  = 2
	MTU1024 = 3
	MTU2048 = 4
	MTU4096 = 5
)

// VLCap and OperationalVLs encodings (IBA 14.2.5.6).
const (
	VLCapVL0     = 1
	VLCapVL0To1  = 2
	VLCapVL0To3  = 3
	VLCapVL0To7  = 4
	VLCapVL0To14 = 5
)

// PortInfo CapabilityMask bits (IBA 14.2.5.6).
const (
	CapIsSM                                = 1 << 1
	CapIsNoticeSupported                   = 1 << 2
	CapIsTrapSupported                     = 1 << 3
	CapIsOptionalIPDSupported              = 1 << 4
	CapIsAutomaticMigrationSupported       = 1 << 5
	CapIsSLMappingSupported                = 1 << 6
	CapIsMKeyNVRAM                         = 1 << 7
	CapIsPKeyNVRAM                         = 1 << 8
	CapIsLEDInfoSupported                  = 1 << 9
	CapIsSMDisabled                        = 1 << 10
	CapIsSystemImageGUIDSupported          = 1 << 11
	CapIsPKeySwitchExternalPortTrapSupp    = 1 << 12
	CapIsCableInfoSupported                = 1 << 13
	CapIsExtendedSpeedsSupported           = 1 << 14
	CapIsCapabilityMask2Supported          = 1 << 15
	CapIsCommunicationManagementSupported  = 1 << 16
	CapIsSNMPTunnelingSupported            = 1 << 17
	CapIsReinitSupported                   = 1 << 18
	CapIsDeviceManagementSupported         = 1 << 19
	CapIsVendorClassSupported              = 1 << 20
	CapIsDRNoticeSupported                 = 1 << 21
	CapIsCapabilityMaskNoticeSupported     = 1 << 22
	CapIsBootManagementSupported           = 1 << 23
	CapIsLinkRoundTripLatencySupported     = 1 << 24
	CapIsClientReregistrationSupported     = 1 << 25
	CapIsOtherLocalChangesNoticeSupported  = 1 << 26
	CapIsLinkSpeedWidthPairsTableSupported = 1 << 27
	CapIsVendorSpecificMADsTableSupported  = 1 << 28
	CapIsMcastPKeyTrapSuppressionSupported = 1 << 29
	CapIsMulticastFDBTopSupported          = 1 << 30
	CapIsHierarchyInfoSupported            = 1 << 31
)

// PortInfo CapabilityMask2 bits (IBA 14.2.5.6).
const (
	Cap2IsSetNodeDescriptionSupported   = 1 << 0
	Cap2IsPortInfoExtendedSupported     = 1 << 1
	Cap2IsVirtualizationSupported       = 1 << 2
	Cap2IsSwitchPortStateTableSupported = 1 << 3
	Cap2IsLinkWidth2xSupported          = 1 << 4
	Cap2IsLinkSpeedHDRSupported         = 1 << 5
	Cap2IsLinkSpeedNDRSupported         = 1 << 10
)

// PortInfo attribute modifier (IBA 14.2.5.6): the port number in the low
// byte; bit 31 is SMSupportExtendedSpeeds, set by an SM that understands
// the LinkSpeedExt fields (opensm sets it on every Set when the port has
// CapIsExtendedSpeedsSupported). An SMA masks it off to find the port.
const (
	PortInfoAttrModPortMask            = 0xff
	PortInfoAttrModSMSupportsExtSpeeds = 1 << 31
)

// PortInfo describes one port (IBA 14.2.5.6):
//
//	bytes 0-7:   M_Key
//	bytes 8-15:  GIDPrefix
//	bytes 16-17: LID
//	bytes 18-19: MasterSMLID
//	bytes 20-23: CapabilityMask
//	bytes 24-25: DiagCode
//	bytes 26-27: M_KeyLeasePeriod
//	byte 28:     LocalPortNum
//	byte 29:     LinkWidthEnabled
//	byte 30:     LinkWidthSupported
//	byte 31:     LinkWidthActive
//	byte 32:     LinkSpeedSupported(4) PortState(4)
//	byte 33:     PortPhysicalState(4) LinkDownDefaultState(4)
//	byte 34:     M_KeyProtectBits(2) Reserved(3) LMC(3)
//	byte 35:     LinkSpeedActive(4) LinkSpeedEnabled(4)
//	byte 36:     NeighborMTU(4) MasterSMSL(4)
//	byte 37:     VLCap(4) InitType(4)
//	byte 38:     VLHighLimit
//	byte 39:     VLArbitrationHighCap
//	byte 40:     VLArbitrationLowCap
//	byte 41:     InitTypeReply(4) MTUCap(4)
//	byte 42:     VLStallCount(3) HOQLife(5)
//	byte 43:     OperationalVLs(4) PartitionEnforcementInbound(1)
//	             PartitionEnforcementOutbound(1) FilterRawInbound(1) FilterRawOutbound(1)
//	bytes 44-45: M_KeyViolations
//	bytes 46-47: P_KeyViolations
//	bytes 48-49: Q_KeyViolations
//	byte 50:     GUIDCap
//	byte 51:     ClientReregister(1) MulticastPKeyTrapSuppressionEnabled(2) SubnetTimeOut(5)
//	byte 52:     Reserved(3) RespTimeValue(5)
//	byte 53:     LocalPhyErrors(4) OverrunErrors(4)
//	bytes 54-55: MaxCreditHint
//	byte 56:     Reserved
//	bytes 57-59: LinkRoundTripLatency
//	bytes 60-61: CapabilityMask2
//	byte 62:     LinkSpeedExtActive(4) LinkSpeedExtSupported(4)
//	byte 63:     Reserved(3) LinkSpeedExtEnabled(5)
type PortInfo []byte

// MKey returns the port's M_Key.
func (p PortInfo) MKey() uint64 { return binary.BigEndian.Uint64(p[0:]) }

// GIDPrefix returns the subnet prefix of the port's GIDs.
func (p PortInfo) GIDPrefix() uint64 { return binary.BigEndian.Uint64(p[8:]) }

// LID returns the base LID.
func (p PortInfo) LID() uint16 { return binary.BigEndian.Uint16(p[16:]) }

// MasterSMLID returns the LID of the master SM.
func (p PortInfo) MasterSMLID() uint16 { return binary.BigEndian.Uint16(p[18:]) }

// CapabilityMask returns the Cap* bits.
func (p PortInfo) CapabilityMask() uint32 { return binary.BigEndian.Uint32(p[20:]) }

// DiagCode returns the diagnostic code.
func (p PortInfo) DiagCode() uint16 { return binary.BigEndian.Uint16(p[24:]) }

// MKeyLeasePeriod returns the M_Key lease period in seconds.
func (p PortInfo) MKeyLeasePeriod() uint16 { return binary.BigEndian.Uint16(p[26:]) }

// LocalPortNum returns the number of the port the SMP arrived on.
func (p PortInfo) LocalPortNum() uint8 { return p[28] }

// LinkWidthEnabled returns the enabled LinkWidth* bits.
func (p PortInfo) LinkWidthEnabled() uint8 { return p[29] }

// LinkWidthSupported returns the supported LinkWidth* bits.
func (p PortInfo) LinkWidthSupported() uint8 { return p[30] }

// LinkWidthActive returns the active LinkWidth* value.
func (p PortInfo) LinkWidthActive() uint8 { return p[31] }

// LinkSpeedSupported returns the supported LinkSpeed* bits.
func (p PortInfo) LinkSpeedSupported() uint8 { return p[32] >> 4 }

// PortState returns the PortState* value.
func (p PortInfo) PortState() uint8 { return p[32] & 0xf }

// PortPhysicalState returns the PhysState* value.
func (p PortInfo) PortPhysicalState() uint8 { return p[33] >> 4 }

// LinkDownDefaultState returns the LinkDownDefault* value.
func (p PortInfo) LinkDownDefaultState() uint8 { return p[33] & 0xf }

// MKeyProtectBits returns the 2-bit M_Key protection level.
func (p PortInfo) MKeyProtectBits() uint8 { return p[34] >> 6 }

// LMC returns the 3-bit LID mask control.
func (p PortInfo) LMC() uint8 { return p[34] & 0x7 }

// LinkSpeedActive returns the active LinkSpeed* value.
func (p PortInfo) LinkSpeedActive() uint8 { return p[35] >> 4 }

// LinkSpeedEnabled returns the enabled LinkSpeed* bits.
func (p PortInfo) LinkSpeedEnabled() uint8 { return p[35] & 0xf }

// NeighborMTU returns the MTU* value of the link.
func (p PortInfo) NeighborMTU() uint8 { return p[36] >> 4 }

// MasterSMSL returns the SL for packets to the master SM.
func (p PortInfo) MasterSMSL() uint8 { return p[36] & 0xf }

// VLCap returns the VLCap* value.
func (p PortInfo) VLCap() uint8 { return p[37] >> 4 }

// InitType returns the 4-bit InitType.
func (p PortInfo) InitType() uint8 { return p[37] & 0xf }

// VLHighLimit returns the high-priority VL arbitration limit.
func (p PortInfo) VLHighLimit() uint8 { return p[38] }

// VLArbitrationHighCap returns the high-priority VLArbitrationTable size.
func (p PortInfo) VLArbitrationHighCap() uint8 { return p[39] }

// VLArbitrationLowCap returns the low-priority VLArbitrationTable size.
func (p PortInfo) VLArbitrationLowCap() uint8 { return p[40] }

// InitTypeReply returns the 4-bit InitTypeReply.
func (p PortInfo) InitTypeReply() uint8 { return p[41] >> 4 }

// MTUCap returns the largest MTU* the port supports.
func (p PortInfo) MTUCap() uint8 { return p[41] & 0xf }

// VLStallCount returns the 3-bit VL stall count.
func (p PortInfo) VLStallCount() uint8 { return p[42] >> 5 }

// HOQLife returns the 5-bit head-of-queue lifetime exponent.
func (p PortInfo) HOQLife() uint8 { return p[42] & 0x1f }

// OperationalVLs returns the VLCap* value in use.
func (p PortInfo) OperationalVLs() uint8 { return p[43] >> 4 }

// PartitionEnforcementInbound reports inbound P_Key enforcement (switch
// external ports).
func (p PortInfo) PartitionEnforcementInbound() bool { return p[43]&0x08 != 0 }

// PartitionEnforcementOutbound reports outbound P_Key enforcement.
func (p PortInfo) PartitionEnforcementOutbound() bool { return p[43]&0x04 != 0 }

// FilterRawInbound reports inbound raw-packet filtering.
func (p PortInfo) FilterRawInbound() bool { return p[43]&0x02 != 0 }

// FilterRawOutbound reports outbound raw-packet filtering.
func (p PortInfo) FilterRawOutbound() bool { return p[43]&0x01 != 0 }

// MKeyViolations returns the M_Key violation counter.
func (p PortInfo) MKeyViolations() uint16 { return binary.BigEndian.Uint16(p[44:]) }

// PKeyViolations returns the P_Key violation counter.
func (p PortInfo) PKeyViolations() uint16 { return binary.BigEndian.Uint16(p[46:]) }

// QKeyViolations returns the Q_Key violation counter.
func (p PortInfo) QKeyViolations() uint16 { return binary.BigEndian.Uint16(p[48:]) }

// GUIDCap returns the number of GUID entries the port supports.
func (p PortInfo) GUIDCap() uint8 { return p[50] }

// ClientReregister reports the client-reregistration request bit.
func (p PortInfo) ClientReregister() bool { return p[51]&0x80 != 0 }

// MulticastPKeyTrapSuppressionEnabled returns the 2-bit field.
func (p PortInfo) MulticastPKeyTrapSuppressionEnabled() uint8 { return p[51] >> 5 & 0x3 }

// SubnetTimeOut returns the 5-bit subnet timeout exponent.
func (p PortInfo) SubnetTimeOut() uint8 { return p[51] & 0x1f }

// RespTimeValue returns the 5-bit response time exponent.
func (p PortInfo) RespTimeValue() uint8 { return p[52] & 0x1f }

// LocalPhyErrors returns the 4-bit local physical error threshold.
func (p PortInfo) LocalPhyErrors() uint8 { return p[53] >> 4 }

// OverrunErrors returns the 4-bit buffer overrun threshold.
func (p PortInfo) OverrunErrors() uint8 { return p[53] & 0xf }

// MaxCreditHint returns the maximum credit hint.
func (p PortInfo) MaxCreditHint() uint16 { return binary.BigEndian.Uint16(p[54:]) }

// LinkRoundTripLatency returns the 24-bit round-trip latency.
func (p PortInfo) LinkRoundTripLatency() uint32 { return smGetBits(p, 456, 24) }

// CapabilityMask2 returns the Cap2* bits.
func (p PortInfo) CapabilityMask2() uint16 { return binary.BigEndian.Uint16(p[60:]) }

// LinkSpeedExtActive returns the active LinkSpeedExt* value.
func (p PortInfo) LinkSpeedExtActive() uint8 { return p[62] >> 4 }

// LinkSpeedExtSupported returns the supported LinkSpeedExt* bits.
func (p PortInfo) LinkSpeedExtSupported() uint8 { return p[62] & 0xf }

// LinkSpeedExtEnabled returns the 5-bit enabled LinkSpeedExt* field.
func (p PortInfo) LinkSpeedExtEnabled() uint8 { return p[63] & 0x1f }

// SetMKey sets M_Key.
func (p PortInfo) SetMKey(v uint64) { binary.BigEndian.PutUint64(p[0:], v) }

// SetGIDPrefix sets GIDPrefix.
func (p PortInfo) SetGIDPrefix(v uint64) { binary.BigEndian.PutUint64(p[8:], v) }

// SetLID sets LID.
func (p PortInfo) SetLID(v uint16) { binary.BigEndian.PutUint16(p[16:], v) }

// SetMasterSMLID sets MasterSMLID.
func (p PortInfo) SetMasterSMLID(v uint16) { binary.BigEndian.PutUint16(p[18:], v) }

// SetCapabilityMask sets CapabilityMask.
func (p PortInfo) SetCapabilityMask(v uint32) { binary.BigEndian.PutUint32(p[20:], v) }

// SetDiagCode sets DiagCode.
func (p PortInfo) SetDiagCode(v uint16) { binary.BigEndian.PutUint16(p[24:], v) }

// SetMKeyLeasePeriod sets M_KeyLeasePeriod.
func (p PortInfo) SetMKeyLeasePeriod(v uint16) { binary.BigEndian.PutUint16(p[26:], v) }

// SetLocalPortNum sets LocalPortNum.
func (p PortInfo) SetLocalPortNum(v uint8) { p[28] = v }

// SetLinkWidthEnabled sets LinkWidthEnabled.
func (p PortInfo) SetLinkWidthEnabled(v uint8) { p[29] = v }

// SetLinkWidthSupported sets LinkWidthSupported.
func (p PortInfo) SetLinkWidthSupported(v uint8) { p[30] = v }

// SetLinkWidthActive sets LinkWidthActive.
func (p PortInfo) SetLinkWidthActive(v uint8) { p[31] = v }

// SetLinkSpeedSupported sets the 4-bit LinkSpeedSupported.
func (p PortInfo) SetLinkSpeedSupported(v uint8) { p[32] = p[32]&0x0f | v<<4 }

// SetPortState sets the 4-bit PortState.
func (p PortInfo) SetPortState(v uint8) { p[32] = p[32]&0xf0 | v&0xf }

// SetPortPhysicalState sets the 4-bit PortPhysicalState.
func (p PortInfo) SetPortPhysicalState(v uint8) { p[33] = p[33]&0x0f | v<<4 }

// SetLinkDownDefaultState sets the 4-bit LinkDownDefaultState.
func (p PortInfo) SetLinkDownDefaultState(v uint8) { p[33] = p[33]&0xf0 | v&0xf }

// SetMKeyProtectBits sets the 2-bit M_KeyProtectBits.
func (p PortInfo) SetMKeyProtectBits(v uint8) { p[34] = p[34]&0x3f | v<<6 }

// SetLMC sets the 3-bit LMC.
func (p PortInfo) SetLMC(v uint8) { p[34] = p[34]&0xf8 | v&0x7 }

// SetLinkSpeedActive sets the 4-bit LinkSpeedActive.
func (p PortInfo) SetLinkSpeedActive(v uint8) { p[35] = p[35]&0x0f | v<<4 }

// SetLinkSpeedEnabled sets the 4-bit LinkSpeedEnabled.
func (p PortInfo) SetLinkSpeedEnabled(v uint8) { p[35] = p[35]&0xf0 | v&0xf }

// SetNeighborMTU sets the 4-bit NeighborMTU.
func (p PortInfo) SetNeighborMTU(v uint8) { p[36] = p[36]&0x0f | v<<4 }

// SetMasterSMSL sets the 4-bit MasterSMSL.
func (p PortInfo) SetMasterSMSL(v uint8) { p[36] = p[36]&0xf0 | v&0xf }

// SetVLCap sets the 4-bit VLCap.
func (p PortInfo) SetVLCap(v uint8) { p[37] = p[37]&0x0f | v<<4 }

// SetInitType sets the 4-bit InitType.
func (p PortInfo) SetInitType(v uint8) { p[37] = p[37]&0xf0 | v&0xf }

// SetVLHighLimit sets VLHighLimit.
func (p PortInfo) SetVLHighLimit(v uint8) { p[38] = v }

// SetVLArbitrationHighCap sets VLArbitrationHighCap.
func (p PortInfo) SetVLArbitrationHighCap(v uint8) { p[39] = v }

// SetVLArbitrationLowCap sets VLArbitrationLowCap.
func (p PortInfo) SetVLArbitrationLowCap(v uint8) { p[40] = v }

// SetInitTypeReply sets the 4-bit InitTypeReply.
func (p PortInfo) SetInitTypeReply(v uint8) { p[41] = p[41]&0x0f | v<<4 }

// SetMTUCap sets the 4-bit MTUCap.
func (p PortInfo) SetMTUCap(v uint8) { p[41] = p[41]&0xf0 | v&0xf }

// SetVLStallCount sets the 3-bit VLStallCount.
func (p PortInfo) SetVLStallCount(v uint8) { p[42] = p[42]&0x1f | v<<5 }

// SetHOQLife sets the 5-bit HOQLife.
func (p PortInfo) SetHOQLife(v uint8) { p[42] = p[42]&0xe0 | v&0x1f }

// SetOperationalVLs sets the 4-bit OperationalVLs.
func (p PortInfo) SetOperationalVLs(v uint8) { p[43] = p[43]&0x0f | v<<4 }

// SetPartitionEnforcementInbound sets PartitionEnforcementInbound.
func (p PortInfo) SetPartitionEnforcementInbound(v bool) { p[43] = setBit(p[43], 0x08, v) }

// SetPartitionEnforcementOutbound sets PartitionEnforcementOutbound.
func (p PortInfo) SetPartitionEnforcementOutbound(v bool) { p[43] = setBit(p[43], 0x04, v) }

// SetFilterRawInbound sets FilterRawInbound.
func (p PortInfo) SetFilterRawInbound(v bool) { p[43] = setBit(p[43], 0x02, v) }

// SetFilterRawOutbound sets FilterRawOutbound.
func (p PortInfo) SetFilterRawOutbound(v bool) { p[43] = setBit(p[43], 0x01, v) }

// SetMKeyViolations sets M_KeyViolations.
func (p PortInfo) SetMKeyViolations(v uint16) { binary.BigEndian.PutUint16(p[44:], v) }

// SetPKeyViolations sets P_KeyViolations.
func (p PortInfo) SetPKeyViolations(v uint16) { binary.BigEndian.PutUint16(p[46:], v) }

// SetQKeyViolations sets Q_KeyViolations.
func (p PortInfo) SetQKeyViolations(v uint16) { binary.BigEndian.PutUint16(p[48:], v) }

// SetGUIDCap sets GUIDCap.
func (p PortInfo) SetGUIDCap(v uint8) { p[50] = v }

// SetClientReregister sets ClientReregister.
func (p PortInfo) SetClientReregister(v bool) { p[51] = setBit(p[51], 0x80, v) }

// SetMulticastPKeyTrapSuppressionEnabled sets the 2-bit field.
func (p PortInfo) SetMulticastPKeyTrapSuppressionEnabled(v uint8) {
	p[51] = p[51]&0x9f | v&0x3<<5
}

// SetSubnetTimeOut sets the 5-bit SubnetTimeOut.
func (p PortInfo) SetSubnetTimeOut(v uint8) { p[51] = p[51]&0xe0 | v&0x1f }

// SetRespTimeValue sets the 5-bit RespTimeValue.
func (p PortInfo) SetRespTimeValue(v uint8) { p[52] = p[52]&0xe0 | v&0x1f }

// SetLocalPhyErrors sets the 4-bit LocalPhyErrors.
func (p PortInfo) SetLocalPhyErrors(v uint8) { p[53] = p[53]&0x0f | v<<4 }

// SetOverrunErrors sets the 4-bit OverrunErrors.
func (p PortInfo) SetOverrunErrors(v uint8) { p[53] = p[53]&0xf0 | v&0xf }

// SetMaxCreditHint sets MaxCreditHint.
func (p PortInfo) SetMaxCreditHint(v uint16) { binary.BigEndian.PutUint16(p[54:], v) }

// SetLinkRoundTripLatency sets the 24-bit LinkRoundTripLatency.
func (p PortInfo) SetLinkRoundTripLatency(v uint32) { smSetBits(p, 456, 24, v) }

// SetCapabilityMask2 sets CapabilityMask2.
func (p PortInfo) SetCapabilityMask2(v uint16) { binary.BigEndian.PutUint16(p[60:], v) }

// SetLinkSpeedExtActive sets the 4-bit LinkSpeedExtActive.
func (p PortInfo) SetLinkSpeedExtActive(v uint8) { p[62] = p[62]&0x0f | v<<4 }

// SetLinkSpeedExtSupported sets the 4-bit LinkSpeedExtSupported.
func (p PortInfo) SetLinkSpeedExtSupported(v uint8) { p[62] = p[62]&0xf0 | v&0xf }

// SetLinkSpeedExtEnabled sets the 5-bit LinkSpeedExtEnabled.
func (p PortInfo) SetLinkSpeedExtEnabled(v uint8) { p[63] = p[63]&0xe0 | v&0x1f }

// ---------------------------------------------------------------------
// P_KeyTable (IBA 14.2.5.7)

// PKeyTable is one block of 32 P_Keys. The attribute modifier holds the
// block number in bits 15-0 and, for a switch, the port in bits 23-16
// (IBA 14.2.5.7).
type PKeyTable []byte

// Entry returns P_Key i (0-31) of the block.
func (t PKeyTable) Entry(i int) uint16 { return binary.BigEndian.Uint16(t[i*2:]) }

// SetEntry sets P_Key i (0-31) of the block.
func (t PKeyTable) SetEntry(i int, v uint16) { binary.BigEndian.PutUint16(t[i*2:], v) }

// PKeyTableAttrMod builds a P_KeyTable attribute modifier.
func PKeyTableAttrMod(port uint8, block uint16) uint32 { return uint32(port)<<16 | uint32(block) }

// ---------------------------------------------------------------------
// SLtoVLMappingTable (IBA 14.2.5.8)

// SLtoVLMappingTable maps the 16 SLs to VLs, four bits each, SL 0 in the
// high nibble of byte 0. On a switch the attribute modifier is
// inputPort<<8 | outputPort.
type SLtoVLMappingTable []byte

// VL returns the VL for sl (0-15).
func (t SLtoVLMappingTable) VL(sl int) uint8 { return uint8(smGetBits(t, sl*4, 4)) }

// SetVL sets the VL for sl (0-15).
func (t SLtoVLMappingTable) SetVL(sl int, vl uint8) { smSetBits(t, sl*4, 4, uint32(vl)) }

// ---------------------------------------------------------------------
// VLArbitrationTable (IBA 14.2.5.9)

// VLArbitrationTable is one block of 32 entries, each Reserved(4) VL(4)
// Weight(8). The attribute modifier is block<<16 | port; blocks 1 and 2
// are the low-priority table, 3 and 4 the high-priority one.
type VLArbitrationTable []byte

// VL returns the VL of entry i (0-31).
func (t VLArbitrationTable) VL(i int) uint8 { return t[i*2] & 0xf }

// Weight returns the weight of entry i (0-31).
func (t VLArbitrationTable) Weight(i int) uint8 { return t[i*2+1] }

// SetVL sets the VL of entry i.
func (t VLArbitrationTable) SetVL(i int, vl uint8) { t[i*2] = t[i*2]&0xf0 | vl&0xf }

// SetWeight sets the weight of entry i.
func (t VLArbitrationTable) SetWeight(i int, w uint8) { t[i*2+1] = w }

// VLArbitrationTable blocks (attribute modifier bits 31-16, IBA 14.2.5.9).
const (
	VLArbLowBlock0  = 1
	VLArbLowBlock1  = 2
	VLArbHighBlock0 = 3
	VLArbHighBlock1 = 4
)

// ---------------------------------------------------------------------
// LinearForwardingTable (IBA 14.2.5.10)

// LFTNoPort marks an LFT entry with no route (ibsim and real switches
// initialise every entry to it).
const LFTNoPort = 0xff

// LinearForwardingTable is one block of 64 output ports: entry i of block
// b routes LID b*64+i. The attribute modifier is the block number.
type LinearForwardingTable []byte

// Port returns entry i (0-63).
func (t LinearForwardingTable) Port(i int) uint8 { return t[i] }

// SetPort sets entry i (0-63).
func (t LinearForwardingTable) SetPort(i int, port uint8) { t[i] = port }

// ---------------------------------------------------------------------
// MulticastForwardingTable (IBA 14.2.5.12)

// MulticastForwardingTable is one block of 32 16-bit port masks: entry i
// of block b is multicast LID 0xC000+b*32+i, and bit j of the mask is
// port position*16+j. The attribute modifier holds the position in bits
// 31-28 and the block in bits 8-0.
type MulticastForwardingTable []byte

// PortMask returns entry i (0-31).
func (t MulticastForwardingTable) PortMask(i int) uint16 {
	return binary.BigEndian.Uint16(t[i*2:])
}

// SetPortMask sets entry i (0-31).
func (t MulticastForwardingTable) SetPortMask(i int, v uint16) {
	binary.BigEndian.PutUint16(t[i*2:], v)
}

// MFTAttrMod builds a MulticastForwardingTable attribute modifier from a
// port-mask position (0-15) and a block (0-511).
func MFTAttrMod(position uint8, block uint16) uint32 {
	return uint32(position&0xf)<<28 | uint32(block&0x1ff)
}

// ---------------------------------------------------------------------
// SMInfo (IBA 14.2.5.13)

// SM states (SMInfo SMState, IBA 14.2.5.13).
const (
	SMStateNotActive   = 0
	SMStateDiscovering = 1
	SMStateStandby     = 2
	SMStateMaster      = 3
)

// SMInfo Set attribute modifiers (IBA 14.4.1, SM state machine control).
const (
	SMInfoHandover    = 1
	SMInfoAcknowledge = 2
	SMInfoDisable     = 3
	SMInfoStandby     = 4
	SMInfoDiscover    = 5
)

// SMInfo describes a subnet manager (IBA 14.2.5.13):
//
//	bytes 0-7:   GUID
//	bytes 8-15:  SM_Key
//	bytes 16-19: ActCount
//	byte 20:     Priority(4) SMState(4)
type SMInfo []byte

// GUID returns the port GUID of the SM.
func (s SMInfo) GUID() uint64 { return binary.BigEndian.Uint64(s[0:]) }

// SMKey returns SM_Key (zero unless the requester is authenticated).
func (s SMInfo) SMKey() uint64 { return binary.BigEndian.Uint64(s[8:]) }

// ActCount returns the activity counter.
func (s SMInfo) ActCount() uint32 { return binary.BigEndian.Uint32(s[16:]) }

// Priority returns the 4-bit SM priority.
func (s SMInfo) Priority() uint8 { return s[20] >> 4 }

// SMState returns the SMState* value.
func (s SMInfo) SMState() uint8 { return s[20] & 0xf }

// SetGUID sets GUID.
func (s SMInfo) SetGUID(v uint64) { binary.BigEndian.PutUint64(s[0:], v) }

// SetSMKey sets SM_Key.
func (s SMInfo) SetSMKey(v uint64) { binary.BigEndian.PutUint64(s[8:], v) }

// SetActCount sets ActCount.
func (s SMInfo) SetActCount(v uint32) { binary.BigEndian.PutUint32(s[16:], v) }

// SetPriority sets the 4-bit Priority.
func (s SMInfo) SetPriority(v uint8) { s[20] = s[20]&0x0f | v<<4 }

// SetSMState sets the 4-bit SMState.
func (s SMInfo) SetSMState(v uint8) { s[20] = s[20]&0xf0 | v&0xf }

// ---------------------------------------------------------------------
// Notice (IBA 13.4.8.2)

// Notice types (IBA 13.4.8.2, Type).
const (
	NoticeTypeFatal    = 0
	NoticeTypeUrgent   = 1
	NoticeTypeSecurity = 2
	NoticeTypeSM       = 3 // subnet management
	NoticeTypeInfo     = 4
	NoticeTypeEmpty    = 0x7f
)

// NoticeProducerClassManager is the generic-notice producer type of a
// class manager; the other producers use the NodeType* values.
const NoticeProducerClassManager = 4

// Generic trap numbers (IBA 14.2.5.1 and 13.4.8.2).
const (
	TrapGIDInService               = 64
	TrapGIDOutOfService            = 65
	TrapMcastGroupCreated          = 66
	TrapMcastGroupDeleted          = 67
	TrapLinkStateChange            = 128 // a switch port changed state: SwitchInfo.PortStateChange set
	TrapLinkIntegrityThreshold     = 129
	TrapBufferOverrunThreshold     = 130
	TrapFlowControlWatchdogExpired = 131
	TrapLocalChanges               = 144 // CapabilityMask, NodeDescription, width/speed enabled …
	TrapSystemImageGUIDChange      = 145
	TrapBadMKey                    = 256
	TrapBadPKey                    = 257
	TrapBadQKey                    = 258
	TrapSwitchExternalPortBadPKey  = 259
)

// Trap 144 change flags (Notice DataDetails bytes 10-11).
const (
	Trap144NodeDescriptionChange  = 1 << 0
	Trap144LinkWidthEnabledChange = 1 << 1
	Trap144LinkSpeedEnabledChange = 1 << 2
	Trap144SMPriorityChange       = 1 << 3
	Trap144HierarchyInfoChange    = 1 << 4
	Trap144CapabilityMask2Change  = 1 << 5
)

// NoticeDataDetailsLen is the size of a Notice's DataDetails.
const NoticeDataDetailsLen = 54

// Notice is a trap or notice (IBA 13.4.8.2):
//
//	byte 0:      IsGeneric(1) Type(7)
//	bytes 1-3:   ProducerType (generic) or VendorID (vendor specific)
//	bytes 4-5:   TrapNumber (generic) or DeviceID (vendor specific)
//	bytes 6-7:   IssuerLID
//	bytes 8-9:   NoticeToggle(1) NoticeCount(15)
//	bytes 10-63: DataDetails
//	bytes 64-79: IssuerGID
//
// An SMP Trap(Notice) holds only the first 64 bytes (NoticeSMPLen), so
// IssuerGID is valid only in the 80-byte form SA Reports carry.
type Notice []byte

// IsGeneric reports a generic (not vendor-specific) notice.
func (n Notice) IsGeneric() bool { return n[0]&0x80 != 0 }

// Type returns the NoticeType* value.
func (n Notice) Type() uint8 { return n[0] & 0x7f }

// ProducerType returns the 24-bit producer type of a generic notice.
func (n Notice) ProducerType() uint32 { return smGetBits(n, 8, 24) }

// VendorID returns the 24-bit vendor ID of a vendor-specific notice (the
// same bits as ProducerType).
func (n Notice) VendorID() uint32 { return smGetBits(n, 8, 24) }

// TrapNumber returns the trap number of a generic notice.
func (n Notice) TrapNumber() uint16 { return binary.BigEndian.Uint16(n[4:]) }

// DeviceID returns the device ID of a vendor-specific notice (the same
// bits as TrapNumber).
func (n Notice) DeviceID() uint16 { return binary.BigEndian.Uint16(n[4:]) }

// IssuerLID returns the LID of the notice's issuer.
func (n Notice) IssuerLID() uint16 { return binary.BigEndian.Uint16(n[6:]) }

// NoticeToggle returns the toggle bit (alternates per new notice).
func (n Notice) NoticeToggle() bool { return n[8]&0x80 != 0 }

// NoticeCount returns the 15-bit count of notices not yet sent.
func (n Notice) NoticeCount() uint16 { return binary.BigEndian.Uint16(n[8:]) & 0x7fff }

// DataDetails returns the 54 bytes of trap-specific details.
func (n Notice) DataDetails() []byte { return n[10 : 10+NoticeDataDetailsLen] }

// IssuerGID returns the issuer's GID (needs the 80-byte form).
func (n Notice) IssuerGID() GID { return GID(n[64:80]) }

// SetIsGeneric sets IsGeneric.
func (n Notice) SetIsGeneric(v bool) { n[0] = setBit(n[0], 0x80, v) }

// SetType sets the 7-bit Type.
func (n Notice) SetType(v uint8) { n[0] = n[0]&0x80 | v&0x7f }

// SetProducerType sets the 24-bit ProducerType.
func (n Notice) SetProducerType(v uint32) { smSetBits(n, 8, 24, v) }

// SetVendorID sets the 24-bit VendorID.
func (n Notice) SetVendorID(v uint32) { smSetBits(n, 8, 24, v) }

// SetTrapNumber sets TrapNumber.
func (n Notice) SetTrapNumber(v uint16) { binary.BigEndian.PutUint16(n[4:], v) }

// SetDeviceID sets DeviceID.
func (n Notice) SetDeviceID(v uint16) { binary.BigEndian.PutUint16(n[4:], v) }

// SetIssuerLID sets IssuerLID.
func (n Notice) SetIssuerLID(v uint16) { binary.BigEndian.PutUint16(n[6:], v) }

// SetNoticeToggle sets NoticeToggle.
func (n Notice) SetNoticeToggle(v bool) { n[8] = setBit(n[8], 0x80, v) }

// SetNoticeCount sets the 15-bit NoticeCount.
func (n Notice) SetNoticeCount(v uint16) {
	binary.BigEndian.PutUint16(n[8:], uint16(n[8]&0x80)<<8|v&0x7fff)
}

// SetIssuerGID sets IssuerGID (needs the 80-byte form).
func (n Notice) SetIssuerGID(g GID) { copy(n[64:80], g[:]) }

// SetGenericTrap fills the header of a generic trap: IsGeneric, Type,
// ProducerType, TrapNumber and IssuerLID; DataDetails is cleared.
func (n Notice) SetGenericTrap(typ uint8, producer uint32, trap, issuerLID uint16) {
	n.SetIsGeneric(true)
	n.SetType(typ)
	n.SetProducerType(producer)
	n.SetTrapNumber(trap)
	n.SetIssuerLID(issuerLID)
	clear(n.DataDetails())
}

// Trap128LID returns LIDADDR of trap 128, the switch whose port changed
// state (DataDetails bytes 0-1).
func (n Notice) Trap128LID() uint16 { return binary.BigEndian.Uint16(n[10:]) }

// SetTrap128LID sets LIDADDR of trap 128.
func (n Notice) SetTrap128LID(v uint16) { binary.BigEndian.PutUint16(n[10:], v) }

// Trap 144 DataDetails (IBA 14.2.5.1; opensm ib_mad_notice_attr_t ntc_144):
//
//	bytes 0-1:   Reserved
//	bytes 2-3:   LIDADDR
//	byte 4:      Reserved
//	byte 5:      Reserved(7) OtherLocalChanges(1)
//	bytes 6-9:   CapabilityMask
//	bytes 10-11: Reserved(10) change flags (Trap144*Change)
//	bytes 12-13: CapabilityMask2

// Trap144LID returns LIDADDR of trap 144, the port whose attributes
// changed.
func (n Notice) Trap144LID() uint16 { return binary.BigEndian.Uint16(n[12:]) }

// Trap144OtherLocalChanges reports the OtherLocalChanges bit.
func (n Notice) Trap144OtherLocalChanges() bool { return n[15]&0x01 != 0 }

// Trap144CapabilityMask returns the port's new CapabilityMask.
func (n Notice) Trap144CapabilityMask() uint32 { return binary.BigEndian.Uint32(n[16:]) }

// Trap144ChangeFlags returns the Trap144*Change bits.
func (n Notice) Trap144ChangeFlags() uint16 { return binary.BigEndian.Uint16(n[20:]) & 0x3f }

// Trap144CapabilityMask2 returns the port's new CapabilityMask2.
func (n Notice) Trap144CapabilityMask2() uint16 { return binary.BigEndian.Uint16(n[22:]) }

// SetTrap144LID sets LIDADDR of trap 144.
func (n Notice) SetTrap144LID(v uint16) { binary.BigEndian.PutUint16(n[12:], v) }

// SetTrap144OtherLocalChanges sets the OtherLocalChanges bit.
func (n Notice) SetTrap144OtherLocalChanges(v bool) { n[15] = setBit(n[15], 0x01, v) }

// SetTrap144CapabilityMask sets CapabilityMask of trap 144.
func (n Notice) SetTrap144CapabilityMask(v uint32) { binary.BigEndian.PutUint32(n[16:], v) }

// SetTrap144ChangeFlags sets the six Trap144*Change bits.
func (n Notice) SetTrap144ChangeFlags(v uint16) { smSetBits(n, 170, 6, uint32(v)) }

// SetTrap144CapabilityMask2 sets CapabilityMask2 of trap 144.
func (n Notice) SetTrap144CapabilityMask2(v uint16) { binary.BigEndian.PutUint16(n[22:], v) }

// ---------------------------------------------------------------------
// ClassPortInfo (IBA 13.4.8.1)

// ClassPortInfoLen is the size of ClassPortInfo.
const ClassPortInfoLen = 72

// ClassPortInfo CapabilityMask bits common to all classes (IBA 13.4.8.1);
// bits 8-15 are class specific (for the PMA see PMACap*).
const (
	ClassCapIsTrapSupported            = 1 << 0
	ClassCapIsGetSetNoticeSupported    = 1 << 1
	ClassCapIsCapabilityMask2Supported = 1 << 2
)

// ClassPortInfo describes a management class agent (IBA 13.4.8.1); the
// same layout serves every class (SM, SA, PMA, CM, …):
//
//	byte 0:      BaseVersion
//	byte 1:      ClassVersion
//	bytes 2-3:   CapabilityMask
//	bytes 4-7:   CapabilityMask2(27) RespTimeValue(5)
//	bytes 8-23:  RedirectGID
//	bytes 24-27: RedirectTC(8) RedirectSL(4) RedirectFL(20)
//	bytes 28-29: RedirectLID
//	bytes 30-31: RedirectP_Key
//	bytes 32-35: Reserved(8) RedirectQP(24)
//	bytes 36-39: RedirectQ_Key
//	bytes 40-55: TrapGID
//	bytes 56-59: TrapTC(8) TrapSL(4) TrapFL(20)
//	bytes 60-61: TrapLID
//	bytes 62-63: TrapP_Key
//	bytes 64-67: TrapHL(8) TrapQP(24)
//	bytes 68-71: TrapQ_Key
type ClassPortInfo []byte

// BaseVersion returns the highest MAD base version supported.
func (c ClassPortInfo) BaseVersion() uint8 { return c[0] }

// ClassVersion returns the highest class version supported.
func (c ClassPortInfo) ClassVersion() uint8 { return c[1] }

// CapabilityMask returns the capability bits.
func (c ClassPortInfo) CapabilityMask() uint16 { return binary.BigEndian.Uint16(c[2:]) }

// CapabilityMask2 returns the 27-bit CapabilityMask2.
func (c ClassPortInfo) CapabilityMask2() uint32 { return binary.BigEndian.Uint32(c[4:]) >> 5 }

// RespTimeValue returns the 5-bit response time exponent.
func (c ClassPortInfo) RespTimeValue() uint8 { return c[7] & 0x1f }

// RedirectGID returns the GID to redirect requests to.
func (c ClassPortInfo) RedirectGID() GID { return GID(c[8:24]) }

// RedirectTC returns the redirect traffic class.
func (c ClassPortInfo) RedirectTC() uint8 { return c[24] }

// RedirectSL returns the redirect SL.
func (c ClassPortInfo) RedirectSL() uint8 { return c[25] >> 4 }

// RedirectFL returns the 20-bit redirect flow label.
func (c ClassPortInfo) RedirectFL() uint32 { return binary.BigEndian.Uint32(c[24:]) & 0xfffff }

// RedirectLID returns the redirect LID (0: no redirection).
func (c ClassPortInfo) RedirectLID() uint16 { return binary.BigEndian.Uint16(c[28:]) }

// RedirectPKey returns the redirect P_Key.
func (c ClassPortInfo) RedirectPKey() uint16 { return binary.BigEndian.Uint16(c[30:]) }

// RedirectQP returns the 24-bit redirect QP.
func (c ClassPortInfo) RedirectQP() uint32 { return binary.BigEndian.Uint32(c[32:]) & 0xffffff }

// RedirectQKey returns the redirect Q_Key.
func (c ClassPortInfo) RedirectQKey() uint32 { return binary.BigEndian.Uint32(c[36:]) }

// TrapGID returns the GID traps are sent to.
func (c ClassPortInfo) TrapGID() GID { return GID(c[40:56]) }

// TrapTC returns the trap traffic class.
func (c ClassPortInfo) TrapTC() uint8 { return c[56] }

// TrapSL returns the trap SL.
func (c ClassPortInfo) TrapSL() uint8 { return c[57] >> 4 }

// TrapFL returns the 20-bit trap flow label.
func (c ClassPortInfo) TrapFL() uint32 { return binary.BigEndian.Uint32(c[56:]) & 0xfffff }

// TrapLID returns the LID traps are sent to.
func (c ClassPortInfo) TrapLID() uint16 { return binary.BigEndian.Uint16(c[60:]) }

// TrapPKey returns the trap P_Key.
func (c ClassPortInfo) TrapPKey() uint16 { return binary.BigEndian.Uint16(c[62:]) }

// TrapHL returns the trap hop limit.
func (c ClassPortInfo) TrapHL() uint8 { return c[64] }

// TrapQP returns the 24-bit trap QP.
func (c ClassPortInfo) TrapQP() uint32 { return binary.BigEndian.Uint32(c[64:]) & 0xffffff }

// TrapQKey returns the trap Q_Key.
func (c ClassPortInfo) TrapQKey() uint32 { return binary.BigEndian.Uint32(c[68:]) }

// SetBaseVersion sets BaseVersion.
func (c ClassPortInfo) SetBaseVersion(v uint8) { c[0] = v }

// SetClassVersion sets ClassVersion.
func (c ClassPortInfo) SetClassVersion(v uint8) { c[1] = v }

// SetCapabilityMask sets CapabilityMask.
func (c ClassPortInfo) SetCapabilityMask(v uint16) { binary.BigEndian.PutUint16(c[2:], v) }

// SetCapabilityMask2 sets the 27-bit CapabilityMask2.
func (c ClassPortInfo) SetCapabilityMask2(v uint32) { smSetBits(c, 32, 27, v) }

// SetRespTimeValue sets the 5-bit RespTimeValue.
func (c ClassPortInfo) SetRespTimeValue(v uint8) { c[7] = c[7]&0xe0 | v&0x1f }

// SetRedirectGID sets RedirectGID.
func (c ClassPortInfo) SetRedirectGID(g GID) { copy(c[8:24], g[:]) }

// SetRedirectTC sets RedirectTC.
func (c ClassPortInfo) SetRedirectTC(v uint8) { c[24] = v }

// SetRedirectSL sets the 4-bit RedirectSL.
func (c ClassPortInfo) SetRedirectSL(v uint8) { c[25] = c[25]&0x0f | v<<4 }

// SetRedirectFL sets the 20-bit RedirectFL.
func (c ClassPortInfo) SetRedirectFL(v uint32) { smSetBits(c, 204, 20, v) }

// SetRedirectLID sets RedirectLID.
func (c ClassPortInfo) SetRedirectLID(v uint16) { binary.BigEndian.PutUint16(c[28:], v) }

// SetRedirectPKey sets RedirectP_Key.
func (c ClassPortInfo) SetRedirectPKey(v uint16) { binary.BigEndian.PutUint16(c[30:], v) }

// SetRedirectQP sets the 24-bit RedirectQP.
func (c ClassPortInfo) SetRedirectQP(v uint32) { smSetBits(c, 264, 24, v) }

// SetRedirectQKey sets RedirectQ_Key.
func (c ClassPortInfo) SetRedirectQKey(v uint32) { binary.BigEndian.PutUint32(c[36:], v) }

// SetTrapGID sets TrapGID.
func (c ClassPortInfo) SetTrapGID(g GID) { copy(c[40:56], g[:]) }

// SetTrapTC sets TrapTC.
func (c ClassPortInfo) SetTrapTC(v uint8) { c[56] = v }

// SetTrapSL sets the 4-bit TrapSL.
func (c ClassPortInfo) SetTrapSL(v uint8) { c[57] = c[57]&0x0f | v<<4 }

// SetTrapFL sets the 20-bit TrapFL.
func (c ClassPortInfo) SetTrapFL(v uint32) { smSetBits(c, 460, 20, v) }

// SetTrapLID sets TrapLID.
func (c ClassPortInfo) SetTrapLID(v uint16) { binary.BigEndian.PutUint16(c[60:], v) }

// SetTrapPKey sets TrapP_Key.
func (c ClassPortInfo) SetTrapPKey(v uint16) { binary.BigEndian.PutUint16(c[62:], v) }

// SetTrapHL sets TrapHL.
func (c ClassPortInfo) SetTrapHL(v uint8) { c[64] = v }

// SetTrapQP sets the 24-bit TrapQP.
func (c ClassPortInfo) SetTrapQP(v uint32) { smSetBits(c, 520, 24, v) }

// SetTrapQKey sets TrapQ_Key.
func (c ClassPortInfo) SetTrapQKey(v uint32) { binary.BigEndian.PutUint32(c[68:], v) }

// LinkEnable resolves a LinkWidthEnabled or LinkSpeedEnabled value an SM writes in a
// PortInfo Set against the port's supported set (IBA 14.2.5.6): noChange keeps the
// current value (0 is returned), setSupported enables everything supported, anything
// else must be a subset of supported (ok false otherwise: status 0x001C).
func LinkEnable(v, noChange, setSupported, supported uint8) (enable uint8, ok bool) {
	switch v {
	case noChange:
		return 0, true
	case setSupported:
		return supported, true
	}
	return v, v&^supported == 0
}

// FillPMAClassPortInfo writes a Performance Management ClassPortInfo (IBA 16.1.3.1)
// with the given capability mask and response time into out (the MAD data area).
func FillPMAClassPortInfo(out []byte, capMask uint16, respTimeValue uint8) {
	clear(out)
	c := ClassPortInfo(out)
	c.SetBaseVersion(MADBaseVersion)
	c.SetClassVersion(ClassVersionPerf)
	c.SetCapabilityMask(capMask)
	c.SetRespTimeValue(respTimeValue)
}

// WidestLinkWidth returns the widest link width in a LinkWidth mask (12X > 8X > 4X > 2X >
// 1X), the width a link trains to (IBA 14.2.5.6), or 0.
func WidestLinkWidth(m uint8) uint8 {
	for _, w := range [...]uint8{LinkWidth12X, LinkWidth8X, LinkWidth4X, LinkWidth2X, LinkWidth1X} {
		if m&w != 0 {
			return w
		}
	}
	return 0
}

// FastestLinkSpeed returns the fastest speed in a LinkSpeed mask (QDR > DDR > SDR), or 0.
func FastestLinkSpeed(m uint8) uint8 {
	for _, s := range [...]uint8{LinkSpeedQDR, LinkSpeedDDR, LinkSpeedSDR} {
		if m&s != 0 {
			return s
		}
	}
	return 0
}
