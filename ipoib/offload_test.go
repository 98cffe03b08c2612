package ipoib

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/tun"
)

// Unit tests of the offload path's packet surgery: the transmit segmenter and the
// receive merge (GRO), without an HCA or a TUN. Checksums are checked both with inet's
// helpers and with the naive reference implementation below, so a bug shared by inet
// and the code under test does not go unnoticed.

// ---------------------------------------------------------------------------------
// Reference checksums (RFC 1071, byte pairs, no tricks).

func refSum(b []byte) uint64 {
	var s uint64
	for k := 0; k+1 < len(b); k += 2 {
		s += uint64(b[k])<<8 | uint64(b[k+1])
	}
	if len(b)%2 == 1 {
		s += uint64(b[len(b)-1]) << 8
	}
	return s
}

func refFold(s uint64) uint16 {
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

// refPseudo is the pseudo-header sum of an l4len-byte transport segment in ip.
func refPseudo(ip []byte, proto byte, l4len int) uint64 {
	var s uint64
	if ip[0]>>4 == 4 {
		s = refSum(ip[12:20])
	} else {
		s = refSum(ip[8:40])
	}
	return s + uint64(proto) + uint64(l4len)
}

// refIPHL is the IP header length of a well-formed test packet.
func refIPHL(ip []byte) int {
	if ip[0]>>4 == 4 {
		return int(ip[0]&0x0F) * 4
	}
	return 40
}

func refProto(ip []byte) byte {
	if ip[0]>>4 == 4 {
		return ip[9]
	}
	return ip[6]
}

// refL4Valid reports whether ip's TCP/UDP checksum is right.
func refL4Valid(ip []byte) bool {
	iphl := refIPHL(ip)
	l4 := ip[iphl:]
	return refFold(refSum(l4)+refPseudo(ip, refProto(ip), len(l4))) == 0xFFFF
}

// refPartialOK reports whether ip's checksum field holds the folded pseudo-header sum
// (CHECKSUM_PARTIAL).
func refPartialOK(ip []byte) bool {
	iphl := refIPHL(ip)
	off := inet.TCPCsumOffset
	if refProto(ip) == inet.ProtoUDP {
		off = inet.UDPCsumOffset
	}
	got := binary.BigEndian.Uint16(ip[iphl+off:])
	want := refFold(refPseudo(ip, refProto(ip), len(ip)-iphl))
	// 0x0000 and 0xFFFF are the same one's-complement value.
	return got == want || (got == 0 && want == 0xFFFF) || (got == 0xFFFF && want == 0)
}

func refIPv4HeaderOK(ip []byte) bool {
	return refFold(refSum(ip[:refIPHL(ip)])) == 0xFFFF
}

// ---------------------------------------------------------------------------------
// Packet builder.

var (
	tSrc4 = [4]byte{10, 0, 0, 1}
	tDst4 = [4]byte{10, 0, 0, 2}
	tSrc6 = netip.MustParseAddr("fd00::1").As16()
	tDst6 = netip.MustParseAddr("fd00::2").As16()
)

// pktSpec describes a test packet; defaults come from tcpSpec/udpSpec.
type pktSpec struct {
	v6           bool
	proto        byte
	sport, dport uint16
	seq, ack     uint32
	flags        byte
	win          uint16
	opts         []byte // TCP options, a multiple of 4 bytes
	ipopts       []byte // IPv4 options, a multiple of 4 bytes
	id           uint16
	ttl          byte
	tos          byte
	flow         uint32 // IPv6 flow label
	noDF         bool
	src4, dst4   [4]byte
	src6, dst6   [16]byte
	payload      []byte
	complete     bool // a complete transport checksum instead of the partial one
}

const (
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpURG = 0x20
	tcpECE = 0x40
)

func tsOpt(tsval, tsecr uint32) []byte {
	o := []byte{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(o[4:], tsval)
	binary.BigEndian.PutUint32(o[8:], tsecr)
	return o
}

func tcpSpec(v6 bool) pktSpec {
	return pktSpec{
		v6: v6, proto: inet.ProtoTCP, sport: 40000, dport: 5201,
		seq: 0xFFFFF000, ack: 0x01020304, flags: tcpACK, win: 0x1F00,
		opts: tsOpt(0x11223344, 0x55667788), id: 0x1234, ttl: 64, flow: 0x12345,
		src4: tSrc4, dst4: tDst4, src6: tSrc6, dst6: tDst6,
	}
}

func udpSpec(v6 bool) pktSpec {
	return pktSpec{
		v6: v6, proto: inet.ProtoUDP, sport: 4789, dport: 9000, id: 0x1234, ttl: 64, flow: 0x54321,
		src4: tSrc4, dst4: tDst4, src6: tSrc6, dst6: tDst6,
	}
}

func (s pktSpec) build() []byte {
	l4hl := 8
	if s.proto == inet.ProtoTCP {
		l4hl = 20 + len(s.opts)
	}
	iphl := 20 + len(s.ipopts)
	if s.v6 {
		iphl = 40
	}
	p := make([]byte, iphl+l4hl+len(s.payload))
	if !s.v6 {
		p[0], p[1] = 0x40|byte(iphl/4), s.tos
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		binary.BigEndian.PutUint16(p[4:], s.id)
		if !s.noDF {
			p[6] = 0x40
		}
		p[8], p[9] = s.ttl, s.proto
		copy(p[12:16], s.src4[:])
		copy(p[16:20], s.dst4[:])
		copy(p[20:iphl], s.ipopts)
		binary.BigEndian.PutUint16(p[10:], ^refFold(refSum(p[:iphl])))
	} else {
		binary.BigEndian.PutUint32(p, 6<<28|uint32(s.tos)<<20|s.flow&0xFFFFF)
		binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
		p[6], p[7] = s.proto, s.ttl
		copy(p[8:24], s.src6[:])
		copy(p[24:40], s.dst6[:])
	}
	l4 := p[iphl:]
	binary.BigEndian.PutUint16(l4[0:], s.sport)
	binary.BigEndian.PutUint16(l4[2:], s.dport)
	csumOff := inet.UDPCsumOffset
	if s.proto == inet.ProtoTCP {
		csumOff = inet.TCPCsumOffset
		binary.BigEndian.PutUint32(l4[4:], s.seq)
		binary.BigEndian.PutUint32(l4[8:], s.ack)
		l4[12] = byte(l4hl/4) << 4
		l4[13] = s.flags
		binary.BigEndian.PutUint16(l4[14:], s.win)
		copy(l4[20:], s.opts)
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(s.payload)))
	}
	copy(l4[l4hl:], s.payload)
	binary.BigEndian.PutUint16(l4[csumOff:], refFold(refPseudo(p, s.proto, len(l4))))
	if s.complete {
		c := ^refFold(refSum(l4))
		if c == 0 && s.proto == inet.ProtoUDP {
			c = 0xFFFF
		}
		binary.BigEndian.PutUint16(l4[csumOff:], c)
	}
	return p
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return b
}

// ---------------------------------------------------------------------------------
// The segmenter, configured as sendSegmented configures it.

func newTestSegmenter(t testing.TB, big []byte, size int) (*segmenter, int) {
	t.Helper()
	iphl, proto, csumOff, ok := inet.Transport(big)
	if !ok {
		t.Fatalf("test packet not TCP/UDP")
	}
	v4 := big[0]>>4 == 4
	l4hl := 8
	if proto == inet.ProtoTCP {
		l4hl = int(big[iphl+12]>>4) * 4
	}
	hl := iphl + l4hl
	s := &segmenter{tmpl: append([]byte(nil), big[:hl]...), iphl: iphl, proto: proto, csumOff: csumOff, v4: v4, size: size}
	if proto == inet.ProtoTCP {
		s.seq = binary.BigEndian.Uint32(big[iphl+4:])
	}
	if v4 {
		s.id = binary.BigEndian.Uint16(big[4:])
	}
	return s, hl
}

