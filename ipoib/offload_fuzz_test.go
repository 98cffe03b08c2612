package ipoib

import (
	"encoding/binary"
	"testing"

	"github.com/pibgw/pibgw/hca"
)

// FuzzGRO feeds groAdd a burst cut from the input (what the fabric delivered, which a
// peer controls) and checks it never panics and accounts for every packet: each is
// written (alone or merged) or dropped as malformed, and every merged write keeps its
// length fields consistent.
//
//	go test ./ipoib -run '^$' -fuzz '^FuzzGRO$' -fuzztime 60s -fuzzminimizetime 5s
//
// (Its inputs are kilobytes long: minimizing each new one for the default minute would
// stall the run.)
func FuzzGRO(f *testing.F) {
	segs, _ := tcpRun(tcpSpec(false), repeatSize(1988, 3), true, 1)
	var seed []byte
	for _, s := range segs {
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(s)))
		seed = append(seed, s...)
	}
	f.Add(seed, uint8(3))
	f.Add([]byte{0, 20, 0x45}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, flagBits uint8) {
		i, fake := newGROInterface()
		n := 0
		for len(data) >= 2 {
			l := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if l < 20 || l > len(data) || l > 4096 {
				break
			}
			var flags hca.WCFlags
			if flagBits&1 != 0 {
				flags |= hca.WCIPCsumOK
			}
			if flagBits&2 != 0 {
				flags |= hca.WCIPCsumPartial | hca.WCIPCsumOK
			}
			flagBits = flagBits>>2 | flagBits<<6
			i.groAdd(rxBuf(data[:l]), flags)
			data = data[l:]
			n++
		}
		i.groFlush()
		if got := cnt(i, cRxPackets) + cnt(i, cDropMalformed); got != uint64(n) {
			t.Fatalf("%d packets in, %d written + dropped", n, got)
		}
		if uint64(len(fake.writes)) != cnt(i, cRxBatches) {
			t.Fatalf("%d writes, rx_batches %d", len(fake.writes), cnt(i, cRxBatches))
		}
		for _, w := range fake.writes {
			if w.pieces > 1 {
				ip := w.pkt
				if ip[0]>>4 == 4 && int(binary.BigEndian.Uint16(ip[2:])) != len(ip) ||
					ip[0]>>4 == 6 && int(binary.BigEndian.Uint16(ip[4:]))+40 != len(ip) {
					t.Fatalf("merged write of %d bytes with a wrong IP length field", len(ip))
				}
				if len(ip) > 0xFFFF {
					t.Fatalf("merged write of %d bytes", len(ip))
				}
			}
		}
	})
}
