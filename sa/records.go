package sa

import (
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// NodeRecord (IBA 15.2.5.2), PortInfoRecord (15.2.5.3) and ServiceRecord (15.2.5.14).

// saField is one component of a record: its component-mask bit and its bytes.
type saField struct {
	bit     uint64
	off, ln int
}

// saFieldsMatch compares rec with query on the masked whole-byte fields.
func saFieldsMatch(rec, query []byte, mask uint64, fields []saField) bool {
	for _, f := range fields {
		if mask&f.bit == 0 {
			continue
		}
		for i := f.off; i < f.off+f.ln; i++ {
			if rec[i] != query[i] {
				return false
			}
		}
	}
	return true
}

var nodeRecordFields = []saField{
	{wire.NRCompLID, 0, 2}, {wire.NRCompBaseVersion, 4, 1}, {wire.NRCompClassVersion, 5, 1},
	{wire.NRCompNodeType, 6, 1}, {wire.NRCompNumPorts, 7, 1}, {wire.NRCompSystemImageGUID, 8, 8},
	{wire.NRCompNodeGUID, 16, 8}, {wire.NRCompPortGUID, 24, 8}, {wire.NRCompPartitionCap, 32, 2},
	{wire.NRCompDeviceID, 34, 2}, {wire.NRCompRevision, 36, 4}, {wire.NRCompLocalPortNum, 40, 1},
	{wire.NRCompVendorID, 41, 3}, {wire.NRCompNodeDescription, 44, 64},
}

var portInfoRecordFields = []saField{
	{wire.PIRCompEndportLID, 0, 2}, {wire.PIRCompPortNum, 2, 1}, {wire.PIRCompOptions, 3, 1},
	{wire.PIRCompMKey, 4, 8}, {wire.PIRCompGIDPrefix, 12, 8}, {wire.PIRCompLID, 20, 2},
	{wire.PIRCompMasterSMLID, 22, 2}, {wire.PIRCompCapMask, 24, 4},
}

// PIRAnyCapBits, in the attribute modifier of a PortInfoRecord query with the
// CapabilityMask component, asks for the ports with any of the query's CapabilityMask
// bits rather than exactly that mask: opensm's "enhanced component mask"
// (osm_sa_portinfo_record.c), which saquery -s uses to find the IsSM and IsSMdisabled ports.
const PIRAnyCapBits = 1 << 31

// fillNodeRecord writes the NodeRecord of node n as seen through end port p.
func fillNodeRecord(r wire.NodeRecord, n *Node, p *Port) {
	clear(r)
	r.SetLID(p.LID)
	ni := r.NodeInfo()
	copy(ni, n.NodeInfo[:wire.NodeInfoLen])
	// The record names the port it was read through (IBA 15.2.5.2): PortGUID and
	// LocalPortNum of a CA port, port 0 of a switch.
	ni[0], ni[1], ni[2], ni[3] = wire.MADBaseVersion, wire.ClassVersionSM, n.Type, uint8(n.NumPorts)
	if n.SystemImageGUID != 0 {
		be.PutUint64(ni[4:], n.SystemImageGUID)
	}
	be.PutUint64(ni[12:], n.GUID)
	be.PutUint64(ni[20:], p.GUID)
	ni[36] = p.Num
	copy(r.NodeDescription(), n.Description)
}

// startQuery checks a Get/GetTable query and fetches the SM's topology, answering the
// error itself when it cannot go on.
func (a *Agent) startQuery(m *hca.MAD) (wire.SAMAD, *Topology, bool) {
	req := wire.SAMAD(m.Data)
	if method := req.MAD().Method(); method != wire.MethodGet && method != wire.MethodGetTable {
		a.replyError(m, wire.StatusMethodAttrNotSupp)
		return nil, nil, false
	}
	t := a.topology()
	if t == nil {
		a.replyError(m, wire.SAStatusNoResources)
		return nil, nil, false
	}
	return req, t, true
}

func (a *Agent) handleNodeRecord(m *hca.MAD) {
	a.tableQuery(m, wire.NodeRecordLen, nodeRecordFields, func(t *Topology, rec []byte, emit func()) {
		for _, n := range t.Nodes {
			for _, p := range n.Ports {
				if p == nil || !p.Endport() || p.LID == 0 {
					continue
				}
				fillNodeRecord(rec, n, p)
				emit()
			}
		}
	})
}

func (a *Agent) handlePortInfoRecord(m *hca.MAD) {
	req, t, ok := a.startQuery(m)
	if !ok {
		return
	}
	mask := req.CompMask()
	q := req.Data()[:wire.PortInfoRecordLen]
	// PIRAnyCapBits: a record matches with any of the query's CapabilityMask bits (none
	// with a mask of none, as opensm's).
	anyCap := mask&wire.PIRCompCapMask != 0 && req.MAD().AttrMod()&PIRAnyCapBits != 0
	if anyCap {
		mask &^= wire.PIRCompCapMask
	}
	stride := wire.SARecordStride(wire.PortInfoRecordLen)
	b := a.getBuf()
	var rec [wire.PortInfoRecordLen]byte
	for _, n := range t.Nodes {
		lid := n.LID()
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			r := wire.PortInfoRecord(rec[:])
			clear(rec[:])
			if p.Endport() {
				r.SetEndportLID(p.LID)
			} else {
				r.SetEndportLID(lid)
			}
			if r.EndportLID() == 0 {
				continue
			}
			r.SetPortNum(p.Num)
			copy(r.PortInfo(), p.Info[:wire.PortInfoLen])
			// IBA 15.2.5.3: M_Key is not disclosed.
			clear(r.PortInfo()[0:8])
			if !saFieldsMatch(rec[:], q, mask, portInfoRecordFields) ||
				anyCap && wire.PortInfoRecord(rec[:]).CapMask()&wire.PortInfoRecord(q).CapMask() == 0 {
				continue
			}
			k := len(b.recs)
			b.recs = append(b.recs, make([]byte, stride)...)
			copy(b.recs[k:], rec[:])
		}
	}
	a.replyRecords(m, b.recs, wire.PortInfoRecordLen)
	a.putBuf(b)
}

