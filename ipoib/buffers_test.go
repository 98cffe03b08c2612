package ipoib_test

import (
	"testing"

	"github.com/pibgw/pibgw/sa"
)

// The receive ring is made as it is needed (issue 43 item 7: every child held 1 MiB of
// posted buffers from its creation): none while the interface cannot come up, a few once
// it is up, the whole ring once a burst used half of them — and nothing of a burst is
// lost meanwhile.
func TestReceiveRingGrows(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	_, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	b, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	// A child whose P_Key is not in the port's table posts nothing.
	c, _ := tf.iface(t, 1, 0x8123, "ib1.8123")
	if c.State().Up {
		t.Fatal("ib1.8123 up without its P_Key in the table")
	}
	if n := c.PostedReceives(); n != 0 {
		t.Errorf("a child that is down posted %d receive buffers, want 0", n)
	}
	start := b.PostedReceives()
	if start == 0 || start > 64 {
		t.Fatalf("ib1 posted %d receive buffers at bring-up, want 1–64", start)
	}
	sendUntilDelivered(t, ta, tb, udp4("10.10.0.1", "10.10.0.2", 1000, 2000, []byte("resolve")))
	// Bursts until the ring has grown to its length (256).
	const burst = 500
	for round := 0; b.PostedReceives() < 256; round++ {
		if round == 20 {
			t.Fatalf("after %d bursts of %d packets, %d receive buffers posted, want 256", round, burst, b.PostedReceives())
		}
		go func() {
			for k := range burst {
				ta.Inject(udp4("10.10.0.1", "10.10.0.2", 1000, 2000, []byte{byte(k), byte(k >> 8)}))
			}
		}()
		for range burst {
			tb.recv(t)
		}
	}
}

// The control slots (ARP, ND, packets that waited for a neighbour) are made a few at a
// time as sends need them: an idle interface has a handful, not 64 of 4 KiB.
func TestControlSlotsOnDemand(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "10.10.0.1/24")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "10.10.0.2/24")
	sendUntilDelivered(t, ta, tb, udp4("10.10.0.1", "10.10.0.2", 1000, 2000, []byte("resolve")))
	if n := a.ControlSlots(); n == 0 || n > 16 {
		t.Errorf("ib0 made %d control slots for its announcements and one ARP exchange, want 1–16", n)
	}
}
