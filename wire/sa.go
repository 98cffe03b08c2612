package wire

import "encoding/binary"

// Subnet administration MADs (IBA 15.2.1): the MAD common header, the RMPP header at 24,
// then the SA header and 200 bytes of SA data:
//
//	bytes 0-23:   MAD common header
//	bytes 24-35:  RMPP header
//	bytes 36-43:  SM_Key
//	bytes 44-45:  AttributeOffset (in 8-byte units; the record stride of a GetTable)
//	bytes 46-47:  Reserved
//	bytes 48-55:  ComponentMask
//	bytes 56-255: SA data
//
// Layouts here match OpenSM's include/iba/ib_types.h (ib_sa_mad_t and the record types),
// which Wireshark's packet-infiniband.c decodes the same way.
const (
	SAHeaderLen = 56
	SADataLen   = MADLen - SAHeaderLen // 200
	// SAClassHeaderLen is the part of the SA header after the RMPP header (SM_Key,
	// AttributeOffset, ComponentMask), counted in RMPP PayloadLength.
	SAClassHeaderLen = SAHeaderLen - RMPPHeaderOffset - RMPPHeaderLen // 20
)

// SA attribute IDs (IBA 15.2.5, Table 204).
const (
	AttrNodeRecord            = 0x0011
	AttrPortInfoRecord        = 0x0012
	AttrSLtoVLTableRecord     = 0x0013
	AttrSwitchInfoRecord      = 0x0014
	AttrLinearFwdTableRecord  = 0x0015
	AttrRandomFwdTableRecord  = 0x0016
	AttrMulticastFwdTblRecord = 0x0017
	AttrSMInfoRecord          = 0x0018
	AttrLinkRecord            = 0x0020
	AttrGUIDInfoRecord        = 0x0030
	AttrServiceRecord         = 0x0031
	AttrPKeyTableRecord       = 0x0033
	AttrPathRecord            = 0x0035
	AttrVLArbTableRecord      = 0x0036
	AttrMCMemberRecord        = 0x0038
	AttrTraceRecord           = 0x0039
	AttrMultiPathRecord       = 0x003A
	AttrServiceAssocRecord    = 0x003B
	AttrInformInfoRecord      = 0x00F3
)

// SA status codes: the class-specific bits 8-14 of the MAD status (IBA 15.2.1.1,
// Table 199), as OpenSM's IB_SA_MAD_STATUS_*.
const (
	SAStatusNoResources            = 0x0100 // ERR_NO_RESOURCES
	SAStatusReqInvalid             = 0x0200 // ERR_REQ_INVALID
	SAStatusNoRecords              = 0x0300 // ERR_NO_RECORDS
	SAStatusTooManyRecords         = 0x0400 // ERR_TOO_MANY_RECORDS
	SAStatusInvalidGID             = 0x0500 // ERR_REQ_INVALID_GID
	SAStatusInsufficientComponents = 0x0600 // ERR_REQ_INSUFFICIENT_COMPONENTS
	SAStatusDenied                 = 0x0700 // ERR_REQ_DENIED
	SAStatusPrioritySuggested      = 0x0800 // ERR_STATUS_PRIO_SUGGESTED
)

// SAStatusText names an SA (or common) MAD status for error messages.
func SAStatusText(s uint16) string {
	switch s {
	case 0:
		return "success"
	case SAStatusNoResources:
		return "ERR_NO_RESOURCES"
	case SAStatusReqInvalid:
		return "ERR_REQ_INVALID"
	case SAStatusNoRecords:
		return "ERR_NO_RECORDS"
	case SAStatusTooManyRecords:
		return "ERR_TOO_MANY_RECORDS"
	case SAStatusInvalidGID:
		return "ERR_REQ_INVALID_GID"
	case SAStatusInsufficientComponents:
		return "ERR_REQ_INSUFFICIENT_COMPONENTS"
	case SAStatusDenied:
		return "ERR_REQ_DENIED"
	case SAStatusPrioritySuggested:
		return "ERR_STATUS_PRIO_SUGGESTED"
	case StatusBusy:
		return "busy"
	case StatusBadVersion:
		return "bad class version"
	case StatusMethodNotSupported:
		return "method not supported"
	case StatusMethodAttrNotSupp:
		return "method/attribute not supported"
	case StatusInvalidAttrOrModVal:
		return "invalid attribute or modifier value"
	}
	return "status 0x" + saHex16(s)
}

