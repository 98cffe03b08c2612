package udplink

import (
	"fmt"
	"sync/atomic"
)

// DropReason says why a datagram (or an outgoing packet) was dropped.
type DropReason int

const (
	DropTruncated      DropReason = iota // longer than the largest message
	DropShort                            // shorter than a header (and tag)
	DropNotAllowed                       // no PSK, and the source is not in the allow-list
	DropAuth                             // the tag does not verify under any key
	DropVersion                          // unknown protocol version
	DropType                             // unknown message type, or one not valid here
	DropMalformed                        // a control message of the wrong length or content
	DropUnknownSession                   // a session message from no session (or an old one)
	DropReplay                           // sequence number seen before, or older than the window
	DropStale                            // a connect not newer than the last one for its GUID
	DropVCRC                             // data whose VCRC (IBA 7.8.2) is wrong
	DropTxDown                           // sent on a link whose session is gone
	DropTxOversize                       // an outgoing packet larger than a message carries
	DropTxError                          // the kernel refused the datagram
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{
	"truncated", "short", "not_allowed", "auth", "version", "type", "malformed",
	"unknown_session", "replay", "stale_connect", "vcrc", "tx_down", "tx_oversize", "tx_error",
}

func (r DropReason) String() string {
	if r >= 0 && r < numDropReasons {
		return dropReasonNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", int(r))
}

// DropReasons lists every reason, in order.
func DropReasons() []DropReason {
	out := make([]DropReason, numDropReasons)
	for i := range out {
		out[i] = DropReason(i)
	}
	return out
}

// Counters is a snapshot of an endpoint's counters.
type Counters struct {
	RxDatagrams, RxPackets, RxBytes uint64 // every datagram; data packets delivered and their bytes
	TxDatagrams, TxPackets, TxBytes uint64
	TxForwarded                     uint64 // data packets sent from the datagram they arrived in (a switch forwarding, no copy)
	Connects, Refused, Deaths       uint64 // sessions opened, refusals (sent or received), peers declared dead
	StaleHints                      uint64 // disconnects sent for sessions the listener does not have
	Drops                           [numDropReasons]uint64
}

// Dropped returns the count for one reason.
func (c Counters) Dropped(r DropReason) uint64 { return c.Drops[r] }

// Map returns the counters by name, drops as drop_<reason>, for control replies.
func (c Counters) Map() map[string]uint64 {
	m := map[string]uint64{
		"rx_datagrams": c.RxDatagrams, "rx_packets": c.RxPackets, "rx_bytes": c.RxBytes,
		"tx_datagrams": c.TxDatagrams, "tx_packets": c.TxPackets, "tx_bytes": c.TxBytes, "tx_forwarded": c.TxForwarded,
		"connects": c.Connects, "refused": c.Refused, "deaths": c.Deaths, "stale_hints": c.StaleHints,
	}
	for i, v := range c.Drops {
		m["drop_"+dropReasonNames[i]] = v
	}
	return m
}

type counters struct {
	rxDgrams, rxPkts, rxBytes atomic.Uint64
	txDgrams, txPkts, txBytes atomic.Uint64
	txForwarded               atomic.Uint64
	connects, refused, deaths atomic.Uint64
	hints                     atomic.Uint64
	drops                     [numDropReasons]atomic.Uint64
}

func (c *counters) drop(r DropReason) { c.drops[r].Add(1) }

func (c *counters) snapshot() Counters {
	s := Counters{
		RxDatagrams: c.rxDgrams.Load(), RxPackets: c.rxPkts.Load(), RxBytes: c.rxBytes.Load(),
		TxDatagrams: c.txDgrams.Load(), TxPackets: c.txPkts.Load(), TxBytes: c.txBytes.Load(),
		TxForwarded: c.txForwarded.Load(),
		Connects:    c.connects.Load(), Refused: c.refused.Load(), Deaths: c.deaths.Load(),
		StaleHints: c.hints.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = c.drops[i].Load()
	}
	return s
}
