package ipoib

import (
	"encoding/binary"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/tun"
)

// The offload path, used when the tun.Device is a kernel TUN with offloads
// (tun.Offloader): what Linux's ipoib does on an HCA with IB_DEVICE_UD_TSO and
// IB_DEVICE_UD_IP_CSUM.
//
// Transmit: one read returns a whole segment of up to 64 KiB as the IP stack queued it
// (TCP or UDP, with CHECKSUM_PARTIAL). It is cut into path-MTU packets right here, each
// posted as a two-SGE send — a header slot (IPoIB header, the IP and TCP/UDP headers
// patched for that segment) and the payload where the read put it — with
// IBV_SEND_IP_CSUM. So the payload is copied once (by the HCA's gather) and no checksum
// is computed in process (wire.SetCsumPending); the first segment goes in place, its
// header patched in the read buffer.
//
// Receive: the QP is created with IPCsumPartial, so packets from in-process senders keep
// their partial checksums (hca.WCIPCsumPartial). Consecutive TCP segments of a flow in a
// burst are merged like Linux's GRO — the first one's headers fixed up to cover them all,
// the others' payloads taken from their receive slots — and each result is written with
// its virtio-net header: the kernel gets one large CHECKSUM_PARTIAL segment instead of
// many packets, and nobody sums the data.

// gsoRing is the offload transmit path's buffers, one MR: the read buffer, then a
// header slot per segment.
type gsoRing struct {
	mr   *hca.MR
	buf  []byte // txHead head-room + one segment of up to 64 KiB
	hdrs [][]byte
	tmpl [maxSegHeaders]byte
	// scratch builds whole packets for the slow path (destination not resolved).
	scratch []byte
	sgl     [][2]hca.SGE
	wrs     []hca.SendWR
}

// maxSegHeaders bounds a segment's IP and transport headers (60 + 60).
const maxSegHeaders = 120

// hdrSlotLen is a header slot: IPoIB header + IP and transport headers, rounded up.
const hdrSlotLen = 128

func (g *gsoRing) init(pd *hca.PD, n int) error {
	bufLen := txHead + groSegment
	mem := make([]byte, bufLen+n*hdrSlotLen)
	mr, err := pd.RegMR(mem, hca.AccessLocalWrite)
	if err != nil {
		return err
	}
	g.mr = mr
	g.buf = mem[:bufLen:bufLen]
	g.hdrs = make([][]byte, n)
	for k := range g.hdrs {
		o := bufLen + k*hdrSlotLen
		g.hdrs[k] = mem[o : o+hdrSlotLen : o+hdrSlotLen]
	}
	g.scratch = make([]byte, slotLen)
	g.sgl = make([][2]hca.SGE, n)
	g.wrs = make([]hca.SendWR, 0, n)
	return nil
}

func (g *gsoRing) free() {
	if g.mr != nil {
		_ = g.mr.Dereg()
		g.mr = nil
	}
}

// partialCsum looks at a packet the stack did not ask to segment: a CHECKSUM_PARTIAL
// one goes with checksum offload when its checksum is where the HCA can do it, or is
// completed here; !ok drops a malformed one (counted).
func (i *Interface) partialCsum(pkt []byte, meta tun.GSO) (csumAt, bool) {
	if !meta.NeedsCsum {
		return csumAt{}, true
	}
	iphl, proto, csumOff, ok := inet.Transport(pkt)
	cs, co := int(meta.CsumStart), int(meta.CsumOffset)
	switch {
	case ok && cs == iphl && co == csumOff:
		return csumAt{uint16(cs), uint16(co), proto == inet.ProtoUDP}, true
	case cs+co+2 <= len(pkt):
		inet.CompleteAt(pkt[cs:], co, ok && proto == inet.ProtoUDP)
		return csumAt{}, true
	}
	i.cnt.inc(cDropMalformed)
	return csumAt{}, false
}

