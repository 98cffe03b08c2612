package hca

import "testing"

// numTable: what is stored is found, what is deleted is not, chunks come and go with
// their entries, and numbers beyond 24 bits are never found.
func TestNumTable(t *testing.T) {
	var tb numTable[int]
	if tb.load(5) != nil {
		t.Fatal("empty table found 5")
	}
	tb.store(5, nil) // deleting from nothing
	vals := map[uint32]*int{}
	for _, k := range []uint32{0, 1, 4095, 4096, 0x48, 0xFFFFFE, 0x123456} {
		v := new(int)
		*v = int(k)
		vals[k] = v
		tb.store(k, v)
	}
	for k, v := range vals {
		if tb.load(k) != v {
			t.Fatalf("load(%#x) = %v", k, tb.load(k))
		}
	}
	if tb.load(1<<24|5) != nil {
		t.Fatal("a 25-bit key found an entry")
	}
	tb.store(4096, nil)
	if tb.load(4096) != nil || tb.load(4095) != vals[4095] {
		t.Fatal("delete")
	}
	if tb.top.Load()[1].Load() != nil {
		t.Fatal("the chunk of 4096 stayed with no entry")
	}
	tb.store(0x123456, vals[0]) // replace
	tb.store(0x123456, vals[0])
	tb.store(0x123456, nil)
	if tb.top.Load()[0x123].Load() != nil {
		t.Fatal("replacing counted twice: the chunk stayed")
	}
}
