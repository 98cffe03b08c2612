package sa

import (
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// LinkRecord (IBA 15.2.5.13), SwitchInfoRecord (15.2.5.5), LinearForwardingTableRecord
// (15.2.5.6), P_KeyTableRecord (15.2.5.11), GUIDInfoRecord (15.2.5.18) and SMInfoRecord
// (15.2.5.10), MulticastForwardingTableRecord (15.2.5.8): the SM's view of the links, of
// the tables it read and programmed, and of itself, which opensm's SA serves too
// (saquery -x, SWIR, LFTR, PKTR, GIR, SMIR, MFTR).

var (
	linkRecordFields = []saField{
		{wire.LRCompFromLID, 0, 2}, {wire.LRCompFromPort, 2, 1}, {wire.LRCompToPort, 3, 1}, {wire.LRCompToLID, 4, 2},
	}
	switchInfoRecordFields = []saField{{wire.SWIRCompLID, 0, 2}}
	lftRecordFields        = []saField{{wire.LFTRCompLID, 0, 2}, {wire.LFTRCompBlock, 2, 2}}
	pkeyTableRecordFields  = []saField{{wire.PKTRCompLID, 0, 2}, {wire.PKTRCompBlock, 2, 2}, {wire.PKTRCompPort, 4, 1}}
	guidInfoRecordFields   = []saField{{wire.GIRCompLID, 0, 2}, {wire.GIRCompBlock, 2, 1}}
	mftRecordFields        = []saField{{wire.MFTRCompLID, 0, 2}} // Position and BlockNum: handleMFTRecord
	smInfoRecordFields     = []saField{
		{wire.SMIRCompLID, 0, 2}, {wire.SMIRCompGUID, 4, 8}, {wire.SMIRCompSMKey, 12, 8}, {wire.SMIRCompActCount, 20, 4},
	}
)

// portLID is the LID a record names a port by: its own for an end port, the switch's for
// a switch's external port (IBA 15.2.5.13).
func portLID(p *Port) uint16 {
	if p.Endport() {
		return p.LID
	}
	return p.Node.LID()
}

// tableQuery answers a Get or GetTable of records of recLen bytes: each calls emit with
// every record of the SM's topology; those the request's template matches on fields
// under its component mask are the answer.
func (a *Agent) tableQuery(m *hca.MAD, recLen int, fields []saField, each func(t *Topology, rec []byte, emit func())) {
	req, t, ok := a.startQuery(m)
	if !ok {
		return
	}
	mask := req.CompMask()
	q := req.Data()[:recLen]
	stride := wire.SARecordStride(recLen)
	b := a.getBuf()
	rec := make([]byte, recLen)
	each(t, rec, func() {
		if !saFieldsMatch(rec, q, mask, fields) {
			return
		}
		k := len(b.recs)
		b.recs = append(b.recs, make([]byte, stride)...)
		copy(b.recs[k:], rec)
	})
	a.replyRecords(m, b.recs, recLen)
	a.putBuf(b)
}

// handleLinkRecord: both directions of every link between two ports with LIDs.
func (a *Agent) handleLinkRecord(m *hca.MAD) {
	a.tableQuery(m, wire.LinkRecordLen, linkRecordFields, func(t *Topology, rec []byte, emit func()) {
		for _, n := range t.Nodes {
			for _, p := range n.Ports {
				if p == nil || p.Remote == nil || portLID(p) == 0 || portLID(p.Remote) == 0 {
					continue
				}
				clear(rec)
				r := wire.LinkRecord(rec)
				r.SetFromLID(portLID(p))
				r.SetFromPort(p.Num)
				r.SetToPort(p.Remote.Num)
				r.SetToLID(portLID(p.Remote))
				emit()
			}
		}
	})
}

func (a *Agent) handleSwitchInfoRecord(m *hca.MAD) {
	a.tableQuery(m, wire.SwitchInfoRecordLen, switchInfoRecordFields, func(t *Topology, rec []byte, emit func()) {
		for _, n := range t.Nodes {
			if !n.IsSwitch() || n.LID() == 0 {
				continue
			}
			clear(rec)
			r := wire.SwitchInfoRecord(rec)
			r.SetLID(n.LID())
			copy(r.SwitchInfo(), n.SwitchInfo[:])
			emit()
		}
	})
}

// handleLFTRecord: every switch's LFT blocks up to its LinearFDBTop, as programmed.
func (a *Agent) handleLFTRecord(m *hca.MAD) {
	a.tableQuery(m, wire.LFTRecordLen, lftRecordFields, func(t *Topology, rec []byte, emit func()) {
		for _, n := range t.Nodes {
			if !n.IsSwitch() || n.LID() == 0 {
				continue
			}
			top := int(wire.SwitchInfo(n.SwitchInfo[:]).LinearFDBTop())
			for blk := 0; blk <= top/64; blk++ {
				clear(rec)
				r := wire.LFTRecord(rec)
				r.SetLID(n.LID())
				r.SetBlock(uint16(blk))
				lft := r.LFT()
				for i := range lft {
					lft[i] = 0xFF // IBA 14.2.5.10: no route
					if lid := blk*64 + i; lid < len(n.LFT) && lid <= top {
						lft[i] = n.LFT[lid]
					}
				}
				emit()
			}
		}
	})
}

// handlePKeyTableRecord: the P_Key table blocks of every port that has one (CA ports;
// switch ports under partition enforcement), as programmed.
func (a *Agent) handlePKeyTableRecord(m *hca.MAD) {
	a.tableQuery(m, wire.PKeyTableRecordLen, pkeyTableRecordFields, func(t *Topology, rec []byte, emit func()) {
		for _, n := range t.Nodes {
			for _, p := range n.Ports {
				if p == nil || portLID(p) == 0 || len(p.PKeys) == 0 {
					continue
				}
				for blk := 0; blk*32 < len(p.PKeys); blk++ {
					clear(rec)
					r := wire.PKeyTableRecord(rec)
					r.SetLID(portLID(p))
					r.SetBlock(uint16(blk))
					if n.IsSwitch() {
						r.SetPort(p.Num) // reserved for a CA (IBA 15.2.5.11)
					}
					for i := 0; i < 32 && blk*32+i < len(p.PKeys); i++ {
						r.SetPKey(i, p.PKeys[blk*32+i])
					}
					emit()
				}
			}
		}
	})
}

// handleGUIDInfoRecord: block 0 of every end port's GUIDInfo, its port GUID first: the
// fabric's ports have a GUIDCap of one.
func (a *Agent) handleGUIDInfoRecord(m *hca.MAD) {
	a.tableQuery(m, wire.GUIDInfoRecordLen, guidInfoRecordFields, func(t *Topology, rec []byte, emit func()) {
		for _, n := range t.Nodes {
			for _, p := range n.Ports {
				if p == nil || !p.Endport() || p.LID == 0 {
					continue
				}
				clear(rec)
				r := wire.GUIDInfoRecord(rec)
				r.SetLID(p.LID)
				r.SetGUID(0, p.GUID)
				emit()
			}
		}
	})
}

// handleSMInfoRecord: the one SM of the subnet, pibgw's, at its port's LID (pibgw runs one
// SM per subnet); its SM_Key reads as zero, as its SMInfo does.
func (a *Agent) handleSMInfoRecord(m *hca.MAD) {
	a.tableQuery(m, wire.SMInfoRecordLen, smInfoRecordFields, func(t *Topology, rec []byte, emit func()) {
		if a.cfg.SMInfo == nil || t.SMLID == 0 {
			return
		}
		clear(rec)
		r := wire.SMInfoRecord(rec)
		r.SetLID(t.SMLID)
		var info [wire.SMPDataLen]byte
		a.cfg.SMInfo(info[:])
		copy(r.SMInfo(), info[:])
		emit()
	})
}

// handleMFTRecord: every switch's MFT blocks, from block 0 to the last with an MLID in
// use and for every position its ports need (16 ports each, port 0 included), as the SM
// programmed them (IBA 15.2.5.8); Position and BlockNum, sub-byte fields, are matched
// here.
func (a *Agent) handleMFTRecord(m *hca.MAD) {
	req := wire.SAMAD(m.Data)
	mask, q := req.CompMask(), wire.MFTRecord(req.Data()[:wire.MFTRecordLen])
	a.tableQuery(m, wire.MFTRecordLen, mftRecordFields, func(t *Topology, rec []byte, emit func()) {
		if a.cfg.MFTs == nil {
			return
		}
		mfts := a.cfg.MFTs()
		for _, n := range t.Nodes {
			entries := mfts[n.GUID]
			if !n.IsSwitch() || n.LID() == 0 || len(entries) == 0 {
				continue
			}
			lastBlock := 0
			for mlid := range entries {
				lastBlock = max(lastBlock, int(mlid-mlidBase)/mftBlockLen)
			}
			for blk := 0; blk <= lastBlock; blk++ {
				for pos := 0; pos <= n.NumPorts/mftPortsPerPos; pos++ {
					if mask&wire.MFTRCompPosition != 0 && int(q.Position()) != pos ||
						mask&wire.MFTRCompBlock != 0 && int(q.Block()) != blk {
						continue
					}
					clear(rec)
					r := wire.MFTRecord(rec)
					r.SetLID(n.LID())
					r.SetPositionBlock(uint8(pos), uint16(blk))
					for i := 0; i < mftBlockLen; i++ {
						e := mftEntry(entries[uint16(mlidBase+blk*mftBlockLen+i)])
						r.SetMask(i, e.bits16(pos))
					}
					emit()
				}
			}
		}
	})
}
