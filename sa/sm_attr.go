package sa

import "encoding/binary"

// Field access for the subnet-management attributes the SM reads and writes, over the
// 64-byte SMP data block (offsets in bytes from IBA 14.2.5). Kept private: the SA and
// tools read the decoded values from the Topology.

var be = binary.BigEndian

// NodeInfo (IBA 14.2.5.3).
const (
	niNodeType     = 2
	niNumPorts     = 3
	niSysImageGUID = 4
	niNodeGUID     = 12
	niPortGUID     = 20
	niPartitionCap = 28
	niDeviceID     = 30
	niRevision     = 32
	niLocalPort    = 36 // LocalPortNum(8) VendorID(24)
)

// PortInfo (IBA 14.2.5.6).
const (
	piMKey          = 0
	piGIDPrefix     = 8
	piLID           = 16
	piMasterSMLID   = 18
	piCapMask       = 20
	piMKeyLease     = 26
	piLocalPort     = 28
	piWidthEnabled  = 29
	piWidthSupp     = 30
	piWidthActive   = 31
	piSpeedState    = 32 // LinkSpeedSupported(4) PortState(4)
	piPhysDown      = 33 // PortPhysicalState(4) LinkDownDefaultState(4)
	piLMC           = 34 // M_KeyProtectBits(2) resv(3) LMC(3)
	piSpeedActEn    = 35 // LinkSpeedActive(4) LinkSpeedEnabled(4)
	piNeighMTUSMSL  = 36 // NeighborMTU(4) MasterSMSL(4)
	piVLCapInit     = 37 // VLCap(4) InitType(4)
	piInitReplyMTU  = 41 // InitTypeReply(4) MTUCap(4)
	piHOQLife       = 42 // VLStallCount(3) HOQLife(5)
	piOperVLs       = 43 // OperationalVLs(4) PartEnfIn(1) PartEnfOut(1) FilterRawIn(1) FilterRawOut(1)
	piPKeyViol      = 46
	piSubnetTimeout = 51 // ClientReregister(1) MulticastPKeyTrapSuppression(2) SubnetTimeOut(5)
	piRespTime      = 52
)

// Port states (PortInfo:PortState, IBA 14.2.5.6).
const (
	PortStateNoChange = 0
	PortStateDown     = 1
	PortStateInit     = 2
	PortStateArmed    = 3
	PortStateActive   = 4
)

// Physical port states (PortInfo:PortPhysicalState).
const (
	PhysStateSleep    = 1
	PhysStatePolling  = 2
	PhysStateDisabled = 3
	PhysStateTraining = 4
	PhysStateLinkUp   = 5
)

// SwitchInfo (IBA 14.2.5.4).
const (
	siLinearFDBCap    = 0
	siMulticastFDBCap = 4
	siLinearFDBTop    = 6
	siLifeTimePSC     = 11 // LifeTimeValue(5) PortStateChange(1) OptimizedSLtoVL(2)
	siPartEnfCap      = 14
	siCaps            = 16 // InboundEnforcementCap(1) OutboundEnforcementCap(1) FilterRawIn FilterRawOut EnhancedPort0(1)
	siMulticastFDBTop = 18
)

const siPortStateChange = 0x04 // bit of byte siLifeTimePSC

// SMInfo (IBA 14.2.5.13).
const (
	smiGUID     = 0
	smiSMKey    = 8
	smiActCount = 16
	smiPrioSt   = 20 // Priority(4) SMState(4)
)

// SM states (SMInfo:SMState, IBA 14.4.1).
const (
	SMStateNotActive   = 0
	SMStateDiscovering = 1
	SMStateStandby     = 2
	SMStateMaster      = 3
)

// IBA MTU encodings (PortInfo:MTUCap, NeighborMTU).
const (
	MTU256  = 1
	MTU512  = 2
	MTU1024 = 3
	MTU2048 = 4
	MTU4096 = 5
)

// Node types (NodeInfo:NodeType).
const (
	NodeTypeCA     = 1
	NodeTypeSwitch = 2
	NodeTypeRouter = 3
)

// pkeyBlockLen is the number of P_Keys in one P_KeyTable block (IBA 14.2.5.7).
const pkeyBlockLen = 32

// mftBlockLen is the number of MLIDs in one MulticastForwardingTable block and
// mftPortsPerPos the number of ports one port-mask position covers (IBA 14.2.5.11).
const (
	mftBlockLen    = 32
	mftPortsPerPos = 16
)

// lftBlockLen is the number of LIDs in one LinearForwardingTable block (IBA 14.2.5.10).
const lftBlockLen = 64
