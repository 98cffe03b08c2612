package tun

import "encoding/binary"

// Segmentation and checksum offload, exchanged as whole segments.
//
// A Device with offloads already splits the kernel's large segments in Read and merges
// consecutive ones in Write (wireguard-go's GSO and GRO), computing and checking every
// packet's checksum in software. A caller that does segmentation and coalescing its own
// way — IPoIB emulating an HCA's LSO and checksum offload, whose in-process fabric never
// needs the checksums computed — uses the Offloader methods instead: one kernel segment
// per read with its offload metadata, and one (possibly coalesced) segment per write.

// GSOType is the kind of segmentation a segment asks for (virtio_net_hdr.gso_type).
type GSOType uint8

const (
	GSONone  GSOType = 0 // a single packet
	GSOTCPv4 GSOType = 1 // TCP over IPv4, segment at Size bytes of payload
	GSOTCPv6 GSOType = 4
	GSOUDPL4 GSOType = 5 // UDP (IPv4 or IPv6), each segment its own datagram
)

// GSO is a segment's offload metadata, what Linux's virtio_net_hdr says.
type GSO struct {
	Type GSOType
	// ECN is set when the segment's TCP flow uses ECN (CWR belongs to the first
	// segment only).
	ECN bool
	// NeedsCsum is CHECKSUM_PARTIAL: the 16-bit field at CsumStart+CsumOffset holds
	// the pseudo-header sum, and the checksum over [CsumStart, end) remains to be done.
	NeedsCsum  bool
	CsumStart  uint16
	CsumOffset uint16
	// HdrLen is the length of the headers (IP and transport) of a segmented packet.
	HdrLen uint16
	// Size is the payload per segment (the MSS for TCP).
	Size uint16
}

// Offloader is implemented by devices that can exchange whole offloaded segments.
type Offloader interface {
	// Offloads reports whether the device is in offload mode at all; if not, the
	// other methods must not be used.
	Offloads() bool
	// ReadGSO reads one segment (up to 64 KiB) into buf[offset:] and returns its length
	// and metadata. offset must be at least MinOffset.
	ReadGSO(buf []byte, offset int) (int, GSO, error)
	// WriteGSO writes buf[offset:] followed by the pieces of tail (payload of a
	// coalesced segment that lies elsewhere) as one segment; it may use the head-room.
	WriteGSO(buf []byte, offset int, g GSO, tail [][]byte) error
}

// OffloadSwitcher is implemented by devices whose offloads can be changed while they
// run.
type OffloadSwitcher interface {
	SetOffloads(o Offloads) error
}

// Offloads says what the kernel may hand over unfinished (TUNSETOFFLOAD; what
// `ethtool -K DEV tx … tso …` sets on a NIC).
type Offloads int

const (
	// OffloadsNone: every checksum complete, nothing larger than the MTU.
	OffloadsNone Offloads = iota
	// OffloadsCsum: CHECKSUM_PARTIAL packets, none larger than the MTU.
	OffloadsCsum
	// OffloadsAll: checksums and TCP/UDP segmentation (wireguard-go's set, the default).
	OffloadsAll
)

// virtio_net_hdr (include/uapi/linux/virtio_net.h), 10 bytes, little-endian.
const (
	vnetFlagNeedsCsum = 1
	vnetGSOECN        = 0x80
)

func decodeVnetHdr(h []byte) GSO {
	le := binary.LittleEndian
	return GSO{
		Type:       GSOType(h[1] &^ vnetGSOECN),
		ECN:        h[1]&vnetGSOECN != 0,
		NeedsCsum:  h[0]&vnetFlagNeedsCsum != 0,
		HdrLen:     le.Uint16(h[2:]),
		Size:       le.Uint16(h[4:]),
		CsumStart:  le.Uint16(h[6:]),
		CsumOffset: le.Uint16(h[8:]),
	}
}

func encodeVnetHdr(h []byte, g GSO) {
	h[0], h[1] = 0, byte(g.Type)
	if g.NeedsCsum {
		h[0] = vnetFlagNeedsCsum
	}
	if g.ECN {
		h[1] |= vnetGSOECN
	}
	le := binary.LittleEndian
	le.PutUint16(h[2:], g.HdrLen)
	le.PutUint16(h[4:], g.Size)
	le.PutUint16(h[6:], g.CsumStart)
	le.PutUint16(h[8:], g.CsumOffset)
}
