package wire

import (
	"bytes"
	"testing"
)

// TestCMReqLayout checks a REQ's fields land on IBA 12.6.5's bytes (Table 106), offsets
// counted from the start of the MAD as a capture shows them.
func TestCMReqLayout(t *testing.T) {
	mad := make([]byte, MADLen)
	NewCMMAD(mad, AttrCMReq, 0x1122334455667788)
	m := CMReq(mad)
	m.SetLocalCommID(0xA1A2A3A4)
	m.SetServiceID(0x0000000001060000 | 7471)
	m.SetLocalCAGUID(0x0002C90300001111)
	m.SetLocalQKey(0)
	m.SetLocalQPN(0xABCDEF)
	m.SetResponderResources(4)
	m.SetInitiatorDepth(3)
	m.SetRemoteCMResponseTimeout(20)
	m.SetTransportServiceType(0)
	m.SetEndToEndFlowControl(true)
	m.SetStartingPSN(0x123456)
	m.SetLocalCMResponseTimeout(20)
	m.SetRetryCount(7)
	m.SetPKey(0xFFFF)
	m.SetPathMTU(4)
	m.SetRNRRetryCount(6)
	m.SetMaxCMRetries(15)
	m.SetSRQ(true)
	p := m.Primary()
	p.SetLocalLID(1)
	p.SetRemoteLID(2)
	p.SetFlowLabel(0xFFFFF)
	p.SetPacketRate(3)
	p.SetSL(5)
	p.SetSubnetLocal(true)
	p.SetLocalACKTimeout(18)
	copy(m.Private(), "hello")

	want := map[int]byte{
		0: 1, 1: MgmtClassCM, 2: 2, 3: MethodCMSend, 16: 0, 17: 0x10, // header
		24: 0xA1, 27: 0xA4, // local comm ID
		36: 0x01, 37: 0x06, 38: 0x1D, 39: 0x2F, // service ID 0x...0106_1D2F
		40: 0x00, 41: 0x02, 42: 0xC9, // CA GUID
		56: 0xAB, 57: 0xCD, 58: 0xEF, 59: 4, // QPN, responder resources
		63: 3,                // initiator depth
		67: 20<<3 | 0<<1 | 1, // remote CM timeout, RC, flow control
		68: 0x12, 70: 0x56,   // starting PSN
		71: 20<<3 | 7,      // local CM timeout, retry count
		72: 0xFF, 73: 0xFF, // P_Key
		74: 4<<4 | 6,               // MTU, RNR retry
		75: 15<<4 | 1<<3,           // max CM retries, SRQ
		76: 0, 77: 1, 78: 0, 79: 2, // LIDs
		112: 0xFF, 113: 0xFF, 114: 0xF0, 115: 3, // flow label, rate
		118: 5<<4 | 1<<3,   // SL, subnet local
		119: 18 << 3,       // local ACK timeout
		164: 'h', 168: 'o', // private data at 24+140
	}
	for off, b := range want {
		if mad[off] != b {
			t.Errorf("byte %d = %#02x, want %#02x", off, mad[off], b)
		}
	}
	// Read back.
	if m.LocalQPN() != 0xABCDEF || m.StartingPSN() != 0x123456 || m.RetryCount() != 7 ||
		m.RNRRetryCount() != 6 || m.MaxCMRetries() != 15 || !m.SRQ() || m.PathMTU() != 4 ||
		m.RemoteCMResponseTimeout() != 20 || m.LocalCMResponseTimeout() != 20 ||
		!m.EndToEndFlowControl() || m.TransportServiceType() != 0 || m.ResponderResources() != 4 ||
		m.InitiatorDepth() != 3 {
		t.Errorf("REQ fields read back wrong")
	}
	if p.FlowLabel() != 0xFFFFF || p.PacketRate() != 3 || p.SL() != 5 || !p.SubnetLocal() ||
		p.LocalACKTimeout() != 18 || p.LocalLID() != 1 || p.RemoteLID() != 2 {
		t.Errorf("path fields read back wrong")
	}
	if !bytes.HasPrefix(m.Private(), []byte("hello")) || len(m.Private()) != CMReqPrivateLen {
		t.Errorf("private data %q (%d bytes)", m.Private()[:5], len(m.Private()))
	}
	if 24+140+CMReqPrivateLen != MADLen {
		t.Errorf("REQ does not fill the MAD")
	}
}

// TestCMMessagesFillMAD: each message's private data ends at the MAD's end (IBA 12.6:
// every CM message is 232 bytes).
func TestCMMessagesFillMAD(t *testing.T) {
	mad := make([]byte, MADLen)
	for name, end := range map[string]int{
		"MRA":      len(CMMRA(mad).Private()) + 24 + 10,
		"REJ":      len(CMRej(mad).Private()) + 24 + 84,
		"REP":      len(CMRep(mad).Private()) + 24 + 36,
		"RTU":      len(CMRTU(mad).Private()) + 24 + 8,
		"DREQ":     len(CMDReq(mad).Private()) + 24 + 12,
		"SIDR_REQ": len(CMSIDRReq(mad).Private()) + 24 + 16,
		"SIDR_REP": len(CMSIDRRep(mad).Private()) + 24 + 96,
	} {
		if end != MADLen {
			t.Errorf("%s ends at %d, want %d", name, end, MADLen)
		}
	}
}

func TestCMRepRejLayout(t *testing.T) {
	mad := make([]byte, MADLen)
	NewCMMAD(mad, AttrCMRep, 1)
	r := CMRep(mad)
	r.SetLocalQPN(0x000102)
	r.SetStartingPSN(0xFFFFFF)
	r.SetTargetACKDelay(31)
	r.SetEndToEndFlowControl(true)
	r.SetRNRRetryCount(7)
	r.SetSRQ(true)
	r.SetLocalCAGUID(0x0102030405060708)
	if mad[24+12] != 0 || mad[24+13] != 1 || mad[24+14] != 2 || mad[24+26] != 31<<3|1 ||
		mad[24+27] != 7<<5|1<<4 || mad[24+28] != 1 || mad[24+35] != 8 || mad[24+22] != 0xFF {
		t.Errorf("REP bytes % x", mad[24:24+36])
	}
	if r.RNRRetryCount() != 7 || !r.SRQ() || r.TargetACKDelay() != 31 || r.StartingPSN() != 0xFFFFFF {
		t.Errorf("REP fields read back wrong")
	}
	NewCMMAD(mad, AttrCMRej, 2)
	j := CMRej(mad)
	j.SetMessageRejected(CMMsgREQ)
	j.SetRejectedInfoLen(1)
	j.SetReason(RejConsumerReject)
	if mad[24+9] != 1<<1 || mad[24+11] != 28 || j.RejectedInfoLen() != 1 || j.Reason() != 28 {
		t.Errorf("REJ bytes % x", mad[24:24+12])
	}
}

func TestCMTimeout(t *testing.T) {
	if got := CMTimeoutNanos(20); got != 4294967296 { // ≈ 4.3 s
		t.Errorf("timeout 20 = %d ns", got)
	}
	if CMTimeoutNanos(40) != CMTimeoutNanos(31) {
		t.Errorf("timeout above 31 not capped")
	}
}
