package ibsim

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/pibgw/pibgw/hca"
)

// FuzzDatagrams feeds arbitrary datagrams to the server as control messages (with a
// client attached in slot 0) and as MADs from that client: bad input is refused or
// dropped and counted, never a panic.
func FuzzDatagrams(f *testing.F) {
	d, err := hca.NewDevice(hca.Config{Name: "pib_0", NodeGUID: 0x0002c90300000300, NumPorts: 2})
	if err != nil {
		f.Fatal(err)
	}
	d.StartAgents()
	s, err := New(Config{SocketName: fmt.Sprintf("pibgwfuzz-%d", os.Getpid()), MaxClients: 4, Devices: []*hca.Device{d}, ExternalSM: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	from := &net.UnixAddr{Name: "@pibgwfuzz-nobody\x00", Net: "unixgram"}

	ctl := func(id, typ, n uint32, data ...byte) []byte {
		b := make([]byte, ctlLen)
		le.PutUint32(b[0:], ctlMagic)
		le.PutUint32(b[4:], id)
		le.PutUint32(b[8:], typ)
		le.PutUint32(b[12:], n)
		copy(b[16:], data)
		return b
	}
	for typ := uint32(0); typ <= 11; typ++ {
		f.Add(ctl(0, typ, 64, 2))
	}
	f.Add(ctl(0, ctlConnect, 44, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'p', 'i', 'b', '_', '0', '/', '2'))
	f.Add(ctl(0, ctlSetIsSM, 4, 1))
	f.Add(ctl(9, ctlGetNodeInfo, 64))
	mad := make([]byte, reqLen)
	mad[0], mad[1], mad[4], mad[5] = 0xFF, 0xFF, 0xFF, 0xFF
	mad[31] = 0x01
	copy(mad[reqMADOff:], []byte{1, 0x81, 1, 1})
	f.Add(mad)

	f.Fuzz(func(t *testing.T, b []byte) {
		s.mu.Lock()
		if s.slots[0] == nil {
			s.slots[0] = newClient(s, 0, hcaEndpoint{d.Port(1)}, 1)
			s.nclient++
		}
		c := s.slots[0]
		s.mu.Unlock()
		buf := append([]byte(nil), b...)
		if msg, err := parseCtl(buf); err == nil {
			s.handleCtl(&msg, from)
		}
		if checkRequest(b) == nil {
			c.send(simRequest(append([]byte(nil), b...)))
		}
		for len(c.out) > 0 {
			datagramPool.Put(<-c.out)
		}
	})
}
