package rc_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
	"github.com/pibgw/pibgw/rc"
)

// xrcPair is an XRC send QP on HCA 0 connected to an XRC receive QP on HCA 1, whose
// domain has two XRC SRQs with their own CQs, and a second domain with one more SRQ.
type xrcPair struct {
	f          *hcatest.Fabric
	ini        *side // XRC_SEND QP, its PD, send CQ and buffer
	tgt        *hca.QP
	tctx       *hca.Context
	tpd        *hca.PD
	tbuf       []byte
	tmr        *hca.MR
	srqs       [2]*hca.SRQ
	cqs        [2]*hca.CQ
	otherSRQ   *hca.SRQ // in another domain of HCA 1
	xrcd, xrc2 *hca.XRCD
}

func newXRCPair(t *testing.T, wrap func(int, fabric.Direction, fabric.Link) fabric.Link) *xrcPair {
	t.Helper()
	x := &xrcPair{f: hcatest.NewFabric(t, 2, hcatest.Options{Register: rc.Register, Wrap: wrap})}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Initiator: an XRC send QP has a send CQ only.
	a := &side{ctx: x.f.Devs[0].Open(), port: x.f.Devs[0].Port(1), buf: make([]byte, 1<<16)}
	var err error
	a.pd, err = a.ctx.AllocPD()
	must(err)
	a.scq, err = a.ctx.CreateCQ(256, nil)
	must(err)
	a.mr, err = a.pd.RegMR(a.buf, hca.AccessLocalWrite)
	must(err)
	a.qp, err = a.pd.CreateQP(hca.QPInitAttr{SendCQ: a.scq, QPType: hca.QPTypeXRCSend, Cap: hca.QPCap{MaxSendWR: 64, MaxSendSGE: 1}})
	must(err)
	if _, err := a.qp.PostRecv([]hca.RecvWR{{WRID: 1}}); err == nil {
		t.Fatal("post_recv on an XRC send QP accepted")
	}
	x.ini = a
	// Target: a domain, two XRC SRQs with their CQs, the receive QP.
	x.tctx = x.f.Devs[1].Open()
	x.tpd, err = x.tctx.AllocPD()
	must(err)
	x.tbuf = make([]byte, 1<<16)
	x.tmr, err = x.tpd.RegMR(x.tbuf, hca.AccessLocalWrite|hca.AccessRemoteWrite|hca.AccessRemoteRead)
	must(err)
	x.xrcd, err = x.tctx.OpenXRCD()
	must(err)
	x.xrc2, err = x.tctx.OpenXRCD()
	must(err)
	for i := range x.srqs {
		x.cqs[i], err = x.tctx.CreateCQ(64, nil)
		must(err)
		x.srqs[i], err = x.tpd.CreateXRCSRQ(x.xrcd, x.cqs[i], hca.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
		must(err)
	}
	x.otherSRQ, err = x.tpd.CreateXRCSRQ(x.xrc2, x.cqs[0], hca.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	must(err)
	if x.srqs[0].Num() == 0 || x.srqs[0].Num() == x.srqs[1].Num() {
		t.Fatalf("SRQ numbers %#x %#x", x.srqs[0].Num(), x.srqs[1].Num())
	}
	x.tgt, err = x.xrcd.CreateQP(hca.QPInitAttr{QPType: hca.QPTypeXRCRecv})
	must(err)
	// Connect as xsrq_pingpong does.
	mod := func(qp *hca.QP, a hca.QPAttr, mask hca.QPAttrMask) {
		t.Helper()
		must(qp.Modify(&a, mask|hca.QPAttrState))
	}
	init := hca.QPAttr{QPState: hca.QPStateInit, PortNum: 1, QPAccessFlags: hca.AccessRemoteWrite | hca.AccessRemoteRead}
	mod(x.tgt, init, hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags)
	init.QPAccessFlags = 0
	mod(a.qp, init, hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags)
	mod(x.tgt, hca.QPAttr{QPState: hca.QPStateRTR, DestQPNum: a.qp.Num(), PathMTU: hca.MTU1024, RQPSN: 77, MinRNRTimer: 12,
		AHAttr: hca.AHAttr{DLID: a.port.LID(), PortNum: 1}},
		hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|hca.QPAttrRQPSN|hca.QPAttrMaxDestRdAtomic|hca.QPAttrMinRNRTimer)
	mod(x.tgt, hca.QPAttr{QPState: hca.QPStateRTS, Timeout: 14, SQPSN: 88}, hca.QPAttrTimeout|hca.QPAttrSQPSN)
	mod(a.qp, hca.QPAttr{QPState: hca.QPStateRTR, DestQPNum: x.tgt.Num(), PathMTU: hca.MTU1024, RQPSN: 88,
		AHAttr: hca.AHAttr{DLID: x.f.Devs[1].Port(1).LID(), PortNum: 1}},
		hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|hca.QPAttrRQPSN)
	mod(a.qp, hca.QPAttr{QPState: hca.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 77},
		hca.QPAttrTimeout|hca.QPAttrSQPSN|hca.QPAttrRetryCnt|hca.QPAttrRNRRetry|hca.QPAttrMaxQPRdAtomic)
	return x
}

func (x *xrcPair) postSRQ(t *testing.T, i int, wrid uint64, off, n int) {
	t.Helper()
	if _, err := x.srqs[i].PostRecv([]hca.RecvWR{{WRID: wrid, SGL: []hca.SGE{{Addr: x.tmr.Addr() + uint64(off), Length: uint32(n), LKey: x.tmr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// TestXRCSendToTwoSRQs: one XRC send QP delivers to two SRQs of the remote domain through
// one receive QP, each message to the SRQ its XRCETH names, completing on that SRQ's CQ
// with the receive QP's number; multi-packet messages, RDMA WRITE and READ through the
// SRQ's PD work too; an SRQ of another domain is an invalid request.
func TestXRCSendToTwoSRQs(t *testing.T) {
	x := newXRCPair(t, nil)
	a := x.ini
	x.postSRQ(t, 0, 10, 0, 4096)
	x.postSRQ(t, 1, 20, 8192, 4096)
	for i, n := range []int{3000, 100} { // 3000 bytes: three packets at MTU 1024
		fill(a.buf[i*4096:i*4096+n], uint64(n))
		a.post(t, hca.SendWR{WRID: uint64(i), Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
			SGL: []hca.SGE{a.sge(i*4096, n)}, RemoteSRQN: x.srqs[1-i].Num()})
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
			t.Fatalf("send %d: %s", i, wc.Status)
		}
		// Message 0 went to SRQ 1 (WR 20, buffer at 8192), message 1 to SRQ 0 (WR 10, at 0).
		cq, wrid, off := x.cqs[1-i], uint64(20-10*i), 8192*(1-i)
		wc := waitWC(t, cq, nil)
		if wc.Status != hca.WCSuccess || wc.WRID != wrid || wc.ByteLen != uint32(n) || wc.QPNum != x.tgt.Num() || wc.SrcQP != a.qp.Num() {
			t.Fatalf("message %d: WC %+v (receive QP %#x, send QP %#x)", i, wc, x.tgt.Num(), a.qp.Num())
		}
		x.f.Sync()
		if !bytes.Equal(x.tbuf[off:off+n], a.buf[i*4096:i*4096+n]) {
			t.Fatalf("message %d: data differs", i)
		}
	}
	// RDMA through the receive QP reaches memory of the named SRQ's PD.
	copy(a.buf, "xrc write")
	a.post(t, hca.SendWR{WRID: 5, Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 9)},
		RemoteAddr: x.tmr.Addr() + 30000, RKey: x.tmr.RKey(), RemoteSRQN: x.srqs[0].Num()})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
		t.Fatalf("WRITE: %s", wc.Status)
	}
	x.f.Sync()
	copy(x.tbuf[40000:], "xrc read!")
	x.f.Sync()
	a.post(t, hca.SendWR{WRID: 6, Opcode: hca.WRRDMARead, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(100, 9)},
		RemoteAddr: x.tmr.Addr() + 40000, RKey: x.tmr.RKey(), RemoteSRQN: x.srqs[1].Num()})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess || wc.ByteLen != 9 {
		t.Fatalf("READ: %+v", wc)
	}
	if string(x.tbuf[30000:30009]) != "xrc write" || string(a.buf[100:109]) != "xrc read!" {
		t.Fatalf("RDMA data %q %q", x.tbuf[30000:30009], a.buf[100:109])
	}
	// An SRQ of another domain: invalid request, the send QP goes to ERR.
	a.post(t, hca.SendWR{WRID: 7, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)}, RemoteSRQN: x.otherSRQ.Num()})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCRemInvReqErr {
		t.Fatalf("send to another domain's SRQ: %s, want REM_INV_REQ_ERR", wc.Status)
	}
	if x.otherSRQ.Len() != 0 || x.cqs[0].Poll(make([]hca.WC, 1)) != 0 {
		t.Fatal("the other domain's SRQ was touched")
	}
}

// TestXRCObjects: the lifetime rules of domains, XRC SRQs and receive QPs.
func TestXRCObjects(t *testing.T) {
	x := newXRCPair(t, nil)
	// Inspection lists the XRC QPs (no receive CQ on the send QP, no CQs on the receive QP).
	for i, d := range x.f.Devs {
		objs, err := d.Inspect(hca.KindQP)
		if err != nil || len(objs) != 1 || objs[0].QP.Type != []string{"XRC_SEND", "XRC_RECV"}[i] {
			t.Fatalf("HCA %d QPs: %+v %v", i, objs, err)
		}
	}
	if err := x.xrcd.Close(); err == nil {
		t.Fatal("closing a domain with SRQs and a QP succeeded")
	}
	if _, err := x.tpd.CreateQP(hca.QPInitAttr{QPType: hca.QPTypeXRCRecv}); err == nil {
		t.Fatal("XRC_RECV QP from a PD")
	}
	if _, err := x.xrcd.CreateQP(hca.QPInitAttr{QPType: hca.QPTypeRC}); err == nil {
		t.Fatal("RC QP from an XRC domain")
	}
	if _, err := x.tgt.PostSend([]hca.SendWR{{Opcode: hca.WRSend}}); err == nil {
		t.Fatal("post_send on an XRC receive QP")
	}
	if err := x.tgt.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, s := range x.srqs {
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.xrcd.Close(); err != nil {
		t.Fatalf("closing the emptied domain: %v", err)
	}
	if err := x.cqs[1].Destroy(); err != nil {
		t.Fatalf("the SRQ's CQ is still held: %v", err)
	}
}

// TestXRCCaptureDecodesInTshark: XRC requests carry the XRC opcodes and an XRCETH with
// the destination SRQ right after the BTH, responses the XRC acknowledge; tshark (4.0
// names XRC opcodes but has no XRCETH dissector, so the XRCETH is the first four bytes of
// what it shows as the rest of the packet) finds nothing malformed.
func TestXRCCaptureDecodesInTshark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xrc.pcap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cw := fabric.NewCaptureWriter(file, fabric.CaptureOptions{})
	x := newXRCPair(t, func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if d == fabric.AtoB {
			return fabric.NewCaptureLink(l, cw)
		}
		return l
	})
	a := x.ini
	x.postSRQ(t, 1, 1, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 16)}, RemoteSRQN: x.srqs[1].Num()})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	x.f.Settle(t)
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	fabrictest.RequireCleanDecode(t, path)
	rows := fabrictest.TsharkFields(t, path, "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.vendor")
	if len(rows) != 2 {
		t.Fatalf("%d frames, want the SEND and its ACK: %v", len(rows), rows)
	}
	srqn := x.srqs[1].Num()
	if rows[0][0] != "164" || !strings.HasPrefix(rows[0][2], "00"+hex6(srqn)) {
		t.Errorf("SEND frame %v: want opcode 164 (XRC SEND Only) and an XRCETH naming SRQ %#x", rows[0], srqn)
	}
	if rows[1][0] != "177" {
		t.Errorf("ACK frame %v: want opcode 177 (XRC Acknowledge)", rows[1])
	}
}

func hex6(v uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		b[i] = digits[v&0xF]
		v >>= 4
	}
	return string(b)
}
