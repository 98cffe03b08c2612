package wire

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"

	"github.com/pibgw/pibgw/internal/csum"
)

// Payloads by reference for in-process hops.
//
// An HCA reads a message's data from the sender's memory when it builds each packet, and
// a receiving HCA writes it into the receiver's memory: one pass over the bytes at each
// end, none in between. Inside one pibgw process, building an RC packet by copying the
// data into the packet and then copying it again out of the packet into the receive
// buffer would be two passes where a wire needs one. So an in-process RC sender may
// leave a packet's payload unfilled and put a reference in its place: the sending
// device, the local key and the address of the bytes in a registered memory region,
// behind a secret of this process. The receiving port resolves the reference and the
// transport copies straight from the sender's memory (ResolvePayload). The bytes stay
// valid as long as an HCA's would have to be readable: until the message is
// acknowledged, since RC completes a send only once the responder has taken it.
//
// Like the deferred ICRC, the reference never leaves the process: whoever makes a packet
// observable or keeps it beyond the sender's call (Finalize: captures, UDP links, the
// fault injector; Materialize: a copy that outlives the call, a packet handed to an
// attached process) copies the bytes in first. A reference that no longer resolves (the
// region was deregistered while the packet waited) leaves a packet with a wrong ICRC,
// which every receiver drops, as a packet damaged on a wire. The secret keeps a packet
// that arrives from outside the process (a UDP link, an attached process) from naming
// this process's memory: a mark with the wrong secret does not resolve either.

// payloadRefMark is the BTH.Resv8a value of an ICRC-pending packet whose payload is a
// reference; msgCsumMark that of the first packet of a message, its payload a reference,
// which also carries a checksum to finish over the whole message (SetMsgCsumPending).
const (
	payloadRefMark = icrcPendingMark | 0x20
	msgCsumMark    = payloadRefMark | 0x10
)

func isRefMark(m byte) bool { return m == payloadRefMark || m == msgCsumMark }

// PayloadRefMin is the shortest payload worth passing by reference; shorter ones are
// copied (a reference takes PayloadRefLen bytes of the payload area).
const PayloadRefMin = 256

// PayloadRefLen is the size of a reference: secret (8), device (4), key (4), address (8).
// A first packet with a message checksum adds the message's length (4) after it.
const PayloadRefLen = 24

// PayloadSource resolves a reference to n bytes at addr of the region whose local key is
// key on device dev, or returns nil if there are none (hca installs it).
type PayloadSource func(dev, key uint32, addr uint64, n int) []byte

var (
	payloadSource atomic.Pointer[PayloadSource]
	refSecret     = func() uint64 {
		var b [8]byte
		rand.Read(b[:])
		return binary.LittleEndian.Uint64(b[:]) | 1 // never 0, so a zeroed payload never matches
	}()
)

// SetPayloadSource installs the resolver of references (nil: none resolves).
func SetPayloadSource(f PayloadSource) {
	if f == nil {
		payloadSource.Store(nil)
		return
	}
	payloadSource.Store(&f)
}

// SetPayloadRef turns an ICRC-pending packet's payload into a reference to the n bytes at
// addr of region key on device dev, n being the payload's length. It reports false,
// changing nothing, if the packet is not pending (or already carries a deferred
// checksum or a reference) or its payload is shorter than PayloadRefMin.
func SetPayloadRef(pkt []byte, dev, key uint32, addr uint64) bool {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != icrcPendingMark {
		return false
	}
	p := payloadOffset(pkt, o)
	if p < 0 || payloadEnd(pkt, o)-p < PayloadRefMin {
		return false
	}
	r := pkt[p : p+PayloadRefLen]
	binary.LittleEndian.PutUint64(r, refSecret)
	binary.LittleEndian.PutUint32(r[8:], dev)
	binary.LittleEndian.PutUint32(r[12:], key)
	binary.LittleEndian.PutUint64(r[16:], addr)
	pkt[o+4] = payloadRefMark
	return true
}

// HasPayloadRef reports whether pkt's payload is a reference.
func HasPayloadRef(pkt []byte) bool {
	o := bthOffset(pkt)
	return o >= 0 && isRefMark(pkt[o+4])
}

// ResolvePayload returns the bytes pkt's reference names (the payload's length), without
// copying them, or false if the reference does not resolve.
func ResolvePayload(pkt []byte) ([]byte, bool) {
	o := bthOffset(pkt)
	if o < 0 || !isRefMark(pkt[o+4]) {
		return nil, false
	}
	p, end := payloadOffset(pkt, o), payloadEnd(pkt, o)
	if p < 0 || end-p < PayloadRefMin {
		return nil, false
	}
	return resolve(pkt[p:p+PayloadRefLen], end-p)
}

// resolve returns the n bytes reference r names.
func resolve(r []byte, n int) ([]byte, bool) {
	if binary.LittleEndian.Uint64(r) != refSecret {
		return nil, false
	}
	f := payloadSource.Load()
	if f == nil {
		return nil, false
	}
	b := (*f)(binary.LittleEndian.Uint32(r[8:]), binary.LittleEndian.Uint32(r[12:]),
		binary.LittleEndian.Uint64(r[16:]), n)
	if len(b) != n {
		return nil, false
	}
	return b, true
}

