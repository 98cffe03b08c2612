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

// numTable maps a 24-bit number (a QPN, an XRC SRQ number) to an object: a two-level
// radix table of atomic pointers, so that a lookup is two loads and a store is O(1)
// whatever the number of entries (a map copied on every store made 30,000 QPNs of one
// process take 30 s, and held the device lock longer with each). A chunk of 4096
// entries is allocated when its first number is stored and dropped when its last goes.
type numTable[T any] struct {
	top atomic.Pointer[[numChunks]atomic.Pointer[numChunk[T]]]
}

const (
	numChunkBits = 12
	numChunks    = 1 << (24 - numChunkBits)
)

type numChunk[T any] struct {
	e [1 << numChunkBits]atomic.Pointer[T]
	n int // entries set; stores are serialised
}

func (t *numTable[T]) load(k uint32) *T {
	top := t.top.Load()
	if top == nil || k>>24 != 0 {
		return nil
	}
	c := top[k>>numChunkBits].Load()
	if c == nil {
		return nil
	}
	return c.e[k&(1<<numChunkBits-1)].Load()
}

// store sets number k (nil deletes it); callers serialise stores.
func (t *numTable[T]) store(k uint32, v *T) {
	if k>>24 != 0 {
		panic("hca: table key beyond 24 bits")
	}
	top := t.top.Load()
	if top == nil {
		if v == nil {
			return
		}
		top = new([numChunks]atomic.Pointer[numChunk[T]])
		t.top.Store(top)
	}
	slot := &top[k>>numChunkBits]
	c := slot.Load()
	if c == nil {
		if v == nil {
			return
		}
		c = new(numChunk[T])
		slot.Store(c)
	}
	e := &c.e[k&(1<<numChunkBits-1)]
	switch old := e.Load(); {
	case old == nil && v != nil:
		c.n++
	case old != nil && v == nil:
		if c.n--; c.n == 0 {
			e.Store(nil)
			slot.Store(nil)
			return
		}
	}
	e.Store(v)
}
