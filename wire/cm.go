package wire

import "encoding/binary"

// Communication management MADs (IBA 12.6): management class 0x07, class version 2, sent
// from and to QP1 with method Send (0x03). The message is the attribute; its fields
// follow the 24-byte MAD common header, 232 bytes in all, and end in private data. The
// layouts are IBA 12.6's tables 106–120 as Linux's include/rdma/ibta_vol1_c12.h gives
// them; offsets below count from the start of the MAD.
//
// Each message type is a view over a whole 256-byte MAD ([]byte of MADLen bytes); build
// one with NewCMMAD and the setters, read one with the getters. Nothing allocates.

// CM attribute IDs (IBA 12.6.1, Table 105).
const (
	AttrCMReq     = 0x0010
	AttrCMMRA     = 0x0011
	AttrCMRej     = 0x0012
	AttrCMRep     = 0x0013
	AttrCMRTU     = 0x0014
	AttrCMDReq    = 0x0015
	AttrCMDRep    = 0x0016
	AttrCMSIDRReq = 0x0017
	AttrCMSIDRRep = 0x0018
	AttrCMLAP     = 0x0019
	AttrCMAPR     = 0x001A
)

// MethodCMSend is the method of every CM message (IBA 12.6.1: Send, 0x03).
const MethodCMSend = 0x03

// Private data lengths (IBA 12.6; Linux's cm_msgs.h).
const (
	CMReqPrivateLen     = 92
	CMMRAPrivateLen     = 222
	CMRejPrivateLen     = 148
	CMRepPrivateLen     = 196
	CMRTUPrivateLen     = 224
	CMDReqPrivateLen    = 220
	CMDRepPrivateLen    = 224
	CMSIDRReqPrivateLen = 216
	CMSIDRRepPrivateLen = 136
	CMRejARILen         = 72
	CMSIDRInfoLen       = 72
)

// cmOff is where CM message fields start: after the MAD common header.
const cmOff = MADHeaderLen

// REJ reasons (IBA 12.6.7.2, Table 109), those a CM sends or a consumer meets.
const (
	RejNoQP                 = 1
	RejNoEEC                = 2
	RejNoResources          = 3
	RejTimeout              = 4
	RejUnsupportedReq       = 5
	RejInvalidCommID        = 6
	RejInvalidCommInstance  = 7
	RejInvalidServiceID     = 8
	RejInvalidTransportType = 9
	RejStaleConn            = 10
	RejRDCNotExist          = 11
	RejInvalidGID           = 12
	RejInvalidLID           = 13
	RejInvalidSL            = 14
	RejInvalidTrafficClass  = 15
	RejInvalidHopLimit      = 16
	RejInvalidPacketRate    = 17
	RejInvalidAltGID        = 18
	RejInvalidAltLID        = 19
	RejInvalidAltSL         = 20
	RejInvalidAltTC         = 21
	RejInvalidAltHopLimit   = 22
	RejInvalidAltRate       = 23
	RejPortCMRedirect       = 24
	RejPortRedirect         = 25
	RejInvalidMTU           = 26
	RejInsufficientRespRes  = 27
	RejConsumerReject       = 28
	RejInvalidRNRRetry      = 29
	RejDuplicateLocalCommID = 30
	RejInvalidClassVersion  = 31
	RejInvalidFlowLabel     = 32
	RejInvalidAltFlowLabel  = 33
)

// MessageRejected / MessageMRAed: which message a REJ or MRA answers (IBA 12.6.6, 12.6.7).
const (
	CMMsgREQ   = 0
	CMMsgREP   = 1
	CMMsgOther = 2 // REJ: "other"; MRA: LAP
)

