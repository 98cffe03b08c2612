package hca

// AH is an address handle (ibv_ah).
type AH struct {
	pd   *PD
	id   uint32
	attr AHAttr
	pace int64 // PaceBytesPerSec of the port and static rate
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	d := pd.ctx.dev
	if d.Port(int(attr.PortNum)) == nil {
		return nil, errorf("create_ah", EINVAL, "port %d does not exist", attr.PortNum)
	}
	// The kernel checks no SL (ib_uverbs_create_ah); the drivers keep its low 4 bits
	// (mlx5's stat_rate_sl, mlx4's sl_tclass_flowlabel), as here.
	attr.SL &= 0xF
	if attr.IsGlobal {
		if int(attr.GRH.SGIDIndex) >= GIDTableLen {
			return nil, errorf("create_ah", EINVAL, "sgid_index %d out of range", attr.GRH.SGIDIndex)
		}
		if _, ok := d.Port(int(attr.PortNum)).GID(int(attr.GRH.SGIDIndex)); !ok {
			// An empty entry is ENODATA, one beyond the table EINVAL (the kernel's
			// rdma_get_gid_attr, through rdma_fill_sgid_attr).
			return nil, errorf("create_ah", ENODATA, "sgid_index %d is empty", attr.GRH.SGIDIndex)
		}
	}
	// DLID 0 is not refused: the kernel checks no DLID of an InfiniBand AH
	// (rdma_check_ah_attr) and mlx5 builds the address as given; the switch drops
	// the packets (fabric: DropLID0).
	if isMulticastLID(attr.DLID) && !attr.IsGlobal {
		// IBA 8.4.1: multicast packets carry a GRH.
		return nil, errorf("create_ah", EINVAL, "multicast DLID %#x needs a GRH (is_global)", attr.DLID)
	}
	if pd.dead.Load() {
		return nil, errorf("create_ah", EINVAL, "PD %d is freed", pd.id)
	}
	d.mu.Lock()
	if d.counts.ah >= MaxAH {
		d.mu.Unlock()
		return nil, errorf("create_ah", ENOMEM, "device has %d AHs (max_ah)", MaxAH)
	}
	d.counts.ah++
	id := d.nextID()
	d.mu.Unlock()
	pd.refs.Add(1)
	ah := &AH{pd: pd, id: id, attr: attr, pace: PaceBytesPerSec(d.Port(int(attr.PortNum)), attr.StaticRate)}
	d.register(ah)
	return ah, nil
}

// Attr returns the address vector.
func (ah *AH) Attr() *AHAttr { return &ah.attr }

// Pace is the rate in bytes per second that sends through this AH must not exceed
// (static rate control, IBA 9.11); 0: the port's rate.
func (ah *AH) Pace() int64 { return ah.pace }

// Query returns the address vector (ibv_query_ah).
func (ah *AH) Query() AHAttr { return ah.attr }

// PD returns the AH's protection domain.
func (ah *AH) PD() *PD { return ah.pd }

// Destroy destroys the AH (ibv_destroy_ah).
func (ah *AH) Destroy() error {
	d := ah.pd.ctx.dev
	d.mu.Lock()
	d.counts.ah--
	d.mu.Unlock()
	d.unregister(ah)
	ah.pd.refs.Add(-1)
	return nil
}