func saHex16(v uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>12], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}

// SAMAD is a subnet administration MAD (IBA 15.2.1), a view over 256 bytes.
type SAMAD []byte

// MAD returns the common-header view.
func (m SAMAD) MAD() MAD { return MAD(m) }

// RMPP returns the RMPP header view.
func (m SAMAD) RMPP() RMPPHeader { return RMPPOf(MAD(m)) }

// SMKey returns SM_Key.
func (m SAMAD) SMKey() uint64 { return binary.BigEndian.Uint64(m[36:]) }

// AttrOffset returns AttributeOffset, in 8-byte units.
func (m SAMAD) AttrOffset() uint16 { return binary.BigEndian.Uint16(m[44:]) }

// CompMask returns ComponentMask.
func (m SAMAD) CompMask() uint64 { return binary.BigEndian.Uint64(m[48:]) }

// Data returns the 200 bytes of SA data.
func (m SAMAD) Data() []byte { return m[SAHeaderLen:MADLen] }

// SetSMKey sets SM_Key.
func (m SAMAD) SetSMKey(v uint64) { binary.BigEndian.PutUint64(m[36:], v) }

// SetAttrOffset sets AttributeOffset (8-byte units) and clears the reserved field.
func (m SAMAD) SetAttrOffset(v uint16) {
	binary.BigEndian.PutUint16(m[44:], v)
	m[46], m[47] = 0, 0
}

// SetCompMask sets ComponentMask.
func (m SAMAD) SetCompMask(v uint64) { binary.BigEndian.PutUint64(m[48:], v) }

// InitSAMAD clears m and writes a request header: base version 1, class 0x03, class
// version 2, the method, TID, attribute and component mask.
func InitSAMAD(m SAMAD, method uint8, tid uint64, attr uint16, mask uint64) {
	clear(m[:MADLen])
	h := MAD(m)
	h.SetBaseVersion(MADBaseVersion)
	h.SetMgmtClass(MgmtClassSubnAdm)
	h.SetClassVersion(ClassVersionSA)
	h.SetMethod(method)
	h.SetTID(tid)
	h.SetAttrID(attr)
	m.SetCompMask(mask)
}

// Record sizes and their GetTable strides: records are padded to a multiple of 8 bytes
// (AttributeOffset counts 8-byte words, IBA 15.2.1.2).
const (
	PathRecordLen     = 64
	MCMemberRecordLen = 52
	NodeRecordLen     = 108
	PortInfoRecordLen = 68
	ServiceRecordLen  = 176
	// The records of the SM's tables (sarecords.go).
	LinkRecordLen       = 6
	SwitchInfoRecordLen = 4 + SwitchInfoLen
	LFTRecordLen        = 72
	PKeyTableRecordLen  = 72
	GUIDInfoRecordLen   = 72
	SMInfoRecordLen     = 25
	MFTRecordLen        = 72
)

// SARecordStride returns the GetTable stride of a record of n bytes: n rounded up to a
// multiple of 8.
func SARecordStride(n int) int { return (n + 7) &^ 7 }

// SAAttrOffset returns the AttributeOffset of records of n bytes.
func SAAttrOffset(n int) uint16 { return uint16(SARecordStride(n) / 8) }

// SARecordLen returns the size of the record of attribute attr, or 0 if this package does
// not describe it.
func SARecordLen(attr uint16) int {
	switch attr {
	case AttrPathRecord:
		return PathRecordLen
	case AttrMCMemberRecord:
		return MCMemberRecordLen
	case AttrNodeRecord:
		return NodeRecordLen
	case AttrPortInfoRecord:
		return PortInfoRecordLen
	case AttrServiceRecord:
		return ServiceRecordLen
	case AttrLinkRecord:
		return LinkRecordLen
	case AttrSwitchInfoRecord:
		return SwitchInfoRecordLen
	case AttrLinearFwdTableRecord:
		return LFTRecordLen
	case AttrPKeyTableRecord:
		return PKeyTableRecordLen
	case AttrGUIDInfoRecord:
		return GUIDInfoRecordLen
	case AttrSMInfoRecord:
		return SMInfoRecordLen
	case AttrMulticastFwdTblRecord:
		return MFTRecordLen
	}
	return 0
}

