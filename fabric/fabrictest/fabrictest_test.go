package fabrictest_test

import (
	"context"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

func TestRecorderWait(t *testing.T) {
	a, b := fabrictest.NewRecorder(), fabrictest.NewRecorder()
	fabric.NewCable(a, b)
	p := fabrictest.UD{DLID: 2, SLID: 1, Payload: []byte("abc")}.Build()
	go func() {
		for i := 0; i < 3; i++ {
			a.Send(p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := b.Wait(ctx, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("Wait: %d packets, %v", len(got), err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if _, err := b.Wait(short, 4); err == nil {
		t.Fatal("Wait for a fourth packet returned without one")
	}
}

func TestUDBuild(t *testing.T) {
	p := fabrictest.UD{DLID: 7, SLID: 9, DestQP: 0x123, SrcQP: 0x45, QKey: 0x11111111, PSN: 99, Payload: []byte("12345")}.Build()
	if len(p)%4 != 0 || int(wire.LRH(p).PktLen())*4 != len(p) || !wire.CheckICRC(p) {
		t.Fatalf("bad packet %x", p)
	}
	bth := wire.BTH(p[wire.LRHLen:])
	if bth.OpCode() != wire.UDSendOnly || bth.PadCnt() != 3 || bth.PKey() != 0xFFFF || bth.DestQP() != 0x123 {
		t.Fatalf("BTH %x", []byte(bth[:wire.BTHLen]))
	}
	smp := fabrictest.DRSMP(1, wire.AttrNodeInfo, 2, 5)
	if wire.LRH(smp).VL() != 15 || wire.LRH(smp).DLID() != 0xFFFF || !wire.CheckICRC(smp) {
		t.Fatal("bad DR SMP")
	}
	s := wire.SMP(smp[wire.LRHLen+wire.BTHLen+wire.DETHLen:])
	if !s.IsDirectedRoute() || s.HopCount() != 2 || s.InitialPath()[2] != 5 {
		t.Fatal("bad DR SMP fields")
	}
}
