package wire

import (
	"bytes"
	"testing"
)

// TestCMLAPAPRLayout writes every LAP and APR field and checks the bytes where IBA 12.8's
// tables 115 and 116 put them (offsets from the MAD's first byte: 24 + the table's).
func TestCMLAPAPRLayout(t *testing.T) {
	mad := make([]byte, MADLen)
	NewCMMAD(mad, AttrCMLAP, 0x1122)
	l := CMLAP(mad)
	l.SetLocalCommID(0x01020304)
	l.SetRemoteCommID(0x05060708)
	l.SetRemoteQPN(0xABCDEF)
	l.SetRemoteCMResponseTimeout(20)
	l.SetAltLocalLID(0x0011)
	l.SetAltRemoteLID(0x0022)
	g1, g2 := MakeGID(DefaultGIDPrefix, 0x33), MakeGID(DefaultGIDPrefix, 0x44)
	l.SetAltLocalGID(g1)
	l.SetAltRemoteGID(g2)
	l.SetAltFlowLabel(0xFEDCB)
	l.SetAltTrafficClass(0x5A)
	l.SetAltHopLimit(0x40)
	l.SetAltPacketRate(3)
	l.SetAltSL(9)
	l.SetAltSubnetLocal(true)
	l.SetAltLocalACKTimeout(17)
	copy(l.Private(), "lap private")
	want := map[int][]byte{
		24: {1, 2, 3, 4, 5, 6, 7, 8},
		36: {0xAB, 0xCD, 0xEF, 20 << 3},
		44: {0x00, 0x11, 0x00, 0x22},
		80: {0xFE, 0xDC, 0xB0, 0x5A, 0x40, 3, 9<<4 | 0x08, 17 << 3},
		88: []byte("lap private"),
	}
	for off, b := range want {
		if !bytes.Equal(mad[off:off+len(b)], b) {
			t.Errorf("LAP bytes %d..: % x, want % x", off, mad[off:off+len(b)], b)
		}
	}
	if GID(mad[48:64]) != g1 || GID(mad[64:80]) != g2 {
		t.Error("LAP GIDs")
	}
	if l.LocalCommID() != 0x01020304 || l.RemoteCommID() != 0x05060708 || l.RemoteQPN() != 0xABCDEF ||
		l.RemoteCMResponseTimeout() != 20 || l.AltLocalLID() != 0x11 || l.AltRemoteLID() != 0x22 ||
		l.AltLocalGID() != g1 || l.AltRemoteGID() != g2 || l.AltFlowLabel() != 0xFEDCB || l.AltTrafficClass() != 0x5A ||
		l.AltHopLimit() != 0x40 || l.AltPacketRate() != 3 || l.AltSL() != 9 || !l.AltSubnetLocal() || l.AltLocalACKTimeout() != 17 {
		t.Error("LAP getters")
	}
	if 24+64+CMLAPPrivateLen != MADLen {
		t.Error("LAP private data does not end the MAD")
	}

	NewCMMAD(mad, AttrCMAPR, 0x1122)
	a := CMAPR(mad)
	a.SetLocalCommID(0x05060708)
	a.SetRemoteCommID(0x01020304)
	a.SetStatus(APRInvalidLID)
	a.SetInfo([]byte{0xAA, 0xBB})
	copy(a.Private(), "apr")
	if !bytes.Equal(mad[24:38], []byte{5, 6, 7, 8, 1, 2, 3, 4, 2, APRInvalidLID, 0, 0, 0xAA, 0xBB}) || string(mad[108:111]) != "apr" {
		t.Errorf("APR bytes % x", mad[24:112])
	}
	if a.Status() != APRInvalidLID || !bytes.Equal(a.Info(), []byte{0xAA, 0xBB}) || 24+84+CMAPRPrivateLen != MADLen {
		t.Error("APR getters")
	}
}
