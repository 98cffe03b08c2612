package attach

import (
	"sync/atomic"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/wire"
)

// The daemon checks every packet an attached process sends, as an HCA checks what its
// driver posts: the process may only send what its own QPs could have built. A packet
// that fails is dropped and counted (pibgw ps); nothing of it leaves the port.

type counter int

const (
	cntTxPackets  counter = iota // packets sent on the process's behalf
	cntRxPackets                 // packets handed to the process
	cntRxRingFull                // packets for the process dropped: its ring was full
	cntMalformed                 // not a packet a port could send
	cntSLID                      // SLID not the port's LID (LMC range)
	cntSrcQP                     // source QP not the process's
	cntPKey                      // P_Key not in the port's table
	cntQP0                       // QP0 / VL15 traffic
	cntMAD                       // a MAD of a class or ID the process did not register
	cntQKey                      // a controlled Q_Key from a QP that may not use it
	cntSGID                      // GRH source GID not the port's
	cntDirectTx                  // of tx_packets: sent through direct rings (direct.go)
	cntDirectRx                  // of rx_packets: received through direct rings
	numCounters
)

var counterNames = [numCounters]string{
	"tx_packets", "rx_packets", "drop_rx_ring_full", "police_malformed", "police_slid",
	"police_src_qp", "police_pkey", "police_qp0", "police_mad", "police_qkey", "police_sgid",
	"direct_tx_packets", "direct_rx_packets",
}

type policeCounters [numCounters]atomic.Uint64

func (c *policeCounters) inc(k counter)           { c[k].Add(1) }
func (c *policeCounters) add(k counter, n uint64) { c[k].Add(n) }
func (c *policeCounters) get(k counter) uint64    { return c[k].Load() }

func (c *policeCounters) snapshot() map[string]uint64 {
	m := make(map[string]uint64, numCounters)
	for i := range c {
		m[counterNames[i]] = c[i].Load()
	}
	return m
}

// check applies the rules to one packet (a private copy) the process sent on port.
func (x *session) check(dev int, port *hca.Port, b []byte) bool {
	c := &x.police
	var pk wire.Packet
	if err := pk.Parse(b); err != nil || pk.BTH == nil {
		c.inc(cntMalformed) // raw packets too: no attached QP type sends them
		return false
	}
	if bad := portRules(&pk, port); bad != 0 {
		c.inc(bad)
		return false
	}
	if pk.DETH == nil {
		// RC and UC packets carry no source QP (IBA 9.2); their receivers accept only
		// the PSNs of the connection they are in.
		return true
	}
	if pk.DETH.SrcQP() == 1 {
		return x.checkMAD(port, &pk)
	}
	if bad := udRules(&pk, x.ownsQPN(dev, pk.DETH.SrcQP())); bad != 0 {
		c.inc(bad)
		return false
	}
	return true
}

// portRules are the checks of a packet's headers against the port that sent it: 0 if it
// passes, else the rule it broke. The daemon applies them to what a process sends
// through it, the receiver of a direct ring to what it finds there (direct.go).
func portRules(pk *wire.Packet, port *hca.Port) counter {
	// IBA 7.6.5, 13.5.1: QP0 and VL15 belong to the subnet management agents, which
	// live in the daemon.
	if pk.LRH.VL() == 15 || pk.BTH.DestQP() == 0 || pk.DETH != nil && pk.DETH.SrcQP() == 0 {
		return cntQP0
	}
	// IBA 7.11.1: a port sends from its base LID plus path bits below its LMC.
	lid, lmc := port.LID(), port.LMC()
	if slid := pk.LRH.SLID(); lid == 0 || slid>>lmc != lid>>lmc {
		return cntSLID
	}
	// IBA 10.9.2: a QP's P_Key is an entry of its port's table.
	pkey := pk.BTH.PKey()
	if pkey&0x7FFF == 0 || port.FindPKey(pkey) < 0 {
		return cntPKey
	}
	if pk.GRH != nil {
		if g, _ := port.GID(0); pk.GRH.SGID() != g {
			return cntSGID
		}
	}
	return 0
}

// udRules are the checks of a datagram's DETH (not from QP1): its source QP is the
// sender's (owned), its Q_Key is not a controlled one.
func udRules(pk *wire.Packet, owned bool) counter {
	if !owned {
		return cntSrcQP
	}
	// A Q_Key with the high-order bit set is a controlled Q_Key that only privileged
	// consumers may send with (QP1's 0x80010000 among them); Linux's uverbs refuses it
	// to unprivileged QPs the same way.
	if pk.DETH.QKey()&0x80000000 != 0 {
		return cntQKey
	}
	return 0
}

// checkMAD lets a process send from QP1 only CM MADs of its own connections: the comm
// ID (or SIDR request ID) it chose carries its session's prefix.
func (x *session) checkMAD(port *hca.Port, pk *wire.Packet) bool {
	c := &x.police
	if len(pk.Payload) != wire.MADLen || wire.MAD(pk.Payload).MgmtClass() != wire.MgmtClassCM {
		c.inc(cntMAD)
		return false
	}
	if id, ok := ibcm.SenderID(pk.Payload); ok && ibcm.IDPrefixOf(id) != x.id {
		c.inc(cntMAD)
		return false
	}
	x.trackOut(port, pk)
	return true
}
