package hca

import (
	"errors"
	"testing"
)

// TestCreateAHChecksAsTheKernel: the checks of rdma_check_ah_attr and rdma_fill_sgid_attr
// — a port that exists, an SGID entry in the table (EINVAL) and not empty (ENODATA) — and
// none on the DLID of an InfiniBand AH (0 is created) or the SL (its low 4 bits are kept).
func TestCreateAHChecksAsTheKernel(t *testing.T) {
	d := newTestDevice(t, 1)
	pd, err := d.Open().AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		attr AHAttr
		want error
	}{
		{"dlid 0", AHAttr{DLID: 0, PortNum: 1}, nil},
		{"sl 17", AHAttr{DLID: 1, SL: 17, PortNum: 1}, nil},
		{"port 2", AHAttr{DLID: 1, PortNum: 2}, EINVAL},
		{"port 0", AHAttr{DLID: 1, PortNum: 0}, EINVAL},
		{"sgid 0", AHAttr{DLID: 1, PortNum: 1, IsGlobal: true, GRH: GlobalRoute{SGIDIndex: 0, HopLimit: 1}}, nil},
		{"sgid empty", AHAttr{DLID: 1, PortNum: 1, IsGlobal: true, GRH: GlobalRoute{SGIDIndex: 1, HopLimit: 1}}, ENODATA},
		{"sgid beyond", AHAttr{DLID: 1, PortNum: 1, IsGlobal: true, GRH: GlobalRoute{SGIDIndex: GIDTableLen, HopLimit: 1}}, EINVAL},
	} {
		ah, err := pd.CreateAH(tc.attr)
		if err == nil && ah.Query().SL != tc.attr.SL&0xF {
			t.Errorf("%s: SL %d, want %d", tc.name, ah.Query().SL, tc.attr.SL&0xF)
		}
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else {
				ah.Destroy()
			}
		} else if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
