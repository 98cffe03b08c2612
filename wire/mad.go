package wire

import (
	"encoding/binary"
	"errors"
)

// MADLen is the size of every MAD (IBA 13.4.1).
const MADLen = 256

// MAD common header layout (IBA 13.4.2,):
//
//	byte 0:      BaseVersion
//	byte 1:      MgmtClass
//	byte 2:      ClassVersion
//	byte 3:      R(1) Method(7)
//	bytes 4-5:   Status
//	bytes 6-7:   ClassSpecific
//	bytes 8-15:  TransactionID
//	bytes 16-17: AttributeID
//	bytes 18-19: Reserved
//	bytes 20-23: AttributeModifier
//	bytes 24-255: Data
const (
	MADHeaderLen = 24
	MADDataLen   = MADLen - MADHeaderLen

	// MADBaseVersion is the only base version defined (IBA 13.4.2).
	MADBaseVersion = 1
)

// MAD is a management datagram (IBA 13.4), a view over 256 bytes.
type MAD []byte

// MAD errors returned by ParseMAD.
var (
	ErrMADLen     = errors.New("wire: MAD is not 256 bytes")
	ErrMADVersion = errors.New("wire: unsupported MAD base version")
)

// ParseMAD checks that b is one MAD (exactly MADLen bytes, base version 1,
// IBA 13.4.2) and returns it as a view. It does not allocate.
func ParseMAD(b []byte) (MAD, error) {
	if len(b) != MADLen {
		return nil, ErrMADLen
	}
	m := MAD(b)
	if m.BaseVersion() != MADBaseVersion {
		return nil, ErrMADVersion
	}
	return m, nil
}

// BaseVersion returns the MAD base version (IBA 13.4.2).
func (m MAD) BaseVersion() uint8 { return m[0] }

// MgmtClass returns the management class (IBA 13.4.4).
func (m MAD) MgmtClass() uint8 { return m[1] }

// ClassVersion returns the class version.
func (m MAD) ClassVersion() uint8 { return m[2] }

// Method returns the method (the low seven bits and the R bit, as one
// byte, so that responses compare equal to MethodGetResp etc.).
func (m MAD) Method() uint8 { return m[3] }

// IsResponse reports whether the R bit of the method is set.
func (m MAD) IsResponse() bool { return m[3]&MethodResponse != 0 }

// Status returns the 16-bit status (IBA 13.4.7).
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[4:]) }

// ClassSpecific returns the class-specific field.
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[6:]) }

// TID returns the transaction ID (IBA 13.4.6).
func (m MAD) TID() uint64 { return binary.BigEndian.Uint64(m[8:]) }

// AttrID returns the attribute ID.
func (m MAD) AttrID() uint16 { return binary.BigEndian.Uint16(m[16:]) }

// AttrMod returns the attribute modifier.
func (m MAD) AttrMod() uint32 { return binary.BigEndian.Uint32(m[20:]) }

// Data returns the 232 bytes after the common header.
func (m MAD) Data() []byte { return m[MADHeaderLen:MADLen] }

// SetBaseVersion sets the base version.
func (m MAD) SetBaseVersion(v uint8) { m[0] = v }

// SetMgmtClass sets the management class.
func (m MAD) SetMgmtClass(v uint8) { m[1] = v }

// SetClassVersion sets the class version.
func (m MAD) SetClassVersion(v uint8) { m[2] = v }

// SetMethod sets the method byte (R bit included).
func (m MAD) SetMethod(v uint8) { m[3] = v }

// SetStatus sets the status.
func (m MAD) SetStatus(v uint16) { binary.BigEndian.PutUint16(m[4:], v) }

// SetClassSpecific sets the class-specific field.
func (m MAD) SetClassSpecific(v uint16) { binary.BigEndian.PutUint16(m[6:], v) }

// SetTID sets the transaction ID.
func (m MAD) SetTID(v uint64) { binary.BigEndian.PutUint64(m[8:], v) }