// segmentAll cuts big into packets of size payload bytes with segmenter.headers, each
// with its checksum left partial, as sendSegmented's packets leave.
func segmentAll(t testing.TB, big []byte, size int) [][]byte {
	t.Helper()
	s, hl := newTestSegmenter(t, big, size)
	data := big[hl:]
	nseg := max((len(data)+size-1)/size, 1)
	segs := make([][]byte, nseg)
	for k := range segs {
		n := min(size, len(data)-k*size)
		p := make([]byte, hl+n)
		s.headers(p[:hl], k, n, k == nseg-1)
		copy(p[hl:], data[k*size:k*size+n])
		segs[k] = p
	}
	return segs
}

func TestSegmenterTCPv4(t *testing.T) {
	const mss = 1988
	cases := []struct {
		name    string
		flags   byte
		payload int
	}{
		{"ACK|PSH", tcpACK | tcpPSH, 10000},
		{"FIN|ACK|PSH", tcpFIN | tcpACK | tcpPSH, 10000},
		{"CWR|ACK", tcpCWR | tcpACK, 10000},
		{"exact multiple", tcpACK | tcpPSH, 3 * mss},
		{"one segment", tcpCWR | tcpACK | tcpPSH | tcpFIN, 700},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := tcpSpec(false)
			spec.flags = c.flags
			spec.payload = randBytes(uint64(c.payload), c.payload)
			big := spec.build()
			checkSegmentsTCP(t, big, mss, c.payload)
		})
	}
}

func TestSegmenterTCPv6(t *testing.T) {
	const mss = 1988
	for _, flags := range []byte{tcpACK | tcpPSH, tcpFIN | tcpACK | tcpPSH, tcpCWR | tcpACK} {
		t.Run(fmt.Sprintf("flags=%#02x", flags), func(t *testing.T) {
			spec := tcpSpec(true)
			spec.flags = flags
			spec.payload = randBytes(7, 10000)
			big := spec.build()
			checkSegmentsTCP(t, big, mss, 10000)
		})
	}
}

// checkSegmentsTCP segments big (TCP, IPv4 or IPv6) at mss and checks every segment.
func checkSegmentsTCP(t *testing.T, big []byte, mss, payloadLen int) {
	t.Helper()
	v4 := big[0]>>4 == 4
	iphl := refIPHL(big)
	tcphl := int(big[iphl+12]>>4) * 4
	hl := iphl + tcphl
	data := big[hl:]
	wantSegs := max((payloadLen+mss-1)/mss, 1)
	tmpl := append([]byte(nil), big[:hl]...)

	s, shl := newTestSegmenter(t, big, mss)
	if shl != hl {
		t.Fatalf("header length %d, want %d", shl, hl)
	}
	seq0 := binary.BigEndian.Uint32(big[iphl+4:])
	id0 := binary.BigEndian.Uint16(big[4:])
	flags0 := big[iphl+13]

	var got []byte
	for k := range wantSegs {
		last := k == wantSegs-1
		n := min(mss, len(data)-k*mss)
		if !last && n != mss {
			t.Fatalf("segment %d: %d bytes", k, n)
		}
		// headers must write exactly len(tmpl) bytes.
		p := make([]byte, hl+n+4)
		copy(p[hl+n:], []byte{0xDE, 0xAD, 0xBE, 0xEF})
		copy(p[hl:], data[k*mss:k*mss+n])
		for j := range hl {
			p[j] = 0xEE // the slot's previous contents
		}
		s.headers(p[:hl], k, n, last)
		if !bytes.Equal(p[hl+n:], []byte{0xDE, 0xAD, 0xBE, 0xEF}) || !bytes.Equal(p[hl:hl+n], data[k*mss:k*mss+n]) {
			t.Fatalf("segment %d: headers wrote past the headers", k)
		}
		p = p[:hl+n]
		if !bytes.Equal(s.tmpl, tmpl) {
			t.Fatalf("segment %d: headers changed the template", k)
		}

		// IP header.
		if v4 {
			if got := int(binary.BigEndian.Uint16(p[2:])); got != hl+n {
				t.Errorf("segment %d: IPv4 total length %d, want %d", k, got, hl+n)
			}
			if got, want := binary.BigEndian.Uint16(p[4:]), id0+uint16(k); got != want {
				t.Errorf("segment %d: IPv4 ID %#x, want %#x", k, got, want)
			}
			if inet.Checksum(p[:iphl]) != 0 || !refIPv4HeaderOK(p) {
				t.Errorf("segment %d: IPv4 header checksum wrong", k)
			}
			// Everything else as in the big one: version/IHL, TOS, flags, TTL, proto, addresses.
			if !bytes.Equal(p[:2], tmpl[:2]) || !bytes.Equal(p[6:10], tmpl[6:10]) || !bytes.Equal(p[12:iphl], tmpl[12:iphl]) {
				t.Errorf("segment %d: IPv4 header % x, template % x", k, p[:iphl], tmpl[:iphl])
			}
		} else {
			if got := int(binary.BigEndian.Uint16(p[4:])); got != tcphl+n {
				t.Errorf("segment %d: IPv6 payload length %d, want %d", k, got, tcphl+n)
			}
			if !bytes.Equal(p[:4], tmpl[:4]) || !bytes.Equal(p[6:40], tmpl[6:40]) {
				t.Errorf("segment %d: IPv6 header % x, template % x", k, p[:40], tmpl[:40])
			}
		}

		// TCP header.
		th, tt := p[iphl:], tmpl[iphl:]
		if got, want := binary.BigEndian.Uint32(th[4:]), seq0+uint32(k*mss); got != want {
			t.Errorf("segment %d: seq %#x, want %#x", k, got, want)
		}
		wantFlags := flags0
		if k > 0 {
			wantFlags &^= tcpCWR
		}
		if !last {
			wantFlags &^= tcpFIN | tcpPSH
		}
		if th[13] != wantFlags {
			t.Errorf("segment %d: flags %#02x, want %#02x", k, th[13], wantFlags)
		}
		if !bytes.Equal(th[:4], tt[:4]) || !bytes.Equal(th[8:13], tt[8:13]) || !bytes.Equal(th[14:16], tt[14:16]) ||
			!bytes.Equal(th[18:tcphl], tt[18:tcphl]) {
			t.Errorf("segment %d: ports/ack/offset/window/urgent/options changed:\n% x\n% x", k, th[:tcphl], tt[:tcphl])
		}
		if !refPartialOK(p) {
			t.Errorf("segment %d: checksum field %#04x is not the pseudo-header sum", k, binary.BigEndian.Uint16(th[16:]))
		}

		// Completed, the segment is a valid packet.
		if !inet.CompletePartial(p) {
			t.Fatalf("segment %d: CompletePartial refused it", k)
		}
		if !inet.Valid(p) || !refL4Valid(p) {
			t.Errorf("segment %d: TCP checksum wrong after completion", k)
		}
		if v4 && (inet.Checksum(p[:iphl]) != 0 || !refIPv4HeaderOK(p)) {
			t.Errorf("segment %d: IPv4 header checksum wrong after completion", k)
		}
		got = append(got, p[hl:]...)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("segments' payloads do not add up to the original")
	}
}

