package wire

import "encoding/binary"

// The SA records of the SM's view of the fabric's tables (IBA 15.2.5), as saquery reads
// them (-x, SWIR, LFTR, PKTR, GIR). Component-mask bits as OpenSM's IB_*_COMPMASK_*.

// LinkRecord is a view of a LinkRecord (IBA 15.2.5.13, 6 bytes, stride 8): one direction
// of a link, FromLID(16) FromPort(8) ToPort(8) ToLID(16). A switch port's LID is the
// switch's.
type LinkRecord []byte

const (
	LRCompFromLID  = 1 << 0
	LRCompFromPort = 1 << 1
	LRCompToPort   = 1 << 2
	LRCompToLID    = 1 << 3
)

func (r LinkRecord) FromLID() uint16     { return binary.BigEndian.Uint16(r[0:]) }
func (r LinkRecord) FromPort() uint8     { return r[2] }
func (r LinkRecord) ToPort() uint8       { return r[3] }
func (r LinkRecord) ToLID() uint16       { return binary.BigEndian.Uint16(r[4:]) }
func (r LinkRecord) SetFromLID(v uint16) { binary.BigEndian.PutUint16(r[0:], v) }
func (r LinkRecord) SetFromPort(v uint8) { r[2] = v }
func (r LinkRecord) SetToPort(v uint8)   { r[3] = v }
func (r LinkRecord) SetToLID(v uint16)   { binary.BigEndian.PutUint16(r[4:], v) }

// SwitchInfoRecord is a view of a SwitchInfoRecord (IBA 15.2.5.5, 24 bytes): LID(16)
// Reserved(16) and the 20 bytes of SwitchInfo (IBA 14.2.5.4).
type SwitchInfoRecord []byte

const SWIRCompLID = 1 << 0

func (r SwitchInfoRecord) LID() uint16            { return binary.BigEndian.Uint16(r[0:]) }
func (r SwitchInfoRecord) SetLID(v uint16)        { binary.BigEndian.PutUint16(r[0:], v) }
func (r SwitchInfoRecord) SwitchInfo() SwitchInfo { return SwitchInfo(r[4 : 4+SwitchInfoLen]) }

// LFTRecord is a view of a LinearForwardingTableRecord (IBA 15.2.5.6, 72 bytes): LID(16)
// BlockNum(16) Reserved(32) and one 64-entry block of the switch's LFT.
type LFTRecord []byte

const (
	LFTRCompLID   = 1 << 0
	LFTRCompBlock = 1 << 1
)

func (r LFTRecord) LID() uint16       { return binary.BigEndian.Uint16(r[0:]) }
func (r LFTRecord) Block() uint16     { return binary.BigEndian.Uint16(r[2:]) }
func (r LFTRecord) LFT() []byte       { return r[8 : 8+64] }
func (r LFTRecord) SetLID(v uint16)   { binary.BigEndian.PutUint16(r[0:], v) }
func (r LFTRecord) SetBlock(v uint16) { binary.BigEndian.PutUint16(r[2:], v) }

// MFTRecord is a view of a MulticastForwardingTableRecord (IBA 15.2.5.8, 72 bytes):
// LID(16), Position(4) BlockNum(12), Reserved(32) and one block of 32 MLIDs' port masks
// for ports 16·Position … 16·Position+15.
type MFTRecord []byte

const (
	MFTRCompLID      = 1 << 0
	MFTRCompPosition = 1 << 1
	MFTRCompBlock    = 1 << 3
)

func (r MFTRecord) LID() uint16       { return binary.BigEndian.Uint16(r[0:]) }
func (r MFTRecord) Position() uint8   { return r[2] >> 4 }
func (r MFTRecord) Block() uint16     { return binary.BigEndian.Uint16(r[2:]) & 0x0FFF }
func (r MFTRecord) Mask(i int) uint16 { return binary.BigEndian.Uint16(r[8+2*i:]) }
func (r MFTRecord) SetLID(v uint16)   { binary.BigEndian.PutUint16(r[0:], v) }
func (r MFTRecord) SetPositionBlock(pos uint8, blk uint16) {
	binary.BigEndian.PutUint16(r[2:], uint16(pos)<<12|blk&0x0FFF)
}
func (r MFTRecord) SetMask(i int, v uint16) { binary.BigEndian.PutUint16(r[8+2*i:], v) }

