package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// smField describes one attribute field by its IBA bit offset (bit 0 is
// the most significant bit of byte 0) and width, as libibmad's fields.c
// lists them, with the accessor pair under test.
type smField struct {
	name   string
	off, w int
	get    func([]byte) uint64
	set    func([]byte, uint64)
}

func smFld[T ~[]byte, V uint8 | uint16 | uint32 | uint64](name string, off, w int, get func(T) V, set func(T, V)) smField {
	return smField{name, off, w,
		func(b []byte) uint64 { return uint64(get(T(b))) },
		func(b []byte, v uint64) { set(T(b), V(v)) }}
}

func smFlag[T ~[]byte](name string, off int, get func(T) bool, set func(T, bool)) smField {
	return smField{name, off, 1,
		func(b []byte) uint64 {
			if get(T(b)) {
				return 1
			}
			return 0
		},
		func(b []byte, v uint64) { set(T(b), v != 0) }}
}

// smRefBit reads bit i (IBA numbering) one bit at a time, independently of
// smGetBits.
func smRefBit(b []byte, i int) uint64 { return uint64(b[i/8]>>(7-i%8)) & 1 }

func smRefBits(b []byte, off, w int) uint64 {
	var v uint64
	for i := off; i < off+w; i++ {
		v = v<<1 | smRefBit(b, i)
	}
	return v
}

// smCheckFields checks, for every field, set-then-get of zero, all ones
// and a mixed pattern, that the value lands exactly at the documented bit
// offset, and that no neighbouring bit moves (all-ones buffer, field set to
// zero; all-zeros buffer, field set to ones).
func smCheckFields(t *testing.T, size int, fields []smField) {
	t.Helper()
	for _, f := range fields {
		max := uint64(1)<<f.w - 1
		if f.w == 64 {
			max = ^uint64(0)
		}
		for _, fill := range []byte{0x00, 0xff} {
			for _, v := range []uint64{0, max, 0xa5c3_96e1_5a3c_691e & max, 1} {
				b := bytes.Repeat([]byte{fill}, size)
				f.set(b, v)
				if got := f.get(b); got != v {
					t.Errorf("%s: fill %#x set %#x get %#x", f.name, fill, v, got)
				}
				if got := smRefBits(b, f.off, f.w); got != v {
					t.Errorf("%s: set %#x, bits %d+%d hold %#x", f.name, v, f.off, f.w, got)
				}
				for i := 0; i < size*8; i++ {
					if (i < f.off || i >= f.off+f.w) && smRefBit(b, i) != uint64(fill&1) {
						t.Errorf("%s: setting %#x on fill %#x changed bit %d", f.name, v, fill, i)
						break
					}
				}
			}
		}
	}
}

func TestSMBits(t *testing.T) {
	b := make([]byte, 8)
	for off := 0; off < 32; off++ {
		for w := 1; w <= 32 && off+w <= 64; w++ {
			clear(b)
			v := uint32(0xdeadbeef) & (1<<w - 1)
			smSetBits(b, off, w, v)
			if smGetBits(b, off, w) != v || smRefBits(b, off, w) != uint64(v) {
				t.Fatalf("off %d w %d: % x", off, w, b)
			}
		}
	}
}

// Field offsets from libibmad fields.c (IB_NODE_*_F), IBA 14.2.5.3.
func TestNodeInfoFields(t *testing.T) {
	smCheckFields(t, NodeInfoLen, []smField{
		smFld("BaseVersion", 0, 8, NodeInfo.BaseVersion, NodeInfo.SetBaseVersion),
		smFld("ClassVersion", 8, 8, NodeInfo.ClassVersion, NodeInfo.SetClassVersion),
		smFld("NodeType", 16, 8, NodeInfo.NodeType, NodeInfo.SetNodeType),
		smFld("NumPorts", 24, 8, NodeInfo.NumPorts, NodeInfo.SetNumPorts),
		smFld("SystemImageGUID", 32, 64, NodeInfo.SystemImageGUID, NodeInfo.SetSystemImageGUID),
		smFld("NodeGUID", 96, 64, NodeInfo.NodeGUID, NodeInfo.SetNodeGUID),
		smFld("PortGUID", 160, 64, NodeInfo.PortGUID, NodeInfo.SetPortGUID),
		smFld("PartitionCap", 224, 16, NodeInfo.PartitionCap, NodeInfo.SetPartitionCap),
		smFld("DeviceID", 240, 16, NodeInfo.DeviceID, NodeInfo.SetDeviceID),
		smFld("Revision", 256, 32, NodeInfo.Revision, NodeInfo.SetRevision),
		smFld("LocalPortNum", 288, 8, NodeInfo.LocalPortNum, NodeInfo.SetLocalPortNum),
		smFld("VendorID", 296, 24, NodeInfo.VendorID, NodeInfo.SetVendorID),
	})
}