func TestSegmenterUDP(t *testing.T) {
	const size = 1400
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			spec := udpSpec(v6)
			spec.payload = randBytes(11, 10000)
			big := spec.build()
			iphl := refIPHL(big)
			hl := iphl + 8
			tmpl := append([]byte(nil), big[:hl]...)
			segs := segmentAll(t, big, size)
			if len(segs) != 8 {
				t.Fatalf("%d segments, want 8", len(segs))
			}
			var got []byte
			for k, p := range segs {
				n := len(p) - hl
				want := min(size, 10000-k*size)
				if n != want {
					t.Fatalf("segment %d: %d bytes of payload, want %d", k, n, want)
				}
				if v6 {
					if got := int(binary.BigEndian.Uint16(p[4:])); got != 8+n {
						t.Errorf("segment %d: IPv6 payload length %d, want %d", k, got, 8+n)
					}
				} else {
					if got := int(binary.BigEndian.Uint16(p[2:])); got != hl+n {
						t.Errorf("segment %d: IPv4 total length %d, want %d", k, got, hl+n)
					}
					if got := binary.BigEndian.Uint16(p[4:]); got != 0x1234+uint16(k) {
						t.Errorf("segment %d: IPv4 ID %#x, want %#x", k, got, 0x1234+k)
					}
					if !refIPv4HeaderOK(p) {
						t.Errorf("segment %d: IPv4 header checksum wrong", k)
					}
				}
				u := p[iphl:]
				if got := int(binary.BigEndian.Uint16(u[4:])); got != 8+n {
					t.Errorf("segment %d: UDP length %d, want %d", k, got, 8+n)
				}
				if !bytes.Equal(u[:4], tmpl[iphl:iphl+4]) {
					t.Errorf("segment %d: ports changed", k)
				}
				if !refPartialOK(p) {
					t.Errorf("segment %d: checksum field is not the pseudo-header sum", k)
				}
				inet.CompletePartial(p)
				if !inet.Valid(p) || !refL4Valid(p) {
					t.Errorf("segment %d: UDP checksum wrong after completion", k)
				}
				if binary.BigEndian.Uint16(u[6:]) == 0 {
					t.Errorf("segment %d: UDP checksum 0 (means none)", k)
				}
				got = append(got, p[hl:]...)
			}
			if !bytes.Equal(got, spec.payload) {
				t.Errorf("payloads do not add up to the original")
			}
		})
	}
}

// ---------------------------------------------------------------------------------
// GRO.

type gsoWrite struct {
	pkt    []byte // buf[offset:] and the tail pieces, copied
	g      tun.GSO
	pieces int
}

// fakeOffloader records WriteGSO calls.
type fakeOffloader struct {
	writes []gsoWrite
	err    error
}

func (f *fakeOffloader) Offloads() bool { return true }
func (f *fakeOffloader) ReadGSO([]byte, int) (int, tun.GSO, error) {
	return 0, tun.GSO{}, errors.New("fakeOffloader: ReadGSO is not used")
}

func (f *fakeOffloader) WriteGSO(buf []byte, offset int, g tun.GSO, tail [][]byte) error {
	if offset != rxHead {
		return fmt.Errorf("offset %d, want rxHead %d", offset, rxHead)
	}
	p := append([]byte(nil), buf[offset:]...)
	for _, t := range tail {
		p = append(p, t...)
	}
	f.writes = append(f.writes, gsoWrite{pkt: p, g: g, pieces: 1 + len(tail)})
	return f.err
}

// nopOffloader discards writes.
type nopOffloader struct{}

func (nopOffloader) Offloads() bool                            { return true }
func (nopOffloader) ReadGSO([]byte, int) (int, tun.GSO, error) { return 0, tun.GSO{}, tun.ErrClosed }
func (nopOffloader) WriteGSO([]byte, int, tun.GSO, [][]byte) error {
	return nil
}

func newGROInterface() (*Interface, *fakeOffloader) {
	f := &fakeOffloader{}
	i := &Interface{}
	i.txp.off = f
	return i, f
}

func cnt(i *Interface, c counter) uint64 { return i.cnt[c].Load() }

const partialFlags = hca.WCIPCsumOK | hca.WCIPCsumPartial

// rxBuf puts ip in a receive slot of its own, at rxHead, with scratch before it.
func rxBuf(ip []byte) []byte {
	buf := make([]byte, rxHead+len(ip))
	for k := range rxHead {
		buf[k] = 0xA5
	}
	copy(buf[rxHead:], ip)
	return buf
}

// feed gives each packet to groAdd in its own buffer, with flags.
func feed(i *Interface, flags hca.WCFlags, pkts ...[]byte) {
	for _, p := range pkts {
		i.groAdd(rxBuf(p), flags)
	}
}

// tcpRun builds in-sequence TCP segments of the given payload sizes from spec, the
// last with PSH if psh; it returns them and their concatenated payload.
func tcpRun(spec pktSpec, sizes []int, psh bool, seed uint64) ([][]byte, []byte) {
	total := 0
	for _, n := range sizes {
		total += n
	}
	data := randBytes(seed, total)
	segs := make([][]byte, len(sizes))
	off := 0
	for k, n := range sizes {
		s := spec
		s.seq = spec.seq + uint32(off)
		s.id = spec.id + uint16(k)
		s.payload = data[off : off+n]
		if psh && k == len(sizes)-1 {
			s.flags |= tcpPSH
		}
		segs[k] = s.build()
		off += n
	}
	return segs, data
}

func repeatSize(n, count int) []int {
	s := make([]int, count)
	for k := range s {
		s[k] = n
	}
	return s
}

// payloadOf is the TCP payload of ip.
func payloadOf(ip []byte) []byte {
	iphl := refIPHL(ip)
	return ip[iphl+int(ip[iphl+12]>>4)*4:]
}

func concatPayloads(segs ...[]byte) []byte {
	var b []byte
	for _, s := range segs {
		b = append(b, payloadOf(s)...)
	}
	return b
}

// checkMerged checks a write that merged segs (in order) into one large segment.
func checkMerged(t *testing.T, w gsoWrite, segs [][]byte) {
	t.Helper()
	head := segs[0]
	v4 := head[0]>>4 == 4
	iphl := refIPHL(head)
	tcphl := int(head[iphl+12]>>4) * 4
	hl := iphl + tcphl
	size := len(head) - hl
	payload := concatPayloads(segs...)

	wantType := tun.GSOTCPv6
	if v4 {
		wantType = tun.GSOTCPv4
	}
	want := tun.GSO{Type: wantType, NeedsCsum: true, CsumStart: uint16(iphl), CsumOffset: 16, HdrLen: uint16(hl), Size: uint16(size)}
	if w.g != want {
		t.Errorf("GSO %+v, want %+v", w.g, want)
	}
	if w.pieces != len(segs) {
		t.Errorf("written in %d pieces, want %d (one per segment)", w.pieces, len(segs))
	}
	p := w.pkt
	if len(p) != hl+len(payload) {
		t.Fatalf("written %d bytes, want %d", len(p), hl+len(payload))
	}
	if v4 {
		if got := int(binary.BigEndian.Uint16(p[2:])); got != len(p) {
			t.Errorf("IPv4 total length %d, want %d", got, len(p))
		}
		if inet.Checksum(p[:iphl]) != 0 || !refIPv4HeaderOK(p) {
			t.Errorf("IPv4 header checksum wrong")
		}
		// The rest of the IP header is the first segment's (ID included).
		if !bytes.Equal(p[:2], head[:2]) || !bytes.Equal(p[4:10], head[4:10]) || !bytes.Equal(p[12:iphl], head[12:iphl]) {
			t.Errorf("IPv4 header % x, first segment's % x", p[:iphl], head[:iphl])
		}
	} else {
		if got := int(binary.BigEndian.Uint16(p[4:])); got != len(p)-40 {
			t.Errorf("IPv6 payload length %d, want %d", got, len(p)-40)
		}
		if !bytes.Equal(p[:4], head[:4]) || !bytes.Equal(p[6:40], head[6:40]) {
			t.Errorf("IPv6 header % x, first segment's % x", p[:40], head[:40])
		}
	}
	th, hh := p[iphl:], head[iphl:]
	wantFlags := hh[13]
	if last := segs[len(segs)-1]; last[iphl+13]&tcpPSH != 0 {
		wantFlags |= tcpPSH
	}
	if th[13] != wantFlags {
		t.Errorf("TCP flags %#02x, want %#02x", th[13], wantFlags)
	}
	if !bytes.Equal(th[:13], hh[:13]) || !bytes.Equal(th[14:16], hh[14:16]) || !bytes.Equal(th[18:tcphl], hh[18:tcphl]) {
		t.Errorf("TCP header % x, first segment's % x", th[:tcphl], hh[:tcphl])
	}
	if !bytes.Equal(p[hl:], payload) {
		t.Errorf("merged payload differs from the segments'")
	}
	if !refPartialOK(p) {
		t.Errorf("checksum field %#04x is not the pseudo-header sum", binary.BigEndian.Uint16(th[16:]))
	}
	c := append([]byte(nil), p...)
	if !inet.CompletePartial(c) || !inet.Valid(c) || !refL4Valid(c) {
		t.Errorf("TCP checksum wrong after completion")
	}
}

