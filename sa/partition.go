package sa

import (
	"fmt"
	"slices"
)

// Partitions in the spirit of opensm's partitions.conf:
//
//	Default=0x7fff, ipoib : ALL=full ;
//	storage=0x0002, ipoib, mtu=5 : 0x0002c90300000301=full, 0x0002c90300000401 ;
//
// Each partition has a name, a 15-bit P_Key and members; a member is a port GUID or ALL,
// full or limited. A port's P_Key table gets one entry per partition it belongs to, the
// P_Key with bit 15 set for a full member and clear for a limited one (IBA 10.9.1). The
// default partition 0x7fff comes first (index 0, where QP1 traffic looks, IBA 10.9.2).

// Member is one partition member.
type Member struct {
	// GUID is the member's port GUID; ignored when All is set.
	GUID uint64
	// All makes every end port (CA ports and switch port 0) a member.
	All bool
	// Full makes the member a full member; otherwise it is a limited member.
	Full bool
}

// Partition is one configured partition.
type Partition struct {
	Name string
	// PKey is the 15-bit partition key (bit 15 is ignored).
	PKey    uint16
	Members []Member
	// IPoIB asks the SA to pre-create the partition's IPoIB broadcast group.
	IPoIB bool
	// Broadcast-group parameters for the SA (MCMemberRecord): MTU and Rate in IBA
	// encodings (0: MTU 2048 = 4, rate 10 Gb/s = 3), SL, and Q_Key (0: 0x0B1B).
	MTU  uint8
	Rate uint8
	SL   uint8
	QKey uint32
}

// DefaultPKey is the default partition's key (IBA 10.9.1.2).
const DefaultPKey = 0x7FFF

// DefaultPartition is opensm's default: "Default=0x7fff, ipoib : ALL=full ;".
func DefaultPartition() Partition {
	return Partition{Name: "Default", PKey: DefaultPKey, Members: []Member{{All: true, Full: true}}, IPoIB: true}
}

// BroadcastQKey is opensm's default Q_Key for IPoIB broadcast groups.
const BroadcastQKey = 0x0B1B

// normalizePartitions validates ps and returns it with the default partition first,
// P_Keys reduced to 15 bits and defaults filled in.
func normalizePartitions(ps []Partition) ([]Partition, error) {
	out := make([]Partition, 0, len(ps)+1)
	seen := make(map[uint16]string)
	hasDefault := false
	for i, p := range ps {
		p.PKey &= 0x7FFF
		if p.PKey == 0 {
			return nil, fmt.Errorf("sa: partition %d (%q): P_Key 0 is invalid", i, p.Name)
		}
		if prev, dup := seen[p.PKey]; dup {
			return nil, fmt.Errorf("sa: partition %q: P_Key %#x already used by %q", p.Name, p.PKey, prev)
		}
		seen[p.PKey] = p.Name
		if p.QKey == 0 {
			p.QKey = BroadcastQKey
		}
		if p.MTU == 0 {
			p.MTU = MTU2048
		}
		if p.Rate == 0 {
			p.Rate = 3 // 10 Gb/s (IBA 15.2.5.16 rate encoding)
		}
		p.Members = slices.Clone(p.Members)
		if p.PKey == DefaultPKey {
			hasDefault = true
			out = slices.Insert(out, 0, p)
			continue
		}
		out = append(out, p)
	}
	if !hasDefault {
		d := DefaultPartition()
		d.QKey, d.MTU, d.Rate = BroadcastQKey, MTU2048, 3
		out = slices.Insert(out, 0, d)
	}
	if len(out) > pkeyBlockLen {
		return nil, fmt.Errorf("sa: %d partitions, at most %d fit a P_Key table", len(out), pkeyBlockLen)
	}
	return out, nil
}

// Membership returns the P_Key port guid holds in p (bit 15 set for full members) and
// whether it is a member at all. The SM's own port is always a full member of the
// default partition, so that every port can reach the SA.
func (p *Partition) Membership(guid uint64, smPort bool) (uint16, bool) {
	member, full := false, false
	for _, m := range p.Members {
		if m.All || m.GUID == guid {
			member = true
			full = full || m.Full
		}
	}
	if smPort && p.PKey == DefaultPKey {
		member, full = true, true
	}
	if !member {
		return 0, false
	}
	if full {
		return p.PKey | 0x8000, true
	}
	return p.PKey, true
}

// pkeyTable builds the P_Key table of end port guid.
func pkeyTable(parts []Partition, guid uint64, smPort bool, capacity int) []uint16 {
	if capacity <= 0 || capacity > pkeyBlockLen {
		capacity = pkeyBlockLen
	}
	t := make([]uint16, capacity)
	i := 0
	for k := range parts {
		if key, ok := parts[k].Membership(guid, smPort); ok && i < capacity {
			t[i] = key
			i++
		}
	}
	return t
}

// SetPartitions replaces the partitions on a running SM (pibgw partition add, del): it
// validates them as New does, and a heavy sweep programs every port's P_Key table from
// them (IBA 14.2.5.7: the SM sets PKeyTable); the SA creates the broadcast groups of the
// new ones from the Topology it publishes. The channel is closed when that sweep is done.
func (sm *SM) SetPartitions(ps []Partition) (<-chan struct{}, error) {
	parts, err := normalizePartitions(ps)
	if err != nil {
		return nil, err
	}
	sm.mu.Lock()
	sm.newParts = parts
	sm.mu.Unlock()
	return sm.Resweep(), nil
}

// Partitions returns the partitions the last heavy sweep programmed, the default one
// first.
func (sm *SM) Partitions() []Partition {
	if t := sm.topo.Load(); t != nil {
		return slices.Clone(t.Partitions)
	}
	return nil
}

// assignPKeys computes the P_Key table of every CA port (and, with enforcement, of the
// switch ports facing them).
func (sm *SM) assignPKeys(s *sweep) {
	// The partitions change only here, on the driver's goroutine, which alone reads
	// sm.cfg.Partitions during a sweep.
	sm.mu.Lock()
	if sm.newParts != nil {
		sm.cfg.Partitions, sm.newParts = sm.newParts, nil
	}
	sm.mu.Unlock()
	parts := sm.cfg.Partitions
	for _, n := range s.topo.Nodes {
		if n.IsSwitch() {
			continue
		}
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			p.PKeys = pkeyTable(parts, p.GUID, n == s.root && p.Num == sm.port.Num(), int(n.PartitionCap))
			if sm.cfg.PartitionEnforcement && p.linked() && p.Remote.Node.IsSwitch() {
				// The switch port admits what the CA port may send or receive: its
				// P_Keys with full membership (the CA's own table decides limited).
				r := p.Remote
				r.PKeys = make([]uint16, len(p.PKeys))
				for i, k := range p.PKeys {
					if k != 0 {
						r.PKeys[i] = k | 0x8000
					}
				}
			}
		}
	}
}
