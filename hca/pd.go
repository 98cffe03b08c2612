package hca

import "sync/atomic"

// PD is a protection domain (ibv_pd).
type PD struct {
	ctx  *Context
	id   uint32
	refs atomic.Int32 // MRs, QPs, AHs, SRQs using it
	dead atomic.Bool
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts.pd >= MaxPD {
		return nil, errorf("alloc_pd", ENOMEM, "device has %d PDs (max_pd)", MaxPD)
	}
	d.counts.pd++
	pd := &PD{ctx: c, id: d.nextID()}
	d.register(pd)
	return pd, nil
}

// ID is the object id pibgw's inspection shows.
func (pd *PD) ID() uint32 { return pd.id }

// Context returns the PD's context.
func (pd *PD) Context() *Context { return pd.ctx }

// Dealloc frees the PD; EBUSY while objects still use it (ibv_dealloc_pd).
func (pd *PD) Dealloc() error {
	if n := pd.refs.Load(); n > 0 {
		return errorf("dealloc_pd", EBUSY, "PD %d still has %d objects", pd.id, n)
	}
	if pd.dead.Swap(true) {
		return errorf("dealloc_pd", EINVAL, "PD %d already freed", pd.id)
	}
	d := pd.ctx.dev
	d.mu.Lock()
	d.counts.pd--
	d.mu.Unlock()
	d.unregister(pd)
	return nil
}
