package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Offsets and bit positions below are those of OpenSM's ib_types.h (ib_sa_mad_t,
// ib_path_rec_t, ib_member_rec_t, ib_node_record_t, ib_portinfo_record_t,
// ib_service_record_t) and the kernel's RMPP header.

func TestSAMADHeaderLayout(t *testing.T) {
	m := SAMAD(make([]byte, MADLen))
	InitSAMAD(m, MethodGetTable, 0x0102030405060708, AttrPathRecord, PRCompDGID|PRCompSGID)
	m.SetSMKey(0x1122334455667788)
	m.SetAttrOffset(8)
	r := m.RMPP()
	r.SetVersion(RMPPVersion1)
	r.SetType(RMPPTypeData)
	r.SetRespTime(0x1F)
	r.SetFlags(RMPPFlagActive | RMPPFlagFirst)
	r.SetStatus(RMPPStatusBadSegment)
	r.SetSegmentNumber(3)
	r.SetPayloadLength(0x01020304)
	want := map[int]byte{
		0: 1, 1: MgmtClassSubnAdm, 2: ClassVersionSA, 3: MethodGetTable,
		8: 1, 15: 8, 16: 0, 17: 0x35,
		24: 1, 25: 1, 26: 0x1F<<3 | 3, 27: 120, 31: 3, 32: 1, 35: 4,
		36: 0x11, 43: 0x88, 44: 0, 45: 8, 55: 0x0C,
	}
	for off, v := range want {
		if m[off] != v {
			t.Errorf("byte %d = %#x, want %#x", off, m[off], v)
		}
	}
	if r.RespTime() != 0x1F || r.Flags() != 3 || !r.Active() || !r.First() || r.Last() || r.Type() != RMPPTypeData {
		t.Fatalf("RMPP header read back wrong: %x", []byte(r))
	}
	r.SetFlags(RMPPFlagLast)
	if r.RespTime() != 0x1F || !r.Last() || r.Active() {
		t.Fatal("SetFlags disturbed RRespTime")
	}
	if m.SMKey() != 0x1122334455667788 || m.AttrOffset() != 8 || m.CompMask() != PRCompDGID|PRCompSGID || len(m.Data()) != 200 {
		t.Fatal("SA header read back wrong")
	}
	if SAClassHeaderLen != 20 || RMPPSegmentLen != 220 {
		t.Fatal("header lengths")
	}
}

func TestRMPPPayloadLengths(t *testing.T) {
	for _, c := range []struct {
		n, segs     int
		first, last uint32
	}{
		{0, 1, 20, 20},
		{112, 1, 132, 132},
		{200, 1, 220, 220},
		{201, 2, 241, 21},
		{32 * 112, 18, 18*20 + 3584, 20 + 3584 - 17*200},
	} {
		if s := RMPPSegments(c.n, SADataLen); s != c.segs {
			t.Errorf("RMPPSegments(%d) = %d, want %d", c.n, s, c.segs)
		}
		f, l := RMPPPayloadLengths(c.n, SADataLen, SAClassHeaderLen)
		if f != c.first || l != c.last {
			t.Errorf("RMPPPayloadLengths(%d) = %d, %d, want %d, %d", c.n, f, l, c.first, c.last)
		}
	}
}

