package ipoib

import "testing"

// TestControlQueueBounded: the completion handler's hand-off of ARP/ND never blocks; past
// the bound, packets are dropped and counted, and the queued ones are copies (the
// receive buffer is re-posted at once).
func TestControlQueueBounded(t *testing.T) {
	i := &Interface{ctl: control{rx: make(chan ctrlPacket, ctrlRxLen)}}
	buf := []byte{1, 2, 3}
	const sent = ctrlRxLen + 44
	for range sent {
		i.queueControl(EtherTypeARP, buf) // nobody receives: must not block
	}
	if got := i.cnt[cDropCtrlOverflow].Load(); got != sent-ctrlRxLen {
		t.Fatalf("drop_ctrl_overflow = %d, want %d", got, sent-ctrlRxLen)
	}
	if len(i.ctl.rx) != ctrlRxLen {
		t.Fatalf("queued %d, want %d", len(i.ctl.rx), ctrlRxLen)
	}
	buf[0] = 9
	if p := <-i.ctl.rx; p.pkt[0] != 1 || p.etype != EtherTypeARP {
		t.Fatalf("queued packet %v (etype %#x) is not a copy of what was received", p.pkt, p.etype)
	}
}
