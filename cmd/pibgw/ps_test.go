package main

import "testing"

// TestSessionDropped: ps's DROPPED column sums policing and full-ring drops only — direct
// rings' packets, sent and received, are no drops (issue 44: they showed as such).
func TestSessionDropped(t *testing.T) {
	c := map[string]uint64{"tx_packets": 100, "rx_packets": 90, "direct_tx_packets": 70, "direct_rx_packets": 60,
		"drop_rx_ring_full": 3, "police_slid": 2, "police_pkey": 1}
	if got := sessionDropped(c); got != 6 {
		t.Errorf("DROPPED %d, want 6 (3 ring full + 3 policed)", got)
	}
}
