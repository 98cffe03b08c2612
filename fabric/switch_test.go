package fabric_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
	"github.com/pibgw/pibgw/wire"
)

// testFabric is a switch with a Recorder cabled to each external port. Host i has LID
// 0x10+i and the LFT routes it to port i.
type testFabric struct {
	sw     *fabric.Switch
	hosts  []*fabrictest.Recorder // index = switch port; [0] unused
	cables []*fabric.Cable
}

func newTestFabric(t *testing.T, ports int) *testFabric {
	t.Helper()
	f := &testFabric{
		sw:     fabric.NewSwitch(fabric.SwitchConfig{Ports: ports}),
		hosts:  make([]*fabrictest.Recorder, ports+1),
		cables: make([]*fabric.Cable, ports+1),
	}
	for i := 1; i <= ports; i++ {
		f.hosts[i] = fabrictest.NewRecorder()
		f.cables[i] = fabric.NewCable(f.hosts[i], f.sw.Port(i))
		f.sw.SetLFT(hostLID(i), uint8(i))
	}
	return f
}

func hostLID(i int) uint16 { return uint16(0x10 + i) }

func (f *testFabric) lens() []int {
	n := make([]int, len(f.hosts))
	for i, h := range f.hosts[1:] {
		n[i+1] = h.Len()
	}
	return n
}

func TestSwitchUnicast(t *testing.T) {
	f := newTestFabric(t, 4)
	p := udPkt(hostLID(3), "hello")
	f.hosts[1].Send(p)
	got := f.hosts[3].Packets()
	if len(got) != 1 || !bytes.Equal(got[0], p) {
		t.Fatalf("port 3 got %x", got)
	}
	if n := f.lens(); n[1]+n[2]+n[4] != 0 {
		t.Fatalf("other ports got packets: %v", n)
	}
	in, out := f.sw.Counters(1), f.sw.Counters(3)
	words := uint64(len(p) / 4)
	if in.RcvPkts != 1 || in.RcvData != words || out.XmitPkts != 1 || out.XmitData != words {
		t.Fatalf("counters in %+v out %+v", in, out)
	}
}

func TestSwitchMixedBatchKeepsOrderPerPort(t *testing.T) {
	f := newTestFabric(t, 4)
	var batch [][]byte
	dst := []int{2, 2, 3, 2, 4, 4, 4, 3}
	for i, d := range dst {
		batch = append(batch, udPkt(hostLID(d), string(rune('a'+i))))
	}
	f.hosts[1].Send(batch...)
	for _, port := range []int{2, 3, 4} {
		var want [][]byte
		for i, d := range dst {
			if d == port {
				want = append(want, batch[i])
			}
		}
		got := f.hosts[port].Packets()
		if len(got) != len(want) {
			t.Fatalf("port %d got %d packets, want %d", port, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("port %d packet %d out of order", port, i)
			}
		}
	}
}

// batchCounter counts Receive calls, to check that runs go out as one sub-slice.
type batchCounter struct {
	calls, pkts int
}

func (b *batchCounter) Receive(p [][]byte) { b.calls++; b.pkts += len(p) }
func (b *batchCounter) Attach(fabric.Link) {}

func TestSwitchForwardsRunsAsOneBatch(t *testing.T) {
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 3})
	src := fabrictest.NewRecorder()
	fabric.NewCable(src, sw.Port(1))
	b2, b3 := &batchCounter{}, &batchCounter{}
	fabric.NewCable(b2, sw.Port(2))
	fabric.NewCable(b3, sw.Port(3))
	sw.SetLFT(2, 2)
	sw.SetLFT(3, 3)
	// Runs: [2 2 2] [3 3] [2].
	src.Send(udPkt(2, "a"), udPkt(2, "b"), udPkt(2, "c"), udPkt(3, "d"), udPkt(3, "e"), udPkt(2, "f"))
	if b2.calls != 2 || b2.pkts != 4 || b3.calls != 1 || b3.pkts != 2 {
		t.Fatalf("port 2: %d calls %d pkts; port 3: %d calls %d pkts", b2.calls, b2.pkts, b3.calls, b3.pkts)
	}
}

