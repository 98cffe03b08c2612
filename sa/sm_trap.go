package sa

import (
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// handleTrap takes a Trap(Notice) SMP that reached the SM's port (IBA 14.2.5.1): it is
// answered with a TrapRepress (IBA 13.4.9: the SM tells the sender to stop repeating it;
// the same MAD with method TrapRepress, to where it came from), and a trap 128 — a
// switch's port changed link state — starts a heavy sweep now, as opensm does
// (osm_trap_rcv.c: force_heavy_sweep), instead of waiting for the next light sweep: a
// host plugged into a switch process is Active within milliseconds, an unplugged one is
// out of the routes as quickly. Heavy, not light: a port that comes up while a heavy
// sweep runs can have its PortStateChange cleared by that sweep's SwitchInfo Set after
// discovery passed it, which a light sweep would then never see; the trap's own sweep,
// after the running one, finds it.
//
// The sweep starts from the SM's clock, at once (on a goroutine of its own with the real
// clock; at the next Advance with a test's fake one): the trap arrives on the goroutine
// of the switch that sent it, in the middle of a link change, which a sweep must not run
// inside. Traps that arrive before that sweep starts fold into it, and those during a
// sweep into one more heavy sweep after it (Resweep's request; startJob).
func (sm *SM) handleTrap(m *hca.MAD) {
	smp := wire.SMP(m.Data)
	if smp.MAD().ClassVersion() != wire.ClassVersionSM || smp.MAD().AttrID() != wire.AttrNotice {
		return
	}
	sm.trapsIn.Add(1)
	var resp [wire.MADLen]byte // traps are rare: no pool
	copy(resp[:], m.Data)
	wire.MAD(resp[:]).SetMethod(wire.MethodTrapRepress)
	if err := sm.port.ReplyMAD(m, resp[:]); err != nil {
		sm.log.Debug("TrapRepress not sent", "to", m.From.SLID, "err", err)
	}
	n := wire.Notice(smp.SMPData())
	if !n.IsGeneric() || n.TrapNumber() != wire.TrapLinkStateChange {
		return
	}
	sm.log.Debug("trap 128: a switch port changed link state; heavy sweep", "switch_lid", n.IssuerLID())
	if sm.trapSweep.Swap(true) {
		return
	}
	sm.clk.AfterFunc(0, func() {
		sm.trapSweep.Store(false)
		sm.Resweep()
	})
}
