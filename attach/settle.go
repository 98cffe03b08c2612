package attach

// Quiet reports whether both of the session's data rings are empty — the daemon has taken
// every packet this process sent (and transmitted or dropped it), and the mirror ports have
// taken every packet the daemon forwarded — and how many bytes were ever written into the
// two rings, a count that grows with every packet. A caller that sees the rings empty
// twice with the same count knows that nothing moved in between (hcatest's Fabric.Settle).
//
// Quiet takes, one after the other, the lock the mirror ports send under and the lock
// their packets are taken in under. The race detector does not see the rings' own
// synchronization (atomics in shared memory, mapped twice when both ends are in one
// process, as in tests); the locks show it what the rings imply: what this process did
// before it sent a packet, or while it took one in, happens before what the caller of
// Quiet does next, and what the caller did before happens before the packets this
// process takes in next.
func (s *Session) Quiet() (empty bool, written uint64) {
	s.txMu.Lock()
	txTail, txHead := s.tx.Indexes()
	s.txMu.Unlock()
	s.rxMu.Lock()
	rxTail, rxHead := s.rx.Indexes()
	s.rxMu.Unlock()
	return txTail == txHead && rxTail == rxHead, txHead + rxHead
}