func TestSwitchMulticast(t *testing.T) {
	f := newTestFabric(t, 4)
	const mlid = 0xC005
	f.sw.SetMFT(mlid, fabric.MakePortMask(1, 2, 4))
	if got := f.sw.MFT(mlid); got != fabric.MakePortMask(1, 2, 4) {
		t.Fatalf("MFT = %v", got.Ports())
	}
	f.hosts[1].Send(udPkt(mlid, "group"))
	if n := f.lens(); n[1] != 0 || n[2] != 1 || n[3] != 0 || n[4] != 1 {
		t.Fatalf("multicast from port 1 reached %v, want ports 2 and 4 only", n)
	}
	// From a port outside the group: every member gets it.
	f.hosts[3].Send(udPkt(mlid, "group"))
	if n := f.lens(); n[1] != 1 || n[2] != 2 || n[4] != 2 {
		t.Fatalf("multicast from port 3 reached %v", n)
	}
	// A group with the ingress port as the only member goes nowhere and is counted.
	f.sw.SetMFT(mlid+1, fabric.MakePortMask(2))
	f.hosts[2].Send(udPkt(mlid+1, "self"))
	if d := f.sw.Counters(2).Dropped(fabric.DropNoMFT); d != 1 {
		t.Fatalf("no-mft drops on port 2 = %d, want 1", d)
	}
	// Port 0 in a mask means the switch's own management agent.
	mgmt := fabrictest.NewRecorder()
	f.sw.SetManagement(fabric.ManagementFunc(func(_ int, p [][]byte) { mgmt.Receive(p) }))
	f.sw.SetMFT(mlid+2, fabric.MakePortMask(0, 3))
	f.hosts[1].Send(udPkt(mlid+2, "to sma"))
	if mgmt.Len() != 1 || f.hosts[3].Len() != 1 {
		t.Fatalf("mgmt got %d, port 3 got %d", mgmt.Len(), f.hosts[3].Len())
	}
}

func TestSwitchDrops(t *testing.T) {
	f := newTestFabric(t, 3)
	f.sw.SetManagement(nil) // no agent: packets for the switch itself are dropped
	p := udPkt(hostLID(2), "x")
	short := p[:6]
	badLen := append(append([]byte(nil), p...), 0, 0, 0, 0) // PktLen no longer matches
	cases := []struct {
		name   string
		pkt    []byte
		reason fabric.DropReason
	}{
		{"lid0", udPkt(0, "x"), fabric.DropLID0},
		{"unset lft", udPkt(0x1234, "x"), fabric.DropNoRoute},
		{"permissive without sma", udPkt(0xFFFF, "x"), fabric.DropPermissive},
		{"mlid beyond mft", udPkt(0xC000+fabric.DefaultMFTCap, "x"), fabric.DropNoMFT},
		{"empty mft", udPkt(0xC001, "x"), fabric.DropNoMFT},
		{"raw lnh", fabrictest.WithLNH(p, wire.LNHRaw), fabric.DropRawLNH},
		{"short", short, fabric.DropMalformed},
		{"pktlen mismatch", badLen, fabric.DropMalformed},
		{"switch lid without sma", udPkt(0x0001, "x"), fabric.DropNoManagement},
		{"lft names missing port", udPkt(0x0002, "x"), fabric.DropBadPort},
	}
	f.sw.SetLFT(0x0001, 0) // the switch's own LID
	f.sw.SetLFT(0x0002, 9)
	for _, tc := range cases {
		before := f.sw.Counters(1)
		f.hosts[1].Send(tc.pkt)
		after := f.sw.Counters(1)
		if got := after.Dropped(tc.reason) - before.Dropped(tc.reason); got != 1 {
			t.Errorf("%s: %v drops went up by %d, want 1", tc.name, tc.reason, got)
		}
	}
	if n := f.lens(); n[1]+n[2]+n[3] != 0 {
		t.Fatalf("dropped packets were delivered: %v", n)
	}
	if e := f.sw.Counters(1).RcvErrors; e != 2 {
		t.Fatalf("RcvErrors = %d, want 2", e)
	}
	// IPv6 raw packets (LNH 01) carry an IPv6 header and are forwarded.
	f.hosts[1].Send(fabrictest.WithLNH(p, wire.LNHIPv6))
	if f.hosts[2].Len() != 1 {
		t.Fatal("raw IPv6 packet not forwarded")
	}
}