// csumAt is where the transport checksum of a CHECKSUM_PARTIAL IP packet lies, as
// virtio-net's csum_start and csum_offset say it; the zero value means none is pending
// (an IP header comes first, so start is never 0).
type csumAt struct {
	start, offset uint16
	udp           bool // a sum of 0 goes as 0xFFFF (RFC 768)
}

func (c csumAt) pending() bool { return c.start != 0 }

// apply asks the HCA to finish the checksum at c of the IPoIB message wr sends (the
// 4-byte header, then the packet).
func (c csumAt) apply(wr *hca.SendWR) {
	if c.pending() {
		wr.SendFlags |= hca.SendIPCsum
		wr.CsumStart, wr.CsumOffset, wr.CsumNoZero = HeaderLen+c.start, c.offset, c.udp
	}
}

// segmenter patches a segment's headers from the template of the big one's
// (tcp_gso_segment's and udp4_ufo/__udp_gso_segment's rules).
type segmenter struct {
	tmpl    []byte // IP + transport headers of the big segment
	iphl    int
	proto   uint8
	csumOff int
	v4      bool
	size    int    // payload per segment
	seq     uint32 // TCP: sequence number of the first byte
	id      uint16 // IPv4: identification of the first segment

	// Sums of what all segments share, so each one's checksums cost a few additions:
	// the IPv4 header without its length, identification and checksum fields, and the
	// pseudo-header without its length.
	ready   bool
	ipSum   uint64
	pseudo0 uint64
}

func (s *segmenter) prepare() {
	if s.v4 {
		h := s.tmpl[:s.iphl]
		s.ipSum = inet.Sum(h[:2], 0) + inet.Sum(h[6:10], 0) + inet.Sum(h[12:], 0)
	}
	s.pseudo0 = inet.PseudoSum(s.tmpl, s.proto, 0)
	s.ready = true
}

// headers writes segment k's headers (payload n bytes; last marks the final segment)
// into dst, len(dst) == len(tmpl).
func (s *segmenter) headers(dst []byte, k, n int, last bool) {
	if !s.ready {
		s.prepare()
	}
	copy(dst, s.tmpl)
	hl := len(s.tmpl)
	if s.v4 {
		tot, id := uint16(hl+n), s.id+uint16(k)
		binary.BigEndian.PutUint16(dst[2:], tot)
		binary.BigEndian.PutUint16(dst[4:], id)
		binary.BigEndian.PutUint16(dst[10:], ^inet.Fold(s.ipSum+uint64(tot)+uint64(id)))
	} else {
		binary.BigEndian.PutUint16(dst[4:], uint16(hl-40+n))
	}
	l4 := dst[s.iphl:]
	if s.proto == inet.ProtoTCP {
		binary.BigEndian.PutUint32(l4[4:], s.seq+uint32(k*s.size))
		if k > 0 {
			l4[13] &^= tcpCWR
		}
		if !last {
			l4[13] &^= tcpFIN | tcpPSH
		}
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(8+n))
	}
	binary.BigEndian.PutUint16(l4[s.csumOff:], inet.Fold(s.pseudo0+uint64(hl-s.iphl+n)))
}

// TCP flags (RFC 9293 §3.1, RFC 3168).
const (
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpACK = 0x10
	tcpCWR = 0x80
)