// SetMsgCsumPending asks for a checksum over a whole message (the checksum engine of
// SetCsumPending, for RC messages of several packets): pkt is the message's first
// packet, its payload a reference to the message's start (SetPayloadRef), msgLen the
// message's length; the region runs from start (from the message's first byte) to the
// message's end, and the field at start+offset lies in this packet. Like the packet's
// bytes, the sum is computed only where the packet leaves the process (Materialize) or
// by a receiver that wants complete checksums (MsgCsum). It reports false, marking
// nothing, if pkt's payload is not a reference or the field does not lie in it.
func SetMsgCsumPending(pkt []byte, msgLen uint32, start, offset uint16, noZero bool) bool {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != payloadRefMark || offset&csumNoZero != 0 {
		return false
	}
	p, end := payloadOffset(pkt, o), payloadEnd(pkt, o)
	if p < 0 || int(start)+int(offset)+2 > end-p || uint64(end-p) > uint64(msgLen) {
		return false
	}
	binary.LittleEndian.PutUint32(pkt[p+PayloadRefLen:], msgLen)
	putCsumSlot(pkt, start, offset, noZero)
	pkt[o+4] = msgCsumMark
	return true
}

// MsgCsumPending reports whether pkt carries a message checksum to finish.
func MsgCsumPending(pkt []byte) bool {
	o := bthOffset(pkt)
	return o >= 0 && pkt[o+4] == msgCsumMark
}

// MsgCsum computes the checksum SetMsgCsumPending deferred: the position of its field
// from the first payload byte, and the value to store there. ok is false if pkt carries
// none or its message does not resolve.
func MsgCsum(pkt []byte) (field int, value uint16, ok bool) {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != msgCsumMark {
		return 0, 0, false
	}
	p, end := payloadOffset(pkt, o), payloadEnd(pkt, o)
	if p < 0 || end-p < PayloadRefMin {
		return 0, 0, false
	}
	msgLen := binary.LittleEndian.Uint32(pkt[p+PayloadRefLen:])
	start, offset, noZero := csumSlot(pkt)
	field = start + offset
	if field+2 > end-p || uint64(end-p) > uint64(msgLen) || msgLen > 1<<31 {
		return 0, 0, false
	}
	msg, ok := resolve(pkt[p:p+PayloadRefLen], int(msgLen))
	if !ok {
		return 0, 0, false
	}
	v := ^csum.Fold(csum.Sum(msg[start:], 0))
	if v == 0 && noZero {
		v = 0xFFFF
	}
	return field, v, true
}

// CopyPacket copies pkt into dst, which must hold len(pkt) bytes, and returns len(pkt).
// Of a packet whose payload is a reference it copies only what bringing the bytes in
// (Materialize, Finalize) does not overwrite: the headers, the reference and what
// follows the payload (pad, ICRC slot). The rest of dst's payload is left as it was,
// for Materialize or Finalize on dst to fill, which one of them must before dst is seen:
// a copy that stands for the bytes costs one pass over them, not two.
func CopyPacket(dst, pkt []byte) int {
	dst = dst[:len(pkt)]
	o := bthOffset(pkt)
	if o < 0 || !isRefMark(pkt[o+4]) {
		return copy(dst, pkt)
	}
	p, end := payloadOffset(pkt, o), payloadEnd(pkt, o)
	keep := p + PayloadRefLen + 4 // the reference and a message checksum's length
	if p < 0 || keep > end {
		return copy(dst, pkt) // not what SetPayloadRef writes: Materialize clears it
	}
	copy(dst[:keep], pkt)
	copy(dst[end:], pkt[end:])
	return len(pkt)
}

// Materialize copies the bytes of a payload reference into the packet, with a pending
// message checksum computed (SetMsgCsumPending); the packet stays ICRC pending. A reference that does not resolve leaves a zero payload and a wrong ICRC (the
// packet is no longer pending), so that every receiver drops it. Other packets are left
// alone.
func Materialize(pkt []byte) {
	o := bthOffset(pkt)
	if o < 0 || !isRefMark(pkt[o+4]) {
		return
	}
	src, ok := ResolvePayload(pkt)
	var field int
	var sum uint16
	if ok && pkt[o+4] == msgCsumMark {
		field, sum, ok = MsgCsum(pkt)
	}
	if ok {
		p := payloadOffset(pkt, o)
		copy(pkt[p:], src)
		if pkt[o+4] == msgCsumMark {
			binary.BigEndian.PutUint16(pkt[p+field:], sum)
		}
		pkt[o+4] = icrcPendingMark
		return
	}
	if p, end := payloadOffset(pkt, o), payloadEnd(pkt, o); p >= 0 && end > p {
		clear(pkt[p:end])
	}
	pkt[o+4] = 0
	SetICRC(pkt)
	icrc := pkt[len(pkt)-ICRCLen:]
	icrc[0] ^= 0xFF
}