// Selectors of PathRecord and MCMemberRecord MTU, Rate and PacketLifeTime (IBA 15.2.5.16).
const (
	SASelectorGreater = 0 // greater than the value
	SASelectorLess    = 1 // less than the value
	SASelectorExactly = 2 // exactly the value
	SASelectorLargest = 3 // the largest available
)

// Rate encodings (IBA 14.2.5.6 PortInfo / 15.2.5.16 PathRecord Rate).
const (
	SARate2_5Gbps = 2
	SARate10Gbps  = 3
	SARate30Gbps  = 4
	SARate5Gbps   = 5
	SARate20Gbps  = 6
	SARate40Gbps  = 7
	SARate60Gbps  = 8
	SARate80Gbps  = 9
	SARate120Gbps = 10
)

// saSetBits sets a width-bit field at bit shift of byte off.
func saSetBits(b []byte, off int, shift, width uint, v uint8) {
	m := uint8(1<<width-1) << shift
	b[off] = b[off]&^m | v<<shift&m
}

// PathRecord is a view of a PathRecord (IBA 15.2.5.16, 64 bytes):
//
//	0  ServiceID(64)
//	8  DGID(128)
//	24 SGID(128)
//	40 DLID(16) 42 SLID(16)
//	44 RawTraffic(1) Reserved(3) FlowLabel(20) HopLimit(8)
//	48 TClass(8) 49 Reversible(1) NumbPath(7) 50 P_Key(16)
//	52 QoSClass(12) SL(4)
//	54 MTUSelector(2) MTU(6) 55 RateSelector(2) Rate(6)
//	56 PacketLifeTimeSelector(2) PacketLifeTime(6) 57 Preference(8) 58 Reserved(48)
type PathRecord []byte

// PathRecord component-mask bits (IBA 15.2.5.16; OpenSM IB_PR_COMPMASK_*).
const (
	PRCompServiceIDMSB   = 1 << 0
	PRCompServiceIDLSB   = 1 << 1
	PRCompServiceID      = PRCompServiceIDMSB | PRCompServiceIDLSB
	PRCompDGID           = 1 << 2
	PRCompSGID           = 1 << 3
	PRCompDLID           = 1 << 4
	PRCompSLID           = 1 << 5
	PRCompRawTraffic     = 1 << 6
	PRCompFlowLabel      = 1 << 8
	PRCompHopLimit       = 1 << 9
	PRCompTClass         = 1 << 10
	PRCompReversible     = 1 << 11
	PRCompNumbPath       = 1 << 12
	PRCompPKey           = 1 << 13
	PRCompQoSClass       = 1 << 14
	PRCompSL             = 1 << 15
	PRCompMTUSelector    = 1 << 16
	PRCompMTU            = 1 << 17
	PRCompRateSelector   = 1 << 18
	PRCompRate           = 1 << 19
	PRCompPktLifeSel     = 1 << 20
	PRCompPacketLifeTime = 1 << 21
	PRCompPreference     = 1 << 22
)

func (r PathRecord) ServiceID() uint64             { return binary.BigEndian.Uint64(r[0:]) }
func (r PathRecord) DGID() GID                     { return GID(r[8:24]) }
func (r PathRecord) SGID() GID                     { return GID(r[24:40]) }
func (r PathRecord) DLID() uint16                  { return binary.BigEndian.Uint16(r[40:]) }
func (r PathRecord) SLID() uint16                  { return binary.BigEndian.Uint16(r[42:]) }
func (r PathRecord) RawTraffic() bool              { return r[44]&0x80 != 0 }
func (r PathRecord) FlowLabel() uint32             { return binary.BigEndian.Uint32(r[44:]) >> 8 & 0xFFFFF }
func (r PathRecord) HopLimit() uint8               { return r[47] }
func (r PathRecord) TClass() uint8                 { return r[48] }
func (r PathRecord) Reversible() bool              { return r[49]&0x80 != 0 }
func (r PathRecord) NumbPath() uint8               { return r[49] & 0x7F }
func (r PathRecord) PKey() uint16                  { return binary.BigEndian.Uint16(r[50:]) }
func (r PathRecord) QoSClass() uint16              { return binary.BigEndian.Uint16(r[52:]) >> 4 }
func (r PathRecord) SL() uint8                     { return r[53] & 0x0F }
func (r PathRecord) MTUSelector() uint8            { return r[54] >> 6 }
func (r PathRecord) MTU() uint8                    { return r[54] & 0x3F }
func (r PathRecord) RateSelector() uint8           { return r[55] >> 6 }
func (r PathRecord) Rate() uint8                   { return r[55] & 0x3F }
func (r PathRecord) PacketLifeTimeSelector() uint8 { return r[56] >> 6 }
func (r PathRecord) PacketLifeTime() uint8         { return r[56] & 0x3F }
func (r PathRecord) Preference() uint8             { return r[57] }

