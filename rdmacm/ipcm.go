package rdmacm

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// The IP CM header (IBA Annex A11.6, Linux's struct cma_hdr): the first 36 bytes of the
// private data of a REQ or SIDR_REQ sent by rdma_cm.
//
//	byte 0      CM version (0)
//	byte 1      IP version in the upper nibble (4 or 6)
//	bytes 2-3   source port
//	bytes 4-19  source IP (IPv4: the last 4 bytes, after 12 zero bytes)
//	bytes 20-35 destination IP
const ipcmHeaderLen = 36

// User private data after the header (IBA Annex A11; Linux's cma.c): 92 − 36 in a REQ, 216 − 36 in a
// SIDR_REQ; REP, REJ, SIDR_REP and the rest carry the user's data alone.
const (
	MaxConnectPrivate    = 92 - ipcmHeaderLen  // 56
	MaxSIDRReqPrivate    = 216 - ipcmHeaderLen // 180
	MaxAcceptPrivate     = 196
	MaxAcceptUDPrivate   = 136
	MaxRejectPrivate     = 148
	MaxDisconnectPrivate = 220
)

type ipcmHeader struct {
	src, dst netip.AddrPort
}

func putIPCM(b []byte, h ipcmHeader) {
	clear(b[:ipcmHeaderLen])
	b[0] = 0
	if h.src.Addr().Is4() {
		b[1] = 4 << 4
	} else {
		b[1] = 6 << 4
	}
	binary.BigEndian.PutUint16(b[2:], h.src.Port())
	putIP(b[4:20], h.src.Addr())
	putIP(b[20:36], h.dst.Addr())
}

func putIP(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b[12:16], v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

var errIPCM = errors.New("rdmacm: private data has no IP CM header")

// parseIPCM reads the header; the destination port is the service ID's.
func parseIPCM(b []byte, dstPort uint16) (ipcmHeader, error) {
	if len(b) < ipcmHeaderLen || b[0] != 0 {
		return ipcmHeader{}, errIPCM
	}
	var src, dst netip.Addr
	switch b[1] >> 4 {
	case 4:
		src = netip.AddrFrom4([4]byte(b[16:20]))
		dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		src = netip.AddrFrom16([16]byte(b[4:20]))
		dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return ipcmHeader{}, errIPCM
	}
	return ipcmHeader{
		src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(b[2:])),
		dst: netip.AddrPortFrom(dst, dstPort),
	}, nil
}
