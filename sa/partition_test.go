package sa

import (
	"slices"
	"testing"
)

func TestPartitionTables(t *testing.T) {
	parts, err := normalizePartitions([]Partition{
		{Name: "storage", PKey: 0x8002, Members: []Member{{GUID: 0xA, Full: true}, {GUID: 0xB}, {GUID: 0xC}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if parts[0].PKey != DefaultPKey || parts[1].PKey != 0x0002 {
		t.Fatalf("partitions %+v", parts)
	}
	cases := []struct {
		guid uint64
		sm   bool
		want []uint16
	}{
		{0xA, false, []uint16{0xFFFF, 0x8002}},
		{0xB, false, []uint16{0xFFFF, 0x0002}},
		{0xD, false, []uint16{0xFFFF}},
		{0xE, true, []uint16{0xFFFF}},
	}
	for _, c := range cases {
		got := pkeyTable(parts, c.guid, c.sm, 32)
		want := make([]uint16, 32)
		copy(want, c.want)
		if !slices.Equal(got, want) {
			t.Errorf("port %#x: %x, want %x", c.guid, got[:4], c.want)
		}
	}
	if _, err := normalizePartitions([]Partition{{Name: "a", PKey: 5}, {Name: "b", PKey: 0x8005}}); err == nil {
		t.Error("duplicate P_Key accepted")
	}
	if _, err := normalizePartitions([]Partition{{Name: "z", PKey: 0x8000}}); err == nil {
		t.Error("P_Key 0 accepted")
	}
	// A limited-only default partition: the SM port stays a full member.
	parts, _ = normalizePartitions([]Partition{{Name: "Default", PKey: 0x7fff, Members: []Member{{All: true}}}})
	if got := pkeyTable(parts, 1, true, 32)[0]; got != 0xFFFF {
		t.Errorf("SM port default P_Key %#x", got)
	}
	if got := pkeyTable(parts, 2, false, 32)[0]; got != 0x7FFF {
		t.Errorf("limited default P_Key %#x", got)
	}
}
