package ipoib_test

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
)

// restartSM replaces the SM and SA with ones configured with cfg (the way an
// administrator changes partitions.conf) and, like a new master SM, has every port's
// clients register again.
func (tf *testFabric) restartSM(t *testing.T, cfg sa.Config) {
	t.Helper()
	tf.agent.Close()
	tf.sm.Close()
	cfg.Port = tf.f.HCAs[0].Port(1)
	cfg.Clock = tf.clk
	sm, err := sa.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sm.Close)
	agent, err := sa.StartSA(sm, sa.AgentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tf.sm, tf.agent = sm, agent
	for _, p := range tf.f.Ports() {
		attr := p.Query()
		p.SetSM(attr.SMLID, attr.SMSL^1) // IBV_EVENT_SM_CHANGE: clients rejoin
	}
}

// waitUp waits for the interface to come up, moving the fake clock so that retries
// (of joins that raced the SA's start) happen.
func (tf *testFabric) waitUp(t *testing.T, ifc *ipoib.Interface) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ifc.State().Up {
		if time.Now().After(deadline) {
			t.Fatalf("%s still down: %s", ifc.Name(), ifc.State().Reason)
		}
		tf.clk.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
}

// TestPKeyChild: interfaces for P_Key 0x8001 stay down until the SM's partition
// configuration puts 0x8001 in their ports' tables, then come up with the partition's
// broadcast group (MTU 4096: interface MTU 4092, where the default partition's is
// 2044); A and B talk on 0x8001, the parents keep working, C (not a member) stays down
// and cannot reach the partition; closing A's child stops A↔B on 0x8001 only.
func TestPKeyChild(t *testing.T) {
	tf := newTestFabric(t, 3, sa.Config{SweepInterval: -1})
	pa, tpa := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	pb, tpb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	_, tpc := tf.iface(t, 2, 0xFFFF, "ib2", "10.10.0.3/24", "10.20.0.3/24")
	ca, tca := tf.iface(t, 0, 0x8001, "ib0.8001", "10.20.0.1/24")
	cb, tcb := tf.iface(t, 1, 0x8001, "ib1.8001", "10.20.0.2/24")
	cc, _ := tf.iface(t, 2, 0x8001, "ib2.8001", "10.20.0.3/24")
	for _, c := range []*ipoib.Interface{ca, cb, cc} {
		st := c.State()
		if st.Up || !strings.Contains(st.Reason, "P_Key 0x8001 not in the port's table") {
			t.Fatalf("%s: %+v", c.Name(), st)
		}
	}
	if ca.QPN() == pa.QPN() {
		t.Fatal("child shares the parent's QP")
	}
	// Traffic on the child while it is down is dropped and counted.
	tca.Inject(udp4("10.20.0.1", "10.20.0.2", 1, 2, []byte("too early")))
	waitFor(t, "drop_down", func() bool { return ca.Counter("drop_down") == 1 })

	tf.restartSM(t, sa.Config{SweepInterval: -1, Partitions: []sa.Partition{
		sa.DefaultPartition(),
		{Name: "p1", PKey: 0x0001, IPoIB: true, MTU: 5, Members: []sa.Member{
			{GUID: tf.f.HCAs[0].Port(1).GUID(), Full: true},
			{GUID: tf.f.HCAs[1].Port(1).GUID(), Full: true},
		}},
	}})
	tf.waitUp(t, ca)
	tf.waitUp(t, cb)
	tf.waitUp(t, pa)
	tf.waitUp(t, pb)
	<-tf.sm.Resweep() // the groups' forwarding is in place (see ifaceWith)
	if ca.MTU() != 4092 || tca.MTU() != 4092 || pa.MTU() != 2044 {
		t.Fatalf("MTUs: child %d (tun %d), parent %d", ca.MTU(), tca.MTU(), pa.MTU())
	}
	if got, want := ca.Info().Broadcast.String(), "00:ff:ff:ff:ff:12:40:1b:80:01:00:00:00:00:00:00:ff:ff:ff:ff"; got != want {
		t.Fatalf("child broadcast %s, want %s", got, want)
	}
	if st := cc.State(); st.Up {
		t.Fatal("C's child came up without the P_Key")
	}

	// A↔B on 0x8001, with 4 KiB packets. As for the parents below, the first ARP may
	// reach the switch before the SM programmed the new group's MFT entry: it is
	// retried on the interface's clock, which the first receive advances.
	for k := 0; k < 3; k++ {
		p := udp4("10.20.0.1", "10.20.0.2", 1, 2, bytes.Repeat([]byte{byte(k)}, 4092-28))
		tca.Inject(p)
		if got := tcb.recvAdvancing(t, tf.clk, 100*time.Millisecond); !bytes.Equal(got, p) {
			t.Fatal("A→B on 0x8001 differs")
		}
		r := icmpEcho4("10.20.0.2", "10.20.0.1", uint16(k), []byte("pong"))
		tcb.Inject(r)
		if got := tca.recv(t); !bytes.Equal(got, r) {
			t.Fatal("B→A on 0x8001 differs")
		}
	}
	// The parents still talk (they rejoined their broadcast group at the new SA). The
	// first ARP may reach the switch before the SM has programmed the group's new MFT
	// entry: it is retried on the interface's clock, and the ping sent again if the ARP
	// ran out of tries first (the parents need not rejoin before the resweep above).
	p := icmpEcho4("10.10.0.1", "10.10.0.2", 1, []byte("parent"))
	if got := resendAdvancing(t, tpa, tpb, p, tf.clk, 100*time.Millisecond); !bytes.Equal(got, p) {
		t.Fatal("parent A→B differs")
	}
	// C, on the default partition only, cannot reach 10.20.0.1: its ARP goes to the
	// default partition's group, where nobody owns the address.
	tpc.Inject(icmpEcho4("10.20.0.3", "10.20.0.1", 1, nil))
	for k := 0; k < 4; k++ {
		tf.clk.Advance(time.Second)
	}
	tca.nothing(t, 20*time.Millisecond)
	tpa.nothing(t, 20*time.Millisecond)
	if ca.Counter("rx_arp") != 1 {
		t.Fatalf("A's child saw ARP from outside the partition: %v", ca.Info().Counters)
	}

	// Deleting A's child: B's child can no longer reach it; the parents still can.
	ca.Close()
	tcb.Inject(icmpEcho4("10.20.0.2", "10.20.0.1", 9, []byte("gone")))
	tca.nothing(t, 20*time.Millisecond)
	tpa.Inject(p)
	if got := tpb.recv(t); !bytes.Equal(got, p) {
		t.Fatal("parent A→B after closing the child differs")
	}

	// The partition goes away again: B's child goes down (its P_Key left the table),
	// the parent stays up.
	tf.restartSM(t, sa.Config{SweepInterval: -1})
	waitFor(t, "B's child down", func() bool {
		st := cb.State()
		return !st.Up && strings.Contains(st.Reason, "P_Key 0x8001 not in the port's table")
	})
	tf.waitUp(t, pb)
	tcb.Inject(icmpEcho4("10.20.0.2", "10.20.0.1", 10, nil))
	waitFor(t, "drop while down", func() bool { return cb.Counter("drop_down") > 0 })
	tpb.Inject(icmpEcho4("10.10.0.2", "10.10.0.1", 11, []byte("parent again")))
	tpa.recvMatch(t, func(b []byte) bool { return bytes.Contains(b, []byte("parent again")) })
	_ = netip.Addr{}
}
