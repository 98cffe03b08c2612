package ud_test

import (
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/wire"
)

// TestMADLayerRequestResponse sends a GMP and a LID-routed SMP between two HCAs through
// the switch: the request reaches the class's request handler on the far port, the reply
// reaches the response handler on the near port with the TID intact.
func TestMADLayerRequestResponse(t *testing.T) {
	f := hcatest.NewFabric(t, 2, hcatest.Options{})
	if f.Attached() {
		t.Skip("attached: the daemon owns QP0 and QP1 — it refuses SMPs and GMPs other than CM from a process, and its own agents take the GMPs that arrive")
	}
	a, b := f.Devs[0].Port(1), f.Devs[1].Port(1)
	for _, class := range []uint8{wire.MgmtClassPerfMgt, wire.MgmtClassSubnLID} {
		var gotReq, gotResp *hca.MADAddr
		var respTID uint64
		b.RegisterMADHandler(class, false, hca.MADHandlerFunc(func(m *hca.MAD) {
			from := m.From
			gotReq = &from
			resp := append([]byte(nil), m.Data...)
			wire.MAD(resp).SetMethod(wire.MethodGetResp)
			if err := m.Port.ReplyMAD(m, resp); err != nil {
				t.Error(err)
			}
		}))
		a.RegisterMADHandler(class, true, hca.MADHandlerFunc(func(m *hca.MAD) {
			from := m.From
			gotResp = &from
			respTID = wire.MAD(m.Data).TID()
		}))
		mad := make([]byte, wire.MADLen)
		mm := wire.MAD(mad)
		mm.SetBaseVersion(1)
		mm.SetMgmtClass(class)
		mm.SetClassVersion(1)
		mm.SetMethod(wire.MethodGet)
		tid := a.TID()
		mm.SetTID(tid)
		qpn := uint32(1)
		if class == wire.MgmtClassSubnLID {
			qpn = 0
		}
		if err := a.SendMAD(hca.MADAddr{DLID: 2, QPN: qpn, QKey: hca.GSIQKey}, mad); err != nil {
			t.Fatal(err)
		}
		if gotReq == nil || gotReq.SLID != 1 || gotReq.QPN != qpn {
			t.Fatalf("class %#x: request at b: %+v", class, gotReq)
		}
		if gotResp == nil || gotResp.SLID != 2 || respTID != tid {
			t.Fatalf("class %#x: response at a: %+v tid %#x want %#x", class, gotResp, respTID, tid)
		}
	}
	// A GMP with a wrong Q_Key is dropped and counted.
	mad := make([]byte, wire.MADLen)
	wire.MAD(mad).SetBaseVersion(1)
	wire.MAD(mad).SetMgmtClass(wire.MgmtClassPerfMgt)
	before := b.Counters().Get(hca.CntQKeyViolations)
	if err := a.SendMAD(hca.MADAddr{DLID: 2, QPN: 1, QKey: 0x1234}, mad); err != nil {
		t.Fatal(err)
	}
	if b.Counters().Get(hca.CntQKeyViolations) != before+1 {
		t.Fatal("GMP with a bad Q_Key not counted")
	}
}