// checkSingle checks a write of one packet as it was received.
func checkSingle(t *testing.T, w gsoWrite, ip []byte, partial bool) {
	t.Helper()
	var want tun.GSO
	if partial {
		iphl, _, csumOff, _ := inet.Transport(ip)
		want = tun.GSO{NeedsCsum: true, CsumStart: uint16(iphl), CsumOffset: uint16(csumOff)}
	}
	if w.g != want {
		t.Errorf("GSO %+v, want %+v", w.g, want)
	}
	if w.pieces != 1 {
		t.Errorf("written in %d pieces, want 1", w.pieces)
	}
	if !bytes.Equal(w.pkt, ip) {
		t.Errorf("written packet differs from the received one")
	}
}

func checkCounters(t *testing.T, i *Interface, packets, merged, batches uint64) {
	t.Helper()
	if got := cnt(i, cRxPackets); got != packets {
		t.Errorf("rx_packets %d, want %d", got, packets)
	}
	if got := cnt(i, cRxGRO); got != merged {
		t.Errorf("rx_gro_merged %d, want %d", got, merged)
	}
	if got := cnt(i, cRxBatches); got != batches {
		t.Errorf("rx_batches %d, want %d", got, batches)
	}
}

func TestGROMergeSegmented(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			spec := tcpSpec(v6)
			spec.flags = tcpACK | tcpPSH
			spec.payload = randBytes(3, 10000)
			big := spec.build()
			segs := segmentAll(t, big, 1988)
			if len(segs) != 6 {
				t.Fatalf("%d segments, want 6", len(segs))
			}
			i, f := newGROInterface()
			feed(i, partialFlags, segs...)
			if len(f.writes) != 0 {
				t.Fatalf("%d writes before the flush, want 0", len(f.writes))
			}
			i.groFlush()
			if len(f.writes) != 1 {
				t.Fatalf("%d writes, want 1", len(f.writes))
			}
			w := f.writes[0]
			checkMerged(t, w, segs)
			hl := refIPHL(big) + 32
			if w.g.HdrLen != uint16(hl) || w.g.Size != 1988 {
				t.Errorf("HdrLen %d Size %d, want %d 1988", w.g.HdrLen, w.g.Size, hl)
			}
			if !bytes.Equal(w.pkt[hl:], spec.payload) {
				t.Errorf("payload is not the original")
			}
			if w.pkt[refIPHL(big)+13]&tcpPSH == 0 {
				t.Errorf("PSH lost")
			}
			checkCounters(t, i, 6, 5, 1)
			if got := cnt(i, cRxBytes); got != uint64(10000+6*hl) {
				t.Errorf("rx_bytes %d, want %d", got, 10000+6*hl)
			}
			// A second flush writes nothing more.
			i.groFlush()
			if len(f.writes) != 1 {
				t.Errorf("a second flush wrote again")
			}
		})
	}
}

// TestGROSegmentRoundTrip: what the kernel makes of a merged write (cutting it at Size
// past HdrLen, as the segmenter does) is exactly the packets that were merged.
func TestGROSegmentRoundTrip(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			spec := tcpSpec(v6)
			spec.flags = tcpACK | tcpPSH
			spec.payload = randBytes(5, 20000)
			segs := segmentAll(t, spec.build(), 1400)
			i, f := newGROInterface()
			feed(i, partialFlags, segs...)
			i.groFlush()
			if len(f.writes) != 1 {
				t.Fatalf("%d writes, want 1", len(f.writes))
			}
			w := f.writes[0]
			again := segmentAll(t, w.pkt, int(w.g.Size))
			if len(again) != len(segs) {
				t.Fatalf("%d segments again, want %d", len(again), len(segs))
			}
			for k := range segs {
				a, b := append([]byte(nil), segs[k]...), again[k]
				inet.CompletePartial(a)
				inet.CompletePartial(b)
				if !bytes.Equal(a, b) {
					t.Errorf("segment %d differs after the round trip:\n% x\n% x", k, a[:72], b[:72])
				}
			}
		})
	}
}

func TestGROSequenceGap(t *testing.T) {
	spec := tcpSpec(false)
	spec.flags = tcpACK | tcpPSH
	spec.payload = randBytes(13, 5*1988-100)
	segs := segmentAll(t, spec.build(), 1988)
	i, f := newGROInterface()
	feed(i, partialFlags, segs[0], segs[1], segs[3], segs[4]) // segment 2 lost
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("%d writes, want 2", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[0:2])
	checkMerged(t, f.writes[1], segs[3:5])
	checkCounters(t, i, 4, 2, 2)

	// A retransmission (an earlier sequence number) does not merge either.
	i, f = newGROInterface()
	feed(i, partialFlags, segs[0], segs[1], segs[1], segs[2])
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("retransmission: %d writes, want 2", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[0:2])
	checkMerged(t, f.writes[1], segs[1:3])
}

// TestGROMismatch: a segment whose headers differ from the run's in anything Linux's
// GRO compares ends the run, is written on its own, and the next one (back to the
// first headers) starts a new run.
func TestGROMismatch(t *testing.T) {
	type mutation struct {
		name string
		v6   bool
		f    func(s *pktSpec)
		post func(p []byte) []byte // applied to the built packet
	}
	muts := []mutation{
		{"source port", false, func(s *pktSpec) { s.sport++ }, nil},
		{"destination port", false, func(s *pktSpec) { s.dport++ }, nil},
		{"ack", false, func(s *pktSpec) { s.ack++ }, nil},
		{"window", false, func(s *pktSpec) { s.win++ }, nil},
		{"timestamp value", false, func(s *pktSpec) { s.opts = tsOpt(0x11223345, 0x55667788) }, nil},
		{"timestamp echo", false, func(s *pktSpec) { s.opts = tsOpt(0x11223344, 0x55667789) }, nil},
		{"no options", false, func(s *pktSpec) { s.opts = nil }, nil},
		{"TTL", false, func(s *pktSpec) { s.ttl-- }, nil},
		{"TOS", false, func(s *pktSpec) { s.tos = 0x10 }, nil},
		{"DF", false, func(s *pktSpec) { s.noDF = true }, nil},
		{"source address", false, func(s *pktSpec) { s.src4[3]++ }, nil},
		{"destination address", false, func(s *pktSpec) { s.dst4[3]++ }, nil},
		{"v6 flow label", true, func(s *pktSpec) { s.flow++ }, nil},
		{"v6 traffic class", true, func(s *pktSpec) { s.tos = 0x10 }, nil},
		{"v6 hop limit", true, func(s *pktSpec) { s.ttl-- }, nil},
		{"v6 source address", true, func(s *pktSpec) { s.src6[15]++ }, nil},
		{"v6 destination address", true, func(s *pktSpec) { s.dst6[15]++ }, nil},
		{"v6 source port", true, func(s *pktSpec) { s.sport++ }, nil},
		{"v6 timestamp value", true, func(s *pktSpec) { s.opts = tsOpt(1, 0x55667788) }, nil},
		{"IPv4 options", false, func(s *pktSpec) { s.ipopts = []byte{1, 1, 1, 0} }, nil},
		// A packet longer than its IP length says (trailing bytes) is not data.
		{"IPv4 trailing byte", false, func(*pktSpec) {}, func(p []byte) []byte { return append(p, 0) }},
		{"v6 trailing byte", true, func(*pktSpec) {}, func(p []byte) []byte { return append(p, 0) }},
		{"v6 payload length short", true, func(*pktSpec) {}, func(p []byte) []byte {
			binary.BigEndian.PutUint16(p[4:], binary.BigEndian.Uint16(p[4:])-1)
			return p
		}},
	}
	for _, m := range muts {
		t.Run(m.name, func(t *testing.T) {
			spec := tcpSpec(m.v6)
			segs, _ := tcpRun(spec, repeatSize(1988, 5), true, 17)
			odd := spec
			m.f(&odd)
			odd.seq = spec.seq + 2*1988
			odd.id = spec.id + 2
			odd.payload = payloadOf(segs[2])
			segs[2] = odd.build()
			if m.post != nil {
				segs[2] = m.post(segs[2])
			}
			i, f := newGROInterface()
			feed(i, partialFlags, segs...)
			i.groFlush()
			if len(f.writes) != 3 {
				t.Fatalf("%d writes, want 3", len(f.writes))
			}
			checkMerged(t, f.writes[0], segs[0:2])
			checkSingle(t, f.writes[1], segs[2], true)
			checkMerged(t, f.writes[2], segs[3:5])
			checkCounters(t, i, 5, 2, 3)
		})
	}
}