// smHex decodes a hex string or fails the test.
func smHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The NodeInfo ibsim returned to opensm for its own CA
// (../shared/data/ibsim/opensm-startup.seq line 6, GET_NODEINFO; the
// control message carries the 40-byte NodeInfo), checked against what
// smpquery printed for the same node (ibsim-smp-answers.txt, "nodeinfo 0,1").
func TestNodeInfoVector(t *testing.T) {
	raw := smHex(t, "0101010200000000001000000000000000100000000000000010000000400000000000a101000000")
	n := NodeInfo(raw)
	if n.BaseVersion() != 1 || n.ClassVersion() != 1 || n.NodeType() != NodeTypeCA || n.NumPorts() != 2 ||
		n.SystemImageGUID() != 0x100000 || n.NodeGUID() != 0x100000 || n.PortGUID() != 0x100000 ||
		n.PartitionCap() != 64 || n.DeviceID() != 0 || n.Revision() != 0xa1 || n.LocalPortNum() != 1 ||
		n.VendorID() != 0 {
		t.Errorf("decoded %+v", []any{n.BaseVersion(), n.ClassVersion(), n.NodeType(), n.NumPorts(),
			n.SystemImageGUID(), n.NodeGUID(), n.PortGUID(), n.PartitionCap(), n.DeviceID(),
			n.Revision(), n.LocalPortNum(), n.VendorID()})
	}
	// Rebuild it from the printed values (the SMP answer has PortGUID
	// 0x100001: CA GUID + port, ibsim-protocol.md §4).
	b := NodeInfo(make([]byte, NodeInfoLen))
	b.SetBaseVersion(1)
	b.SetClassVersion(1)
	b.SetNodeType(NodeTypeCA)
	b.SetNumPorts(2)
	b.SetSystemImageGUID(0x100000)
	b.SetNodeGUID(0x100000)
	b.SetPortGUID(0x100000)
	b.SetPartitionCap(64)
	b.SetRevision(0xa1)
	b.SetLocalPortNum(1)
	if !bytes.Equal(b, raw) {
		t.Errorf("rebuilt\n% x\nwant\n% x", []byte(b), raw)
	}
	// "nodeinfo 0": the switch.
	b.SetNodeType(NodeTypeSwitch)
	b.SetNumPorts(8)
	b.SetSystemImageGUID(0x200000)
	b.SetNodeGUID(0x200000)
	b.SetPortGUID(0x200000)
	b.SetPartitionCap(8)
	b.SetLocalPortNum(0)
	want := smHex(t, "0101020800000000002000000000000000200000000000000020000000080000000000a100000000")
	if !bytes.Equal(b, want) {
		t.Errorf("switch NodeInfo\n% x\nwant\n% x", []byte(b), want)
	}
}

func TestNodeDescription(t *testing.T) {
	d := NodeDescription(bytes.Repeat([]byte{'x'}, NodeDescriptionLen))
	if d.String() != string(bytes.Repeat([]byte{'x'}, 64)) {
		t.Error("64 bytes without NUL")
	}
	d.SetString("Switch1")
	if d.String() != "Switch1" || !bytes.Equal(d[:8], []byte("Switch1\x00")) || d[63] != 0 {
		t.Errorf("got %q % x", d.String(), []byte(d))
	}
	d.SetString(string(bytes.Repeat([]byte{'y'}, 70)))
	if len(d.Text()) != 64 {
		t.Error("not truncated to 64")
	}
	d.SetString("")
	if d.String() != "" || !bytes.Equal(d, make([]byte, 64)) {
		t.Error("empty")
	}
	// A longer buffer (the whole SMP data area plus more) is viewed as 64.
	long := append(make([]byte, 64), 'z')
	if NodeDescription(long).String() != "" {
		t.Error("read past 64 bytes")
	}
}

