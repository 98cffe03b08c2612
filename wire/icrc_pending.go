package wire

// Deferred ICRC for in-process hops.
//
// The ICRC is an end-to-end check of bytes that travel over wires (IBA 7.8.1). Inside one
// pibgw process a packet goes from the sender's buffer to the receiver through Go calls
// and nothing can alter it, so computing the ICRC at the sender and checking it at the
// receiver would spend two CRC passes per byte on nothing. Senders therefore mark packets
// "ICRC pending" instead (BTH.Resv8a, which the ICRC masks out and which is zero on any
// real wire), and receivers skip the check for marked packets. Every place where a packet
// becomes observable or can be damaged — a capture, a UDP link, a fault injector that
// corrupts — calls Finalize first, so what anyone can see is bit-exact IBA with a
// correct ICRC, and a corrupted packet is one with a real ICRC that fails the check.

// icrcPendingMark is the BTH.Resv8a value of a packet whose ICRC is not computed yet.
const icrcPendingMark = 0x80

// csumPendingMark is the BTH.Resv8a value of a pending packet that also carries a
// deferred checksum (SetCsumPending).
const csumPendingMark = icrcPendingMark | 0x40

// bthOffset returns the offset of the BTH, or -1 for raw or short packets.
func bthOffset(pkt []byte) int {
	if len(pkt) < LRHLen+BTHLen+ICRCLen {
		return -1
	}
	switch LRH(pkt).LNH() {
	case LNHLocal:
		return LRHLen
	case LNHGlobal:
		if len(pkt) < LRHLen+GRHLen+BTHLen+ICRCLen {
			return -1
		}
		return LRHLen + GRHLen
	}
	return -1
}

// SetICRCPending marks pkt (LRH through the ICRC slot) as carrying no ICRC yet. Only
// in-process senders call it; see Finalize.
func SetICRCPending(pkt []byte) {
	if o := bthOffset(pkt); o >= 0 {
		pkt[o+4] = icrcPendingMark
	}
}

// ICRCPending reports whether pkt's ICRC was deferred.
func ICRCPending(pkt []byte) bool {
	o := bthOffset(pkt)
	return o >= 0 && (pkt[o+4] == icrcPendingMark || pkt[o+4] == csumPendingMark || isRefMark(pkt[o+4]))
}

// Finalize does what an in-process sender deferred — the payload (SetPayloadRef), the
// checksum (SetCsumPending), then the ICRC — and clears the marks, leaving pkt exactly as IBA
// puts it on a wire. A packet that is not pending is left alone.
func Finalize(pkt []byte) {
	Materialize(pkt)
	FinalizeCsum(pkt)
	if o := bthOffset(pkt); o >= 0 && pkt[o+4] == icrcPendingMark {
		pkt[o+4] = 0
		SetICRC(pkt) // Resv8a is masked, so the mark never changed the ICRC
	}
}

// ClearMarks zeroes BTH.Resv8a of a packet that came from outside the process, for which it
// is a reserved field, sent as zero (IBA 9.2) and masked out of the ICRC (7.8.1), but
// which inside a process holds the marks of deferred work (SetICRCPending,
// SetCsumPending, SetPayloadRef): a packet from elsewhere carrying one must be checked
// as any other, not taken for one of this process's. It reports whether pkt changed.
func ClearMarks(pkt []byte) bool {
	if o := bthOffset(pkt); o >= 0 && pkt[o+4] != 0 {
		pkt[o+4] = 0
		return true
	}
	return false
}

// CheckReceivedICRC is a receiver's check: a pending packet never left the process and
// passes; any other must carry a correct ICRC.
func CheckReceivedICRC(pkt []byte) bool {
	if ICRCPending(pkt) {
		return true
	}
	return CheckICRC(pkt)
}
