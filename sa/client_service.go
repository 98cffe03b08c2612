package sa

import (
	"context"

	"github.com/pibgw/pibgw/wire"
)

// Service is a ServiceRecord (IBA 15.2.5.14) as the client handles it.
type Service struct {
	ID   uint64
	GID  wire.GID // zero: the client's port
	PKey uint16   // zero: the SA uses 0xFFFF
	// Lease in seconds; wire.ServiceLeaseInfinite never expires. Zero asks for an
	// infinite lease.
	Lease  uint32
	Key    [16]byte
	Name   string
	Data8  [16]uint8
	Data16 [8]uint16
	Data32 [4]uint32
	Data64 [2]uint64
}

// ServiceFromRecord decodes a ServiceRecord.
func ServiceFromRecord(r wire.ServiceRecord) Service {
	s := Service{ID: r.ID(), GID: r.GID(), PKey: r.PKey(), Lease: r.Lease(), Key: r.Key(), Name: r.Name()}
	copy(s.Data8[:], r.Data8())
	for i := range s.Data16 {
		s.Data16[i] = r.Data16(i)
	}
	for i := range s.Data32 {
		s.Data32[i] = r.Data32(i)
	}
	for i := range s.Data64 {
		s.Data64[i] = r.Data64(i)
	}
	return s
}

func (s *Service) record(r wire.ServiceRecord) {
	clear(r)
	r.SetID(s.ID)
	r.SetGID(s.GID)
	r.SetPKey(s.PKey)
	r.SetLease(s.Lease)
	r.SetKey(s.Key)
	r.SetName(s.Name)
	copy(r.Data8(), s.Data8[:])
	for i, v := range s.Data16 {
		r.SetData16(i, v)
	}
	for i, v := range s.Data32 {
		r.SetData32(i, v)
	}
	for i, v := range s.Data64 {
		r.SetData64(i, v)
	}
}

// RegisterService registers s with the SA (SubnAdmSet of ServiceRecord); a registration
// with the same ID, GID and P_Key replaces the old one. It returns the record as stored.
func (c *Client) RegisterService(ctx context.Context, s Service) (Service, error) {
	if s.GID.IsZero() {
		s.GID = c.ownGID()
	}
	mask := uint64(wire.SRCompID | wire.SRCompGID | wire.SRCompKey | wire.SRCompName | wire.SRCompAllData)
	if s.PKey != 0 {
		mask |= wire.SRCompPKey
	}
	if s.Lease != 0 {
		mask |= wire.SRCompLease
	}
	var rec [wire.ServiceRecordLen]byte
	s.record(rec[:])
	out, err := c.Query(ctx, wire.MethodSet, wire.AttrServiceRecord, mask, rec[:])
	if err != nil {
		return Service{}, err
	}
	return ServiceFromRecord(out), nil
}

// DeregisterService deletes the registration of s (by ID, GID and P_Key).
func (c *Client) DeregisterService(ctx context.Context, s Service) error {
	if s.GID.IsZero() {
		s.GID = c.ownGID()
	}
	mask := uint64(wire.SRCompID | wire.SRCompGID)
	if s.PKey != 0 {
		mask |= wire.SRCompPKey
	}
	var rec [wire.ServiceRecordLen]byte
	s.record(rec[:])
	_, err := c.Query(ctx, wire.MethodDelete, wire.AttrServiceRecord, mask, rec[:])
	return err
}

// QueryService returns the registrations that match q on the components in mask
// (wire.SRComp*; e.g. wire.SRCompID, or wire.SRCompName).
func (c *Client) QueryService(ctx context.Context, q Service, mask uint64) ([]Service, error) {
	var rec [wire.ServiceRecordLen]byte
	q.record(rec[:])
	t, err := c.GetTable(ctx, wire.AttrServiceRecord, mask, rec[:])
	if err != nil {
		return nil, err
	}
	out := make([]Service, t.Count())
	for i := range out {
		out[i] = ServiceFromRecord(t.Record(i))
	}
	return out, nil
}

// NodeRecords returns every NodeRecord (one per CA port and per switch).
func (c *Client) NodeRecords(ctx context.Context) ([]wire.NodeRecord, error) {
	t, err := c.GetTable(ctx, wire.AttrNodeRecord, 0, nil)
	if err != nil {
		return nil, err
	}
	out := make([]wire.NodeRecord, t.Count())
	for i := range out {
		out[i] = t.Record(i)
	}
	return out, nil
}

// PortInfoRecords returns the PortInfoRecords of the port with LID lid (0: every port).
func (c *Client) PortInfoRecords(ctx context.Context, lid uint16) ([]wire.PortInfoRecord, error) {
	var rec [wire.PortInfoRecordLen]byte
	var mask uint64
	if lid != 0 {
		wire.PortInfoRecord(rec[:]).SetEndportLID(lid)
		mask = wire.PIRCompEndportLID
	}
	return c.portInfoRecords(ctx, 0, mask, rec[:])
}

// PortInfoRecordsWithCap returns the PortInfoRecords of the ports whose CapabilityMask has
// any of capMask's bits, as saquery -s asks for the SM ports (wire.CapIsSM): a GetTable
// with the CapabilityMask component and attribute modifier bit 31 (PIRAnyCapBits).
func (c *Client) PortInfoRecordsWithCap(ctx context.Context, capMask uint32) ([]wire.PortInfoRecord, error) {
	var rec [wire.PortInfoRecordLen]byte
	wire.PortInfoRecord(rec[:]).PortInfo().SetCapabilityMask(capMask)
	return c.portInfoRecords(ctx, PIRAnyCapBits, wire.PIRCompCapMask, rec[:])
}

func (c *Client) portInfoRecords(ctx context.Context, mod uint32, mask uint64, rec []byte) ([]wire.PortInfoRecord, error) {
	t, err := c.getTable(ctx, wire.AttrPortInfoRecord, mod, mask, rec)
	if err != nil {
		return nil, err
	}
	out := make([]wire.PortInfoRecord, t.Count())
	for i := range out {
		out[i] = t.Record(i)
	}
	return out, nil
}
