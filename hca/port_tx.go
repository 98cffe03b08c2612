package hca

import (
	"github.com/pibgw/pibgw/trace"
	"github.com/pibgw/pibgw/wire"
)

// Transmit sends packets out of the port (transports call it with finished packets, LRH
// through ICRC). Packets to the port's own LID are looped back inside the HCA, as an HCA
// does; multicast goes to the fabric and to the port's other attached QPs. The caller
// keeps ownership of pkts.
func (p *Port) Transmit(pkts [][]byte) {
	if trace.On() {
		p.traceTx(0, pkts)
	}
	p.transmit(pkts)
}

func (p *Port) transmit(pkts [][]byte) {
	c := &p.counters
	pi := p.info.Load()
	lb := p.link.Load()
	remote := p.dev.cfg.Remote != nil
	start := 0
	flush := func(end int) {
		if end > start {
			if lb == nil {
				c.Add(CntXmitDiscards, uint64(end-start))
				p.dropTx(CntDropNoLink, pkts[start:end])
			} else {
				lb.l.Send(pkts[start:end])
			}
		}
	}
	for i, b := range pkts {
		if len(b) < wire.LRHLen+wire.BTHLen {
			flush(i)
			start = i + 1
			c.Inc(CntXmitDiscards)
			continue
		}
		lrh := wire.LRH(b)
		dlid := lrh.DLID()
		// IBA 7.2: only an Active port sends data packets; SMPs (VL15) go out in any state.
		if pi.state != PortActive && lrh.VL() != 15 {
			flush(i)
			start = i + 1
			c.Inc(CntXmitDiscards)
			p.dropTx(CntDropPortState, pkts[i:i+1])
			continue
		}
		c.Inc(CntXmitPkts)
		c.Add(CntXmitData, uint64(len(b)+wire.VCRCLen)/4)
		switch {
		case isMulticastLID(dlid):
			c.Inc(CntMulticastXmitPkts)
			if !remote { // a mirror's daemon loops it back to every local member
				p.loopback(b)
			}
		case remote && dlid != permissiveLID && p.ownsLID(pi, dlid) && p.dev.lookupQP(remoteDQPN(b)) == nil:
			// To a QP of this port that is not in this process: the daemon loops it back.
			c.Inc(CntUnicastXmitPkts)
		case dlid != permissiveLID && p.ownsLID(pi, dlid):
			c.Inc(CntUnicastXmitPkts)
			flush(i)
			start = i + 1
			p.loopback(b)
		default:
			c.Inc(CntUnicastXmitPkts)
		}
	}
	flush(len(pkts))
}

func (p *Port) loopback(b []byte) {
	if isMulticastLID(wire.LRH(b).DLID()) {
		p.mcMu.RLock()
		n := len(p.mcast)
		p.mcMu.RUnlock()
		if n == 0 {
			return
		}
	}
	pk := packetPool.Get().(*Packet)
	p.receiveOne(pk, b, true)
	pk.Packet = wire.Packet{}
	pk.Raw = nil
	pk.runHandlers()
	packetPool.Put(pk)
}