// Offsets from fields.c (IB_SW_*_F), IBA 14.2.5.4.
func TestSwitchInfoFields(t *testing.T) {
	smCheckFields(t, SwitchInfoLen, []smField{
		smFld("LinearFDBCap", 0, 16, SwitchInfo.LinearFDBCap, SwitchInfo.SetLinearFDBCap),
		smFld("RandomFDBCap", 16, 16, SwitchInfo.RandomFDBCap, SwitchInfo.SetRandomFDBCap),
		smFld("MulticastFDBCap", 32, 16, SwitchInfo.MulticastFDBCap, SwitchInfo.SetMulticastFDBCap),
		smFld("LinearFDBTop", 48, 16, SwitchInfo.LinearFDBTop, SwitchInfo.SetLinearFDBTop),
		smFld("DefaultPort", 64, 8, SwitchInfo.DefaultPort, SwitchInfo.SetDefaultPort),
		smFld("DefaultMulticastPrimaryPort", 72, 8, SwitchInfo.DefaultMulticastPrimaryPort, SwitchInfo.SetDefaultMulticastPrimaryPort),
		smFld("DefaultMulticastNotPrimaryPort", 80, 8, SwitchInfo.DefaultMulticastNotPrimaryPort, SwitchInfo.SetDefaultMulticastNotPrimaryPort),
		smFld("LifeTimeValue", 88, 5, SwitchInfo.LifeTimeValue, SwitchInfo.SetLifeTimeValue),
		smFlag("PortStateChange", 93, SwitchInfo.PortStateChange, SwitchInfo.SetPortStateChange),
		smFld("OptimizedSLtoVLMappingProgramming", 94, 2, SwitchInfo.OptimizedSLtoVLMappingProgramming, SwitchInfo.SetOptimizedSLtoVLMappingProgramming),
		smFld("LIDsPerPort", 96, 16, SwitchInfo.LIDsPerPort, SwitchInfo.SetLIDsPerPort),
		smFld("PartitionEnforcementCap", 112, 16, SwitchInfo.PartitionEnforcementCap, SwitchInfo.SetPartitionEnforcementCap),
		smFlag("InboundEnforcementCap", 128, SwitchInfo.InboundEnforcementCap, SwitchInfo.SetInboundEnforcementCap),
		smFlag("OutboundEnforcementCap", 129, SwitchInfo.OutboundEnforcementCap, SwitchInfo.SetOutboundEnforcementCap),
		smFlag("FilterRawInboundCap", 130, SwitchInfo.FilterRawInboundCap, SwitchInfo.SetFilterRawInboundCap),
		smFlag("FilterRawOutboundCap", 131, SwitchInfo.FilterRawOutboundCap, SwitchInfo.SetFilterRawOutboundCap),
		smFlag("EnhancedPort0", 132, SwitchInfo.EnhancedPort0, SwitchInfo.SetEnhancedPort0),
		smFld("MulticastFDBTop", 144, 16, SwitchInfo.MulticastFDBTop, SwitchInfo.SetMulticastFDBTop),
	})
}

// SwitchInfo as smpquery printed it for ibsim's switch
// (ibsim-smp-answers.txt, "switchinfo 0"), encoded by hand.
func TestSwitchInfoVector(t *testing.T) {
	s := SwitchInfo(make([]byte, SwitchInfoLen))
	s.SetLinearFDBCap(30720)
	s.SetMulticastFDBCap(1024)
	s.SetPortStateChange(true)
	s.SetPartitionEnforcementCap(64)
	s.SetFilterRawInboundCap(true)
	s.SetFilterRawOutboundCap(true)
	want := smHex(t, "7800000004000000000000040000004030000000")
	if !bytes.Equal(s, want) {
		t.Fatalf("got\n% x\nwant\n% x", []byte(s), want)
	}
	if s.LinearFDBCap() != 30720 || s.MulticastFDBCap() != 1024 || !s.PortStateChange() || s.LifeTimeValue() != 0 ||
		s.PartitionEnforcementCap() != 64 || s.InboundEnforcementCap() || !s.FilterRawInboundCap() ||
		!s.FilterRawOutboundCap() || s.EnhancedPort0() || s.MulticastFDBTop() != 0 {
		t.Error("getters")
	}
	// opensm's Set: LifeTime 18 (its default) with PortStateChange written
	// as 1 to clear it.
	s.SetLifeTimeValue(18)
	if s[11] != 18<<3|1<<2 {
		t.Errorf("byte 11 = %#x", s[11])
	}
}