// SIDR_REP status (IBA 12.11.2, Table 121).
const (
	SIDRStatusOK           = 0 // valid QPN and Q_Key
	SIDRStatusNoService    = 1 // service ID not supported
	SIDRStatusRejected     = 2 // rejected by the service provider
	SIDRStatusNoQP         = 3 // no QP available
	SIDRStatusRedirect     = 4 // redirect (ClassPortInfo in the additional information)
	SIDRStatusClassVersion = 5 // unsupported class version
)

// NewCMMAD writes a CM MAD header into mad (zeroing the rest): class 0x07 version 2,
// method Send, the attribute and transaction ID.
func NewCMMAD(mad []byte, attr uint16, tid uint64) {
	clear(mad[:MADLen])
	m := MAD(mad)
	m.SetBaseVersion(1)
	m.SetMgmtClass(MgmtClassCM)
	m.SetClassVersion(ClassVersionCM)
	m.SetMethod(MethodCMSend)
	m.SetTID(tid)
	m.SetAttrID(attr)
}

// Field helpers, offsets relative to the CM message.

func cmU32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[cmOff+off:]) }
func cmPutU32(b []byte, off int, v uint32) {
	binary.BigEndian.PutUint32(b[cmOff+off:], v)
}
func cmU64(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[cmOff+off:]) }
func cmPutU64(b []byte, off int, v uint64) {
	binary.BigEndian.PutUint64(b[cmOff+off:], v)
}
func cmU16(b []byte, off int) uint16 { return binary.BigEndian.Uint16(b[cmOff+off:]) }
func cmPutU16(b []byte, off int, v uint16) {
	binary.BigEndian.PutUint16(b[cmOff+off:], v)
}

// cmU24 reads the 24 bits at the top of the 32-bit word at off (QPNs, PSNs, EECNs).
func cmU24(b []byte, off int) uint32 { return cmU32(b, off) >> 8 }

// cmPutU24 writes the top 24 bits of the word at off, keeping its low byte.
func cmPutU24(b []byte, off int, v uint32) {
	o := cmOff + off
	b[o], b[o+1], b[o+2] = byte(v>>16), byte(v>>8), byte(v)
}

// cmBits reads n bits of the byte at off, the first of them shift bits from its top.
func cmBits(b []byte, off, shift, n int) uint8 {
	return b[cmOff+off] >> (8 - shift - n) & (1<<n - 1)
}

// cmPutBits writes n bits of the byte at off, shift bits from its top.
func cmPutBits(b []byte, off, shift, n int, v uint8) {
	s := 8 - shift - n
	mask := byte(1<<n-1) << s
	b[cmOff+off] = b[cmOff+off]&^mask | v<<s&mask
}