func (r PathRecord) SetServiceID(v uint64) { binary.BigEndian.PutUint64(r[0:], v) }
func (r PathRecord) SetDGID(g GID)         { copy(r[8:24], g[:]) }
func (r PathRecord) SetSGID(g GID)         { copy(r[24:40], g[:]) }
func (r PathRecord) SetDLID(v uint16)      { binary.BigEndian.PutUint16(r[40:], v) }
func (r PathRecord) SetSLID(v uint16)      { binary.BigEndian.PutUint16(r[42:], v) }
func (r PathRecord) SetRawTraffic(v bool)  { r[44] = setBit(r[44], 0x80, v) }

// SetFlowLabel sets the 20-bit flow label, keeping RawTraffic and HopLimit.
func (r PathRecord) SetFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(r[44:])
	w = w&^(0xFFFFF<<8) | (v&0xFFFFF)<<8
	binary.BigEndian.PutUint32(r[44:], w)
}
func (r PathRecord) SetHopLimit(v uint8)  { r[47] = v }
func (r PathRecord) SetTClass(v uint8)    { r[48] = v }
func (r PathRecord) SetReversible(v bool) { r[49] = setBit(r[49], 0x80, v) }
func (r PathRecord) SetNumbPath(v uint8)  { r[49] = r[49]&0x80 | v&0x7F }
func (r PathRecord) SetPKey(v uint16)     { binary.BigEndian.PutUint16(r[50:], v) }
func (r PathRecord) SetQoSClass(v uint16) {
	binary.BigEndian.PutUint16(r[52:], v<<4|uint16(r[53]&0x0F))
}
func (r PathRecord) SetSL(v uint8)                     { r[53] = r[53]&0xF0 | v&0x0F }
func (r PathRecord) SetMTUSelector(v uint8)            { saSetBits(r, 54, 6, 2, v) }
func (r PathRecord) SetMTU(v uint8)                    { saSetBits(r, 54, 0, 6, v) }
func (r PathRecord) SetRateSelector(v uint8)           { saSetBits(r, 55, 6, 2, v) }
func (r PathRecord) SetRate(v uint8)                   { saSetBits(r, 55, 0, 6, v) }
func (r PathRecord) SetPacketLifeTimeSelector(v uint8) { saSetBits(r, 56, 6, 2, v) }
func (r PathRecord) SetPacketLifeTime(v uint8)         { saSetBits(r, 56, 0, 6, v) }
func (r PathRecord) SetPreference(v uint8)             { r[57] = v }

// MCMemberRecord is a view of an MCMemberRecord (IBA 15.2.5.17, 52 bytes):
//
//	0  MGID(128) 16 PortGID(128) 32 Q_Key(32) 36 MLID(16)
//	38 MTUSelector(2) MTU(6) 39 TClass(8) 40 P_Key(16)
//	42 RateSelector(2) Rate(6) 43 PacketLifeTimeSelector(2) PacketLifeTime(6)
//	44 SL(4) FlowLabel(20) HopLimit(8)
//	48 Scope(4) JoinState(4) 49 ProxyJoin(1) Reserved(23)
type MCMemberRecord []byte

// MCMemberRecord component-mask bits (IBA 15.2.5.17; OpenSM IB_MCR_COMPMASK_*).
const (
	MCRCompMGID           = 1 << 0
	MCRCompPortGID        = 1 << 1
	MCRCompQKey           = 1 << 2
	MCRCompMLID           = 1 << 3
	MCRCompMTUSelector    = 1 << 4
	MCRCompMTU            = 1 << 5
	MCRCompTClass         = 1 << 6
	MCRCompPKey           = 1 << 7
	MCRCompRateSelector   = 1 << 8
	MCRCompRate           = 1 << 9
	MCRCompPktLifeSel     = 1 << 10
	MCRCompPacketLifeTime = 1 << 11
	MCRCompSL             = 1 << 12
	MCRCompFlowLabel      = 1 << 13
	MCRCompHopLimit       = 1 << 14
	MCRCompScope          = 1 << 15
	MCRCompJoinState      = 1 << 16
	MCRCompProxyJoin      = 1 << 17
)

