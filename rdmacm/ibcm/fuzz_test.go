package ibcm

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// fakePort is a Port that keeps what is sent.
type fakePort struct{ sent int }

func (p *fakePort) SendMAD(hca.MADAddr, []byte) error              { p.sent++; return nil }
func (p *fakePort) RegisterMADHandler(uint8, bool, hca.MADHandler) {}
func (p *fakePort) TID() uint64                                    { return 1 }
func (p *fakePort) LID() uint16                                    { return 1 }
func (p *fakePort) GID(int) (wire.GID, bool)                       { return wire.GID{}, true }
func (p *fakePort) CAGUID() uint64                                 { return 0x1234 }
func (p *fakePort) FindPKey(uint16) int                            { return 0 }

// FuzzHandle: any MAD of the CM class, in any state the CM can be in (a listener, an
// active connection, a passive one), is handled or dropped; nothing panics.
func FuzzHandle(f *testing.F) {
	for _, attr := range []uint16{wire.AttrCMReq, wire.AttrCMRep, wire.AttrCMRej, wire.AttrCMMRA, wire.AttrCMRTU,
		wire.AttrCMDReq, wire.AttrCMDRep, wire.AttrCMSIDRReq, wire.AttrCMSIDRRep, wire.AttrCMLAP, wire.AttrCMAPR, 0x99} {
		mad := make([]byte, wire.MADLen)
		wire.NewCMMAD(mad, attr, 7)
		f.Add(mad)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mad := make([]byte, wire.MADLen)
		copy(mad, data)
		mad[1], mad[2] = wire.MgmtClassCM, wire.ClassVersionCM
		cm := New(&fakePort{}, Options{Clock: clock.NewFake(time.Unix(1e9, 0))})
		defer cm.Close()
		l := cm.NewID(func(*ID, *Event) {}, nil)
		l.Listen(wire.CMReq(mad).ServiceID(), 0)
		a := cm.NewID(func(*ID, *Event) {}, nil)
		a.SendReq(ReqParam{QPType: hca.QPTypeRC, MaxCMRetries: 1})
		// Aim the message at the active ID too.
		if len(data) > 0 && data[0]&1 == 1 {
			wire.CMRep(mad).SetRemoteCommID(a.LocalCommID())
		}
		for range 2 { // a second time: the duplicate paths
			cm.mu.Lock()
			cm.handle(append([]byte(nil), mad...), hca.MADAddr{SLID: 2, QPN: 1})
			cm.unlock()
		}
	})
}