func TestSwitchOutPortDown(t *testing.T) {
	f := newTestFabric(t, 3)
	f.cables[2].SetUp(false)
	f.hosts[1].Send(udPkt(hostLID(2), "x"), udPkt(hostLID(2), "y"))
	if d := f.sw.Counters(1).Dropped(fabric.DropPortDown); d != 2 {
		t.Fatalf("port-down drops = %d, want 2", d)
	}
	if d := f.sw.Counters(2).XmitDiscards; d != 2 {
		t.Fatalf("XmitDiscards on port 2 = %d, want 2", d)
	}
	if f.sw.PortUp(2) || !f.sw.PortUp(3) {
		t.Fatal("PortUp wrong")
	}
	f.cables[2].SetUp(true)
	f.hosts[1].Send(udPkt(hostLID(2), "z"))
	if f.hosts[2].Len() != 1 {
		t.Fatal("packet not delivered after replug")
	}
	f.cables[3].Detach()
	f.hosts[1].Send(udPkt(hostLID(3), "z"))
	if d := f.sw.Counters(1).Dropped(fabric.DropPortDown); d != 3 {
		t.Fatalf("port-down drops = %d after detach, want 3", d)
	}
}

func TestSwitchManagement(t *testing.T) {
	f := newTestFabric(t, 3)
	const swLID = 0x0001
	f.sw.SetLFT(swLID, 0)
	var mu sync.Mutex
	var got [][]byte
	var inPorts []int
	f.sw.SetManagement(fabric.ManagementFunc(func(in int, p [][]byte) {
		mu.Lock()
		inPorts = append(inPorts, in)
		defer mu.Unlock()
		for _, q := range p {
			got = append(got, append([]byte(nil), q...))
		}
	}))
	lid := udPkt(swLID, "lid-routed smp")
	dr := udPkt(0xFFFF, "directed-route smp")
	f.hosts[2].Send(lid, dr)
	if len(got) != 2 || !bytes.Equal(got[0], lid) || !bytes.Equal(got[1], dr) {
		t.Fatalf("management got %d packets", len(got))
	}
	for _, in := range inPorts {
		if in != 2 {
			t.Fatalf("management saw ingress ports %v, want 2", inPorts)
		}
	}
	if c := f.sw.Counters(0); c.XmitPkts != 2 {
		t.Fatalf("management port XmitPkts = %d", c.XmitPkts)
	}
	// The agent answers out of the port the request came in on.
	reply := udPkt(hostLID(2), "reply")
	f.sw.SendFromPort(2, [][]byte{reply})
	if r := f.hosts[2].Packets(); len(r) != 1 || !bytes.Equal(r[0], reply) {
		t.Fatal("SendFromPort did not reach port 2's host")
	}
	if c := f.sw.Counters(2); c.XmitPkts != 1 {
		t.Fatalf("port 2 XmitPkts = %d", c.XmitPkts)
	}
	f.sw.SetManagement(nil)
	f.hosts[2].Send(lid)
	if d := f.sw.Counters(2).Dropped(fabric.DropNoManagement); d != 1 {
		t.Fatalf("no-management drops = %d", d)
	}
}

