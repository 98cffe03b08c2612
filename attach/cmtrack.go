package attach

import (
	"math/rand/v2"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// The daemon disconnects a dead process's connections, as Linux's rdma_cm does when the
// kernel cleans up after a process (ucma closes its IDs, which sends DREQ): from the CM
// MADs that pass through it, it keeps each connection of a process once the REP has
// gone either way — the process's comm ID, the peer's, and where the peer's CM is —
// and forgets it at DREQ, DREP or REJ. When the process goes, the daemon sends a DREQ
// for each one, so its peers see DISCONNECTED instead of waiting forever.

type cmConn struct {
	port *hca.Port
	peer uint32 // the peer's comm ID
	addr hca.MADAddr
}

// trackOut notes a CM MAD the process sends (already checked).
func (x *session) trackOut(port *hca.Port, pk *wire.Packet) {
	m := pk.Payload
	local := wire.CMRep(m).LocalCommID() // every connection message starts with it
	switch wire.MAD(m).AttrID() {
	case wire.AttrCMRep: // passive side: the connection exists once we answer
		idx := port.FindPKey(pk.BTH.PKey())
		if idx < 0 {
			return
		}
		x.setConn(local, &cmConn{port: port, peer: wire.CMRep(m).RemoteCommID(), addr: hca.MADAddr{
			DLID: pk.LRH.DLID(), SL: pk.LRH.SL(), QPN: 1, QKey: hca.GSIQKey, PKeyIndex: uint16(idx)}})
	case wire.AttrCMDReq, wire.AttrCMDRep, wire.AttrCMRej:
		x.setConn(local, nil)
	}
}

// trackIn notes a CM MAD the daemon hands the process.
func (x *session) trackIn(port *hca.Port, pk *hca.Packet) {
	m := pk.Payload
	mine := wire.CMRep(m).RemoteCommID() // the receiver's comm ID, in every reply
	switch wire.MAD(m).AttrID() {
	case wire.AttrCMRep: // active side
		x.setConn(mine, &cmConn{port: port, peer: wire.CMRep(m).LocalCommID(), addr: hca.MADAddr{
			DLID: pk.LRH.SLID(), SL: pk.LRH.SL(), QPN: 1, QKey: hca.GSIQKey, PKeyIndex: pk.PKeyIndex}})
	case wire.AttrCMDReq, wire.AttrCMDRep, wire.AttrCMRej:
		x.setConn(mine, nil)
	}
}

func (x *session) setConn(local uint32, c *cmConn) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c == nil {
		delete(x.conns, local)
		return
	}
	if x.conns == nil {
		x.conns = make(map[uint32]*cmConn)
	}
	x.conns[local] = c
}

// disconnectAll sends a DREQ for each connection the gone process still had (IBA
// 12.6.10: Local Communication ID, Remote Communication ID, the peer's QPN is not
// checked by the receiving CM). The peer's DREP finds no one and is dropped.
func (x *session) disconnectAll() {
	x.mu.Lock()
	conns := x.conns
	x.conns = nil
	x.mu.Unlock()
	for local, c := range conns {
		mad := make([]byte, wire.MADLen)
		wire.NewCMMAD(mad, wire.AttrCMDReq, rand.Uint64())
		d := wire.CMDReq(mad)
		d.SetLocalCommID(local)
		d.SetRemoteCommID(c.peer)
		if err := c.port.SendMAD(c.addr, mad); err != nil {
			x.srv.log.Debug("attach: DREQ for a gone process", "err", err)
		}
	}
}
