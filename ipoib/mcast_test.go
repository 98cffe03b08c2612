package ipoib_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/sa"
)

// TestSendOnlyGroupsBoundedAndAged is issue 43 item 8 at the interface: packets to 400
// unresolved link-local IPv6 addresses solicit each in its solicited-node group, which
// the interface joins send-only; it holds at most MaxSendOnlyGroups of them (the SA sees
// no more), its own full memberships stay (a peer still resolves it), and once nothing is
// sent to them for NeighborTimeout (fake clock) the interface leaves them all.
func TestSendOnlyGroupsBoundedAndAged(t *testing.T) {
	tf := newTestFabric(t, 2, sa.Config{SweepInterval: -1})
	a, ta := tf.iface(t, 0, 0xFFFF, "ib0", "fd00::1/64")
	_, tb := tf.iface(t, 1, 0xFFFF, "ib1", "fd00::2/64")
	src := a.LinkLocal().String()
	settled := func() (int, int) {
		t.Helper()
		var joined, busy int
		waitFor(t, "the joins and leaves queued", func() bool {
			joined, busy = a.SendOnlyGroups()
			return len(ta.Inbound) == 0 && busy == 0
		})
		return joined, tf.agent.MulticastStats().SendOnlyGroups
	}
	most := 0
	for k := range 400 {
		ta.Inject(echo6(src, fmt.Sprintf("fe80::1:%x", 0x100+k), uint16(k), []byte("anyone?")))
		if k%50 == 49 {
			joined, atSA := settled()
			if joined > ipoib.MaxSendOnlyGroups || atSA > ipoib.MaxSendOnlyGroups {
				t.Fatalf("after %d destinations: %d send-only groups, %d at the SA (bound %d)", k+1, joined, atSA, ipoib.MaxSendOnlyGroups)
			}
			most = max(most, joined)
		}
	}
	if most != ipoib.MaxSendOnlyGroups {
		t.Fatalf("at most %d send-only groups, want the bound %d", most, ipoib.MaxSendOnlyGroups)
	}
	// The interface's own groups were not given up: B resolves A (NS to A's
	// solicited-node group) and pings it.
	p := echo6("fd00::2", "fd00::1", 1, []byte("still reachable"))
	tb.Inject(p)
	if got := ta.recvMatch(t, func(q []byte) bool { return bytes.Equal(q, p) }); !bytes.Equal(got, p) {
		t.Fatal("B → A differs")
	}
	// Nothing more is sent to the groups: the solicitations fail (3 s), then the groups
	// age out within 1.5 NeighborTimeout (the tests' one minute).
	for range 12 {
		tf.clk.Advance(10 * time.Second)
		settled()
	}
	waitFor(t, "the send-only groups left", func() bool {
		joined, _ := a.SendOnlyGroups()
		return joined == 0 && tf.agent.MulticastStats().SendOnlyGroups == 0
	})
	// Their address handles went with them (each counts against the device's max_ah).
	if ahs, err := tf.f.HCAs[0].Inspect(hca.KindAH); err != nil || len(ahs) > 16 {
		t.Fatalf("%d AHs left on the device after the groups left (%v)", len(ahs), err)
	}
	// A new destination joins again.
	ta.Inject(echo6(src, "fe80::2:1", 1, []byte("anyone?")))
	waitFor(t, "a new send-only join", func() bool {
		joined, _ := a.SendOnlyGroups()
		return joined == 1
	})
}
