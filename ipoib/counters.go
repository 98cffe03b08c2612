package ipoib

import "sync/atomic"

// counter names an interface counter; Info.Counters reports them by name.
type counter int

const (
	cRxPackets counter = iota
	cRxBytes
	cTxPackets
	cTxBytes
	cRxARP
	cTxARP
	cRxND
	cTxND
	cRxMulticast
	cTxMulticast

	// Drops, by reason.
	cDropNoNeighbor    // queue of an unresolved neighbour full
	cDropARPTimeout    // resolution failed: packets queued for it dropped
	cDropNoPath        // no PathRecord (or no AH) to the neighbour
	cDropTooBig        // packet above the interface MTU
	cDropTunWrite      // the IP stack refused a packet
	cDropUnknownType   // unknown EtherType received
	cDropOwnMulticast  // our own multicast looped back
	cDropDown          // interface down
	cDropMalformed     // truncated or malformed packet
	cDropNoGroup       // multicast group could not be joined
	cDropSendError     // post_send failed or the send completed in error
	cDropRecvError     // receive completion in error
	cDropWrongPKey     // received on another P_Key index
	cDropStackControl  // ND from the IP stack (pibgw does neighbour discovery itself)
	cDropNotForUs      // ARP/ND for somebody else
	cMembershipReports // IGMP/MLD reports taken from the stack
	cNeighborsResolved // neighbour entries that became reachable
	cNeighborsFailed   // resolutions that timed out
	cPathQueries       // PathRecord lookups made
	cRxBatches         // tun writes (rx_packets / rx_batches: packets per write)
	cTxGSO             // large segments from the stack cut into packets here
	cRxGRO             // received packets merged into a preceding one's segment
	cTxBatches         // tun reads
	cDropCtrlOverflow  // ARP/ND arriving faster than they are answered (ctrlrx.go)
	cTxAnnounce        // gratuitous ARPs and unsolicited NAs sent (admin.go)
	cRxAnnounce        // gratuitous ARPs received
	cDropNeighOverflow // the neighbour table was full (neigh.go: gc_thresh3)
	cDropGroupOverflow // the multicast group table was full
	cTxICMPTooBig      // ICMP "fragmentation needed" / ICMPv6 "packet too big" given the stack (icmp.go)
	cTxCM              // packets sent over connections (connected mode, cm.go)
	cRxCM              // packets received over connections
	cCMTxConnected     // connections we made
	cCMRxConnected     // connections peers made to us
	cCMReaped          // idle connections closed
	cCMFailed          // connections refused, timed out or broken
	cCMRejected        // connection requests we refused
	cCMTxRingFull      // connected-mode sends that waited for a send-ring slot (a completion)
	numCounters
)

var counterNames = [numCounters]string{
	cRxPackets:         "rx_packets",
	cRxBytes:           "rx_bytes",
	cTxPackets:         "tx_packets",
	cTxBytes:           "tx_bytes",
	cRxARP:             "rx_arp",
	cTxARP:             "tx_arp",
	cRxND:              "rx_nd",
	cTxND:              "tx_nd",
	cRxMulticast:       "rx_multicast",
	cTxMulticast:       "tx_multicast",
	cDropNoNeighbor:    "drop_no_neighbor",
	cDropARPTimeout:    "drop_arp_timeout",
	cDropNoPath:        "drop_no_path",
	cDropTooBig:        "drop_too_big",
	cDropTunWrite:      "drop_tun_write",
	cDropUnknownType:   "drop_unknown_ethertype",
	cDropOwnMulticast:  "drop_own_multicast",
	cRxBatches:         "rx_batches",
	cTxBatches:         "tx_batches",
	cTxGSO:             "tx_gso_segments",
	cRxGRO:             "rx_gro_merged",
	cDropDown:          "drop_down",
	cDropMalformed:     "drop_malformed",
	cDropNoGroup:       "drop_no_group",
	cDropSendError:     "drop_send_error",
	cDropRecvError:     "drop_recv_error",
	cDropWrongPKey:     "drop_wrong_pkey",
	cDropStackControl:  "drop_stack_nd",
	cDropNotForUs:      "drop_not_for_us",
	cMembershipReports: "membership_reports",
	cNeighborsResolved: "neighbors_resolved",
	cNeighborsFailed:   "neighbors_failed",
	cTxAnnounce:        "tx_announce",
	cRxAnnounce:        "rx_announce",
	cDropNeighOverflow: "drop_neigh_overflow",
	cDropGroupOverflow: "drop_group_overflow",
	cPathQueries:       "path_queries",
	cDropCtrlOverflow:  "drop_ctrl_overflow",
	cTxICMPTooBig:      "tx_icmp_too_big",
	cTxCM:              "tx_cm_packets",
	cRxCM:              "rx_cm_packets",
	cCMTxConnected:     "cm_tx_connections",
	cCMRxConnected:     "cm_rx_connections",
	cCMReaped:          "cm_reaped",
	cCMFailed:          "cm_failed",
	cCMRejected:        "cm_rejected",
	cCMTxRingFull:      "cm_tx_ring_full",
}

// counters are padded apart from nothing: the tx and rx loops touch different ones.
type counters [numCounters]atomic.Uint64

func (c *counters) add(k counter, n uint64) { c[k].Add(n) }
func (c *counters) inc(k counter)           { c[k].Add(1) }

func (c *counters) snapshot() map[string]uint64 {
	m := make(map[string]uint64, numCounters)
	for i := range c {
		m[counterNames[i]] = c[i].Load()
	}
	return m
}

// CounterNames lists the names Info.Counters uses, in a stable order.
func CounterNames() []string { return append([]string(nil), counterNames[:]...) }
