package wire

import (
	"fmt"
	"testing"
)

func BenchmarkICRC(b *testing.B) {
	for _, n := range []int{64, 4096} {
		for _, global := range []bool{false, true} {
			pkt := buildPacket(RCSendOnly, global, n-LRHLen-BTHLen-ICRCLen-map[bool]int{true: GRHLen}[global])
			b.Run(fmt.Sprintf("%d/global=%v", len(pkt), global), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(pkt)))
				for b.Loop() {
					_ = ICRC(pkt)
				}
			})
		}
	}
}

func BenchmarkVCRC(b *testing.B) {
	for _, n := range []int{64, 4096} {
		pkt := make([]byte, n)
		for i := range pkt {
			pkt[i] = byte(i * 7)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				_ = VCRC(pkt)
			}
		})
		// The slicing-by-16 table alone: the baseline of the folding VCRC.
		b.Run(fmt.Sprintf("%d/table", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				_ = ^updateVCRCTable(0xffff, pkt)
			}
		})
	}
}

// BenchmarkVCRCBytewise is the classic one-table CRC, for comparison with
// the slicing-by-16 VCRC (0.39 GB/s on this project's machine kind).
func BenchmarkVCRCBytewise(b *testing.B) {
	pkt := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		crc := uint16(0xffff)
		for _, v := range pkt {
			crc = crc>>8 ^ vcrcTab[0][byte(crc)^v]
		}
		_ = crc
	}
}

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"UDSendOnly/local/256", buildPacket(UDSendOnly, false, 256)},
		{"RCRDMAWriteOnlyImm/global/4096", buildPacket(RCRDMAWriteOnlyImm, true, 4096)},
		{"RCAcknowledge/local", buildPacket(RCAcknowledge, false, 0)},
	} {
		b.Run(c.name, func(b *testing.B) {
			var p Packet
			b.ReportAllocs()
			b.SetBytes(int64(len(c.pkt)))
			for b.Loop() {
				if err := p.Parse(c.pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