// TestGROOtherFlowInterleaved: another flow's segment in the middle of a run.
func TestGROOtherFlowInterleaved(t *testing.T) {
	spec := tcpSpec(false)
	a, _ := tcpRun(spec, repeatSize(1988, 4), false, 19)
	other := tcpSpec(false)
	other.sport = 40001
	other.seq = 1000
	b, _ := tcpRun(other, []int{1988}, false, 23)
	i, f := newGROInterface()
	feed(i, partialFlags, a[0], a[1], b[0], a[2], a[3])
	i.groFlush()
	if len(f.writes) != 3 {
		t.Fatalf("%d writes, want 3", len(f.writes))
	}
	checkMerged(t, f.writes[0], a[0:2])
	checkSingle(t, f.writes[1], b[0], true)
	checkMerged(t, f.writes[2], a[2:4])
	checkCounters(t, i, 5, 2, 3)
}

// TestGROFlags: segments with flags other than ACK (and PSH) never merge.
func TestGROFlags(t *testing.T) {
	for _, fl := range []struct {
		name  string
		flags byte
	}{
		{"FIN", tcpFIN | tcpACK},
		{"FIN|PSH", tcpFIN | tcpACK | tcpPSH},
		{"SYN", tcpSYN},
		{"SYN|ACK", tcpSYN | tcpACK},
		{"RST", tcpRST | tcpACK},
		{"URG", tcpURG | tcpACK},
		{"ECE", tcpECE | tcpACK},
		{"CWR", tcpCWR | tcpACK},
		{"no ACK", 0},
	} {
		t.Run(fl.name, func(t *testing.T) {
			spec := tcpSpec(false)
			segs, _ := tcpRun(spec, repeatSize(1988, 5), false, 29)
			odd := spec
			odd.flags = fl.flags
			odd.seq = spec.seq + 2*1988
			odd.id = spec.id + 2
			odd.payload = payloadOf(segs[2])
			segs[2] = odd.build()
			i, f := newGROInterface()
			feed(i, partialFlags, segs...)
			i.groFlush()
			if len(f.writes) != 3 {
				t.Fatalf("%d writes, want 3", len(f.writes))
			}
			checkMerged(t, f.writes[0], segs[0:2])
			checkSingle(t, f.writes[1], segs[2], true)
			checkMerged(t, f.writes[2], segs[3:5])

			// As the head of a run it does not take the next one either.
			i, f = newGROInterface()
			feed(i, partialFlags, segs[2], segs[3], segs[4])
			i.groFlush()
			if len(f.writes) != 2 {
				t.Fatalf("as head: %d writes, want 2", len(f.writes))
			}
			checkSingle(t, f.writes[0], segs[2], true)
			checkMerged(t, f.writes[1], segs[3:5])
		})
	}

	// A bare SYN (no data) and a bare ACK are written alone too.
	for _, fl := range []byte{tcpSYN, tcpACK} {
		spec := tcpSpec(false)
		spec.flags = fl
		p := spec.build()
		i, f := newGROInterface()
		feed(i, partialFlags, p, p)
		i.groFlush()
		if len(f.writes) != 2 {
			t.Fatalf("bare %#02x: %d writes, want 2", fl, len(f.writes))
		}
		checkSingle(t, f.writes[0], p, true)
		checkSingle(t, f.writes[1], p, true)
	}
}

// TestGROPSHEndsRun: a segment with PSH is merged but closes the run.
func TestGROPSHEndsRun(t *testing.T) {
	spec := tcpSpec(false)
	segs, _ := tcpRun(spec, repeatSize(1988, 5), false, 31)
	withPSH := spec
	withPSH.flags |= tcpPSH
	withPSH.seq, withPSH.id, withPSH.payload = spec.seq+1988, spec.id+1, payloadOf(segs[1])
	segs[1] = withPSH.build()
	i, f := newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("%d writes, want 2", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[0:2])
	checkMerged(t, f.writes[1], segs[2:5])
	if f.writes[1].pkt[20+13]&tcpPSH != 0 {
		t.Errorf("PSH set on the second run")
	}

	// PSH on the head: written alone, the next one starts over.
	i, f = newGROInterface()
	feed(i, partialFlags, segs[1], segs[2], segs[3])
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("PSH head: %d writes, want 2", len(f.writes))
	}
	checkSingle(t, f.writes[0], segs[1], true)
	checkMerged(t, f.writes[1], segs[2:4])
}

// TestGROShortSegment: a short segment ends the run; a longer one than the first does
// not join it.
func TestGROShortSegment(t *testing.T) {
	spec := tcpSpec(false)
	segs, _ := tcpRun(spec, []int{1988, 1000, 1988, 1988}, false, 37)
	i, f := newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("%d writes, want 2", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[0:2])
	checkMerged(t, f.writes[1], segs[2:4])
	checkCounters(t, i, 4, 2, 2)

	// A short first segment sets the size: equal ones merge, a longer one does not.
	segs, _ = tcpRun(spec, []int{1000, 1000, 1988, 1988}, false, 41)
	i, f = newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("short head: %d writes, want 2", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[0:2])
	checkMerged(t, f.writes[1], segs[2:4])
}