// Offsets from fields.c (IB_PORT_*_F and the CapabilityMask2 /
// LinkSpeedExt additions), IBA 14.2.5.6.
func TestPortInfoFields(t *testing.T) {
	smCheckFields(t, PortInfoLen, []smField{
		smFld("MKey", 0, 64, PortInfo.MKey, PortInfo.SetMKey),
		smFld("GIDPrefix", 64, 64, PortInfo.GIDPrefix, PortInfo.SetGIDPrefix),
		smFld("LID", 128, 16, PortInfo.LID, PortInfo.SetLID),
		smFld("MasterSMLID", 144, 16, PortInfo.MasterSMLID, PortInfo.SetMasterSMLID),
		smFld("CapabilityMask", 160, 32, PortInfo.CapabilityMask, PortInfo.SetCapabilityMask),
		smFld("DiagCode", 192, 16, PortInfo.DiagCode, PortInfo.SetDiagCode),
		smFld("MKeyLeasePeriod", 208, 16, PortInfo.MKeyLeasePeriod, PortInfo.SetMKeyLeasePeriod),
		smFld("LocalPortNum", 224, 8, PortInfo.LocalPortNum, PortInfo.SetLocalPortNum),
		smFld("LinkWidthEnabled", 232, 8, PortInfo.LinkWidthEnabled, PortInfo.SetLinkWidthEnabled),
		smFld("LinkWidthSupported", 240, 8, PortInfo.LinkWidthSupported, PortInfo.SetLinkWidthSupported),
		smFld("LinkWidthActive", 248, 8, PortInfo.LinkWidthActive, PortInfo.SetLinkWidthActive),
		smFld("LinkSpeedSupported", 256, 4, PortInfo.LinkSpeedSupported, PortInfo.SetLinkSpeedSupported),
		smFld("PortState", 260, 4, PortInfo.PortState, PortInfo.SetPortState),
		smFld("PortPhysicalState", 264, 4, PortInfo.PortPhysicalState, PortInfo.SetPortPhysicalState),
		smFld("LinkDownDefaultState", 268, 4, PortInfo.LinkDownDefaultState, PortInfo.SetLinkDownDefaultState),
		smFld("MKeyProtectBits", 272, 2, PortInfo.MKeyProtectBits, PortInfo.SetMKeyProtectBits),
		smFld("LMC", 277, 3, PortInfo.LMC, PortInfo.SetLMC),
		smFld("LinkSpeedActive", 280, 4, PortInfo.LinkSpeedActive, PortInfo.SetLinkSpeedActive),
		smFld("LinkSpeedEnabled", 284, 4, PortInfo.LinkSpeedEnabled, PortInfo.SetLinkSpeedEnabled),
		smFld("NeighborMTU", 288, 4, PortInfo.NeighborMTU, PortInfo.SetNeighborMTU),
		smFld("MasterSMSL", 292, 4, PortInfo.MasterSMSL, PortInfo.SetMasterSMSL),
		smFld("VLCap", 296, 4, PortInfo.VLCap, PortInfo.SetVLCap),
		smFld("InitType", 300, 4, PortInfo.InitType, PortInfo.SetInitType),
		smFld("VLHighLimit", 304, 8, PortInfo.VLHighLimit, PortInfo.SetVLHighLimit),
		smFld("VLArbitrationHighCap", 312, 8, PortInfo.VLArbitrationHighCap, PortInfo.SetVLArbitrationHighCap),
		smFld("VLArbitrationLowCap", 320, 8, PortInfo.VLArbitrationLowCap, PortInfo.SetVLArbitrationLowCap),
		smFld("InitTypeReply", 328, 4, PortInfo.InitTypeReply, PortInfo.SetInitTypeReply),
		smFld("MTUCap", 332, 4, PortInfo.MTUCap, PortInfo.SetMTUCap),
		smFld("VLStallCount", 336, 3, PortInfo.VLStallCount, PortInfo.SetVLStallCount),
		smFld("HOQLife", 339, 5, PortInfo.HOQLife, PortInfo.SetHOQLife),
		smFld("OperationalVLs", 344, 4, PortInfo.OperationalVLs, PortInfo.SetOperationalVLs),
		smFlag("PartitionEnforcementInbound", 348, PortInfo.PartitionEnforcementInbound, PortInfo.SetPartitionEnforcementInbound),
		smFlag("PartitionEnforcementOutbound", 349, PortInfo.PartitionEnforcementOutbound, PortInfo.SetPartitionEnforcementOutbound),
		smFlag("FilterRawInbound", 350, PortInfo.FilterRawInbound, PortInfo.SetFilterRawInbound),
		smFlag("FilterRawOutbound", 351, PortInfo.FilterRawOutbound, PortInfo.SetFilterRawOutbound),
		smFld("MKeyViolations", 352, 16, PortInfo.MKeyViolations, PortInfo.SetMKeyViolations),
		smFld("PKeyViolations", 368, 16, PortInfo.PKeyViolations, PortInfo.SetPKeyViolations),
		smFld("QKeyViolations", 384, 16, PortInfo.QKeyViolations, PortInfo.SetQKeyViolations),
		smFld("GUIDCap", 400, 8, PortInfo.GUIDCap, PortInfo.SetGUIDCap),
		smFlag("ClientReregister", 408, PortInfo.ClientReregister, PortInfo.SetClientReregister),
		smFld("MulticastPKeyTrapSuppressionEnabled", 409, 2, PortInfo.MulticastPKeyTrapSuppressionEnabled, PortInfo.SetMulticastPKeyTrapSuppressionEnabled),
		smFld("SubnetTimeOut", 411, 5, PortInfo.SubnetTimeOut, PortInfo.SetSubnetTimeOut),
		smFld("RespTimeValue", 419, 5, PortInfo.RespTimeValue, PortInfo.SetRespTimeValue),
		smFld("LocalPhyErrors", 424, 4, PortInfo.LocalPhyErrors, PortInfo.SetLocalPhyErrors),
		smFld("OverrunErrors", 428, 4, PortInfo.OverrunErrors, PortInfo.SetOverrunErrors),
		smFld("MaxCreditHint", 432, 16, PortInfo.MaxCreditHint, PortInfo.SetMaxCreditHint),
		smFld("LinkRoundTripLatency", 456, 24, PortInfo.LinkRoundTripLatency, PortInfo.SetLinkRoundTripLatency),
		smFld("CapabilityMask2", 480, 16, PortInfo.CapabilityMask2, PortInfo.SetCapabilityMask2),
		smFld("LinkSpeedExtActive", 496, 4, PortInfo.LinkSpeedExtActive, PortInfo.SetLinkSpeedExtActive),
		smFld("LinkSpeedExtSupported", 500, 4, PortInfo.LinkSpeedExtSupported, PortInfo.SetLinkSpeedExtSupported),
		smFld("LinkSpeedExtEnabled", 507, 5, PortInfo.LinkSpeedExtEnabled, PortInfo.SetLinkSpeedExtEnabled),
	})
}

