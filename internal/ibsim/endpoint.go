package ibsim

import (
	"errors"
	"fmt"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// endpoint is where a client attaches, as in ibsim: a CA's port, or a switch's port 0.
type endpoint interface {
	// name is the node id the CONNECT reply reports.
	name() string
	// send puts a client's MAD (TID already marked) into the fabric from here.
	send(r simRequest, mad wire.MAD) error
	// smaGet reads an SM attribute as the node's SMA answers it at this port.
	smaGet(attr uint16, mod uint32, out []byte) uint16
	numPorts() int
	lid() uint16
	state() uint8
	gidPrefix() uint64
	nodeGUID() uint64
	// setIsSM sets or clears PortInfo:CapabilityMask.IsSM; false if the node cannot.
	setIsSM(on bool) bool
}

// hcaEndpoint is a CA port.
type hcaEndpoint struct{ p *hca.Port }

func (e hcaEndpoint) name() string { return e.p.Device().Name() }

func (e hcaEndpoint) String() string { return fmt.Sprintf("%s/%d", e.p.Device().Name(), e.p.Num()) }

func (e hcaEndpoint) send(r simRequest, mad wire.MAD) error {
	a := hca.MADAddr{DLID: r.DLID(), QPN: r.DQP()}
	switch {
	case r.IsSMP():
		a.QPN = 0
		if r.IsDirected() {
			a.DLID = 0xFFFF
			if !r.IsResponseMAD() {
				return e.p.SendSMP(a, mad)
			}
		}
		return e.p.SendMAD(a, mad)
	case a.DLID == 0 || a.QPN == 0:
		return errors.New("GMP to LID 0 or QP0")
	}
	a.QKey = hca.GSIQKey
	return e.p.SendMAD(a, mad)
}

func (e hcaEndpoint) smaGet(attr uint16, mod uint32, out []byte) uint16 {
	return e.p.SMAGet(attr, mod, out)
}

func (e hcaEndpoint) numPorts() int     { return e.p.Device().NumPorts() }
func (e hcaEndpoint) lid() uint16       { return e.p.LID() }
func (e hcaEndpoint) state() uint8      { return uint8(e.p.State()) }
func (e hcaEndpoint) gidPrefix() uint64 { return e.p.Query().GIDPrefix }
func (e hcaEndpoint) nodeGUID() uint64  { return e.p.Device().Query().NodeGUID }

func (e hcaEndpoint) setIsSM(on bool) bool {
	m := e.p.Query().PortCapFlags
	if on {
		e.p.SetCapMask(m | hca.CapIsSM)
	} else {
		e.p.SetCapMask(m &^ hca.CapIsSM)
	}
	return true
}

// switchEndpoint is a switch's management port 0.
type switchEndpoint struct{ sw *fabric.Switch }

func (e switchEndpoint) name() string   { return e.sw.NodeDesc() }
func (e switchEndpoint) String() string { return e.sw.NodeDesc() + "/0" }

func (e switchEndpoint) send(r simRequest, mad wire.MAD) error {
	dlid := r.DLID()
	if r.IsDirected() {
		dlid = 0xFFFF
	}
	if !r.IsSMP() && (dlid == 0 || r.DQP() == 0) {
		return errors.New("GMP to LID 0 or QP0")
	}
	return e.sw.SendMAD(dlid, r.DQP(), mad)
}

func (e switchEndpoint) smaGet(attr uint16, mod uint32, out []byte) uint16 {
	return e.sw.SMAGet(attr, mod, out)
}

func (e switchEndpoint) numPorts() int     { return e.sw.NumPorts() }
func (e switchEndpoint) lid() uint16       { return e.sw.LID() }
func (e switchEndpoint) state() uint8      { return 4 } // IBA 14.2.5.6: switch port 0 is always Active
func (e switchEndpoint) nodeGUID() uint64  { return e.sw.NodeGUID() }
func (e switchEndpoint) setIsSM(bool) bool { return false }

func (e switchEndpoint) gidPrefix() uint64 {
	var pi [wire.SMPDataLen]byte
	e.sw.SMAGet(wire.AttrPortInfo, 0, pi[:])
	return wire.PortInfo(pi[:]).GIDPrefix()
}