// TestGROChecksumFlags: how a packet's checksum state decides what is written.
func TestGROChecksumFlags(t *testing.T) {
	spec := tcpSpec(false)
	segs, _ := tcpRun(spec, repeatSize(1988, 5), true, 43)

	t.Run("not verified, checked in software, mid-run", func(t *testing.T) {
		// A packet the HCA did not vouch for (from a remote host, say) with correct
		// checksums merges, as in Linux's GRO.
		full := append([]byte(nil), segs[2]...)
		inet.CompletePartial(full)
		i, f := newGROInterface()
		feed(i, partialFlags, segs[0], segs[1])
		feed(i, 0, full)
		feed(i, partialFlags, segs[3], segs[4])
		i.groFlush()
		if len(f.writes) != 1 {
			t.Fatalf("%d writes, want 1", len(f.writes))
		}
		checkMerged(t, f.writes[0], [][]byte{segs[0], segs[1], full, segs[3], segs[4]})
		checkCounters(t, i, 5, 4, 1)
	})

	t.Run("not verified, all checked in software", func(t *testing.T) {
		full := make([][]byte, len(segs))
		for k := range segs {
			full[k] = append([]byte(nil), segs[k]...)
			inet.CompletePartial(full[k])
		}
		i, f := newGROInterface()
		feed(i, 0, full...)
		i.groFlush()
		if len(f.writes) != 1 {
			t.Fatalf("%d writes, want 1", len(f.writes))
		}
		checkMerged(t, f.writes[0], full)
	})

	t.Run("not verified, bad checksums, mid-run", func(t *testing.T) {
		// A bad TCP checksum, or a bad IPv4 header checksum: passed on as it is, for
		// the stack to drop.
		for _, at := range []int{20 + 16, 10} {
			full := append([]byte(nil), segs[2]...)
			inet.CompletePartial(full)
			full[at] ^= 0x5a
			i, f := newGROInterface()
			feed(i, partialFlags, segs[0], segs[1])
			feed(i, 0, full)
			feed(i, partialFlags, segs[3], segs[4])
			i.groFlush()
			if len(f.writes) != 3 {
				t.Fatalf("byte %d spoilt: %d writes, want 3", at, len(f.writes))
			}
			checkMerged(t, f.writes[0], segs[0:2])
			checkSingle(t, f.writes[1], full, false)
			checkMerged(t, f.writes[2], segs[3:5])
			checkCounters(t, i, 5, 2, 3)
		}
	})

	t.Run("not verified, head", func(t *testing.T) {
		// Checked in software, a head the HCA did not vouch for starts a merge too.
		full := append([]byte(nil), segs[0]...)
		inet.CompletePartial(full)
		i, f := newGROInterface()
		feed(i, 0, full)
		feed(i, partialFlags, segs[1:]...)
		i.groFlush()
		if len(f.writes) != 1 {
			t.Fatalf("%d writes, want 1", len(f.writes))
		}
		checkMerged(t, f.writes[0], append([][]byte{full}, segs[1:]...))

		// With a bad checksum it is written alone, as received.
		full[20+16] ^= 0x5a
		i, f = newGROInterface()
		feed(i, 0, full)
		feed(i, partialFlags, segs[1:]...)
		i.groFlush()
		if len(f.writes) != 2 {
			t.Fatalf("bad checksum: %d writes, want 2", len(f.writes))
		}
		checkSingle(t, f.writes[0], full, false)
		checkMerged(t, f.writes[1], segs[1:])
	})

	t.Run("verified complete checksums merge", func(t *testing.T) {
		full := make([][]byte, len(segs))
		for k := range segs {
			full[k] = append([]byte(nil), segs[k]...)
			inet.CompletePartial(full[k])
		}
		i, f := newGROInterface()
		feed(i, hca.WCIPCsumOK, full...)
		i.groFlush()
		if len(f.writes) != 1 {
			t.Fatalf("%d writes, want 1", len(f.writes))
		}
		checkMerged(t, f.writes[0], full)

		// Alone, such a packet keeps its complete checksum.
		i, f = newGROInterface()
		feed(i, hca.WCIPCsumOK, full[0])
		i.groFlush()
		if len(f.writes) != 1 {
			t.Fatalf("alone: %d writes, want 1", len(f.writes))
		}
		checkSingle(t, f.writes[0], full[0], false)
	})

	t.Run("single partial", func(t *testing.T) {
		i, f := newGROInterface()
		feed(i, partialFlags, segs[0])
		if len(f.writes) != 0 {
			t.Fatalf("written before the flush")
		}
		i.groFlush()
		if len(f.writes) != 1 {
			t.Fatalf("%d writes, want 1", len(f.writes))
		}
		want := tun.GSO{Type: tun.GSONone, NeedsCsum: true, CsumStart: 20, CsumOffset: 16}
		if f.writes[0].g != want {
			t.Errorf("GSO %+v, want %+v", f.writes[0].g, want)
		}
		checkSingle(t, f.writes[0], segs[0], true)
		checkCounters(t, i, 1, 0, 1)
	})

	t.Run("partial UDP", func(t *testing.T) {
		u := udpSpec(false)
		u.payload = randBytes(47, 300)
		p := u.build()
		i, f := newGROInterface()
		feed(i, partialFlags, p, p)
		i.groFlush()
		if len(f.writes) != 2 {
			t.Fatalf("%d writes, want 2", len(f.writes))
		}
		for _, w := range f.writes {
			want := tun.GSO{NeedsCsum: true, CsumStart: 20, CsumOffset: 6}
			if w.g != want {
				t.Errorf("GSO %+v, want %+v", w.g, want)
			}
			checkSingle(t, w, p, true)
		}
	})
}

// TestGROSegmentLimit: no more than maxGROSegs segments join one.
func TestGROSegmentLimit(t *testing.T) {
	const n = 2*(maxGROSegs+1) + 10
	spec := tcpSpec(false)
	segs, data := tcpRun(spec, repeatSize(100, n), true, 53)
	i, f := newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 3 {
		t.Fatalf("%d writes, want 3", len(f.writes))
	}
	var got []byte
	k := 0
	for j, w := range f.writes {
		if w.pieces-1 > maxGROSegs {
			t.Errorf("write %d: %d segments merged into the first, above maxGROSegs %d", j, w.pieces-1, maxGROSegs)
		}
		checkMerged(t, w, segs[k:k+w.pieces])
		got = append(got, w.pkt[52:]...)
		k += w.pieces
	}
	if f.writes[0].pieces-1 != maxGROSegs {
		t.Errorf("first write: %d merged, want maxGROSegs %d", f.writes[0].pieces-1, maxGROSegs)
	}
	if k != n || !bytes.Equal(got, data) {
		t.Errorf("data not intact: %d segments of %d written", k, n)
	}
	checkCounters(t, i, n, n-3, 3)
}

// TestGROLengthLimit: a merged segment stays within 65535 bytes of IP length.
func TestGROLengthLimit(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			spec := tcpSpec(v6)
			segs, data := tcpRun(spec, repeatSize(1988, 40), true, 59)
			hl := refIPHL(segs[0]) + 32
			// Whole segments fitting in 65535 bytes of IP packet.
			per := (0xFFFF - hl) / 1988
			i, f := newGROInterface()
			feed(i, partialFlags, segs...)
			i.groFlush()
			if len(f.writes) != 2 {
				t.Fatalf("%d writes, want 2", len(f.writes))
			}
			var got []byte
			k := 0
			for j, w := range f.writes {
				if len(w.pkt) > 0xFFFF {
					t.Errorf("write %d: %d bytes", j, len(w.pkt))
				}
				checkMerged(t, w, segs[k:k+w.pieces])
				got = append(got, w.pkt[hl:]...)
				k += w.pieces
			}
			if f.writes[0].pieces != per {
				t.Errorf("first write: %d segments, want %d", f.writes[0].pieces, per)
			}
			if k != 40 || !bytes.Equal(got, data) {
				t.Errorf("data not intact")
			}
		})
	}

	// The boundary: exactly 65535 bytes merge into one, one byte more does not.
	spec := tcpSpec(false)
	hl := 52
	rest := 0xFFFF - hl - 10*6000
	segs, _ := tcpRun(spec, append(repeatSize(6000, 10), rest), true, 61)
	i, f := newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 1 || len(f.writes[0].pkt) != 0xFFFF {
		t.Fatalf("exactly 65535: %d writes", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs)
	segs, _ = tcpRun(spec, append(repeatSize(6000, 10), rest+1), true, 61)
	i, f = newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("65536: %d writes, want 2", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[:10])
	checkSingle(t, f.writes[1], segs[10], true)
}

// TestGROWriteError: a refused write counts its packets as dropped.
func TestGROWriteError(t *testing.T) {
	spec := tcpSpec(false)
	segs, _ := tcpRun(spec, repeatSize(1988, 4), true, 67)
	i, f := newGROInterface()
	f.err = errors.New("refused")
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 1 {
		t.Fatalf("%d writes, want 1", len(f.writes))
	}
	checkCounters(t, i, 0, 3, 1)
	if got := cnt(i, cDropTunWrite); got != 4 {
		t.Errorf("drop_tun_write %d, want 4", got)
	}
	if got := cnt(i, cRxBytes); got != 0 {
		t.Errorf("rx_bytes %d, want 0", got)
	}
}

