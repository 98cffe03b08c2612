package udplink

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/wire"
)

// fixedPort is an Acceptor that gives every host the same port, number 1.
type fixedPort struct{ p fabric.Port }

func (f fixedPort) Accept(uint64, netip.AddrPort) (fabric.Port, int, error) { return f.p, 1, nil }
func (f fixedPort) Release(int)                                             {}

// rxHarness drives a listener's receive path directly, without its receive loop: the
// test (fuzz, benchmark) hands it datagrams as recvmmsg would. A UDP socket stands for
// the host, to read the listener's answers.
type rxHarness struct {
	tb   testing.TB
	l    *Listener
	host *net.UDPConn
	src  netip.AddrPort
	b    *batch
	hp   *peer // the host's side of the session: its session number and c2s key
	ts   uint64
}

func newRxHarness(tb testing.TB, psk []byte, port fabric.Port) *rxHarness {
	uc, fam, err := listenUDP("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{PSK: psk}
	cfg.setDefaults()
	l, err := newListener(uc, fam, fixedPort{port}, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	host, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	h := &rxHarness{tb: tb, l: l, host: host, src: host.LocalAddr().(*net.UDPAddr).AddrPort(), b: newBatch(cfg.Batch, maxDatagram)}
	tb.Cleanup(func() {
		for _, p := range l.byPort {
			p.end()
		}
		l.e.close()
		host.Close()
	})
	return h
}

// inject hands datagrams to the listener's receive path as one batch from the host.
func (h *rxHarness) inject(ds ...[]byte) {
	b := h.b
	raw, _ := makeRawAddr(h.src, h.l.e.fam)
	b.count = 0
	for _, d := range ds {
		i := b.count
		b.setTo(i, &raw)
		b.msgs[i].hdr.Flags = 0
		if len(d) > len(b.bufs[i]) {
			d = d[:len(b.bufs[i])]
			b.msgs[i].hdr.Flags = 0x20 // MSG_TRUNC
		}
		b.lens[i] = copy(b.bufs[i], d)
		b.segs[i] = 0
		b.count++
	}
	h.l.e.receive(b)
}

// injectGRO hands the listener d as the kernel hands a coalesced run (UDP_GRO): one
// buffer of datagrams of seg bytes, the last possibly shorter.
func (h *rxHarness) injectGRO(d []byte, seg int) {
	b := newBatch(1, groBuffer)
	raw, _ := makeRawAddr(h.src, h.l.e.fam)
	b.setTo(0, &raw)
	b.lens[0] = copy(b.bufs[0], d)
	b.segs[0] = seg
	b.count = 1
	h.l.e.receive(b)
}

// connect opens a session as a host would, reading the ack from the host socket.
func (h *rxHarness) connect() {
	e := h.l.e
	h.ts++
	var crand [randLen]byte
	crand[0] = byte(h.ts)
	body := make([]byte, connectLen)
	body[7] = 0x42
	body[15] = byte(h.ts)
	body[14] = byte(h.ts >> 8)
	copy(body[16:], crand[:])
	msg := make([]byte, maxDatagram)
	Header(msg).put(MsgConnect, 0, 1000+h.ts)
	n := HeaderLen + copy(msg[HeaderLen:], body)
	if e.hs != nil {
		var no nonce
		n = len(seal(e.hs, &no, msg[:n]))
	}
	h.inject(msg[:n])
	buf := make([]byte, maxDatagram)
	h.host.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ack []byte
	for ack == nil {
		// Skip what an earlier session's timer sent (keepalives).
		m, _, err := h.host.ReadFromUDPAddrPort(buf)
		if err != nil {
			h.tb.Fatalf("no connect-ack: %v", err)
		}
		d := buf[:m]
		if e.hs != nil {
			var no nonce
			if !open(e.hs, &no, d) {
				continue
			}
			d = d[:len(d)-TagLen]
		}
		if Header(d).Type() == MsgConnectAck {
			ack = d
		}
	}
	hp := &peer{session: Header(ack).Session()}
	if e.hs != nil {
		hp.tx, _ = e.keys.session(crand[:], ack[HeaderLen+24:HeaderLen+40])
	}
	h.hp = hp
}

// session returns the listener's peer for the host, or nil.
func (h *rxHarness) session() *peer { return h.l.lookup(h.src) }

// data returns the host's next data datagram carrying pkt.
func (h *rxHarness) data(pkt []byte) []byte { return encode(h.hp, pkt) }

// control returns the host's next session control message.
func (h *rxHarness) control(t MsgType, body []byte) []byte {
	buf := make([]byte, HeaderLen+len(body)+TagLen)
	Header(buf).put(t, h.hp.session, h.hp.txSeq.Add(1))
	n := HeaderLen + copy(buf[HeaderLen:], body)
	if h.hp.tx != nil {
		var no nonce
		n = len(seal(h.hp.tx, &no, buf[:n]))
	}
	return buf[:n]
}

func vcrcOK(b []byte) bool { return wire.CheckVCRC(b) }