// PKeyTableRecord is a view of a P_KeyTableRecord (IBA 15.2.5.11, 72 bytes): LID(16)
// BlockNum(16) PortNum(8) Reserved(24) and one 32-entry block of the port's P_Key
// table. A CA port's record has its own LID and PortNum 0 (reserved); a switch port's,
// the switch's LID and the port's number.
type PKeyTableRecord []byte

const (
	PKTRCompLID   = 1 << 0
	PKTRCompBlock = 1 << 1
	PKTRCompPort  = 1 << 2
)

func (r PKeyTableRecord) LID() uint16             { return binary.BigEndian.Uint16(r[0:]) }
func (r PKeyTableRecord) Block() uint16           { return binary.BigEndian.Uint16(r[2:]) }
func (r PKeyTableRecord) Port() uint8             { return r[4] }
func (r PKeyTableRecord) PKey(i int) uint16       { return binary.BigEndian.Uint16(r[8+2*i:]) }
func (r PKeyTableRecord) SetLID(v uint16)         { binary.BigEndian.PutUint16(r[0:], v) }
func (r PKeyTableRecord) SetBlock(v uint16)       { binary.BigEndian.PutUint16(r[2:], v) }
func (r PKeyTableRecord) SetPort(v uint8)         { r[4] = v }
func (r PKeyTableRecord) SetPKey(i int, v uint16) { binary.BigEndian.PutUint16(r[8+2*i:], v) }

// GUIDInfoRecord is a view of a GUIDInfoRecord (IBA 15.2.5.18, 72 bytes): LID(16)
// BlockNum(8) Reserved(40) and one block of eight port GUIDs (IBA 14.2.5.5).
type GUIDInfoRecord []byte

const (
	GIRCompLID   = 1 << 0
	GIRCompBlock = 1 << 1
)

func (r GUIDInfoRecord) LID() uint16             { return binary.BigEndian.Uint16(r[0:]) }
func (r GUIDInfoRecord) Block() uint8            { return r[2] }
func (r GUIDInfoRecord) GUID(i int) uint64       { return binary.BigEndian.Uint64(r[8+8*i:]) }
func (r GUIDInfoRecord) SetLID(v uint16)         { binary.BigEndian.PutUint16(r[0:], v) }
func (r GUIDInfoRecord) SetBlock(v uint8)        { r[2] = v }
func (r GUIDInfoRecord) SetGUID(i int, v uint64) { binary.BigEndian.PutUint64(r[8+8*i:], v) }

// SMInfoRecord is a view of an SMInfoRecord (IBA 15.2.5.10, 25 bytes, stride 32): LID(16)
// Reserved(16) and SMInfo (IBA 14.2.5.13): GUID, SM_Key, ActCount, Priority(4) SMState(4).
type SMInfoRecord []byte

const (
	SMIRCompLID      = 1 << 0
	SMIRCompGUID     = 1 << 1
	SMIRCompSMKey    = 1 << 2
	SMIRCompActCount = 1 << 3
)

func (r SMInfoRecord) LID() uint16      { return binary.BigEndian.Uint16(r[0:]) }
func (r SMInfoRecord) SetLID(v uint16)  { binary.BigEndian.PutUint16(r[0:], v) }
func (r SMInfoRecord) SMInfo() []byte   { return r[4:SMInfoRecordLen] }
func (r SMInfoRecord) GUID() uint64     { return binary.BigEndian.Uint64(r[4:]) }
func (r SMInfoRecord) ActCount() uint32 { return binary.BigEndian.Uint32(r[20:]) }
func (r SMInfoRecord) Priority() uint8  { return r[24] >> 4 }
func (r SMInfoRecord) SMState() uint8   { return r[24] & 0x0F }