// sendSegmented cuts a large segment — n bytes at txHead of rb, a read buffer registered
// as lkey — into packets of meta.Size payload bytes.
func (i *Interface) sendSegmented(rb []byte, lkey uint32, n int, meta tun.GSO, ls *linkState) {
	g := &i.txp.gtx
	pkt := rb[txHead : txHead+n]
	iphl, proto, csumOff, ok := inet.Transport(pkt)
	v4 := ok && pkt[0]>>4 == 4
	switch meta.Type {
	case tun.GSOTCPv4:
		ok = ok && v4 && proto == inet.ProtoTCP
	case tun.GSOTCPv6:
		ok = ok && !v4 && proto == inet.ProtoTCP
	case tun.GSOUDPL4:
		ok = ok && proto == inet.ProtoUDP
	default:
		ok = false
	}
	ok = ok && meta.Size > 0
	l4hl := 8
	if ok && proto == inet.ProtoTCP {
		l4hl = int(pkt[iphl+12]>>4) * 4
		ok = l4hl >= 20
	}
	hl := iphl + l4hl
	if !ok || hl > maxSegHeaders || hl > len(pkt) {
		i.cnt.inc(cDropMalformed)
		return
	}
	if HeaderLen+hl+int(meta.Size) > ls.ibMTU {
		// The stack segments at our MTU, which connected mode (or a path MTU not yet
		// learned) puts above the UD MTU: tell it the UD MTU.
		i.tooBig(pkt, ls.ibMTU-HeaderLen)
		return
	}
	s := segmenter{tmpl: g.tmpl[:hl], iphl: iphl, proto: proto, csumOff: csumOff, v4: v4, size: int(meta.Size)}
	copy(s.tmpl, pkt[:hl])
	if proto == inet.ProtoTCP {
		s.seq = binary.BigEndian.Uint32(pkt[iphl+4:])
	}
	if v4 {
		s.id = binary.BigEndian.Uint16(pkt[4:])
	}
	data := pkt[hl:]
	nseg := max((len(data)+s.size-1)/s.size, 1)
	segLen := func(k int) int { return min(s.size, len(data)-k*s.size) }
	i.cnt.inc(cTxGSO)

	// Segment 0 in place: its headers are the big segment's, patched.
	n0 := segLen(0)
	s.headers(pkt[:hl], 0, n0, nseg == 1)
	seg0 := pkt[:hl+n0]
	ah, qpn, etype, ok := i.dest(seg0, ls, i.clk.Now(), true, true)
	if !ok {
		// dest queued (or dropped) the first; the rest follow it one by one, whole.
		for k := 1; k < nseg; k++ {
			n := segLen(k)
			p := g.scratch[:hl+n]
			s.headers(p[:hl], k, n, k == nseg-1)
			copy(p[hl:], data[k*s.size:k*s.size+n])
			inet.CompletePartial(p)
			i.xmit(p)
		}
		return
	}
	at := csumAt{uint16(s.iphl), uint16(s.csumOff), s.proto == inet.ProtoUDP}
	wrs := append(g.wrs[:0], inPlaceWR(rb[txHead-HeaderLen:txHead], len(seg0), g.sgl[0][:1], lkey, 0, etype, at, ah, qpn, ls))
	hkey := g.mr.LKey()
	dataAddr := hca.BufAddr(data)
	for k := 1; k < nseg; k++ {
		if len(wrs) == len(g.hdrs) {
			i.postTx(wrs)
			wrs = wrs[:0]
		}
		slot := len(wrs)
		n := segLen(k)
		h := g.hdrs[slot][:HeaderLen+hl]
		binary.BigEndian.PutUint32(h, uint32(etype)<<16)
		s.headers(h[HeaderLen:], k, n, k == nseg-1)
		g.sgl[slot] = [2]hca.SGE{
			{Addr: hca.BufAddr(h), Length: uint32(len(h)), LKey: hkey},
			{Addr: dataAddr + uint64(k*s.size), Length: uint32(n), LKey: lkey},
		}
		wrs = append(wrs, hca.SendWR{
			WRID: uint64(slot), SGL: g.sgl[slot][:], Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
			AH: ah, RemoteQPN: qpn, RemoteQKey: ls.qkey,
		})
		at.apply(&wrs[len(wrs)-1])
	}
	i.postTx(wrs)
}

// groState is the segment being merged during one receive burst.
type groState struct {
	buf     []byte   // receive slot of the first segment: the IP packet at rxHead
	tail    [][]byte // payloads of the segments merged into it, in their slots
	length  int      // IP length of the merged segment
	iphl    int
	tcphl   int
	size    int    // payload of the first segment: all but the last have this much
	nextSeq uint32 // sequence number the next segment must have
	segs    int
	partial bool
	closed  bool // took a PSH or a short segment: nothing more merges
}