func TestSwitchTables(t *testing.T) {
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 36})
	if sw.LFT(5) != fabric.PortDrop || sw.LFT(0xBFFF) != fabric.PortDrop {
		t.Fatal("new LFT not all 0xFF")
	}
	var blk [fabric.LFTBlockSize]uint8
	for i := range blk {
		blk[i] = uint8(i%36 + 1)
	}
	sw.SetLFTBlock(3, blk)
	for i := range blk {
		if got := sw.LFT(uint16(3*64 + i)); got != blk[i] {
			t.Fatalf("LFT(%d) = %d, want %d", 3*64+i, got, blk[i])
		}
	}
	if sw.LFTBlock(3) != blk {
		t.Fatal("LFTBlock does not round-trip")
	}
	sw.SetLFT(3*64+5, 7)
	if sw.LFT(3*64+5) != 7 || sw.LFT(3*64+4) != blk[4] || sw.LFT(3*64+6) != blk[6] {
		t.Fatal("SetLFT disturbed neighbouring entries")
	}
	if b := sw.LFTBlock(3); b[5] != 7 || b[4] != blk[4] || b[63] != blk[63] {
		t.Fatalf("LFTBlock after SetLFT: %v", b)
	}
	if b := sw.LFTBlock(4); b[0] != fabric.PortDrop || b[63] != fabric.PortDrop {
		t.Fatalf("LFTBlock of an unset block: %v", b)
	}
	sw.SetLFT(fabric.LFTCap-1, 2)
	if sw.LFT(fabric.LFTCap-1) != 2 {
		t.Fatal("last LFT entry")
	}
	m := fabric.MakePortMask(0, 1, 36, 200) // 200 is not a port of this switch
	sw.SetMFT(0xC000+1023, m)
	if got := sw.MFT(0xC000 + 1023).Ports(); len(got) != 3 || got[2] != 36 {
		t.Fatalf("MFT ports %v, want [0 1 36]", got)
	}
	if sw.MFTCap() != 1024 {
		t.Fatal("default MFT cap")
	}
	big := fabric.NewSwitch(fabric.SwitchConfig{Ports: 254, MFTCap: 4096})
	big.SetMFT(0xC000+4095, fabric.MakePortMask(254, 130))
	if got := big.MFT(0xC000 + 4095).Ports(); len(got) != 2 || got[0] != 130 || got[1] != 254 {
		t.Fatalf("254-port MFT ports %v", got)
	}
}

// Many goroutines send into one switch port while the SM rewrites the tables; run with
// -race.
func TestSwitchConcurrentSendAndTableUpdates(t *testing.T) {
	sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 3})
	in, s2, s3 := &fabrictest.Sink{}, &fabrictest.Sink{}, &fabrictest.Sink{}
	fabric.NewCable(in, sw.Port(1))
	fabric.NewCable(s2, sw.Port(2))
	fabric.NewCable(s3, sw.Port(3))
	sw.SetLFT(0x20, 2)
	sw.SetMFT(0xC001, fabric.MakePortMask(2))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const senders, perSender = 4, 2000
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := [][]byte{udPkt(0x20, "a"), udPkt(0x20, "b"), udPkt(0xC001, "m")}
			link := in.Link()
			for i := 0; i < perSender && ctx.Err() == nil; i++ {
				link.Send(batch)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			default:
			}
			sw.SetLFT(0x20, uint8(2+i%2))
			sw.SetMFT(0xC001, fabric.MakePortMask(2+i%2))
			if i%64 == 0 {
				var blk [64]uint8
				for j := range blk {
					blk[j] = 3
				}
				sw.SetLFTBlock(0, blk)
			}
		}
	}()
	wg.Wait()
	cancel()
	<-done
	total := s2.Packets.Load() + s3.Packets.Load()
	if want := uint64(senders * perSender * 3); total != want || sw.Counters(1).RcvPkts != want {
		t.Fatalf("delivered %d, received %d, want %d; %+v", total, sw.Counters(1).RcvPkts, want, sw.Counters(1))
	}
}
