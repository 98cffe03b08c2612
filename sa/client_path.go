package sa

import (
	"context"
	"time"

	"github.com/pibgw/pibgw/wire"
)

// PathQuery names the path a PathRecord query asks for. Zero fields are left out of the
// component mask; the source defaults to the client's port (the SA takes the requester's
// port), and at least DGID or DLID must be set.
type PathQuery struct {
	DGID wire.GID
	DLID uint16
	SGID wire.GID
	SLID uint16
	// PKey, when non-zero, is the partition the path must be in.
	PKey uint16
	// ServiceID, when non-zero, is passed to the SA (IBA 15.2.5.16).
	ServiceID uint64
	// SL, when HasSL is set, is the service level asked for.
	SL    uint8
	HasSL bool
	// Reversible asks for a path usable in both directions (RC, UC).
	Reversible bool
}

// Path is a PathRecord as the client returns it.
type Path struct {
	ServiceID      uint64
	DGID, SGID     wire.GID
	DLID, SLID     uint16
	RawTraffic     bool
	FlowLabel      uint32
	HopLimit       uint8
	TClass         uint8
	Reversible     bool
	NumbPath       uint8
	PKey           uint16
	QoSClass       uint16
	SL             uint8
	MTU            uint8 // IBA encoding (hca.MTU)
	Rate           uint8 // IBA encoding
	PacketLifeTime uint8
	Preference     uint8
}

// PathFromRecord decodes a PathRecord.
func PathFromRecord(r wire.PathRecord) Path {
	return Path{
		ServiceID: r.ServiceID(), DGID: r.DGID(), SGID: r.SGID(), DLID: r.DLID(), SLID: r.SLID(),
		RawTraffic: r.RawTraffic(), FlowLabel: r.FlowLabel(), HopLimit: r.HopLimit(), TClass: r.TClass(),
		Reversible: r.Reversible(), NumbPath: r.NumbPath(), PKey: r.PKey(), QoSClass: r.QoSClass(),
		SL: r.SL(), MTU: r.MTU(), Rate: r.Rate(), PacketLifeTime: r.PacketLifeTime(), Preference: r.Preference(),
	}
}

// Lifetime is how long the path may be cached: 4.096 µs × 2^PacketLifeTime
// (IBA 15.2.5.16), at least one second.
func (p Path) Lifetime() time.Duration {
	d := time.Duration(4096<<min(p.PacketLifeTime, 40)) * time.Nanosecond
	return max(d, time.Second)
}

// record writes q as a PathRecord template and returns its component mask.
func (q *PathQuery) record(r wire.PathRecord, own wire.GID) uint64 {
	clear(r)
	var mask uint64
	if !q.DGID.IsZero() {
		r.SetDGID(q.DGID)
		mask |= wire.PRCompDGID
	}
	if q.DLID != 0 {
		r.SetDLID(q.DLID)
		mask |= wire.PRCompDLID
	}
	switch {
	case !q.SGID.IsZero():
		r.SetSGID(q.SGID)
		mask |= wire.PRCompSGID
	case q.SLID != 0:
	default:
		r.SetSGID(own)
		mask |= wire.PRCompSGID
	}
	if q.SLID != 0 {
		r.SetSLID(q.SLID)
		mask |= wire.PRCompSLID
	}
	if q.PKey != 0 {
		r.SetPKey(q.PKey)
		mask |= wire.PRCompPKey
	}
	if q.ServiceID != 0 {
		r.SetServiceID(q.ServiceID)
		mask |= wire.PRCompServiceID
	}
	if q.HasSL {
		r.SetSL(q.SL)
		mask |= wire.PRCompSL
	}
	if q.Reversible {
		r.SetReversible(true)
		mask |= wire.PRCompReversible
	}
	// IBA 15.2.5.16: ask for one path.
	r.SetNumbPath(1)
	mask |= wire.PRCompNumbPath
	return mask
}

func (c *Client) ownGID() wire.GID {
	g, _ := c.port.GID(0)
	return g
}

// QueryPath asks the SA for one path (a SubnAdmGet of PathRecord), bypassing the cache.
func (c *Client) QueryPath(ctx context.Context, q PathQuery) (Path, error) {
	if q.DGID.IsZero() && q.DLID == 0 {
		return Path{}, statusError(wire.SAStatusInsufficientComponents)
	}
	cl := c.calls.Get().(*call)
	defer c.putCall(cl)
	m := cl.request(wire.MethodGet, wire.AttrPathRecord, 0, nil)
	m.SetCompMask(q.record(wire.PathRecord(m.Data()[:wire.PathRecordLen]), c.ownGID()))
	if err := c.do(ctx, cl); err != nil {
		return Path{}, err
	}
	if err := cl.statusOf(); err != nil {
		return Path{}, err
	}
	var rec []byte
	if cl.rmpp {
		if len(cl.data) < wire.PathRecordLen {
			return Path{}, ErrBadResponse
		}
		rec = cl.data[:wire.PathRecordLen]
	} else {
		rec = wire.SAMAD(cl.resp[:]).Data()[:wire.PathRecordLen]
	}
	return PathFromRecord(rec), nil
}

// PathRecords asks the SA for every path matching q (SubnAdmGetTable). Unlike
// QueryPath, a zero destination asks for paths to every port.
func (c *Client) PathRecords(ctx context.Context, q PathQuery) ([]Path, error) {
	var rec [wire.PathRecordLen]byte
	mask := q.record(rec[:], c.ownGID()) &^ wire.PRCompNumbPath
	t, err := c.GetTable(ctx, wire.AttrPathRecord, mask, rec[:])
	if err != nil {
		return nil, err
	}
	out := make([]Path, t.Count())
	for i := range out {
		out[i] = PathFromRecord(t.Record(i))
	}
	return out, nil
}

type pathKey struct {
	dgid       wire.GID
	dlid       uint16
	sgid       wire.GID
	slid       uint16
	pkey       uint16
	sl         uint8
	hasSL, rev bool
	sid        uint64
}

type pathEntry struct {
	p       Path
	expires time.Time
}

// PathRecord returns a path to the destination of q from the cache, or asks the SA
// (QueryPath) and caches the answer for ClientOptions.PathTTL or the path's Lifetime.
func (c *Client) PathRecord(ctx context.Context, q PathQuery) (Path, error) {
	if c.opts.PathTTL < 0 {
		return c.QueryPath(ctx, q)
	}
	k := pathKey{q.DGID, q.DLID, q.SGID, q.SLID, q.PKey, q.SL, q.HasSL, q.Reversible, q.ServiceID}
	now := c.clk.Now()
	c.pathMu.Lock()
	e, ok := c.paths[k]
	c.pathMu.Unlock()
	if ok && now.Before(e.expires) {
		return e.p, nil
	}
	p, err := c.QueryPath(ctx, q)
	if err != nil {
		return Path{}, err
	}
	ttl := c.opts.PathTTL
	if ttl == 0 {
		ttl = p.Lifetime()
	}
	c.pathMu.Lock()
	c.paths[k] = pathEntry{p: p, expires: now.Add(ttl)}
	c.pathMu.Unlock()
	return p, nil
}

// InvalidatePaths empties the path cache (done on SM change and reregistration).
func (c *Client) InvalidatePaths() {
	c.pathMu.Lock()
	clear(c.paths)
	c.pathMu.Unlock()
}