// groAdd passes one received IP packet (at rxHead in buf) toward the stack: merged into
// the segment being built, starting a new one, or written as it is.
func (i *Interface) groAdd(buf []byte, flags hca.WCFlags) {
	st := &i.rxp.gro
	ip := buf[rxHead:]
	// A packet the HCA did not vouch for carries complete checksums (it came from
	// another process over a UDP link, where wire.Finalize completed them): it merges
	// once they check out in software, as Linux's GRO validates a CHECKSUM_NONE segment
	// (inet_gro_receive's ip_fast_csum, tcp4_gro_receive's skb_gro_checksum_validate).
	ok := flags&hca.WCIPCsumOK != 0 || tcpChecksumsValid(ip)
	partial := flags&hca.WCIPCsumPartial != 0
	if st.buf != nil && ok && i.groMerge(ip) {
		return
	}
	i.groFlush()
	iphl, tcphl, ok := groCandidate(ip, ok)
	if !ok {
		i.writeOne(buf, partial)
		return
	}
	*st = groState{
		buf: buf, tail: st.tail[:0], length: len(ip), iphl: iphl, tcphl: tcphl, size: len(ip) - iphl - tcphl,
		nextSeq: binary.BigEndian.Uint32(ip[iphl+4:]) + uint32(len(ip)-iphl-tcphl), segs: 1, partial: partial,
	}
	st.closed = ip[iphl+13]&tcpPSH != 0
}

// tcpChecksumsValid reports whether ip is a TCP segment whose IP length matches the
// packet and whose IPv4 header and TCP checksums are correct.
func tcpChecksumsValid(ip []byte) bool {
	iphl, proto, _, ok := inet.Transport(ip)
	if !ok || proto != inet.ProtoTCP {
		return false
	}
	if ip[0]>>4 == 4 {
		if int(binary.BigEndian.Uint16(ip[2:])) != len(ip) || inet.Checksum(ip[:iphl]) != 0 {
			return false
		}
	} else if int(binary.BigEndian.Uint16(ip[4:]))+40 != len(ip) {
		return false
	}
	return inet.Valid(ip)
}

// groCandidate reports whether ip can head a merged segment: an intact TCP segment
// carrying data with only ACK (and PSH) set, its IP length matching.
func groCandidate(ip []byte, csumOK bool) (iphl, tcphl int, ok bool) {
	if !csumOK {
		return 0, 0, false
	}
	iphl, proto, _, ok := inet.Transport(ip)
	if !ok || proto != inet.ProtoTCP {
		return 0, 0, false
	}
	if ip[0]>>4 == 4 {
		if int(binary.BigEndian.Uint16(ip[2:])) != len(ip) {
			return 0, 0, false
		}
	} else if int(binary.BigEndian.Uint16(ip[4:]))+40 != len(ip) {
		return 0, 0, false
	}
	tcphl = int(ip[iphl+12]>>4) * 4
	if tcphl < 20 || iphl+tcphl >= len(ip) {
		return 0, 0, false
	}
	if f := ip[iphl+13]; f != tcpACK && f != tcpACK|tcpPSH {
		return 0, 0, false
	}
	return iphl, tcphl, true
}

