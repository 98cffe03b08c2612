package wire

import "encoding/binary"

// LAP and APR (IBA 12.8): loading an alternate path into an established connection. The
// active side proposes the path in a LAP (Load Alternate Path); the passive side loads it
// into its QP and answers with an APR (Alternate Path Response) whose status says whether
// it did (IBA 12.8.2, Table 117).

// LAP and APR sizes (IBA 12.8.1, 12.8.2).
const (
	CMLAPPrivateLen = 168
	CMAPRPrivateLen = 148
	CMAPRInfoLen    = 72
)

// APR status (IBA 12.8.2, Table 117; Linux's enum ib_cm_apr_status).
const (
	APRSuccess           = 0 // the alternate path was loaded
	APRInvalidCommID     = 1
	APRUnsupported       = 2 // alternate paths not supported
	APRRejected          = 3
	APRRedirect          = 4
	APRIsCurrent         = 5 // the path is the current primary path
	APRInvalidQPN        = 6
	APRInvalidLID        = 7
	APRInvalidGID        = 8
	APRInvalidFlowLabel  = 9
	APRInvalidTClass     = 10
	APRInvalidHopLimit   = 11
	APRInvalidPacketRate = 12
	APRInvalidSL         = 13
)

// CMLAP is a LAP message (IBA 12.8.1, Table 115).
type CMLAP []byte

func (m CMLAP) LocalCommID() uint32      { return cmU32(m, 0) }
func (m CMLAP) SetLocalCommID(v uint32)  { cmPutU32(m, 0, v) }
func (m CMLAP) RemoteCommID() uint32     { return cmU32(m, 4) }
func (m CMLAP) SetRemoteCommID(v uint32) { cmPutU32(m, 4, v) }
func (m CMLAP) RemoteQPN() uint32        { return cmU24(m, 12) }
func (m CMLAP) SetRemoteQPN(v uint32)    { cmPutU24(m, 12, v) }

// RemoteCMResponseTimeout is the 5 bits after the remote QPN (IBA 12.8.1).
func (m CMLAP) RemoteCMResponseTimeout() uint8     { return cmBits(m, 15, 0, 5) }
func (m CMLAP) SetRemoteCMResponseTimeout(v uint8) { cmPutBits(m, 15, 0, 5, v) }

// The alternate path, from the sender's view.
func (m CMLAP) AltLocalLID() uint16        { return cmU16(m, 20) }
func (m CMLAP) SetAltLocalLID(v uint16)    { cmPutU16(m, 20, v) }
func (m CMLAP) AltRemoteLID() uint16       { return cmU16(m, 22) }
func (m CMLAP) SetAltRemoteLID(v uint16)   { cmPutU16(m, 22, v) }
func (m CMLAP) AltLocalGID() GID           { return GID(m[cmOff+24 : cmOff+40]) }
func (m CMLAP) SetAltLocalGID(g GID)       { copy(m[cmOff+24:cmOff+40], g[:]) }
func (m CMLAP) AltRemoteGID() GID          { return GID(m[cmOff+40 : cmOff+56]) }
func (m CMLAP) SetAltRemoteGID(g GID)      { copy(m[cmOff+40:cmOff+56], g[:]) }
func (m CMLAP) AltFlowLabel() uint32       { return cmU32(m, 56) >> 12 }
func (m CMLAP) AltTrafficClass() uint8     { return m[cmOff+59] }
func (m CMLAP) SetAltTrafficClass(v uint8) { m[cmOff+59] = v }
func (m CMLAP) AltHopLimit() uint8         { return m[cmOff+60] }
func (m CMLAP) SetAltHopLimit(v uint8)     { m[cmOff+60] = v }
func (m CMLAP) AltPacketRate() uint8       { return m[cmOff+61] & 0x3F }
func (m CMLAP) SetAltPacketRate(v uint8)   { m[cmOff+61] = v & 0x3F }
func (m CMLAP) AltSL() uint8               { return m[cmOff+62] >> 4 }
func (m CMLAP) SetAltSL(v uint8)           { m[cmOff+62] = m[cmOff+62]&0x0F | v<<4 }
func (m CMLAP) AltSubnetLocal() bool       { return m[cmOff+62]&0x08 != 0 }
func (m CMLAP) AltLocalACKTimeout() uint8  { return m[cmOff+63] >> 3 }

// SetAltFlowLabel sets the 20-bit flow label (the traffic class byte is kept).
func (m CMLAP) SetAltFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(m[cmOff+56:])
	binary.BigEndian.PutUint32(m[cmOff+56:], v<<12|w&0xFFF)
}

// SetAltSubnetLocal sets the SubnetLocal bit.
func (m CMLAP) SetAltSubnetLocal(v bool) {
	m[cmOff+62] &^= 0x08
	if v {
		m[cmOff+62] |= 0x08
	}
}

// SetAltLocalACKTimeout sets the 5-bit local ACK timeout of the alternate path.
func (m CMLAP) SetAltLocalACKTimeout(v uint8) { m[cmOff+63] = v << 3 }

// Private is the LAP's private data.
func (m CMLAP) Private() []byte { return m[cmOff+64 : cmOff+64+CMLAPPrivateLen] }

// CMAPR is an APR message (IBA 12.8.2, Table 116).
type CMAPR []byte

func (m CMAPR) LocalCommID() uint32      { return cmU32(m, 0) }
func (m CMAPR) SetLocalCommID(v uint32)  { cmPutU32(m, 0, v) }
func (m CMAPR) RemoteCommID() uint32     { return cmU32(m, 4) }
func (m CMAPR) SetRemoteCommID(v uint32) { cmPutU32(m, 4, v) }
func (m CMAPR) InfoLength() uint8        { return m[cmOff+8] }
func (m CMAPR) Status() uint8            { return m[cmOff+9] }
func (m CMAPR) SetStatus(v uint8)        { m[cmOff+9] = v }

// Info is the additional information, cut to its length.
func (m CMAPR) Info() []byte { return m[cmOff+12 : cmOff+12+int(min(m.InfoLength(), CMAPRInfoLen))] }

// SetInfo copies up to 72 bytes of additional information and sets their length.
func (m CMAPR) SetInfo(b []byte) {
	n := copy(m[cmOff+12:cmOff+12+CMAPRInfoLen], b)
	m[cmOff+8] = byte(n)
}

// Private is the APR's private data.
func (m CMAPR) Private() []byte { return m[cmOff+84 : cmOff+84+CMAPRPrivateLen] }