// JoinState bits (IBA 15.2.5.17).
const (
	JoinFullMember         = 0x1
	JoinNonMember          = 0x2
	JoinSendOnlyNonMember  = 0x4
	JoinSendOnlyFullMember = 0x8 // IBA 1.3
)

func (r MCMemberRecord) MGID() GID                     { return GID(r[0:16]) }
func (r MCMemberRecord) PortGID() GID                  { return GID(r[16:32]) }
func (r MCMemberRecord) QKey() uint32                  { return binary.BigEndian.Uint32(r[32:]) }
func (r MCMemberRecord) MLID() uint16                  { return binary.BigEndian.Uint16(r[36:]) }
func (r MCMemberRecord) MTUSelector() uint8            { return r[38] >> 6 }
func (r MCMemberRecord) MTU() uint8                    { return r[38] & 0x3F }
func (r MCMemberRecord) TClass() uint8                 { return r[39] }
func (r MCMemberRecord) PKey() uint16                  { return binary.BigEndian.Uint16(r[40:]) }
func (r MCMemberRecord) RateSelector() uint8           { return r[42] >> 6 }
func (r MCMemberRecord) Rate() uint8                   { return r[42] & 0x3F }
func (r MCMemberRecord) PacketLifeTimeSelector() uint8 { return r[43] >> 6 }
func (r MCMemberRecord) PacketLifeTime() uint8         { return r[43] & 0x3F }
func (r MCMemberRecord) SL() uint8                     { return r[44] >> 4 }
func (r MCMemberRecord) FlowLabel() uint32             { return binary.BigEndian.Uint32(r[44:]) >> 8 & 0xFFFFF }
func (r MCMemberRecord) HopLimit() uint8               { return r[47] }
func (r MCMemberRecord) Scope() uint8                  { return r[48] >> 4 }
func (r MCMemberRecord) JoinState() uint8              { return r[48] & 0x0F }
func (r MCMemberRecord) ProxyJoin() bool               { return r[49]&0x80 != 0 }

func (r MCMemberRecord) SetMGID(g GID)                     { copy(r[0:16], g[:]) }
func (r MCMemberRecord) SetPortGID(g GID)                  { copy(r[16:32], g[:]) }
func (r MCMemberRecord) SetQKey(v uint32)                  { binary.BigEndian.PutUint32(r[32:], v) }
func (r MCMemberRecord) SetMLID(v uint16)                  { binary.BigEndian.PutUint16(r[36:], v) }
func (r MCMemberRecord) SetMTUSelector(v uint8)            { saSetBits(r, 38, 6, 2, v) }
func (r MCMemberRecord) SetMTU(v uint8)                    { saSetBits(r, 38, 0, 6, v) }
func (r MCMemberRecord) SetTClass(v uint8)                 { r[39] = v }
func (r MCMemberRecord) SetPKey(v uint16)                  { binary.BigEndian.PutUint16(r[40:], v) }
func (r MCMemberRecord) SetRateSelector(v uint8)           { saSetBits(r, 42, 6, 2, v) }
func (r MCMemberRecord) SetRate(v uint8)                   { saSetBits(r, 42, 0, 6, v) }
func (r MCMemberRecord) SetPacketLifeTimeSelector(v uint8) { saSetBits(r, 43, 6, 2, v) }
func (r MCMemberRecord) SetPacketLifeTime(v uint8)         { saSetBits(r, 43, 0, 6, v) }
func (r MCMemberRecord) SetSL(v uint8)                     { saSetBits(r, 44, 4, 4, v) }