func TestPathRecordLayout(t *testing.T) {
	b := make([]byte, PathRecordLen)
	r := PathRecord(b)
	dgid := GID{0xfe, 0x80, 15: 2}
	sgid := GID{0xfe, 0x80, 15: 1}
	r.SetServiceID(0x1000000000000001)
	r.SetDGID(dgid)
	r.SetSGID(sgid)
	r.SetDLID(0x0002)
	r.SetSLID(0x0001)
	r.SetRawTraffic(true)
	r.SetFlowLabel(0xABCDE)
	r.SetHopLimit(0x40)
	r.SetTClass(0x20)
	r.SetReversible(true)
	r.SetNumbPath(0x7F)
	r.SetPKey(0xFFFF)
	r.SetQoSClass(0xABC)
	r.SetSL(5)
	r.SetMTUSelector(SASelectorExactly)
	r.SetMTU(4)
	r.SetRateSelector(SASelectorLargest)
	r.SetRate(SARate40Gbps)
	r.SetPacketLifeTimeSelector(SASelectorLess)
	r.SetPacketLifeTime(18)
	r.SetPreference(1)
	// hop_flow_raw (opensm ib_path_rec_hop_limit/flow_lbl/ib_path_rec_set_hop_flow_raw):
	// raw bit 31, flow label bits 27..8, hop limit 7..0.
	if got := binary.BigEndian.Uint32(b[44:]); got != 1<<31|0xABCDE<<8|0x40 {
		t.Errorf("hop_flow_raw = %#x", got)
	}
	if b[49] != 0xFF || b[52] != 0xAB || b[53] != 0xC5 || b[54] != 0x84 || b[55] != 0xC7 || b[56] != 0x52 || b[57] != 1 {
		t.Errorf("bytes 49-57: % x", b[49:58])
	}
	if r.ServiceID() != 0x1000000000000001 || r.DGID() != dgid || r.SGID() != sgid || r.DLID() != 2 || r.SLID() != 1 ||
		!r.RawTraffic() || r.FlowLabel() != 0xABCDE || r.HopLimit() != 0x40 || r.TClass() != 0x20 || !r.Reversible() ||
		r.NumbPath() != 0x7F || r.PKey() != 0xFFFF || r.QoSClass() != 0xABC || r.SL() != 5 || r.MTUSelector() != 2 ||
		r.MTU() != 4 || r.RateSelector() != 3 || r.Rate() != 7 || r.PacketLifeTimeSelector() != 1 ||
		r.PacketLifeTime() != 18 || r.Preference() != 1 {
		t.Fatalf("read back: % x", b)
	}
	r.SetReversible(false)
	if r.NumbPath() != 0x7F || r.Reversible() {
		t.Fatal("Reversible/NumbPath share a byte")
	}
	if PRCompPKey != 1<<13 || PRCompSL != 1<<15 || PRCompPacketLifeTime != 1<<21 || PRCompPreference != 1<<22 {
		t.Fatal("component mask bits")
	}
}

func TestMCMemberRecordLayout(t *testing.T) {
	b := make([]byte, MCMemberRecordLen)
	r := MCMemberRecord(b)
	mgid := IPoIBBroadcastMGID(0x7FFF)
	if mgid.String() != "ff12:401b:ffff::ffff:ffff" {
		t.Fatalf("broadcast MGID %s", mgid)
	}
	r.SetMGID(mgid)
	r.SetPortGID(GID{0xfe, 0x80, 15: 9})
	r.SetQKey(IPoIBBroadcastQKey)
	r.SetMLID(0xC000)
	r.SetMTUSelector(SASelectorExactly)
	r.SetMTU(4)
	r.SetTClass(7)
	r.SetPKey(0xFFFF)
	r.SetRateSelector(SASelectorExactly)
	r.SetRate(SARate10Gbps)
	r.SetPacketLifeTimeSelector(SASelectorExactly)
	r.SetPacketLifeTime(18)
	r.SetSL(3)
	r.SetFlowLabel(0x12345)
	r.SetHopLimit(0xFF)
	r.SetScope(MGIDScopeLinkLocal)
	r.SetJoinState(JoinFullMember | JoinSendOnlyNonMember)
	r.SetProxyJoin(true)
	// ib_member_rec_t: sl_flow_hop = SL(4) FlowLabel(20) HopLimit(8); scope_state =
	// Scope(4) JoinState(4).
	if got := binary.BigEndian.Uint32(b[44:]); got != 3<<28|0x12345<<8|0xFF {
		t.Errorf("sl_flow_hop = %#x", got)
	}
	if !bytes.Equal(b[32:44], []byte{0, 0, 0x0B, 0x1B, 0xC0, 0, 0x84, 7, 0xFF, 0xFF, 0x83, 0x92}) {
		t.Errorf("bytes 32-43: % x", b[32:44])
	}
	if b[48] != 0x25 || b[49] != 0x80 {
		t.Errorf("scope_state %#x proxy %#x", b[48], b[49])
	}
	if r.MGID() != mgid || r.QKey() != 0x0B1B || r.MLID() != 0xC000 || r.MTU() != 4 || r.MTUSelector() != 2 ||
		r.TClass() != 7 || r.PKey() != 0xFFFF || r.Rate() != 3 || r.PacketLifeTime() != 18 || r.SL() != 3 ||
		r.FlowLabel() != 0x12345 || r.HopLimit() != 0xFF || r.Scope() != 2 || r.JoinState() != 5 || !r.ProxyJoin() {
		t.Fatalf("read back: % x", b)
	}
	if MCRCompJoinState != 1<<16 || MCRCompProxyJoin != 1<<17 || MCRCompPKey != 1<<7 {
		t.Fatal("component mask bits")
	}
	if SAAttrOffset(MCMemberRecordLen) != 7 || SAAttrOffset(PathRecordLen) != 8 || SAAttrOffset(NodeRecordLen) != 14 ||
		SAAttrOffset(PortInfoRecordLen) != 9 || SAAttrOffset(ServiceRecordLen) != 22 {
		t.Fatal("attribute offsets differ from OpenSM's record sizes")
	}
}