func cmBool(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// CM_REQ (IBA 12.6.5, Table 106).
type CMReq []byte

func (m CMReq) LocalCommID() uint32           { return cmU32(m, 0) }
func (m CMReq) SetLocalCommID(v uint32)       { cmPutU32(m, 0, v) }
func (m CMReq) ServiceID() uint64             { return cmU64(m, 8) }
func (m CMReq) SetServiceID(v uint64)         { cmPutU64(m, 8, v) }
func (m CMReq) LocalCAGUID() uint64           { return cmU64(m, 16) }
func (m CMReq) SetLocalCAGUID(v uint64)       { cmPutU64(m, 16, v) }
func (m CMReq) LocalQKey() uint32             { return cmU32(m, 28) }
func (m CMReq) SetLocalQKey(v uint32)         { cmPutU32(m, 28, v) }
func (m CMReq) LocalQPN() uint32              { return cmU24(m, 32) }
func (m CMReq) SetLocalQPN(v uint32)          { cmPutU24(m, 32, v) }
func (m CMReq) ResponderResources() uint8     { return m[cmOff+35] }
func (m CMReq) SetResponderResources(v uint8) { m[cmOff+35] = v }
func (m CMReq) LocalEECN() uint32             { return cmU24(m, 36) }
func (m CMReq) InitiatorDepth() uint8         { return m[cmOff+39] }
func (m CMReq) SetInitiatorDepth(v uint8)     { m[cmOff+39] = v }
func (m CMReq) RemoteEECN() uint32            { return cmU24(m, 40) }

// RemoteCMResponseTimeout is how long the active side's CM takes to answer (4.096 µs ×
// 2^n).
func (m CMReq) RemoteCMResponseTimeout() uint8     { return cmBits(m, 43, 0, 5) }
func (m CMReq) SetRemoteCMResponseTimeout(v uint8) { cmPutBits(m, 43, 0, 5, v) }

// TransportServiceType: 0 RC, 1 UC, 2 RD (IBA 12.6.5).
func (m CMReq) TransportServiceType() uint8     { return cmBits(m, 43, 5, 2) }
func (m CMReq) SetTransportServiceType(v uint8) { cmPutBits(m, 43, 5, 2, v) }
func (m CMReq) EndToEndFlowControl() bool       { return cmBits(m, 43, 7, 1) == 1 }
func (m CMReq) SetEndToEndFlowControl(v bool)   { cmPutBits(m, 43, 7, 1, cmBool(v)) }
func (m CMReq) StartingPSN() uint32             { return cmU24(m, 44) }
func (m CMReq) SetStartingPSN(v uint32)         { cmPutU24(m, 44, v) }

// LocalCMResponseTimeout is how long the passive side may take to answer.
func (m CMReq) LocalCMResponseTimeout() uint8     { return cmBits(m, 47, 0, 5) }
func (m CMReq) SetLocalCMResponseTimeout(v uint8) { cmPutBits(m, 47, 0, 5, v) }
func (m CMReq) RetryCount() uint8                 { return cmBits(m, 47, 5, 3) }
func (m CMReq) SetRetryCount(v uint8)             { cmPutBits(m, 47, 5, 3, v) }
func (m CMReq) PKey() uint16                      { return cmU16(m, 48) }
func (m CMReq) SetPKey(v uint16)                  { cmPutU16(m, 48, v) }

// PathMTU is the IBA MTU code (1 = 256 … 5 = 4096).
func (m CMReq) PathMTU() uint8               { return cmBits(m, 50, 0, 4) }
func (m CMReq) SetPathMTU(v uint8)           { cmPutBits(m, 50, 0, 4, v) }
func (m CMReq) RDCExists() bool              { return cmBits(m, 50, 4, 1) == 1 }
func (m CMReq) RNRRetryCount() uint8         { return cmBits(m, 50, 5, 3) }
func (m CMReq) SetRNRRetryCount(v uint8)     { cmPutBits(m, 50, 5, 3, v) }
func (m CMReq) MaxCMRetries() uint8          { return cmBits(m, 51, 0, 4) }
func (m CMReq) SetMaxCMRetries(v uint8)      { cmPutBits(m, 51, 0, 4, v) }
func (m CMReq) SRQ() bool                    { return cmBits(m, 51, 4, 1) == 1 }
func (m CMReq) SetSRQ(v bool)                { cmPutBits(m, 51, 4, 1, cmBool(v)) }
func (m CMReq) ExtendedTransportType() uint8 { return cmBits(m, 51, 5, 3) }

// Primary is the primary path's fields; Alternate the alternate path's (all zero when
// there is none).
func (m CMReq) Primary() CMPath   { return CMPath(m[cmOff+52 : cmOff+96]) }
func (m CMReq) Alternate() CMPath { return CMPath(m[cmOff+96 : cmOff+140]) }

// Private is the REQ's private data (92 bytes).
func (m CMReq) Private() []byte { return m[cmOff+140 : cmOff+140+CMReqPrivateLen] }

// CMPath is a path in a REQ (44 bytes: IBA 12.6.5's primary or alternate fields).
type CMPath []byte

func (p CMPath) LocalLID() uint16           { return binary.BigEndian.Uint16(p[0:]) }
func (p CMPath) SetLocalLID(v uint16)       { binary.BigEndian.PutUint16(p[0:], v) }
func (p CMPath) RemoteLID() uint16          { return binary.BigEndian.Uint16(p[2:]) }
func (p CMPath) SetRemoteLID(v uint16)      { binary.BigEndian.PutUint16(p[2:], v) }
func (p CMPath) LocalGID() GID              { return GID(p[4:20]) }
func (p CMPath) SetLocalGID(g GID)          { copy(p[4:20], g[:]) }
func (p CMPath) RemoteGID() GID             { return GID(p[20:36]) }
func (p CMPath) SetRemoteGID(g GID)         { copy(p[20:36], g[:]) }
func (p CMPath) FlowLabel() uint32          { return binary.BigEndian.Uint32(p[36:]) >> 12 }
func (p CMPath) PacketRate() uint8          { return p[39] & 0x3F }
func (p CMPath) SetPacketRate(v uint8)      { p[39] = p[39]&0xC0 | v&0x3F }
func (p CMPath) TrafficClass() uint8        { return p[40] }
func (p CMPath) HopLimit() uint8            { return p[41] }
func (p CMPath) SetHopLimit(v uint8)        { p[41] = v }
func (p CMPath) SL() uint8                  { return p[42] >> 4 }
func (p CMPath) SetSL(v uint8)              { p[42] = p[42]&0x0F | v<<4 }
func (p CMPath) SubnetLocal() bool          { return p[42]&0x08 != 0 }
func (p CMPath) LocalACKTimeout() uint8     { return p[43] >> 3 }
func (p CMPath) SetLocalACKTimeout(v uint8) { p[43] = p[43]&0x07 | v<<3 }

// SetSubnetLocal sets the SubnetLocal bit (1: the path stays in the subnet, no GRH).
func (p CMPath) SetSubnetLocal(v bool) {
	p[42] &^= 0x08
	if v {
		p[42] |= 0x08
	}
}

// SetFlowLabel sets the 20-bit flow label (the packet rate's byte is kept).
func (p CMPath) SetFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(p[36:])
	binary.BigEndian.PutUint32(p[36:], v<<12|w&0xFFF)
}