// SetFlowLabel sets the 20-bit flow label, keeping SL and HopLimit.
func (r MCMemberRecord) SetFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(r[44:])
	w = w&^(0xFFFFF<<8) | (v&0xFFFFF)<<8
	binary.BigEndian.PutUint32(r[44:], w)
}
func (r MCMemberRecord) SetHopLimit(v uint8)  { r[47] = v }
func (r MCMemberRecord) SetScope(v uint8)     { saSetBits(r, 48, 4, 4, v) }
func (r MCMemberRecord) SetJoinState(v uint8) { saSetBits(r, 48, 0, 4, v) }
func (r MCMemberRecord) SetProxyJoin(v bool)  { r[49] = setBit(r[49], 0x80, v) }

// NodeRecord is a view of a NodeRecord (IBA 15.2.5.2, 108 bytes): LID(16) Reserved(16),
// NodeInfo (40 bytes, IBA 14.2.5.3) and NodeDescription (64 bytes).
type NodeRecord []byte

// NodeRecord component-mask bits (IBA 15.2.5.2; OpenSM IB_NR_COMPMASK_*).
const (
	NRCompLID             = 1 << 0
	NRCompBaseVersion     = 1 << 2
	NRCompClassVersion    = 1 << 3
	NRCompNodeType        = 1 << 4
	NRCompNumPorts        = 1 << 5
	NRCompSystemImageGUID = 1 << 6
	NRCompNodeGUID        = 1 << 7
	NRCompPortGUID        = 1 << 8
	NRCompPartitionCap    = 1 << 9
	NRCompDeviceID        = 1 << 10
	NRCompRevision        = 1 << 11
	NRCompLocalPortNum    = 1 << 12
	NRCompVendorID        = 1 << 13
	NRCompNodeDescription = 1 << 14
)

func (r NodeRecord) LID() uint16        { return binary.BigEndian.Uint16(r[0:]) }
func (r NodeRecord) SetLID(v uint16)    { binary.BigEndian.PutUint16(r[0:], v) }
func (r NodeRecord) NodeInfo() NodeInfo { return NodeInfo(r[4 : 4+NodeInfoLen]) }
func (r NodeRecord) NodeDescription() NodeDescription {
	return NodeDescription(r[44 : 44+NodeDescriptionLen])
}

// NodeInfo fields inside the record (IBA 14.2.5.3).
func (r NodeRecord) BaseVersion() uint8      { return r[4] }
func (r NodeRecord) ClassVersion() uint8     { return r[5] }
func (r NodeRecord) NodeType() uint8         { return r[6] }
func (r NodeRecord) NumPorts() uint8         { return r[7] }
func (r NodeRecord) SystemImageGUID() uint64 { return binary.BigEndian.Uint64(r[8:]) }
func (r NodeRecord) NodeGUID() uint64        { return binary.BigEndian.Uint64(r[16:]) }
func (r NodeRecord) PortGUID() uint64        { return binary.BigEndian.Uint64(r[24:]) }
func (r NodeRecord) PartitionCap() uint16    { return binary.BigEndian.Uint16(r[32:]) }
func (r NodeRecord) DeviceID() uint16        { return binary.BigEndian.Uint16(r[34:]) }
func (r NodeRecord) Revision() uint32        { return binary.BigEndian.Uint32(r[36:]) }
func (r NodeRecord) LocalPortNum() uint8     { return r[40] }
func (r NodeRecord) VendorID() uint32        { return binary.BigEndian.Uint32(r[40:]) & 0xFFFFFF }

// PortInfoRecord is a view of a PortInfoRecord (IBA 15.2.5.3, 68 bytes): EndportLID(16)
// PortNum(8) Options(8) and the 64-byte PortInfo (IBA 14.2.5.6).
type PortInfoRecord []byte

// PortInfoRecord component-mask bits (IBA 15.2.5.3; OpenSM IB_PIR_COMPMASK_*): the
// record's header fields, then one bit per PortInfo field in order.
const (
	PIRCompEndportLID  = 1 << 0
	PIRCompPortNum     = 1 << 1
	PIRCompOptions     = 1 << 2
	PIRCompMKey        = 1 << 3
	PIRCompGIDPrefix   = 1 << 4
	PIRCompLID         = 1 << 5
	PIRCompMasterSMLID = 1 << 6
	PIRCompCapMask     = 1 << 7
	PIRCompPortState   = 1 << 15
	PIRCompLMC         = 1 << 20
)

