package wire

import (
	"encoding/binary"

	"github.com/pibgw/pibgw/internal/csum"
)

// Deferred checksums: the HCA side of checksum offload.
//
// A send with IBV_SEND_IP_CSUM asks the HCA's checksum engine to finish a checksum the
// sender started (the IPoIB offload Linux's ipoib uses when a device has
// IB_DEVICE_UD_IP_CSUM). The work request says where, as virtio-net's csum_start and
// csum_offset and mlx5's checksum offsets do: sum the message from CsumStart to its end,
// adding what the 16-bit field at CsumStart+CsumOffset holds (the pseudo-header sum,
// Linux's CHECKSUM_PARTIAL), and store the complement there (0 as 0xFFFF where the WR
// says zero means "no checksum", as UDP's does). The engine knows nothing of IP. Like the ICRC, inside one process the sum is deferred rather than computed: the
// packet is marked and the two offsets ride in its ICRC slot, which a pending packet does
// not use yet; whoever makes the packet observable (Finalize: captures, UDP links, the
// fault injector) or hands it to a receiver that wants complete checksums (FinalizeCsum)
// computes it first. A receiver that takes CHECKSUM_PARTIAL data as they are (an IPoIB
// interface writing to a kernel TUN, which passes the state on to the IP stack as veth
// does) saves two passes over every byte. The mark exists only on ICRC-pending packets.

// payloadOffset returns where the payload of the packet whose BTH is at o starts, or -1.
func payloadOffset(pkt []byte, o int) int {
	op := BTH(pkt[o : o+BTHLen]).OpCode()
	if !op.Valid() || !op.HasPayload() {
		return -1
	}
	return o + BTHLen + op.HeaderLen()
}

// payloadEnd returns the end of the payload of the packet whose BTH is at o: before the
// pad bytes and the ICRC.
func payloadEnd(pkt []byte, o int) int {
	return len(pkt) - ICRCLen - int(BTH(pkt[o:o+BTHLen]).PadCnt())
}

// csumNoZero is the flag bit of the offset kept in the ICRC slot (offsets stay below
// 0x8000: a payload is at most 4 KiB).
const csumNoZero = 0x8000

// SetCsumPending marks an ICRC-pending packet as carrying a checksum for the engine to
// finish: the region runs from start (counted from the first payload byte) to the end of
// the payload, and the 16-bit field at start+offset holds the partial sum; noZero stores
// a result of 0 as 0xFFFF (UDP's rule, RFC 768). It reports false, marking nothing, if
// the packet is not pending, has no payload, or the field does not lie inside the
// payload.
func SetCsumPending(pkt []byte, start, offset uint16, noZero bool) bool {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != icrcPendingMark {
		return false
	}
	p := payloadOffset(pkt, o)
	if p < 0 || p+int(start)+int(offset)+2 > payloadEnd(pkt, o) {
		return false
	}
	putCsumSlot(pkt, start, offset, noZero)
	pkt[o+4] = csumPendingMark
	return true
}

// putCsumSlot keeps a deferred checksum's place in the ICRC slot of a pending packet.
func putCsumSlot(pkt []byte, start, offset uint16, noZero bool) {
	if noZero {
		offset |= csumNoZero
	}
	slot := pkt[len(pkt)-ICRCLen:]
	binary.BigEndian.PutUint16(slot, start)
	binary.BigEndian.PutUint16(slot[2:], offset)
}

// csumSlot reads what putCsumSlot kept: the region's start and the field's offset in
// it, and whether a sum of 0 is stored as 0xFFFF.
func csumSlot(pkt []byte) (start, offset int, noZero bool) {
	slot := pkt[len(pkt)-ICRCLen:]
	o := binary.BigEndian.Uint16(slot[2:])
	return int(binary.BigEndian.Uint16(slot)), int(o &^ csumNoZero), o&csumNoZero != 0
}

// CsumPending reports whether pkt carries a deferred checksum.
func CsumPending(pkt []byte) bool {
	o := bthOffset(pkt)
	return o >= 0 && pkt[o+4] == csumPendingMark
}

// FinalizeCsum computes a deferred checksum in place and clears its mark; the ICRC stays
// pending. Other packets are left alone.
func FinalizeCsum(pkt []byte) {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != csumPendingMark {
		return
	}
	pkt[o+4] = icrcPendingMark
	p, end := payloadOffset(pkt, o), payloadEnd(pkt, o)
	cs, co, noZero := csumSlot(pkt)
	start := p + cs
	field := start + co
	if p < 0 || field+2 > end {
		return // not what SetCsumPending wrote (a forged mark): nothing to finish
	}
	c := ^csum.Fold(csum.Sum(pkt[start:end], 0))
	if c == 0 && noZero {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(pkt[field:], c)
}