// The PortInfo of opensm's own CA port: the first 40 bytes are what ibsim
// returned for GET_PORTINFO (opensm-startup.seq line 8); the whole 64
// bytes are rebuilt from what smpquery printed for it
// (ibsim-smp-answers.txt, "portinfo 0,1").
func TestPortInfoVector(t *testing.T) {
	raw := smHex(t, "00000000000000000000000000000000000000000050c04800000ff901021f027252001140400008")
	p := PortInfo(append(raw, make([]byte, PortInfoLen-len(raw))...))
	if p.MKey() != 0 || p.GIDPrefix() != 0 || p.LID() != 0 || p.MasterSMLID() != 0 ||
		p.CapabilityMask() != 0x50c048 || p.DiagCode() != 0 || p.MKeyLeasePeriod() != 4089 ||
		p.LocalPortNum() != 1 || p.LinkWidthEnabled() != LinkWidth4X ||
		p.LinkWidthSupported() != LinkWidth1X|LinkWidth4X|LinkWidth8X|LinkWidth12X|LinkWidth2X ||
		p.LinkWidthActive() != LinkWidth4X || p.LinkSpeedSupported() != LinkSpeedSDR|LinkSpeedDDR|LinkSpeedQDR ||
		p.PortState() != PortStateInit || p.PortPhysicalState() != PhysStateLinkUp ||
		p.LinkDownDefaultState() != LinkDownDefaultPolling || p.MKeyProtectBits() != 0 || p.LMC() != 0 ||
		p.LinkSpeedActive() != LinkSpeedSDR || p.LinkSpeedEnabled() != LinkSpeedSDR ||
		p.NeighborMTU() != MTU2048 || p.MasterSMSL() != 0 || p.VLCap() != VLCapVL0To7 || p.InitType() != 0 ||
		p.VLHighLimit() != 0 || p.VLArbitrationHighCap() != 8 {
		t.Errorf("decode disagrees with smpquery: % x", []byte(p))
	}
	const capMask = CapIsTrapSupported | CapIsSLMappingSupported | CapIsExtendedSpeedsSupported |
		CapIsCapabilityMask2Supported | CapIsVendorClassSupported | CapIsCapabilityMaskNoticeSupported
	if p.CapabilityMask() != capMask {
		t.Errorf("CapMask %#x, smpquery's flags make %#x", p.CapabilityMask(), capMask)
	}

	b := PortInfo(make([]byte, PortInfoLen))
	b.SetCapabilityMask(capMask)
	b.SetMKeyLeasePeriod(4089)
	b.SetLocalPortNum(1)
	b.SetLinkWidthEnabled(LinkWidth4X)
	b.SetLinkWidthSupported(31)
	b.SetLinkWidthActive(LinkWidth4X)
	b.SetLinkSpeedSupported(7)
	b.SetPortState(PortStateInit)
	b.SetPortPhysicalState(PhysStateLinkUp)
	b.SetLinkDownDefaultState(LinkDownDefaultPolling)
	b.SetLinkSpeedActive(LinkSpeedSDR)
	b.SetLinkSpeedEnabled(LinkSpeedSDR)
	b.SetNeighborMTU(MTU2048)
	b.SetVLCap(VLCapVL0To7)
	b.SetVLArbitrationHighCap(8)
	b.SetVLArbitrationLowCap(8)
	b.SetMTUCap(MTU2048)
	b.SetVLStallCount(7)
	b.SetOperationalVLs(VLCapVL0To7)
	b.SetGUIDCap(32)
	b.SetSubnetTimeOut(31)
	b.SetCapabilityMask2(Cap2IsLinkWidth2xSupported | Cap2IsLinkSpeedHDRSupported)
	b.SetLinkSpeedExtActive(LinkSpeedExtNone)
	if !bytes.Equal(b[:40], raw) {
		t.Errorf("rebuilt\n% x\nwant\n% x", []byte(b[:40]), raw)
	}
	tail := smHex(t, "0804e040"+"000000000000"+"201f"+"0000000000000000"+"0030"+"0000")
	if !bytes.Equal(b[40:], tail) {
		t.Errorf("bytes 40-63\n% x\nwant\n% x", []byte(b[40:]), tail)
	}
	if b.CapabilityMask2() != 0x30 || b.GUIDCap() != 32 || b.SubnetTimeOut() != 31 || b.VLStallCount() != 7 ||
		b.OperationalVLs() != 4 || b.MTUCap() != MTU2048 {
		t.Error("tail getters")
	}

	// Switch port 0 ("portinfo 0 0"): Active, MTUCap 1024, RespTime 8.
	b.SetCapabilityMask(0xc048)
	b.SetLocalPortNum(0)
	b.SetPortState(PortStateActive)
	b.SetNeighborMTU(MTU256)
	b.SetMTUCap(MTU1024)
	b.SetVLStallCount(0)
	b.SetGUIDCap(1)
	b.SetRespTimeValue(8)
	if b[20] != 0 || b[21] != 0 || b[22] != 0xc0 || b[23] != 0x48 || b[32] != 0x74 || b[36] != 0x10 ||
		b[41] != 0x03 || b[42] != 0 || b[50] != 1 || b[51] != 0x1f || b[52] != 8 {
		t.Errorf("switch port 0: % x", []byte(b))
	}
}