// TestGROReusesState: after a flush, a new burst starts clean (no stale tail pieces).
func TestGROReusesState(t *testing.T) {
	spec := tcpSpec(false)
	segs, _ := tcpRun(spec, repeatSize(1988, 6), true, 71)
	i, f := newGROInterface()
	feed(i, partialFlags, segs[:4]...)
	i.groFlush()
	feed(i, partialFlags, segs[4])
	i.groFlush()
	feed(i, partialFlags, segs[4:]...)
	i.groFlush()
	if len(f.writes) != 3 {
		t.Fatalf("%d writes, want 3", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs[:4])
	checkSingle(t, f.writes[1], segs[4], true)
	checkMerged(t, f.writes[2], segs[4:])
	// Nothing keeps a receive slot after the flush.
	if i.rxp.gro.buf != nil {
		t.Errorf("the merge state keeps the first segment's buffer")
	}
	for k, p := range i.rxp.gro.tail[:cap(i.rxp.gro.tail)] {
		if p != nil {
			t.Errorf("the merge state keeps tail piece %d", k)
		}
	}
}

// TestGROIPv4Options: segments with IPv4 options merge (the options kept, the header
// checksum over them).
func TestGROIPv4Options(t *testing.T) {
	spec := tcpSpec(false)
	spec.ipopts = []byte{1, 1, 1, 0} // NOP NOP NOP EOL
	segs, _ := tcpRun(spec, []int{1988, 1988, 1988, 500}, true, 83)
	i, f := newGROInterface()
	feed(i, partialFlags, segs...)
	i.groFlush()
	if len(f.writes) != 1 {
		t.Fatalf("%d writes, want 1", len(f.writes))
	}
	checkMerged(t, f.writes[0], segs)
	if g := f.writes[0].g; g.CsumStart != 24 || g.HdrLen != 56 {
		t.Errorf("GSO %+v, want CsumStart 24 HdrLen 56", g)
	}
}

// TestGROIPVersionMismatch: an IPv4 segment that matches an IPv6 run byte for byte
// where the IPv4 rules look (a 40-byte IPv4 header with options) is not merged into it.
func TestGROIPVersionMismatch(t *testing.T) {
	spec6 := tcpSpec(true)
	spec6.src6[0], spec6.src6[1] = 64, inet.ProtoTCP // IPv4's TTL and protocol
	v6segs, _ := tcpRun(spec6, repeatSize(1988, 2), false, 89)
	// The IPv4 twin of v6segs[1]: IHL 10, its bytes 12..40 the IPv6 header's.
	v4 := append([]byte(nil), v6segs[1]...)
	v4[0] = 0x4A
	binary.BigEndian.PutUint16(v4[2:], uint16(len(v4)))
	v4[4], v4[5], v4[6], v4[7] = 0x12, 0x34, 0, 0
	binary.BigEndian.PutUint16(v4[10:], 0)
	binary.BigEndian.PutUint16(v4[10:], ^refFold(refSum(v4[:40])))
	binary.BigEndian.PutUint16(v4[40+16:], refFold(refPseudo(v4, inet.ProtoTCP, len(v4)-40)))
	if h := v6segs[0]; v4[1] != h[1] || !bytes.Equal(v4[8:10], h[8:10]) || !bytes.Equal(v4[12:40], h[12:40]) {
		t.Fatalf("test packets do not match where IPv4's rules look")
	}
	if _, _, _, ok := inet.Transport(v4); !ok {
		t.Fatalf("IPv4 twin not TCP")
	}
	i, f := newGROInterface()
	feed(i, partialFlags, v6segs[0], v4)
	i.groFlush()
	if len(f.writes) != 2 {
		t.Fatalf("%d writes, want 2", len(f.writes))
	}
	checkSingle(t, f.writes[0], v6segs[0], true)
	checkSingle(t, f.writes[1], v4, true)
}

// TestGROMalformed: broken packets do not panic, and are written as they are or dropped.
func TestGROMalformed(t *testing.T) {
	valid, _ := tcpRun(tcpSpec(false), repeatSize(1988, 2), false, 73)
	v := valid[0]
	mod := func(n int, f func(p []byte)) []byte {
		p := append([]byte(nil), v[:n]...)
		f(p)
		return p
	}
	cases := []struct {
		name string
		ip   []byte
		// transportOK: inet.Transport locates a transport header, so a partial one
		// is written with NeedsCsum (and not dropped).
		transportOK bool
	}{
		{"IPv4 header only", mod(20, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 20) }), false},
		{"truncated TCP header", mod(30, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 30) }), false},
		{"TCP up to the checksum", mod(38, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 38) }), true},
		{"TCP data offset past the end", mod(60, func(p []byte) {
			binary.BigEndian.PutUint16(p[2:], 60)
			p[32] = 15 << 4
		}), true},
		{"TCP data offset = length", mod(52, func(p []byte) { binary.BigEndian.PutUint16(p[2:], 52) }), true},
		{"TCP data offset < 5", mod(100, func(p []byte) {
			binary.BigEndian.PutUint16(p[2:], 100)
			p[32] = 4 << 4
		}), true},
		{"TCP data offset 0", mod(100, func(p []byte) {
			binary.BigEndian.PutUint16(p[2:], 100)
			p[32] = 0
		}), true},
		{"IHL 4", mod(100, func(p []byte) { p[0] = 0x44 }), false},
		{"IHL 0", mod(100, func(p []byte) { p[0] = 0x40 }), false},
		{"IHL 15 beyond the packet", mod(50, func(p []byte) { p[0] = 0x4F }), false},
		{"IHL 15", mod(len(v), func(p []byte) { p[0] = 0x4F }), true},
		{"IPv4 length too big", mod(len(v), func(p []byte) { binary.BigEndian.PutUint16(p[2:], uint16(len(v)+1)) }), true},
		{"IPv4 length too small", mod(len(v), func(p []byte) { binary.BigEndian.PutUint16(p[2:], 40) }), true},
		{"IPv4 fragment", mod(len(v), func(p []byte) { p[6] |= 0x20 }), false},
		{"IPv4 other protocol", mod(len(v), func(p []byte) { p[9] = 1 }), false},
		{"version 5", mod(len(v), func(p []byte) { p[0] = 0x55 }), false},
		{"IPv6 header truncated", func() []byte {
			p := make([]byte, 30)
			p[0], p[6] = 0x60, inet.ProtoTCP
			return p
		}(), false},
		{"IPv6 TCP truncated", func() []byte {
			p := make([]byte, 50)
			p[0], p[6] = 0x60, inet.ProtoTCP
			binary.BigEndian.PutUint16(p[4:], 10)
			return p
		}(), false},
		{"IPv6 payload length wrong", func() []byte {
			s := tcpSpec(true)
			s.payload = make([]byte, 100)
			p := s.build()
			binary.BigEndian.PutUint16(p[4:], 0xFFFF)
			return p
		}(), true},
		{"IPv6 with IPv4 version nibble", func() []byte {
			s := tcpSpec(true)
			s.payload = make([]byte, 100)
			p := s.build()
			p[0] = 0x45 // read as IPv4: protocol 0, and a fragment
			return p
		}(), false},
	}
	for _, c := range cases {
		for _, fl := range []hca.WCFlags{partialFlags, hca.WCIPCsumOK, 0} {
			for _, mid := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/flags=%#x/mid-run=%v", c.name, fl, mid), func(t *testing.T) {
					i, f := newGROInterface()
					if mid {
						feed(i, partialFlags, valid[0])
					}
					feed(i, fl, c.ip)
					if mid {
						feed(i, partialFlags, valid[1])
					}
					i.groFlush()
					// The valid ones are each written alone (nothing merges across the
					// broken one).
					want := 1
					if mid {
						want = 3
					}
					dropped := fl&hca.WCIPCsumPartial != 0 && !c.transportOK
					if dropped {
						want--
					}
					if len(f.writes) != want {
						t.Fatalf("%d writes, want %d", len(f.writes), want)
					}
					if dropped {
						if got := cnt(i, cDropMalformed); got != 1 {
							t.Errorf("drop_malformed %d, want 1", got)
						}
					} else {
						w := f.writes[0]
						if mid {
							w = f.writes[1]
						}
						if !bytes.Equal(w.pkt, c.ip) || w.pieces != 1 {
							t.Errorf("broken packet not written as received")
						}
						if w.g.Type != tun.GSONone || w.g.NeedsCsum != (fl&hca.WCIPCsumPartial != 0) {
							t.Errorf("GSO %+v", w.g)
						}
					}
					if mid {
						checkSingle(t, f.writes[0], valid[0], true)
						checkSingle(t, f.writes[len(f.writes)-1], valid[1], true)
					}
				})
			}
		}
	}
}

