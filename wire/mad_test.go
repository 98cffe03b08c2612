package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestMAD(t *testing.T) {
	m := MAD(make([]byte, MADLen))
	m.SetBaseVersion(MADBaseVersion)
	m.SetMgmtClass(MgmtClassSubnAdm)
	m.SetClassVersion(ClassVersionSA)
	m.SetMethod(MethodGetTableResp)
	m.SetStatus(StatusInvalidAttrOrModVal | StatusBusy)
	m.SetClassSpecific(0xabcd)
	m.SetTID(0x0102030405060708)
	m.SetAttrID(0x0035)
	m.SetAttrMod(0xdeadbeef)
	m.Data()[0] = 0x77
	m.Data()[MADDataLen-1] = 0x99
	// IBA 13.4.2: the common MAD header, byte by byte.
	want := []byte{1, 0x03, 2, 0x92, 0x00, 0x1d, 0xab, 0xcd, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x35, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0x77}
	if !bytes.Equal(m[:25], want) || m[255] != 0x99 {
		t.Fatalf("built % x", []byte(m[:25]))
	}
	if m.BaseVersion() != 1 || m.MgmtClass() != MgmtClassSubnAdm || m.ClassVersion() != 2 ||
		m.Method() != MethodGetTableResp || !m.IsResponse() || m.Status() != 0x1d ||
		m.Status()&StatusInvalidFieldMask != StatusInvalidAttrOrModVal || m.ClassSpecific() != 0xabcd ||
		m.TID() != 0x0102030405060708 || m.AttrID() != 0x35 || m.AttrMod() != 0xdeadbeef || len(m.Data()) != 232 {
		t.Fatal("getters disagree")
	}
	m.SetMethod(MethodGet)
	if m.IsResponse() {
		t.Error("IsResponse on Get")
	}
	for _, c := range [][2]int{{MethodGetResp, 0x81}, {MethodGetTableResp, 0x92}, {MethodDeleteResp, 0x95}, {MethodReportResp, 0x86}, {MethodGetMultiResp, 0x94}} {
		if c[0] != c[1] {
			t.Errorf("method %#x want %#x", c[0], c[1])
		}
	}
}

func TestParseMAD(t *testing.T) {
	b := make([]byte, MADLen)
	b[0] = 1
	if m, err := ParseMAD(b); err != nil || len(m) != MADLen {
		t.Fatalf("valid MAD: %v", err)
	}
	for _, c := range []struct {
		b   []byte
		err error
	}{
		{nil, ErrMADLen},
		{make([]byte, 255), ErrMADLen},
		{append(b[:256:256], 0), ErrMADLen},
		{make([]byte, 256), ErrMADVersion},
		{func() []byte { x := make([]byte, 256); x[0] = 2; return x }(), ErrMADVersion},
	} {
		if _, err := ParseMAD(c.b); !errors.Is(err, c.err) {
			t.Errorf("len %d: %v want %v", len(c.b), err, c.err)
		}
	}
}

func TestSMP(t *testing.T) {
	s := SMP(make([]byte, MADLen))
	s.MAD().SetBaseVersion(1)
	s.MAD().SetMgmtClass(MgmtClassSubnDirected)
	s.MAD().SetClassVersion(ClassVersionSM)
	s.MAD().SetMethod(MethodGet)
	s.MAD().SetAttrID(AttrNodeInfo)
	s.SetD(true)
	s.SetDRStatus(0x7fff)
	s.SetHopPointer(1)
	s.SetHopCount(3)
	s.SetMKey(0x0102030405060708)
	s.SetDrSLID(LIDPermissive)
	s.SetDrDLID(LIDPermissive)
	s.SMPData()[0] = 0xaa
	s.InitialPath()[1] = 2
	s.ReturnPath()[63] = 0xbb
	// IBA 14.2.1.2: D|Status at 4, HopPointer 6, HopCount 7, M_Key 24,
	// DrSLID 32, DrDLID 34, data 64, initial path 128, return path 192.
	if !bytes.Equal(s[4:8], []byte{0xff, 0xff, 1, 3}) || !bytes.Equal(s[24:36], []byte{1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff}) ||
		s[64] != 0xaa || s[129] != 2 || s[255] != 0xbb {
		t.Fatalf("layout % x", []byte(s[:40]))
	}
	if !s.IsDirectedRoute() || !s.D() || s.DRStatus() != 0x7fff || s.HopPointer() != 1 || s.HopCount() != 3 ||
		s.MKey() != 0x0102030405060708 || s.DrSLID() != 0xffff || s.DrDLID() != 0xffff ||
		len(s.SMPData()) != 64 || len(s.InitialPath()) != 64 || len(s.ReturnPath()) != 64 {
		t.Fatal("getters disagree")
	}
	s.SetD(false)
	if s.D() || s.DRStatus() != 0x7fff {
		t.Error("SetD disturbed status")
	}
	s.SetDRStatus(0xffff)
	if s.D() || s.DRStatus() != 0x7fff {
		t.Error("SetDRStatus disturbed D")
	}
	s.SetD(true)
	s.SetDRStatus(0)
	if !s.D() || s.MAD().Status() != 0x8000 {
		t.Error("D bit")
	}
	if s.MAD().AttrID() != AttrNodeInfo {
		t.Error("attr")
	}
}
