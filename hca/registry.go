package hca

import (
	"sync"
	"time"

	"github.com/pibgw/pibgw/trace"
)

// registry records every verbs object of a device with its creation time, as pib's
// debugfs object tables did (driver/pib_debugfs.c): `pibgw inspect` lists them. It is touched
// only when objects are created and destroyed, never on the packet path, and its lock
// is a leaf (taken with or without the device lock, nothing taken under it).
type registry struct {
	mu   sync.Mutex
	objs map[any]time.Time // *Context, *PD, *MR, *CQ, *QP, *SRQ, *AH → creation time
}

func (d *Device) register(obj any) {
	if trace.On() {
		d.traceObject(obj, true)
	}
	now := d.clk.Now()
	r := &d.reg
	r.mu.Lock()
	if r.objs == nil {
		r.objs = make(map[any]time.Time)
	}
	r.objs[obj] = now
	r.mu.Unlock()
}

func (d *Device) unregister(obj any) {
	if trace.On() {
		d.traceObject(obj, false)
	}
	r := &d.reg
	r.mu.Lock()
	delete(r.objs, obj)
	r.mu.Unlock()
}

// objects returns the registered objects and their creation times.
func (d *Device) objects() map[any]time.Time {
	r := &d.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[any]time.Time, len(r.objs))
	for k, v := range r.objs {
		out[k] = v
	}
	return out
}