func (r PortInfoRecord) EndportLID() uint16     { return binary.BigEndian.Uint16(r[0:]) }
func (r PortInfoRecord) PortNum() uint8         { return r[2] }
func (r PortInfoRecord) Options() uint8         { return r[3] }
func (r PortInfoRecord) PortInfo() PortInfo     { return PortInfo(r[4 : 4+PortInfoLen]) }
func (r PortInfoRecord) SetEndportLID(v uint16) { binary.BigEndian.PutUint16(r[0:], v) }
func (r PortInfoRecord) SetPortNum(v uint8)     { r[2] = v }
func (r PortInfoRecord) SetOptions(v uint8)     { r[3] = v }

// PortInfo fields inside the record that the SA matches on (IBA 14.2.5.6).
func (r PortInfoRecord) GIDPrefix() uint64   { return binary.BigEndian.Uint64(r[12:]) }
func (r PortInfoRecord) LID() uint16         { return binary.BigEndian.Uint16(r[20:]) }
func (r PortInfoRecord) MasterSMLID() uint16 { return binary.BigEndian.Uint16(r[22:]) }
func (r PortInfoRecord) CapMask() uint32     { return binary.BigEndian.Uint32(r[24:]) }
func (r PortInfoRecord) PortState() uint8    { return r[4+32] & 0x0F }
func (r PortInfoRecord) LMC() uint8          { return r[4+34] & 0x07 }

// ServiceRecord is a view of a ServiceRecord (IBA 15.2.5.14, 176 bytes):
//
//	0 ServiceID(64) 8 ServiceGID(128) 24 ServiceP_Key(16) 26 Reserved(16)
//	28 ServiceLease(32) 32 ServiceKey(128) 48 ServiceName(64 bytes)
//	112 ServiceData8[16] 128 ServiceData16[8] 144 ServiceData32[4] 160 ServiceData64[2]
type ServiceRecord []byte

// ServiceRecord component-mask bits (IBA 15.2.5.14; OpenSM IB_SR_COMPMASK_*). Each
// ServiceData element has its own bit: ServiceData8[i] is SRCompData8(i), and so on.
const (
	SRCompID    = 1 << 0
	SRCompGID   = 1 << 1
	SRCompPKey  = 1 << 2
	SRCompLease = 1 << 4
	SRCompKey   = 1 << 5
	SRCompName  = 1 << 6

	srCompData8Bit  = 7
	srCompData16Bit = 23
	srCompData32Bit = 31
	srCompData64Bit = 35
	// SRCompAllData covers every ServiceData bit.
	SRCompAllData = (1<<37 - 1) &^ (1<<7 - 1)
)

// ServiceLeaseInfinite is the lease that never expires (IBA 15.2.5.14).
const ServiceLeaseInfinite = 0xFFFFFFFF

// ServiceNameLen is the size of ServiceName.
const ServiceNameLen = 64

// SRCompData8 returns the component-mask bit of ServiceData8[i].
func SRCompData8(i int) uint64 { return 1 << (srCompData8Bit + i) }

// SRCompData16 returns the component-mask bit of ServiceData16[i].
func SRCompData16(i int) uint64 { return 1 << (srCompData16Bit + i) }

// SRCompData32 returns the component-mask bit of ServiceData32[i].
func SRCompData32(i int) uint64 { return 1 << (srCompData32Bit + i) }

// SRCompData64 returns the component-mask bit of ServiceData64[i].
func SRCompData64(i int) uint64 { return 1 << (srCompData64Bit + i) }

func (r ServiceRecord) ID() uint64        { return binary.BigEndian.Uint64(r[0:]) }
func (r ServiceRecord) GID() GID          { return GID(r[8:24]) }
func (r ServiceRecord) PKey() uint16      { return binary.BigEndian.Uint16(r[24:]) }
func (r ServiceRecord) Lease() uint32     { return binary.BigEndian.Uint32(r[28:]) }
func (r ServiceRecord) Key() [16]byte     { return [16]byte(r[32:48]) }
func (r ServiceRecord) NameBytes() []byte { return r[48 : 48+ServiceNameLen] }

