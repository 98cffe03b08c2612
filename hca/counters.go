package hca

import "sync/atomic"

// Counter names one port counter. The first group are IBA PortCounters /
// PortCountersExtended (what perfquery reads, IBA 16.1.3.5 and 16.1.4.x) and PortInfo's
// violation counters; the rest are pibgw's own reasons for dropping a packet.
type Counter int

const (
	CntXmitData Counter = iota // in 4-byte words, as PortXmitData
	CntRcvData
	CntXmitPkts
	CntRcvPkts
	CntUnicastXmitPkts
	CntUnicastRcvPkts
	CntMulticastXmitPkts
	CntMulticastRcvPkts
	CntRcvErrors
	CntXmitDiscards
	CntVL15Dropped
	CntPKeyViolations // PortInfo:P_KeyViolations
	CntQKeyViolations // PortInfo:Q_KeyViolations

	CntDropMalformed // header chain, lengths, opcode (wire.Packet.Parse failed)
	CntDropICRC      // ICRC mismatch
	CntDropDLID      // DLID is not this port's
	CntDropPortState // port not Armed/Active for the packet
	CntDropNoQP      // destination QP does not exist on this port
	CntDropQPState   // QP not in a receiving state
	CntDropQPType    // opcode of another transport than the QP's
	CntDropNoRecvWQE // UD: no receive WQE posted (silently dropped, IBA 9.8)
	CntDropMcastNoGroup
	CntDropNoLink
	numCounters
)

var counterNames = [numCounters]string{
	"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
	"port_unicast_xmit_packets", "port_unicast_rcv_packets",
	"port_multicast_xmit_packets", "port_multicast_rcv_packets",
	"port_rcv_errors", "port_xmit_discards", "vl15_dropped",
	"pkey_violations", "qkey_violations",
	"drop_malformed", "drop_icrc", "drop_dlid", "drop_port_state", "drop_no_qp",
	"drop_qp_state", "drop_qp_type", "drop_no_recv_wqe", "drop_mcast_no_group", "drop_no_link",
}

func (c Counter) String() string {
	if c >= 0 && c < numCounters {
		return counterNames[c]
	}
	return "unknown"
}

// NumCounters is the number of counters a port keeps.
const NumCounters = int(numCounters)

// Counters is a port's counter set, updated atomically on the packet path.
type Counters struct {
	v [numCounters]atomic.Uint64
}

// Add adds n to counter c.
func (cs *Counters) Add(c Counter, n uint64) { cs.v[c].Add(n) }

// Inc adds one to counter c.
func (cs *Counters) Inc(c Counter) { cs.v[c].Add(1) }

// Get reads counter c.
func (cs *Counters) Get(c Counter) uint64 { return cs.v[c].Load() }

// Reset sets counter c to zero.
func (cs *Counters) Reset(c Counter) { cs.v[c].Store(0) }

// Snapshot returns every counter by name.
func (cs *Counters) Snapshot() map[string]uint64 {
	m := make(map[string]uint64, numCounters)
	for i := range cs.v {
		m[counterNames[i]] = cs.v[i].Load()
	}
	return m
}