// SetTrafficClass sets the GRH traffic class of the path.
func (p CMPath) SetTrafficClass(v uint8) { p[40] = v }

// CM_MRA (IBA 12.6.6, Table 107).
type CMMRA []byte

func (m CMMRA) LocalCommID() uint32       { return cmU32(m, 0) }
func (m CMMRA) SetLocalCommID(v uint32)   { cmPutU32(m, 0, v) }
func (m CMMRA) RemoteCommID() uint32      { return cmU32(m, 4) }
func (m CMMRA) SetRemoteCommID(v uint32)  { cmPutU32(m, 4, v) }
func (m CMMRA) MessageMRAed() uint8       { return cmBits(m, 8, 0, 2) }
func (m CMMRA) SetMessageMRAed(v uint8)   { cmPutBits(m, 8, 0, 2, v) }
func (m CMMRA) ServiceTimeout() uint8     { return cmBits(m, 9, 0, 5) }
func (m CMMRA) SetServiceTimeout(v uint8) { cmPutBits(m, 9, 0, 5, v) }
func (m CMMRA) Private() []byte           { return m[cmOff+10 : cmOff+10+CMMRAPrivateLen] }

// CM_REJ (IBA 12.6.7, Table 108).
type CMRej []byte

func (m CMRej) LocalCommID() uint32        { return cmU32(m, 0) }
func (m CMRej) SetLocalCommID(v uint32)    { cmPutU32(m, 0, v) }
func (m CMRej) RemoteCommID() uint32       { return cmU32(m, 4) }
func (m CMRej) SetRemoteCommID(v uint32)   { cmPutU32(m, 4, v) }
func (m CMRej) MessageRejected() uint8     { return cmBits(m, 8, 0, 2) }
func (m CMRej) SetMessageRejected(v uint8) { cmPutBits(m, 8, 0, 2, v) }
func (m CMRej) RejectedInfoLen() uint8     { return cmBits(m, 9, 0, 7) }
func (m CMRej) SetRejectedInfoLen(v uint8) { cmPutBits(m, 9, 0, 7, v) }
func (m CMRej) Reason() uint16             { return cmU16(m, 10) }
func (m CMRej) SetReason(v uint16)         { cmPutU16(m, 10, v) }

