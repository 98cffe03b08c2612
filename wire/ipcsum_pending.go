package wire

import (
	"encoding/binary"

	"github.com/pibgw/pibgw/internal/inet"
)

// Deferred TCP/UDP checksums: the HCA side of IPoIB checksum offload.
//
// A UD send with IBV_SEND_IP_CSUM asks the HCA to compute the checksums of the IP packet
// the message carries after its 4-byte IPoIB header (the mlx4 offload Linux's ipoib uses
// when a device has IB_DEVICE_UD_IP_CSUM): the packet's transport checksum field holds
// the pseudo-header sum, Linux's CHECKSUM_PARTIAL. Like the ICRC, inside one process the
// sum is deferred rather than computed: the packet is marked, and whoever makes it
// observable (Finalize: captures, UDP links, the fault injector) or hands it to a
// receiver that wants complete checksums (FinalizeIPCsum) computes it first. A receiver
// that takes CHECKSUM_PARTIAL packets as they are (an IPoIB interface writing to a
// kernel TUN, which passes the state on to the IP stack just as veth does) saves two
// passes over every byte. The mark exists only on packets that are also ICRC pending.

// ipoibHeaderLen is the IPoIB encapsulation header in front of the IP packet (RFC 4391
// §6).
const ipoibHeaderLen = 4

// SetIPCsumPending marks an ICRC-pending UD packet as carrying a partial (pseudo-header
// only) TCP/UDP checksum. It reports false, marking nothing, if the packet is not
// pending or its payload is not an IPoIB-encapsulated TCP or UDP packet.
func SetIPCsumPending(pkt []byte) bool {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != icrcPendingMark {
		return false
	}
	if _, ok := udIPPacket(pkt, o); !ok {
		return false
	}
	pkt[o+4] = ipCsumPendingMark
	return true
}

// IPCsumPending reports whether pkt carries a deferred TCP/UDP checksum.
func IPCsumPending(pkt []byte) bool {
	o := bthOffset(pkt)
	return o >= 0 && pkt[o+4] == ipCsumPendingMark
}

// FinalizeIPCsum computes a deferred TCP/UDP checksum (and the IPv4 header checksum) in
// place and clears its mark; the ICRC stays pending. Other packets are left alone.
func FinalizeIPCsum(pkt []byte) {
	o := bthOffset(pkt)
	if o < 0 || pkt[o+4] != ipCsumPendingMark {
		return
	}
	pkt[o+4] = icrcPendingMark
	if ip, ok := udIPPacket(pkt, o); ok {
		inet.CompletePartial(ip)
	}
}

// udIPPacket returns the IP packet inside a UD SEND packet whose BTH is at o: the payload
// after DETH (and ImmDt) less pad and ICRC, after the IPoIB header, when that header
// says IPv4 or IPv6 and the packet is TCP or UDP.
func udIPPacket(pkt []byte, o int) ([]byte, bool) {
	bth := BTH(pkt[o : o+BTHLen])
	off := o + BTHLen + DETHLen
	switch bth.OpCode() {
	case UDSendOnly:
	case UDSendOnlyImm:
		off += ImmDtLen
	default:
		return nil, false
	}
	end := len(pkt) - ICRCLen - int(bth.PadCnt())
	if end-off < ipoibHeaderLen+20 {
		return nil, false
	}
	payload := pkt[off:end]
	switch binary.BigEndian.Uint16(payload) {
	case 0x0800, 0x86DD:
	default:
		return nil, false
	}
	ip := payload[ipoibHeaderLen:]
	if _, _, _, ok := inet.Transport(ip); !ok {
		return nil, false
	}
	return ip, true
}
