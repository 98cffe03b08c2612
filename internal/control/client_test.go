package control

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// pcapFramer passes only whole records, however the stream is cut.
func TestPCAPFramer(t *testing.T) {
	var stream []byte
	stream = append(stream, make([]byte, pcapFileHeaderLen)...)
	var records [][]byte
	for _, n := range []int{10, 0, 300, 7} {
		rec := make([]byte, pcapRecordHeaderLen+n)
		binary.LittleEndian.PutUint32(rec[8:], uint32(n))
		for i := range n {
			rec[pcapRecordHeaderLen+i] = byte(i)
		}
		records = append(records, rec)
		stream = append(stream, rec...)
	}
	for cut := 0; cut <= len(stream); cut++ {
		for _, chunk := range []int{1, 3, 64, len(stream)} {
			var out bytes.Buffer
			f := &pcapFramer{w: &out}
			for i := 0; i < cut; i += chunk {
				f.Write(stream[i:min(i+chunk, cut)])
			}
			// The longest prefix of whole records that fits in cut.
			want := 0
			if cut >= pcapFileHeaderLen {
				want = pcapFileHeaderLen
				for _, r := range records {
					if want+len(r) > cut {
						break
					}
					want += len(r)
				}
			}
			if !bytes.Equal(out.Bytes(), stream[:want]) || f.n != int64(want) {
				t.Fatalf("cut %d chunk %d: wrote %d bytes, want %d", cut, chunk, out.Len(), want)
			}
		}
	}
}

func TestFormats(t *testing.T) {
	if got := HWAddrString([]byte{0, 0xff, 0x12, 0x40}); got != "00:ff:12:40" {
		t.Errorf("HWAddrString %q", got)
	}
	if got := PKeyString(0x8001); got != "0x8001" {
		t.Errorf("PKeyString %q", got)
	}
	if got := PKeyString(0x7f); got != "0x007f" {
		t.Errorf("PKeyString %q", got)
	}
}