// serviceEntry is a registered ServiceRecord and when its lease ends.
type serviceEntry struct {
	rec     [wire.ServiceRecordLen]byte
	expires time.Time // zero: never
}

// srKeyMask is what identifies a registration: a Set with the same ServiceID,
// ServiceGID and ServiceP_Key replaces it (IBA 15.2.5.14).
const srKeyMask = wire.SRCompID | wire.SRCompGID | wire.SRCompPKey

// expireLocked drops services whose lease has run out.
func (a *Agent) expireLocked(now time.Time) {
	j := 0
	for _, s := range a.services {
		if !s.expires.IsZero() && !now.Before(s.expires) {
			continue
		}
		a.services[j] = s
		j++
	}
	clear(a.services[j:])
	a.services = a.services[:j]
}

func (a *Agent) handleServiceRecord(m *hca.MAD) {
	req := wire.SAMAD(m.Data)
	mask := req.CompMask()
	q := wire.ServiceRecord(req.Data()[:wire.ServiceRecordLen])
	now := a.clk.Now()
	switch req.MAD().Method() {
	case wire.MethodSet:
		if !a.smKeyOK(req) {
			a.replyError(m, wire.SAStatusDenied)
			return
		}
		if mask&(wire.SRCompID|wire.SRCompGID) != wire.SRCompID|wire.SRCompGID {
			a.replyError(m, wire.SAStatusInsufficientComponents)
			return
		}
		t := a.topology()
		if t == nil || portByGID(t, q.GID()) == nil {
			a.replyError(m, wire.SAStatusInvalidGID)
			return
		}
		e := &serviceEntry{}
		copy(e.rec[:], q)
		r := wire.ServiceRecord(e.rec[:])
		if mask&wire.SRCompPKey == 0 || r.PKey() == 0 {
			r.SetPKey(0xFFFF)
		}
		if mask&wire.SRCompLease == 0 {
			r.SetLease(wire.ServiceLeaseInfinite)
		}
		if l := r.Lease(); l != wire.ServiceLeaseInfinite {
			e.expires = now.Add(time.Duration(l) * time.Second)
		}
		a.mu.Lock()
		a.expireLocked(now)
		replaced := false
		for i, s := range a.services {
			if wire.ServiceRecordMatches(s.rec[:], r, srKeyMask) {
				a.services[i] = e
				replaced = true
				break
			}
		}
		if !replaced {
			a.services = append(a.services, e)
		}
		a.mu.Unlock()
		a.replyRecord(m, e.rec[:])
	case wire.MethodDelete:
		if !a.smKeyOK(req) {
			a.replyError(m, wire.SAStatusDenied)
			return
		}
		a.mu.Lock()
		a.expireLocked(now)
		var del []byte
		j := 0
		for _, s := range a.services {
			if del == nil && wire.ServiceRecordMatches(s.rec[:], q, mask) {
				del = append([]byte(nil), s.rec[:]...)
				continue
			}
			a.services[j] = s
			j++
		}
		clear(a.services[j:])
		a.services = a.services[:j]
		a.mu.Unlock()
		if del == nil {
			a.replyError(m, wire.SAStatusNoRecords)
			return
		}
		a.replyRecord(m, del)
	case wire.MethodGet, wire.MethodGetTable:
		stride := wire.SARecordStride(wire.ServiceRecordLen)
		b := a.getBuf()
		a.mu.Lock()
		a.expireLocked(now)
		for _, s := range a.services {
			if !wire.ServiceRecordMatches(s.rec[:], q, mask) {
				continue
			}
			k := len(b.recs)
			b.recs = append(b.recs, make([]byte, stride)...)
			copy(b.recs[k:], s.rec[:])
		}
		a.mu.Unlock()
		a.replyRecords(m, b.recs, wire.ServiceRecordLen)
		a.putBuf(b)
	default:
		a.replyError(m, wire.StatusMethodAttrNotSupp)
	}
}
