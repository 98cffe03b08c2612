package hca

import "sync/atomic"

// Lookup tables for the packet path: lookups are atomic loads and write nothing, so
// receivers on different cores do not bounce a lock's cache line between them (a read
// lock per packet did). They are the device's only record of its MRs and QPs; stores
// happen under the device lock.

// slotTable maps a dense index (an MR key's index, reused after deregistration) to an
// object; it grows by doubling.
type slotTable[T any] struct {
	s atomic.Pointer[[]atomic.Pointer[T]]
}

func (t *slotTable[T]) load(i uint32) *T {
	s := t.s.Load()
	if s == nil || int(i) >= len(*s) {
		return nil
	}
	return (*s)[i].Load()
}

// store sets index i (nil removes it); callers serialise stores.
func (t *slotTable[T]) store(i uint32, v *T) {
	s := t.s.Load()
	if s == nil || int(i) >= len(*s) {
		if v == nil {
			return
		}
		n := 64
		if s != nil {
			n = 2 * len(*s)
		}
		ns := make([]atomic.Pointer[T], max(n, int(i)+1))
		if s != nil {
			for k := range *s {
				ns[k].Store((*s)[k].Load())
			}
		}
		t.s.Store(&ns)
		s = &ns
	}
	(*s)[i].Store(v)
}

// mapTable maps a sparse key (a QPN) to an object: a map replaced whole on every change
// (QPs come and go rarely; packets look them up constantly).
type mapTable[T any] struct {
	m atomic.Pointer[map[uint32]*T]
}

func (t *mapTable[T]) load(k uint32) *T {
	m := t.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[k]
}

// store sets key k (nil deletes it); callers serialise stores.
func (t *mapTable[T]) store(k uint32, v *T) {
	old := t.m.Load()
	n := 1
	if old != nil {
		n += len(*old)
	}
	m := make(map[uint32]*T, n)
	if old != nil {
		for key, val := range *old {
			m[key] = val
		}
	}
	if v == nil {
		delete(m, k)
	} else {
		m[k] = v
	}
	t.m.Store(&m)
}