// SetAttrID sets the attribute ID and clears the reserved field after it.
func (m MAD) SetAttrID(v uint16) {
	binary.BigEndian.PutUint16(m[16:], v)
	m[18], m[19] = 0, 0
}

// SetAttrMod sets the attribute modifier.
func (m MAD) SetAttrMod(v uint32) { binary.BigEndian.PutUint32(m[20:], v) }

// Management classes (IBA 13.4.4).
const (
	MgmtClassSubnLID      = 0x01 // subnet management, LID routed
	MgmtClassSubnAdm      = 0x03 // subnet administration
	MgmtClassPerfMgt      = 0x04 // performance management
	MgmtClassBM           = 0x05 // baseboard management
	MgmtClassDevMgt       = 0x06 // device management
	MgmtClassCM           = 0x07 // communication management
	MgmtClassSNMP         = 0x08 // SNMP tunneling
	MgmtClassSubnDirected = 0x81 // subnet management, directed route
)

// Class versions used by the classes above.
const (
	ClassVersionSM   = 1 // IBA 14.2.1
	ClassVersionSA   = 2 // IBA 15.2.1
	ClassVersionPerf = 1 // IBA 16.1.1
	ClassVersionCM   = 2 // IBA 12.6.1
)

// Methods (IBA 13.4.5; SA methods IBA 15.2.2).
const (
	MethodResponse = 0x80 // the R bit

	MethodGet            = 0x01
	MethodSet            = 0x02
	MethodSend           = 0x03
	MethodTrap           = 0x05
	MethodReport         = 0x06
	MethodTrapRepress    = 0x07
	MethodGetTable       = 0x12
	MethodGetTraceTable  = 0x13
	MethodGetMulti       = 0x14
	MethodDelete         = 0x15
	MethodGetResp        = MethodGet | MethodResponse           // 0x81
	MethodReportResp     = MethodReport | MethodResponse        // 0x86
	MethodGetTableResp   = MethodGetTable | MethodResponse      // 0x92
	MethodGetMultiResp   = MethodGetMulti | MethodResponse      // 0x94
	MethodDeleteResp     = MethodDelete | MethodResponse        // 0x95
	MethodGetTraceTblRsp = MethodGetTraceTable | MethodResponse // 0x93
)

// Common MAD status bits (IBA 13.4.7). Bits 2-4 hold an
// invalid-field code; bits 8-14 are class specific.
const (
	StatusBusy             = 0x0001
	StatusRedirect         = 0x0002
	StatusInvalidFieldMask = 0x001c

	StatusBadVersion          = 1 << 2 // class or base version not supported
	StatusMethodNotSupported  = 2 << 2
	StatusMethodAttrNotSupp   = 3 << 2 // method/attribute combination
	StatusInvalidAttrOrModVal = 7 << 2 // invalid value in attribute or modifier

	StatusClassSpecificMask = 0x7f00
)

// Subnet management attribute IDs (IBA 14.2.5); ClassPortInfo,
// Notice and InformInfo are common to all classes (IBA 13.4.8).
const (
	AttrClassPortInfo            = 0x0001
	AttrNotice                   = 0x0002
	AttrInformInfo               = 0x0003
	AttrNodeDescription          = 0x0010
	AttrNodeInfo                 = 0x0011
	AttrSwitchInfo               = 0x0012
	AttrGUIDInfo                 = 0x0014
	AttrPortInfo                 = 0x0015
	AttrPKeyTable                = 0x0016
	AttrSLtoVLMappingTable       = 0x0017
	AttrVLArbitrationTable       = 0x0018
	AttrLinearForwardingTable    = 0x0019
	AttrRandomForwardingTable    = 0x001A
	AttrMulticastForwardingTable = 0x001B
	AttrSMInfo                   = 0x0020
	AttrVendorDiag               = 0x0030
	AttrLedInfo                  = 0x0031
)