// Name returns ServiceName up to its first NUL.
func (r ServiceRecord) Name() string {
	b := r.NameBytes()
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
func (r ServiceRecord) Data8() []byte             { return r[112:128] }
func (r ServiceRecord) Data16(i int) uint16       { return binary.BigEndian.Uint16(r[128+2*i:]) }
func (r ServiceRecord) Data32(i int) uint32       { return binary.BigEndian.Uint32(r[144+4*i:]) }
func (r ServiceRecord) Data64(i int) uint64       { return binary.BigEndian.Uint64(r[160+8*i:]) }
func (r ServiceRecord) SetID(v uint64)            { binary.BigEndian.PutUint64(r[0:], v) }
func (r ServiceRecord) SetGID(g GID)              { copy(r[8:24], g[:]) }
func (r ServiceRecord) SetPKey(v uint16)          { binary.BigEndian.PutUint16(r[24:], v) }
func (r ServiceRecord) SetLease(v uint32)         { binary.BigEndian.PutUint32(r[28:], v) }
func (r ServiceRecord) SetKey(k [16]byte)         { copy(r[32:48], k[:]) }
func (r ServiceRecord) SetData16(i int, v uint16) { binary.BigEndian.PutUint16(r[128+2*i:], v) }
func (r ServiceRecord) SetData32(i int, v uint32) { binary.BigEndian.PutUint32(r[144+4*i:], v) }
func (r ServiceRecord) SetData64(i int, v uint64) { binary.BigEndian.PutUint64(r[160+8*i:], v) }

// SetName sets ServiceName, NUL-padded; longer names are cut at 64 bytes.
func (r ServiceRecord) SetName(s string) {
	b := r.NameBytes()
	n := copy(b, s)
	clear(b[n:])
}

// saRecordFieldsEqual reports whether a and b agree on the bytes [off, off+n).
func saRecordFieldsEqual(a, b []byte, off, n int) bool {
	for i := off; i < off+n; i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ServiceRecordMatches reports whether rec agrees with query on every component the
// mask selects (IBA 15.2.5.14), the matching rule of a ServiceRecord Get/GetTable/Delete.
func ServiceRecordMatches(rec, query ServiceRecord, mask uint64) bool {
	fields := [...]struct {
		bit     uint64
		off, ln int
	}{
		{SRCompID, 0, 8}, {SRCompGID, 8, 16}, {SRCompPKey, 24, 2}, {SRCompLease, 28, 4},
		{SRCompKey, 32, 16}, {SRCompName, 48, ServiceNameLen},
	}
	for _, f := range fields {
		if mask&f.bit != 0 && !saRecordFieldsEqual(rec, query, f.off, f.ln) {
			return false
		}
	}
	if mask&SRCompAllData == 0 {
		return true
	}
	for i := 0; i < 16; i++ {
		if mask&SRCompData8(i) != 0 && rec[112+i] != query[112+i] {
			return false
		}
	}
	for i := 0; i < 8; i++ {
		if mask&SRCompData16(i) != 0 && !saRecordFieldsEqual(rec, query, 128+2*i, 2) {
			return false
		}
	}
	for i := 0; i < 4; i++ {
		if mask&SRCompData32(i) != 0 && !saRecordFieldsEqual(rec, query, 144+4*i, 4) {
			return false
		}
	}
	for i := 0; i < 2; i++ {
		if mask&SRCompData64(i) != 0 && !saRecordFieldsEqual(rec, query, 160+8*i, 8) {
			return false
		}
	}
	return true
}

// IPoIB multicast GIDs (RFC 4391 §4): FF1s:401B:PPPP::… for IPv4.
const (
	IPoIBSignatureIPv4 = 0x401B
	IPoIBSignatureIPv6 = 0x601B
	// IPoIBBroadcastQKey is OpenSM's Q_Key of the IPoIB broadcast group.
	IPoIBBroadcastQKey = 0x0B1B
	// MGIDScopeLinkLocal is scope 2, link-local.
	MGIDScopeLinkLocal = 2
)

// IPoIBBroadcastMGID returns the IPv4 broadcast group's MGID of a partition,
// ff12:401b:<pkey>::ffff:ffff (RFC 4391 §5), with the full-member bit of the P_Key set as
// Linux does.
func IPoIBBroadcastMGID(pkey uint16) GID {
	var g GID
	g[0], g[1] = 0xFF, 0x10|MGIDScopeLinkLocal
	binary.BigEndian.PutUint16(g[2:], IPoIBSignatureIPv4)
	binary.BigEndian.PutUint16(g[4:], pkey|0x8000)
	g[12], g[13], g[14], g[15] = 0xFF, 0xFF, 0xFF, 0xFF
	return g
}
