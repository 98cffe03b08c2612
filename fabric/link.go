// Package fabric is where packets travel: the Link seam (a port's attachment to its cable),
// in-process cables, the switch, and the wrappers that inject faults and capture traffic.
//
// Packets cross a Link as raw IBA packets: from the first LRH byte through the ICRC, without
// the VCRC. The VCRC is a per-hop check (IBA 7.8.2); it is computed only where a packet
// becomes observable (captures, UDP links), never on in-process hops.
package fabric

// Link is the transmit side of a cable as seen from the port that sends on it.
//
// Send may run the receiving side synchronously (an in-process cable delivers on the
// caller's goroutine), so a caller must not hold a lock that the receive path can take.
// Send does not retain pkts, nor the bytes they point to, after it returns: the caller may
// reuse its buffers at once. A Link that must keep a packet (delay, reorder, capture, UDP)
// copies it.
type Link interface {
	Send(pkts [][]byte)
}

// Receiver is the port at the far end of a link. Receive must not retain pkts, nor their
// bytes, after it returns, and must never block on the fabric.
type Receiver interface {
	Receive(pkts [][]byte)
}

// Port is anything a cable plugs into: an HCA port or a switch port.
type Port interface {
	Receiver
	// Attach gives the port the Link it transmits on; nil unplugs it.
	Attach(l Link)
}

// LinkFunc adapts a function to a Link.
type LinkFunc func(pkts [][]byte)

func (f LinkFunc) Send(pkts [][]byte) { f(pkts) }

// ReceiverFunc adapts a function to a Receiver.
type ReceiverFunc func(pkts [][]byte)

func (f ReceiverFunc) Receive(pkts [][]byte) { f(pkts) }