func TestSMInfoFields(t *testing.T) {
	// fields.c IB_SMINFO_*_F, IBA 14.2.5.13.
	smCheckFields(t, SMInfoLen, []smField{
		smFld("GUID", 0, 64, SMInfo.GUID, SMInfo.SetGUID),
		smFld("SMKey", 64, 64, SMInfo.SMKey, SMInfo.SetSMKey),
		smFld("ActCount", 128, 32, SMInfo.ActCount, SMInfo.SetActCount),
		smFld("Priority", 160, 4, SMInfo.Priority, SMInfo.SetPriority),
		smFld("SMState", 164, 4, SMInfo.SMState, SMInfo.SetSMState),
	})
	s := SMInfo(make([]byte, SMInfoLen))
	s.SetGUID(0x100001)
	s.SetActCount(7)
	s.SetPriority(15)
	s.SetSMState(SMStateMaster)
	want := smHex(t, "0000000000100001"+"0000000000000000"+"00000007"+"f3")
	if !bytes.Equal(s, want) {
		t.Errorf("% x", []byte(s))
	}
}

func TestGUIDInfo(t *testing.T) {
	var fs []smField
	for i := range GUIDInfoBlockSize {
		fs = append(fs, smField{"GUID", i * 64, 64,
			func(b []byte) uint64 { return GUIDInfo(b).GUID(i) },
			func(b []byte, v uint64) { GUIDInfo(b).SetGUID(i, v) }})
	}
	smCheckFields(t, GUIDInfoLen, fs)
}

func TestPKeyTable(t *testing.T) {
	var fs []smField
	for i := range PKeyTableBlockSize {
		fs = append(fs, smField{"Entry", i * 16, 16,
			func(b []byte) uint64 { return uint64(PKeyTable(b).Entry(i)) },
			func(b []byte, v uint64) { PKeyTable(b).SetEntry(i, uint16(v)) }})
	}
	smCheckFields(t, PKeyTableLen, fs)
	// "pkeys 0,1": entry 0 is 0xffff, the rest zero.
	p := PKeyTable(make([]byte, PKeyTableLen))
	p.SetEntry(0, DefaultPKey)
	if !bytes.Equal(p[:4], []byte{0xff, 0xff, 0, 0}) {
		t.Error("entry 0")
	}
	if PKeyTableAttrMod(4, 1) != 0x40001 {
		t.Error("attribute modifier (opensm-startup.seq line 55: mod=0x40001)")
	}
}

func TestSLtoVLMappingTable(t *testing.T) {
	var fs []smField
	for sl := range 16 {
		fs = append(fs, smField{"VL", sl * 4, 4,
			func(b []byte) uint64 { return uint64(SLtoVLMappingTable(b).VL(sl)) },
			func(b []byte, v uint64) { SLtoVLMappingTable(b).SetVL(sl, uint8(v)) }})
	}
	smCheckFields(t, SLtoVLMappingTableLen, fs)
	// "sl2vl 0,1": SL i -> VL i, SL 15 -> VL 7 (ibsim-smp-answers.txt).
	m := SLtoVLMappingTable(make([]byte, SLtoVLMappingTableLen))
	for sl := range 15 {
		m.SetVL(sl, uint8(sl))
	}
	m.SetVL(15, 7)
	if !bytes.Equal(m, smHex(t, "0123456789abcde7")) {
		t.Errorf("% x", []byte(m))
	}
}

func TestVLArbitrationTable(t *testing.T) {
	var fs []smField
	for i := range VLArbitrationTableBlockSize {
		fs = append(fs,
			smField{"VL", i*16 + 4, 4,
				func(b []byte) uint64 { return uint64(VLArbitrationTable(b).VL(i)) },
				func(b []byte, v uint64) { VLArbitrationTable(b).SetVL(i, uint8(v)) }},
			smField{"Weight", i*16 + 8, 8,
				func(b []byte) uint64 { return uint64(VLArbitrationTable(b).Weight(i)) },
				func(b []byte, v uint64) { VLArbitrationTable(b).SetWeight(i, uint8(v)) }})
	}
	smCheckFields(t, VLArbitrationTableLen, fs)
	// "vlarb 0,1" low table: VL i weight 4 except VL 0 weight 0.
	v := VLArbitrationTable(make([]byte, VLArbitrationTableLen))
	for i := range 8 {
		v.SetVL(i, uint8(i))
		v.SetWeight(i, 4)
	}
	v.SetWeight(0, 0)
	if !bytes.Equal(v[:16], smHex(t, "00000104020403040404050406040704")) {
		t.Errorf("% x", []byte(v[:16]))
	}
}

func TestLinearForwardingTable(t *testing.T) {
	var fs []smField
	for i := range LinearForwardingTableBlockSize {
		fs = append(fs, smField{"Port", i * 8, 8,
			func(b []byte) uint64 { return uint64(LinearForwardingTable(b).Port(i)) },
			func(b []byte, v uint64) { LinearForwardingTable(b).SetPort(i, uint8(v)) }})
	}
	smCheckFields(t, LinearForwardingTableLen, fs)
}

