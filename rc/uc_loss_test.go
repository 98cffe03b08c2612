package rc_test

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
)

// UC: a lost middle packet drops the message; the QP stays in RTS (IBA 9.8.3).
func TestUCLossDropsMessageKeepsQP(t *testing.T) {
	wrap := func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		if i == 0 && d == fabric.AtoB {
			return fabric.NewFaultLink(l, fabric.FaultConfig{Seed: 3, Loss: 0.05})
		}
		return l
	}
	_, a, b := connect(t, connOpts{typ: hca.QPTypeUC, mtu: hca.MTU1024, bufLen: 1 << 16, wrap: wrap})
	for i := 0; i < 20; i++ {
		a.post(t, hca.SendWR{WRID: uint64(i), Opcode: hca.WRRDMAWrite, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 1<<16)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitWC(t, a.scq, nil)
		if s := b.qp.State(); s != hca.QPStateRTS {
			t.Fatalf("after message %d: responder state %s", i, s)
		}
	}
}

// UC: a SEND that finds no receive WQE is dropped whole — its First packet and the
// Middle and Last that follow in sequence — and the QP stays in RTS for the next one
// (IBA 9.8.3). The Middle used to be taken for a SEND with no First: an invalid
// request, the QP to ERR, every receive flushed (qperf's uc_bw server failed so).
func TestUCSendWithoutWQEDropsMessage(t *testing.T) {
	_, a, b := connect(t, connOpts{typ: hca.QPTypeUC, mtu: hca.MTU1024, bufLen: 1 << 16})
	send := func(id uint64) {
		t.Helper()
		a.post(t, hca.SendWR{WRID: id, Opcode: hca.WRSend, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 4096)}})
		if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
			t.Fatalf("send %d: %v", id, wc.Status)
		}
	}
	b.postRecv(t, 1, 0, 4096)
	send(1) // lands
	send(2) // no WQE: dropped, four packets
	if s := b.qp.State(); s != hca.QPStateRTS {
		t.Fatalf("after a SEND with no receive posted: responder state %s", s)
	}
	b.postRecv(t, 3, 0, 4096)
	send(3)
	var got []uint64
	for range 2 {
		wc := waitWC(t, b.rcq, nil)
		if wc.Status != hca.WCSuccess || wc.ByteLen != 4096 {
			t.Fatalf("receive %d: %v, %d bytes", wc.WRID, wc.Status, wc.ByteLen)
		}
		got = append(got, wc.WRID)
	}
	if got[0] != 1 || got[1] != 3 {
		t.Errorf("receives completed %v, want [1 3]", got)
	}
}
