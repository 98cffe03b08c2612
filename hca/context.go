package hca

import (
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/trace"
)

// Context is an open device (ibv_context): it owns PDs, CQs and completion channels and
// receives the device's asynchronous events.
type Context struct {
	dev    *Device
	id     uint32
	events chan AsyncEvent
	lost   atomic.Uint64
	once   sync.Once
}

// asyncQueueLen bounds the async event queue of a context; events past it are counted in
// LostEvents rather than blocking the fabric.
const asyncQueueLen = 1024

// Open opens the device (ibv_open_device).
func (d *Device) Open() *Context {
	c := &Context{dev: d, id: d.nextID(), events: make(chan AsyncEvent, asyncQueueLen)}
	d.register(c)
	d.mu.Lock()
	d.contexts[c] = struct{}{}
	d.mu.Unlock()
	return c
}

// Device returns the context's device.
func (c *Context) Device() *Device { return c.dev }

// Close closes the context (ibv_close_device).
func (c *Context) Close() error {
	c.once.Do(func() {
		c.dev.mu.Lock()
		delete(c.dev.contexts, c)
		c.dev.mu.Unlock()
		c.dev.unregister(c)
	})
	return nil
}

// Events is the async event stream (ibv_get_async_event); events need no ack.
func (c *Context) Events() <-chan AsyncEvent { return c.events }

// LostEvents counts async events dropped because the queue was full.
func (c *Context) LostEvents() uint64 { return c.lost.Load() }

func (c *Context) post(ev AsyncEvent) {
	select {
	case c.events <- ev:
	default:
		c.lost.Add(1)
	}
}

// raise delivers an async event: to the owning context for object events, to every
// context for port and device events.
func (d *Device) raise(ev AsyncEvent) {
	var owner *Context
	switch {
	case ev.QP != nil:
		owner = ev.QP.pd.ctx
	case ev.CQ != nil:
		owner = ev.CQ.ctx
	case ev.SRQ != nil:
		owner = ev.SRQ.pd.ctx
	}
	d.log.Debug("async event", "event", ev.Type.String(), "port", ev.Port)
	if trace.On() {
		d.traceEvent(&ev)
	}
	if owner != nil {
		owner.post(ev)
		return
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	for c := range d.contexts {
		c.post(ev)
	}
}
