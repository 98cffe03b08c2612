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
