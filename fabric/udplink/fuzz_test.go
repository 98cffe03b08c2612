package udplink

import (
	"testing"

	"github.com/pibgw/pibgw/fabric"
)

// FuzzReceive feeds arbitrary datagrams to a switch's UDP listener, without and with a
// PSK, with a session open: raw bytes, fuzzed IB packets in valid (authenticated) data
// messages, corrupted valid messages and control messages with fuzzed bodies. The
// listener drops and counts what it cannot use, never panics, and the packets it
// accepts reach a real switch port.
func FuzzReceive(f *testing.F) {
	var hs [2]*rxHarness
	for i, psk := range [][]byte{nil, testPSK} {
		sw := fabric.NewSwitch(fabric.SwitchConfig{Ports: 2})
		sw.SetLFT(2, 2)
		hs[i] = newRxHarness(f, psk, sw.Port(1))
		hs[i].connect()
	}
	h := hs[0]
	f.Add(byte(0), h.data(pkt(2, 1, 16)))
	f.Add(byte(2), pkt(2, 1, 100))
	f.Add(byte(3), pkt(2, 1, 0))
	f.Add(byte(4), []byte{0, 0, 0, 0, 1, 2})
	f.Add(byte(6), []byte{byte(MsgKeepalive)})
	f.Add(byte(6), []byte{byte(MsgDisconnect), ReasonShutdown})
	f.Add(byte(6), []byte{byte(MsgConnect), 1, 2, 3})
	f.Add(byte(0), make([]byte, 9000))
	f.Add(byte(0), []byte{})
	f.Add(byte(0x80), []byte{5, 1, 2, 3})
	f.Fuzz(func(t *testing.T, sel byte, data []byte) {
		h := hs[sel&1]
		if h.session() == nil {
			h.connect()
		}
		if sel&0x80 != 0 && len(data) > 0 { // a coalesced run: valid datagrams and fuzz, cut at a fuzzed size
			run := append(append(h.data(pkt(2, 1, 16)), data...), h.data(pkt(2, 1, 16))...)
			h.injectGRO(run, int(data[0])<<4|int(sel&0x70)>>4)
			return
		}
		switch sel >> 1 & 3 {
		case 0: // raw bytes
			h.inject(data)
		case 1: // a fuzzed IB packet in a valid message
			if len(data) > maxPacket {
				data = data[:maxPacket]
			}
			h.inject(h.data(data))
		case 2: // a valid message with fuzzed bytes XORed in
			d := h.data(pkt(2, 1, 16))
			for i := 0; i < len(data) && i < len(d); i++ {
				d[i] ^= data[i]
			}
			h.inject(d)
		case 3: // a control message of fuzzed type and body
			if len(data) == 0 {
				return
			}
			h.inject(h.control(MsgType(data[0]), data[1:]))
		}
	})
}
