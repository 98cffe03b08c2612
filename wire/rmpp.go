package wire

import "encoding/binary"

// RMPP, the reliable multi-packet protocol (IBA 13.6), carries messages longer than one
// MAD (SA GetTable responses, …) as numbered segments. Its 12-byte header follows the MAD
// common header at byte 24 of every MAD of a class that uses it (SA, IBA 15.2.1):
//
//	byte 24:     RMPPVersion
//	byte 25:     RMPPType (DATA, ACK, STOP, ABORT)
//	byte 26:     RRespTime(5) RMPPFlags(3): Last(bit 2) First(bit 1) Active(bit 0)
//	byte 27:     RMPPStatus
//	bytes 28-31: Data1: SegmentNumber (DATA, ACK)
//	bytes 32-35: Data2: PayloadLength (DATA) or NewWindowLast (ACK)
const (
	RMPPHeaderOffset = MADHeaderLen
	RMPPHeaderLen    = 12
	// RMPPSegmentLen is the RMPP payload of one segment: everything after the RMPP
	// header, class header included (IBA 13.6.2.3; Linux's IB_MGMT_RMPP_DATA).
	RMPPSegmentLen = MADLen - RMPPHeaderOffset - RMPPHeaderLen

	// RMPPVersion1 is the only RMPP version (IBA 13.6.2.1).
	RMPPVersion1 = 1
	// RMPPNoRespTime in RRespTime means the receiver gives no response time.
	RMPPNoRespTime = 0x1F
)

// RMPPType is the RMPP packet type (IBA 13.6.2.1).
type RMPPType uint8

const (
	RMPPTypeNone  RMPPType = 0
	RMPPTypeData  RMPPType = 1
	RMPPTypeAck   RMPPType = 2
	RMPPTypeStop  RMPPType = 3
	RMPPTypeAbort RMPPType = 4
)

func (t RMPPType) String() string {
	switch t {
	case RMPPTypeNone:
		return "none"
	case RMPPTypeData:
		return "DATA"
	case RMPPTypeAck:
		return "ACK"
	case RMPPTypeStop:
		return "STOP"
	case RMPPTypeAbort:
		return "ABORT"
	}
	return "RMPPType(" + rmppItoa(int(t)) + ")"
}

func rmppItoa(v int) string {
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return string(b[i:])
}

// RMPP flags (IBA 13.6.2.1).
const (
	RMPPFlagActive = 0x01
	RMPPFlagFirst  = 0x02
	RMPPFlagLast   = 0x04
)

// RMPP status codes (IBA 13.6.2.2, Table 171).
const (
	RMPPStatusOK             = 0
	RMPPStatusResources      = 1   // resources exhausted (STOP)
	RMPPStatusTimeTooLong    = 118 // total time too long (ABORT)
	RMPPStatusBadLength      = 119 // inconsistent Last and PayloadLength
	RMPPStatusBadSegment     = 120 // inconsistent First and SegmentNumber
	RMPPStatusBadType        = 121 // illegal RMPPType
	RMPPStatusWindowTooSmall = 122 // NewWindowLast too small
	RMPPStatusSegmentTooBig  = 123 // SegmentNumber too big
	RMPPStatusIllegalStatus  = 124
	RMPPStatusBadVersion     = 125 // unsupported version
	RMPPStatusTooManyRetries = 126
	RMPPStatusUnspecified    = 127
)

// RMPPHeader is a view of the 12-byte RMPP header (IBA 13.6.2.1); take it from a MAD
// with RMPPOf.
type RMPPHeader []byte

// RMPPOf returns the RMPP header of a MAD.
func RMPPOf(m MAD) RMPPHeader {
	return RMPPHeader(m[RMPPHeaderOffset : RMPPHeaderOffset+RMPPHeaderLen])
}

// Version returns RMPPVersion; 0 means the MAD does not use RMPP.
func (h RMPPHeader) Version() uint8 { return h[0] }

// Type returns RMPPType.
func (h RMPPHeader) Type() RMPPType { return RMPPType(h[1]) }

// RespTime returns RRespTime (5 bits).
func (h RMPPHeader) RespTime() uint8 { return h[2] >> 3 }

// Flags returns the three RMPPFlags bits.
func (h RMPPHeader) Flags() uint8 { return h[2] & 0x07 }

// Active reports whether the RMPP Active flag is set: the MAD is part of an RMPP
// transfer.
func (h RMPPHeader) Active() bool { return h[2]&RMPPFlagActive != 0 }

// First reports the First flag (first DATA segment).
func (h RMPPHeader) First() bool { return h[2]&RMPPFlagFirst != 0 }

// Last reports the Last flag (last DATA segment).
func (h RMPPHeader) Last() bool { return h[2]&RMPPFlagLast != 0 }

// Status returns RMPPStatus.
func (h RMPPHeader) Status() uint8 { return h[3] }

// SegmentNumber returns Data1 as the segment number (DATA and ACK; 1-based).
func (h RMPPHeader) SegmentNumber() uint32 { return binary.BigEndian.Uint32(h[4:]) }

// PayloadLength returns Data2 of a DATA packet: in the first segment the total payload
// of the message, in the last the payload of that segment, else 0 (IBA 13.6.2.3).
func (h RMPPHeader) PayloadLength() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// NewWindowLast returns Data2 of an ACK: the last segment the receiver accepts next.
func (h RMPPHeader) NewWindowLast() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SetVersion sets RMPPVersion.
func (h RMPPHeader) SetVersion(v uint8) { h[0] = v }

// SetType sets RMPPType.
func (h RMPPHeader) SetType(t RMPPType) { h[1] = uint8(t) }

// SetRespTime sets RRespTime, keeping the flags.
func (h RMPPHeader) SetRespTime(v uint8) { h[2] = v<<3 | h[2]&0x07 }

// SetFlags sets the three flag bits, keeping RRespTime.
func (h RMPPHeader) SetFlags(f uint8) { h[2] = h[2]&^0x07 | f&0x07 }

// SetStatus sets RMPPStatus.
func (h RMPPHeader) SetStatus(v uint8) { h[3] = v }

// SetSegmentNumber sets Data1.
func (h RMPPHeader) SetSegmentNumber(v uint32) { binary.BigEndian.PutUint32(h[4:], v) }

// SetPayloadLength sets Data2 of a DATA packet.
func (h RMPPHeader) SetPayloadLength(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// SetNewWindowLast sets Data2 of an ACK.
func (h RMPPHeader) SetNewWindowLast(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// RMPPSegments returns how many segments carry n bytes of class data when each segment
// holds per bytes of it (200 for the SA); a message with no data still takes one.
func RMPPSegments(n, per int) int {
	if n <= 0 {
		return 1
	}
	return (n + per - 1) / per
}

// RMPPPayloadLengths returns the PayloadLength values of the first and the last DATA
// segment of a message of n data bytes in segments of per data bytes after a class
// header of hdr bytes (the part of RMPPSegmentLen before the data: 20 for the SA). Like
// Linux's RMPP every segment's class header counts: first = segments × hdr + n, last =
// hdr + the data in the last segment.
func RMPPPayloadLengths(n, per, hdr int) (first, last uint32) {
	segs := RMPPSegments(n, per)
	lastData := n - (segs-1)*per
	if lastData < 0 {
		lastData = 0
	}
	return uint32(segs*hdr + n), uint32(hdr + lastData)
}