// SMP layout (IBA 14.2.1). A LID-routed SMP has the common MAD
// header, M_Key at 24, 32 reserved bytes, 64 bytes of SMP data at 64 and
// 128 reserved bytes. A directed-route SMP replaces Status with
// D(1) Status(15), ClassSpecific with HopPointer and HopCount, and puts
// DrSLID and DrDLID at 32, the initial path at 128 and the return path at
// 192.
const (
	SMPDataOffset        = 64
	SMPDataLen           = 64
	SMPInitialPathOffset = 128
	SMPReturnPathOffset  = 192
	SMPPathLen           = 64
	SMPMaxHops           = 63 // IBA 14.2.2: at most 63 hops
)

// SMP is a subnet management packet (IBA 14.2.1), LID-routed
// (MgmtClassSubnLID) or directed-route (MgmtClassSubnDirected). The
// directed-route accessors are meaningful for the latter only.
type SMP []byte

// MAD returns the SMP as a MAD, for the common-header accessors.
func (s SMP) MAD() MAD { return MAD(s) }

// IsDirectedRoute reports whether the class is directed-route.
func (s SMP) IsDirectedRoute() bool { return s[1] == MgmtClassSubnDirected }

// D returns the direction bit of a directed-route SMP (IBA 14.2.2):
// false outbound, true returning.
func (s SMP) D() bool { return s[4]&0x80 != 0 }

// DRStatus returns the 15-bit status of a directed-route SMP.
func (s SMP) DRStatus() uint16 { return binary.BigEndian.Uint16(s[4:]) & 0x7fff }

// HopPointer returns the hop pointer of a directed-route SMP.
func (s SMP) HopPointer() uint8 { return s[6] }

// HopCount returns the hop count of a directed-route SMP.
func (s SMP) HopCount() uint8 { return s[7] }

// MKey returns the management key (IBA 14.2.4).
func (s SMP) MKey() uint64 { return binary.BigEndian.Uint64(s[24:]) }

// DrSLID returns the directed-route source LID.
func (s SMP) DrSLID() uint16 { return binary.BigEndian.Uint16(s[32:]) }

// DrDLID returns the directed-route destination LID.
func (s SMP) DrDLID() uint16 { return binary.BigEndian.Uint16(s[34:]) }

// SMPData returns the 64 bytes of SMP data.
func (s SMP) SMPData() []byte { return s[SMPDataOffset : SMPDataOffset+SMPDataLen] }

// InitialPath returns the 64-byte initial path of a directed-route SMP;
// byte i is the port to leave by at hop i (byte 0 unused).
func (s SMP) InitialPath() []byte {
	return s[SMPInitialPathOffset : SMPInitialPathOffset+SMPPathLen]
}

// ReturnPath returns the 64-byte return path of a directed-route SMP.
func (s SMP) ReturnPath() []byte {
	return s[SMPReturnPathOffset : SMPReturnPathOffset+SMPPathLen]
}

// SetD sets the direction bit.
func (s SMP) SetD(v bool) { s[4] = setBit(s[4], 0x80, v) }

// SetDRStatus sets the 15-bit status, keeping the D bit.
func (s SMP) SetDRStatus(v uint16) {
	binary.BigEndian.PutUint16(s[4:], uint16(s[4]&0x80)<<8|v&0x7fff)
}

// SetHopPointer sets the hop pointer.
func (s SMP) SetHopPointer(v uint8) { s[6] = v }

// SetHopCount sets the hop count.
func (s SMP) SetHopCount(v uint8) { s[7] = v }

// SetMKey sets the management key.
func (s SMP) SetMKey(v uint64) { binary.BigEndian.PutUint64(s[24:], v) }

// SetDrSLID sets the directed-route source LID.
func (s SMP) SetDrSLID(v uint16) { binary.BigEndian.PutUint16(s[32:], v) }

// SetDrDLID sets the directed-route destination LID.
func (s SMP) SetDrDLID(v uint16) { binary.BigEndian.PutUint16(s[34:], v) }