// groMerge appends ip's payload to the segment being built if it continues it (Linux's
// tcp_gro_receive rules: same flow, headers and options, the next sequence number, no
// larger than the first segment).
func (i *Interface) groMerge(ip []byte) bool {
	st := &i.rxp.gro
	if st.closed {
		return false
	}
	head := st.buf[rxHead:]
	iphl, tcphl, ok := groCandidate(ip, true)
	if !ok || iphl != st.iphl || tcphl != st.tcphl || ip[0]>>4 != head[0]>>4 {
		return false
	}
	if ip[0]>>4 == 4 {
		// Version/IHL/TOS, DF, TTL/protocol, addresses.
		if ip[1] != head[1] || ip[6]&0x40 != head[6]&0x40 || string(ip[8:10]) != string(head[8:10]) ||
			string(ip[12:iphl]) != string(head[12:iphl]) {
			return false
		}
	} else if string(ip[:4]) != string(head[:4]) || string(ip[6:40]) != string(head[6:40]) {
		return false
	}
	th, hh := ip[iphl:], head[iphl:]
	// Ports, acknowledgment number, window, options must match; PSH may end the run.
	if string(th[:4]) != string(hh[:4]) || string(th[8:12]) != string(hh[8:12]) ||
		string(th[14:16]) != string(hh[14:16]) || string(th[20:tcphl]) != string(hh[20:tcphl]) {
		return false
	}
	if binary.BigEndian.Uint32(th[4:]) != st.nextSeq {
		return false
	}
	payload := ip[iphl+tcphl:]
	if len(payload) > st.size || st.length+len(payload) > 0xFFFF || len(st.tail) == maxGROSegs {
		return false
	}
	st.tail = append(st.tail, payload)
	st.length += len(payload)
	st.nextSeq += uint32(len(payload))
	st.segs++
	st.partial = true // the merged segment's checksum is recomputed as partial
	if th[13]&tcpPSH != 0 {
		st.buf[rxHead+iphl+13] |= tcpPSH
		st.closed = true
	}
	if len(payload) < st.size {
		st.closed = true
	}
	return true
}

// maxGROSegs bounds the segments merged into the first one (a write has at most
// maxGROSegs+1 pieces, far below the kernel's 1024 iovecs).
const maxGROSegs = 64

// groFlush writes the segment being built, if any.
func (i *Interface) groFlush() {
	st := &i.rxp.gro
	if st.buf == nil {
		return
	}
	buf, segs := st.buf, st.segs
	st.buf = nil
	if segs == 1 {
		i.writeOne(buf, st.partial)
		return
	}
	ip := buf[rxHead:]
	g := tun.GSO{
		Type: tun.GSOTCPv6, NeedsCsum: true, CsumStart: uint16(st.iphl), CsumOffset: inet.TCPCsumOffset,
		HdrLen: uint16(st.iphl + st.tcphl), Size: uint16(st.size),
	}
	if ip[0]>>4 == 4 {
		g.Type = tun.GSOTCPv4
		binary.BigEndian.PutUint16(ip[2:], uint16(st.length))
		inet.SetIPv4HeaderChecksum(ip[:st.iphl])
	} else {
		binary.BigEndian.PutUint16(ip[4:], uint16(st.length-40))
	}
	binary.BigEndian.PutUint16(ip[st.iphl+inet.TCPCsumOffset:],
		inet.Fold(inet.PseudoSum(ip, inet.ProtoTCP, st.length-st.iphl)))
	i.cnt.add(cRxGRO, uint64(segs-1))
	i.writeGSO(buf, g, st.tail, segs, st.length+(segs-1)*(st.iphl+st.tcphl))
	clear(st.tail)
}

// writeOne writes one received packet; a partial one says so to the kernel.
func (i *Interface) writeOne(buf []byte, partial bool) {
	ip := buf[rxHead:]
	var g tun.GSO
	if partial {
		if iphl, _, csumOff, ok := inet.Transport(ip); ok {
			g = tun.GSO{NeedsCsum: true, CsumStart: uint16(iphl), CsumOffset: uint16(csumOff)}
		} else {
			i.cnt.inc(cDropMalformed)
			return
		}
	}
	i.writeGSO(buf, g, nil, 1, len(ip))
}

// writeGSO writes buf (the IP packet at rxHead) and tail, and counts segs packets of
// bytes in all.
func (i *Interface) writeGSO(buf []byte, g tun.GSO, tail [][]byte, segs, bytes int) {
	i.cnt.inc(cRxBatches)
	if err := i.txp.off.WriteGSO(buf, rxHead, g, tail); err != nil {
		i.cnt.add(cDropTunWrite, uint64(segs))
		return
	}
	i.cnt.add(cRxPackets, uint64(segs))
	i.cnt.add(cRxBytes, uint64(bytes))
}