func TestMulticastForwardingTable(t *testing.T) {
	var fs []smField
	for i := range MulticastForwardingTableBlockSize {
		fs = append(fs, smField{"PortMask", i * 16, 16,
			func(b []byte) uint64 { return uint64(MulticastForwardingTable(b).PortMask(i)) },
			func(b []byte, v uint64) { MulticastForwardingTable(b).SetPortMask(i, uint16(v)) }})
	}
	smCheckFields(t, MulticastForwardingTableLen, fs)
	if MFTAttrMod(2, 0x1ff) != 0x200001ff || MFTAttrMod(15, 3) != 0xf0000003 {
		t.Error("MFTAttrMod")
	}
}

// Views over an SMP's data area are usable in place and allocate nothing.
func TestSMAttrAllocs(t *testing.T) {
	smp := SMP(make([]byte, MADLen))
	var sink uint64
	n := testing.AllocsPerRun(100, func() {
		p := PortInfo(smp.SMPData())
		p.SetLID(5)
		p.SetPortState(PortStateActive)
		p.SetLinkRoundTripLatency(3)
		sink += uint64(p.LID()) + uint64(p.PortState()) + uint64(p.LinkRoundTripLatency())
		ni := NodeInfo(smp.SMPData())
		ni.SetVendorID(0x2c9)
		sink += uint64(ni.VendorID())
		NodeDescription(smp.SMPData()).SetString("pibgw")
		sink += uint64(len(NodeDescription(smp.SMPData()).Text()))
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
	_ = sink
}

func smGIDField(name string, off int, get func([]byte) GID, set func([]byte, GID)) []smField {
	// A GID as two 64-bit halves, so smCheckFields can drive it.
	return []smField{
		{name + ".hi", off, 64,
			func(b []byte) uint64 { return get(b).SubnetPrefix() },
			func(b []byte, v uint64) { g := get(b); set(b, MakeGID(v, g.InterfaceID())) }},
		{name + ".lo", off + 64, 64,
			func(b []byte) uint64 { return get(b).InterfaceID() },
			func(b []byte, v uint64) { g := get(b); set(b, MakeGID(g.SubnetPrefix(), v)) }},
	}
}

// Offsets from fields.c (IB_NOTICE_*_F), IBA 13.4.8.2.
func TestNoticeFields(t *testing.T) {
	fs := []smField{
		smFlag("IsGeneric", 0, Notice.IsGeneric, Notice.SetIsGeneric),
		smFld("Type", 1, 7, Notice.Type, Notice.SetType),
		smFld("ProducerType", 8, 24, Notice.ProducerType, Notice.SetProducerType),
		smFld("VendorID", 8, 24, Notice.VendorID, Notice.SetVendorID),
		smFld("TrapNumber", 32, 16, Notice.TrapNumber, Notice.SetTrapNumber),
		smFld("DeviceID", 32, 16, Notice.DeviceID, Notice.SetDeviceID),
		smFld("IssuerLID", 48, 16, Notice.IssuerLID, Notice.SetIssuerLID),
		smFlag("NoticeToggle", 64, Notice.NoticeToggle, Notice.SetNoticeToggle),
		smFld("NoticeCount", 65, 15, Notice.NoticeCount, Notice.SetNoticeCount),
		smFld("Trap128LID", 80, 16, Notice.Trap128LID, Notice.SetTrap128LID),
		smFld("Trap144LID", 96, 16, Notice.Trap144LID, Notice.SetTrap144LID),
		smFlag("Trap144OtherLocalChanges", 127, Notice.Trap144OtherLocalChanges, Notice.SetTrap144OtherLocalChanges),
		smFld("Trap144CapabilityMask", 128, 32, Notice.Trap144CapabilityMask, Notice.SetTrap144CapabilityMask),
		smFld("Trap144ChangeFlags", 170, 6, Notice.Trap144ChangeFlags, Notice.SetTrap144ChangeFlags),
		smFld("Trap144CapabilityMask2", 176, 16, Notice.Trap144CapabilityMask2, Notice.SetTrap144CapabilityMask2),
	}
	fs = append(fs, smGIDField("IssuerGID", 512,
		func(b []byte) GID { return Notice(b).IssuerGID() },
		func(b []byte, g GID) { Notice(b).SetIssuerGID(g) })...)
	smCheckFields(t, NoticeLen, fs)
}

func TestNoticeTraps(t *testing.T) {
	// Trap 128 from a switch at LID 1 (what an SMA sends when a port
	// changes state): generic, urgent, producer switch.
	n := Notice(bytes.Repeat([]byte{0xee}, NoticeSMPLen))
	n.SetGenericTrap(NoticeTypeUrgent, NodeTypeSwitch, TrapLinkStateChange, 1)
	n.SetNoticeToggle(false)
	n.SetNoticeCount(0)
	n.SetTrap128LID(1)
	want := smHex(t, "81000002008000010000"+"0001")
	if !bytes.Equal(n[:12], want) || !bytes.Equal(n[12:], make([]byte, NoticeSMPLen-12)) {
		t.Errorf("trap 128: % x", []byte(n))
	}
	if !n.IsGeneric() || n.Type() != NoticeTypeUrgent || n.ProducerType() != NodeTypeSwitch ||
		n.TrapNumber() != 128 || n.IssuerLID() != 1 || n.Trap128LID() != 1 || len(n.DataDetails()) != 54 {
		t.Error("trap 128 getters")
	}

	// Trap 144 from a CA port at LID 2 whose CapabilityMask gained IsSM.
	n.SetGenericTrap(NoticeTypeInfo, NodeTypeCA, TrapLocalChanges, 2)
	n.SetTrap144LID(2)
	n.SetTrap144CapabilityMask(0x50c048 | CapIsSM)
	n.SetTrap144ChangeFlags(Trap144NodeDescriptionChange | 0xffc0) // reserved bits dropped
	n.SetTrap144OtherLocalChanges(true)
	n.SetTrap144CapabilityMask2(0x30)
	want = smHex(t, "84000001009000020000"+"0000"+"0002"+"0001"+"0050c04a"+"0001"+"0030")
	if !bytes.Equal(n[:24], want) {
		t.Errorf("trap 144:\n% x\nwant\n% x", []byte(n[:24]), want)
	}
	if n.Trap144LID() != 2 || n.Trap144CapabilityMask()&CapIsSM == 0 || !n.Trap144OtherLocalChanges() ||
		n.Trap144ChangeFlags() != Trap144NodeDescriptionChange || n.Trap144CapabilityMask2() != 0x30 {
		t.Error("trap 144 getters")
	}
}

// Offsets from fields.c (IB_CPI_*_F), IBA 13.4.8.1.
func TestClassPortInfoFields(t *testing.T) {
	fs := []smField{
		smFld("BaseVersion", 0, 8, ClassPortInfo.BaseVersion, ClassPortInfo.SetBaseVersion),
		smFld("ClassVersion", 8, 8, ClassPortInfo.ClassVersion, ClassPortInfo.SetClassVersion),
		smFld("CapabilityMask", 16, 16, ClassPortInfo.CapabilityMask, ClassPortInfo.SetCapabilityMask),
		smFld("CapabilityMask2", 32, 27, ClassPortInfo.CapabilityMask2, ClassPortInfo.SetCapabilityMask2),
		smFld("RespTimeValue", 59, 5, ClassPortInfo.RespTimeValue, ClassPortInfo.SetRespTimeValue),
		smFld("RedirectTC", 192, 8, ClassPortInfo.RedirectTC, ClassPortInfo.SetRedirectTC),
		smFld("RedirectSL", 200, 4, ClassPortInfo.RedirectSL, ClassPortInfo.SetRedirectSL),
		smFld("RedirectFL", 204, 20, ClassPortInfo.RedirectFL, ClassPortInfo.SetRedirectFL),
		smFld("RedirectLID", 224, 16, ClassPortInfo.RedirectLID, ClassPortInfo.SetRedirectLID),
		smFld("RedirectPKey", 240, 16, ClassPortInfo.RedirectPKey, ClassPortInfo.SetRedirectPKey),
		smFld("RedirectQP", 264, 24, ClassPortInfo.RedirectQP, ClassPortInfo.SetRedirectQP),
		smFld("RedirectQKey", 288, 32, ClassPortInfo.RedirectQKey, ClassPortInfo.SetRedirectQKey),
		smFld("TrapTC", 448, 8, ClassPortInfo.TrapTC, ClassPortInfo.SetTrapTC),
		smFld("TrapSL", 456, 4, ClassPortInfo.TrapSL, ClassPortInfo.SetTrapSL),
		smFld("TrapFL", 460, 20, ClassPortInfo.TrapFL, ClassPortInfo.SetTrapFL),
		smFld("TrapLID", 480, 16, ClassPortInfo.TrapLID, ClassPortInfo.SetTrapLID),
		smFld("TrapPKey", 496, 16, ClassPortInfo.TrapPKey, ClassPortInfo.SetTrapPKey),
		smFld("TrapHL", 512, 8, ClassPortInfo.TrapHL, ClassPortInfo.SetTrapHL),
		smFld("TrapQP", 520, 24, ClassPortInfo.TrapQP, ClassPortInfo.SetTrapQP),
		smFld("TrapQKey", 544, 32, ClassPortInfo.TrapQKey, ClassPortInfo.SetTrapQKey),
	}
	fs = append(fs, smGIDField("RedirectGID", 64,
		func(b []byte) GID { return ClassPortInfo(b).RedirectGID() },
		func(b []byte, g GID) { ClassPortInfo(b).SetRedirectGID(g) })...)
	fs = append(fs, smGIDField("TrapGID", 320,
		func(b []byte) GID { return ClassPortInfo(b).TrapGID() },
		func(b []byte, g GID) { ClassPortInfo(b).SetTrapGID(g) })...)
	smCheckFields(t, ClassPortInfoLen, fs)
}