func TestNodeAndPortInfoRecordLayout(t *testing.T) {
	b := make([]byte, NodeRecordLen)
	r := NodeRecord(b)
	r.SetLID(0x12)
	ni := r.NodeInfo()
	ni[2] = 1 // NodeType CA
	binary.BigEndian.PutUint64(b[4+12:], 0x0002c90300000300)
	b[4+36] = 1
	copy(r.NodeDescription(), "pib_0")
	if r.LID() != 0x12 || r.NodeType() != 1 || r.NodeGUID() != 0x0002c90300000300 || r.LocalPortNum() != 1 ||
		b[44] != 'p' || len(r.NodeDescription()) != 64 {
		t.Fatalf("% x", b)
	}
	p := PortInfoRecord(make([]byte, PortInfoRecordLen))
	p.SetEndportLID(7)
	p.SetPortNum(1)
	binary.BigEndian.PutUint16(p.PortInfo()[16:], 7)
	p.PortInfo()[32] = 4
	if p.EndportLID() != 7 || p.PortNum() != 1 || p.LID() != 7 || p.PortState() != 4 || len(p.PortInfo()) != 64 {
		t.Fatalf("% x", []byte(p))
	}
}

func TestServiceRecordLayoutAndMatch(t *testing.T) {
	a := ServiceRecord(make([]byte, ServiceRecordLen))
	a.SetID(0x1000000000000001)
	a.SetGID(GID{0xfe, 0x80, 15: 3})
	a.SetPKey(0xFFFF)
	a.SetLease(60)
	a.SetName("pibgw test service")
	a.SetData16(7, 0xBEEF)
	a.SetData64(1, 42)
	if binary.BigEndian.Uint64(a[0:]) != 0x1000000000000001 || a[24] != 0xFF || binary.BigEndian.Uint32(a[28:]) != 60 ||
		a[48] != 'p' || binary.BigEndian.Uint16(a[142:]) != 0xBEEF || binary.BigEndian.Uint64(a[168:]) != 42 {
		t.Fatalf("% x", []byte(a))
	}
	if a.Name() != "pibgw test service" || a.Data16(7) != 0xBEEF || a.Data64(1) != 42 {
		t.Fatal("read back")
	}
	q := ServiceRecord(make([]byte, ServiceRecordLen))
	q.SetID(0x1000000000000001)
	if !ServiceRecordMatches(a, q, SRCompID) || ServiceRecordMatches(a, q, SRCompID|SRCompName) {
		t.Fatal("match by ID / name")
	}
	q.SetData16(7, 0xBEEF)
	if !ServiceRecordMatches(a, q, SRCompID|SRCompData16(7)) || ServiceRecordMatches(a, q, SRCompData64(1)) {
		t.Fatal("match by data")
	}
	if SRCompData8(0) != 1<<7 || SRCompData16(0) != 1<<23 || SRCompData32(0) != 1<<31 || SRCompData64(1) != 1<<36 {
		t.Fatal("ServiceData bits")
	}
}

func TestSAStatusText(t *testing.T) {
	if SAStatusText(SAStatusNoRecords) != "ERR_NO_RECORDS" || SAStatusText(0x7f00) != "status 0x7f00" {
		t.Fatal(SAStatusText(0x7f00))
	}
	if RMPPTypeAck.String() != "ACK" || RMPPType(9).String() != "RMPPType(9)" {
		t.Fatal(RMPPType(9).String())
	}
}