// checkWriteSane checks what any write must satisfy.
func checkWriteSane(t *testing.T, w gsoWrite) {
	t.Helper()
	g, p := w.g, w.pkt
	if g.NeedsCsum && int(g.CsumStart)+int(g.CsumOffset)+2 > len(p) {
		t.Fatalf("checksum field at %d+%d outside a %d-byte packet", g.CsumStart, g.CsumOffset, len(p))
	}
	if g.Type == tun.GSONone {
		if w.pieces != 1 || g.HdrLen != 0 || g.Size != 0 {
			t.Fatalf("single packet write %+v in %d pieces", g, w.pieces)
		}
		return
	}
	if g.Type != tun.GSOTCPv4 && g.Type != tun.GSOTCPv6 {
		t.Fatalf("GSO type %d", g.Type)
	}
	if !g.NeedsCsum || g.Size == 0 || int(g.HdrLen) >= len(p) || g.CsumOffset != 16 || w.pieces < 2 {
		t.Fatalf("GSO %+v for %d bytes in %d pieces", g, len(p), w.pieces)
	}
	v4 := g.Type == tun.GSOTCPv4
	if v4 != (p[0]>>4 == 4) {
		t.Fatalf("GSO type %d for IP version %d", g.Type, p[0]>>4)
	}
	iphl := refIPHL(p)
	if int(g.CsumStart) != iphl || int(g.HdrLen) != iphl+int(p[iphl+12]>>4)*4 {
		t.Fatalf("GSO %+v, IP header %d, TCP header %d", g, iphl, int(p[iphl+12]>>4)*4)
	}
	if len(p) > 0xFFFF {
		t.Fatalf("%d bytes", len(p))
	}
	if v4 && int(binary.BigEndian.Uint16(p[2:])) != len(p) || !v4 && int(binary.BigEndian.Uint16(p[4:]))+40 != len(p) {
		t.Fatalf("IP length field does not match %d bytes", len(p))
	}
	data := len(p) - int(g.HdrLen)
	if data <= (w.pieces-1)*int(g.Size) || data > w.pieces*int(g.Size) {
		t.Fatalf("%d bytes of data in %d pieces of %d", data, w.pieces, g.Size)
	}
	if !refPartialOK(p) {
		t.Fatalf("merged checksum field is not the pseudo-header sum")
	}
}

// TestGRORandom feeds random and mutated packets: no panic, every write sane, and every
// packet accounted for (written, in a merge or alone, or dropped as malformed).
func TestGRORandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	flagsOf := []hca.WCFlags{0, hca.WCIPCsumOK, partialFlags, hca.WCIPCsumPartial}
	// run feeds pkts and returns how many writes were merged segments.
	run := func(t *testing.T, pkts [][]byte, flags []hca.WCFlags) (merged int) {
		t.Helper()
		i, f := newGROInterface()
		var wantPackets, wantBytes uint64
		for k, p := range pkts {
			if flags[k]&hca.WCIPCsumPartial != 0 {
				if _, _, _, ok := inet.Transport(p); !ok {
					continue // dropped as malformed
				}
			}
			wantPackets++
			wantBytes += uint64(len(p))
		}
		func() {
			defer func() {
				if e := recover(); e != nil {
					t.Fatalf("panic: %v", e)
				}
			}()
			for k, p := range pkts {
				i.groAdd(rxBuf(p), flags[k])
				if r.IntN(8) == 0 {
					i.groFlush() // the end of a receive batch
				}
			}
			i.groFlush()
		}()
		for _, w := range f.writes {
			checkWriteSane(t, w)
			if w.g.Type != tun.GSONone {
				merged++
			}
		}
		if got := cnt(i, cRxPackets); got != wantPackets {
			t.Errorf("rx_packets %d, want %d", got, wantPackets)
		}
		if got := cnt(i, cRxBytes); got != wantBytes {
			t.Errorf("rx_bytes %d, want %d", got, wantBytes)
		}
		if got := cnt(i, cRxPackets) + cnt(i, cDropMalformed); got != uint64(len(pkts)) {
			t.Errorf("%d packets accounted for, %d given", got, len(pkts))
		}
		if got := cnt(i, cRxBatches); got != uint64(len(f.writes)) {
			t.Errorf("rx_batches %d, %d writes", got, len(f.writes))
		}
		return merged
	}

	t.Run("random bytes", func(t *testing.T) {
		pkts := make([][]byte, 500)
		flags := make([]hca.WCFlags, len(pkts))
		for k := range pkts {
			p := randBytes(r.Uint64(), 20+r.IntN(2081))
			if r.IntN(2) == 0 {
				p[0] = 0x45
				if r.IntN(2) == 0 {
					p[9] = inet.ProtoTCP
					p[6] &^= 0x3F
					p[7] = 0
				}
				if r.IntN(2) == 0 {
					binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
				}
			} else {
				p[0] = 0x60
				if len(p) >= 40 && r.IntN(2) == 0 {
					p[6] = inet.ProtoTCP
					binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
				}
			}
			pkts[k], flags[k] = p, flagsOf[r.IntN(len(flagsOf))]
		}
		run(t, pkts, flags)
	})

	t.Run("mutated runs", func(t *testing.T) {
		merged := 0
		for round := range 50 {
			v6 := round%2 == 1
			spec := tcpSpec(v6)
			sizes := repeatSize(1988, 1+r.IntN(40))
			sizes[len(sizes)-1] = 1 + r.IntN(1988)
			segs, _ := tcpRun(spec, sizes, r.IntN(2) == 0, r.Uint64())
			flags := make([]hca.WCFlags, len(segs))
			for k := range segs {
				flags[k] = partialFlags
				switch r.IntN(10) {
				case 0: // flip a header byte
					hl := refIPHL(segs[k]) + 32
					segs[k][r.IntN(hl)] ^= byte(1 + r.IntN(255))
				case 1: // truncate
					segs[k] = segs[k][:20+r.IntN(len(segs[k])-20)]
				case 2:
					flags[k] = flagsOf[r.IntN(len(flagsOf))]
				case 3: // swap with the next
					if k+1 < len(segs) {
						segs[k], segs[k+1] = segs[k+1], segs[k]
					}
				}
			}
			merged += run(t, segs, flags)
		}
		if merged < 20 {
			t.Errorf("only %d merged writes in 50 runs: the test does not exercise merging", merged)
		}
		t.Logf("%d merged writes", merged)
	})
}

// groBenchSegs is 32 in-sequence 1988-byte segments (63668 bytes of IPv4 packet merged),
// each in its own receive buffer, and the first one's pristine headers.
func groBenchSegs(tb testing.TB) ([][]byte, []byte) {
	spec := tcpSpec(false)
	segs, _ := tcpRun(spec, repeatSize(1988, 32), true, 79)
	bufs := make([][]byte, len(segs))
	for k, p := range segs {
		bufs[k] = rxBuf(p)
	}
	return bufs, append([]byte(nil), bufs[0][:rxHead+52]...)
}

// groBenchRound merges and flushes the 32 segments once. The flush rewrote the first
// one's headers, so they are put back first.
func groBenchRound(i *Interface, bufs [][]byte, head []byte) {
	copy(bufs[0], head)
	for _, b := range bufs {
		i.groAdd(b, partialFlags)
	}
	i.groFlush()
}

func TestGROMergeAllocs(t *testing.T) {
	bufs, head := groBenchSegs(t)
	i, f := newGROInterface()
	groBenchRound(i, bufs, head)
	groBenchRound(i, bufs, head)
	if len(f.writes) != 2 || f.writes[0].pieces != 32 || f.writes[1].pieces != 32 || !bytes.Equal(f.writes[0].pkt, f.writes[1].pkt) {
		t.Fatalf("the benchmark's round does not merge 32 segments into one write every time")
	}
	i = &Interface{}
	i.txp.off = nopOffloader{}
	if a := testing.AllocsPerRun(100, func() { groBenchRound(i, bufs, head) }); a != 0 {
		t.Errorf("%v allocations per merge of 32 segments, want 0", a)
	}
}

func BenchmarkGROMerge64K(b *testing.B) {
	bufs, head := groBenchSegs(b)
	i := &Interface{}
	i.txp.off = nopOffloader{}
	b.SetBytes(32 * 1988)
	b.ReportAllocs()
	for b.Loop() {
		groBenchRound(i, bufs, head)
	}
	if got := cnt(i, cRxGRO); got == 0 || got%31 != 0 {
		b.Fatalf("rx_gro_merged %d: not 31 per round", got)
	}
}