// ARI is the additional rejection information (72 bytes; RejectedInfoLen of them used).
func (m CMRej) ARI() []byte     { return m[cmOff+12 : cmOff+12+CMRejARILen] }
func (m CMRej) Private() []byte { return m[cmOff+84 : cmOff+84+CMRejPrivateLen] }

// CM_REP (IBA 12.6.8, Table 110).
type CMRep []byte

func (m CMRep) LocalCommID() uint32           { return cmU32(m, 0) }
func (m CMRep) SetLocalCommID(v uint32)       { cmPutU32(m, 0, v) }
func (m CMRep) RemoteCommID() uint32          { return cmU32(m, 4) }
func (m CMRep) SetRemoteCommID(v uint32)      { cmPutU32(m, 4, v) }
func (m CMRep) LocalQKey() uint32             { return cmU32(m, 8) }
func (m CMRep) SetLocalQKey(v uint32)         { cmPutU32(m, 8, v) }
func (m CMRep) LocalQPN() uint32              { return cmU24(m, 12) }
func (m CMRep) SetLocalQPN(v uint32)          { cmPutU24(m, 12, v) }
func (m CMRep) LocalEECN() uint32             { return cmU24(m, 16) }
func (m CMRep) StartingPSN() uint32           { return cmU24(m, 20) }
func (m CMRep) SetStartingPSN(v uint32)       { cmPutU24(m, 20, v) }
func (m CMRep) ResponderResources() uint8     { return m[cmOff+24] }
func (m CMRep) SetResponderResources(v uint8) { m[cmOff+24] = v }
func (m CMRep) InitiatorDepth() uint8         { return m[cmOff+25] }
func (m CMRep) SetInitiatorDepth(v uint8)     { m[cmOff+25] = v }
func (m CMRep) TargetACKDelay() uint8         { return cmBits(m, 26, 0, 5) }
func (m CMRep) SetTargetACKDelay(v uint8)     { cmPutBits(m, 26, 0, 5, v) }
func (m CMRep) FailoverAccepted() uint8       { return cmBits(m, 26, 5, 2) }
func (m CMRep) EndToEndFlowControl() bool     { return cmBits(m, 26, 7, 1) == 1 }
func (m CMRep) SetEndToEndFlowControl(v bool) { cmPutBits(m, 26, 7, 1, cmBool(v)) }
func (m CMRep) RNRRetryCount() uint8          { return cmBits(m, 27, 0, 3) }
func (m CMRep) SetRNRRetryCount(v uint8)      { cmPutBits(m, 27, 0, 3, v) }
func (m CMRep) SRQ() bool                     { return cmBits(m, 27, 3, 1) == 1 }
func (m CMRep) SetSRQ(v bool)                 { cmPutBits(m, 27, 3, 1, cmBool(v)) }
func (m CMRep) LocalCAGUID() uint64           { return cmU64(m, 28) }
func (m CMRep) SetLocalCAGUID(v uint64)       { cmPutU64(m, 28, v) }
func (m CMRep) Private() []byte               { return m[cmOff+36 : cmOff+36+CMRepPrivateLen] }

// CMRTU is CM_RTU (IBA 12.6.9, Table 111); CMDRep has the same layout (Table 113).
type CMRTU []byte

func (m CMRTU) LocalCommID() uint32      { return cmU32(m, 0) }
func (m CMRTU) SetLocalCommID(v uint32)  { cmPutU32(m, 0, v) }
func (m CMRTU) RemoteCommID() uint32     { return cmU32(m, 4) }
func (m CMRTU) SetRemoteCommID(v uint32) { cmPutU32(m, 4, v) }
func (m CMRTU) Private() []byte          { return m[cmOff+8 : cmOff+8+CMRTUPrivateLen] }

// CMDRep is CM_DREP (IBA 12.6.11, Table 113).
type CMDRep = CMRTU

// CM_DREQ (IBA 12.6.10, Table 112).
type CMDReq []byte

func (m CMDReq) LocalCommID() uint32      { return cmU32(m, 0) }
func (m CMDReq) SetLocalCommID(v uint32)  { cmPutU32(m, 0, v) }
func (m CMDReq) RemoteCommID() uint32     { return cmU32(m, 4) }
func (m CMDReq) SetRemoteCommID(v uint32) { cmPutU32(m, 4, v) }
func (m CMDReq) RemoteQPN() uint32        { return cmU24(m, 8) }
func (m CMDReq) SetRemoteQPN(v uint32)    { cmPutU24(m, 8, v) }
func (m CMDReq) Private() []byte          { return m[cmOff+12 : cmOff+12+CMDReqPrivateLen] }

// CM_SIDR_REQ (IBA 12.11.1, Table 119).
type CMSIDRReq []byte

func (m CMSIDRReq) RequestID() uint32     { return cmU32(m, 0) }
func (m CMSIDRReq) SetRequestID(v uint32) { cmPutU32(m, 0, v) }
func (m CMSIDRReq) PKey() uint16          { return cmU16(m, 4) }
func (m CMSIDRReq) SetPKey(v uint16)      { cmPutU16(m, 4, v) }
func (m CMSIDRReq) ServiceID() uint64     { return cmU64(m, 8) }
func (m CMSIDRReq) SetServiceID(v uint64) { cmPutU64(m, 8, v) }
func (m CMSIDRReq) Private() []byte       { return m[cmOff+16 : cmOff+16+CMSIDRReqPrivateLen] }

// CM_SIDR_REP (IBA 12.11.2, Table 120).
type CMSIDRRep []byte

func (m CMSIDRRep) RequestID() uint32     { return cmU32(m, 0) }
func (m CMSIDRRep) SetRequestID(v uint32) { cmPutU32(m, 0, v) }
func (m CMSIDRRep) Status() uint8         { return m[cmOff+4] }
func (m CMSIDRRep) SetStatus(v uint8)     { m[cmOff+4] = v }
func (m CMSIDRRep) InfoLen() uint8        { return m[cmOff+5] }
func (m CMSIDRRep) SetInfoLen(v uint8)    { m[cmOff+5] = v }
func (m CMSIDRRep) QPN() uint32           { return cmU24(m, 8) }
func (m CMSIDRRep) SetQPN(v uint32)       { cmPutU24(m, 8, v) }
func (m CMSIDRRep) ServiceID() uint64     { return cmU64(m, 12) }
func (m CMSIDRRep) SetServiceID(v uint64) { cmPutU64(m, 12, v) }
func (m CMSIDRRep) QKey() uint32          { return cmU32(m, 20) }
func (m CMSIDRRep) SetQKey(v uint32)      { cmPutU32(m, 20, v) }
func (m CMSIDRRep) Info() []byte          { return m[cmOff+24 : cmOff+24+CMSIDRInfoLen] }
func (m CMSIDRRep) Private() []byte       { return m[cmOff+96 : cmOff+96+CMSIDRRepPrivateLen] }

// CMTimeoutNanos converts a CM timeout exponent to a duration in nanoseconds: 4.096 µs × 2^n
// (IBA 12.7.4; n above 31 is treated as 31).
func CMTimeoutNanos(n uint8) int64 {
	if n > 31 {
		n = 31
	}
	return 4096 << n
}
