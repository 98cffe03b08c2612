package daemon

import (
	"fmt"
	"strings"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
)

// UDPLinks describes the fabric's UDP links: a switch process's hosts by switch port (with
// the ports that belong to a host that is gone), or a host's sessions with its switch.
func (f *Fabric) UDPLinks() []control.Link {
	out := []control.Link{}
	for i, d := range f.Dialers {
		st := d.Status()
		p := f.dialPorts[i]
		l := control.Link{SwitchPort: st.SwitchPort, PortGUID: guidString(st.GUID), Addr: st.Remote.String(),
			Up: st.Up, State: hca.PortState(p.State()).String(), LID: p.LID(), Refusal: st.Refusal,
			Attempts: st.Attempts, Local: st.Local.String()}
		if st.Up {
			l.Since, l.LastRx, l.RxPackets, l.TxPackets = st.Since, st.LastRx, st.RxPackets, st.TxPackets
			l.Authenticated = f.psk
		}
		out = append(out, l)
	}
	for _, u := range f.uplinks {
		st := u.d.Status()
		l := control.Link{SwitchPort: u.port, PortGUID: guidString(st.GUID), Addr: st.Remote.String(), Up: st.Up,
			State: portStateName(f.Switch.PortState(u.port)), Refusal: st.Refusal, Attempts: st.Attempts,
			Local: st.Local.String(), Authenticated: f.psk && st.Up, Uplink: true}
		if st.Up {
			l.Since, l.LastRx, l.RxPackets, l.TxPackets = st.Since, st.LastRx, st.RxPackets, st.TxPackets
		}
		out = append(out, l)
	}
	if f.Listener == nil {
		return out
	}
	live := map[int]control.Link{}
	for _, p := range f.Listener.Peers() {
		live[p.Port] = control.Link{SwitchPort: p.Port, PortGUID: guidString(p.GUID), Addr: p.Addr.String(), Up: true,
			LastRx: p.LastRx, RxPackets: p.RxPackets, TxPackets: p.TxPackets, Authenticated: p.SessionKey}
	}
	for _, a := range f.Ports.Assignments() {
		l, ok := live[a.Port]
		if !ok {
			l = control.Link{SwitchPort: a.Port, PortGUID: guidString(a.GUID)}
		}
		if sl, ok := f.hostSlots[a.Port]; ok {
			l.State = portStateName(sl.sw.PortState(sl.port))
		}
		out = append(out, l)
	}
	return out
}

// LinkCounters sums the UDP links' counters and adds, for every switch of this process
// (a one-process fabric's, a switch process's), each port's packets, discards and
// errors, and its drops by reason (the causes of PortRcvSwitchRelayErrors and
// PortRcvErrors that perfquery and ibqueryerrors show as one number).
func (f *Fabric) LinkCounters() control.LinkCounters {
	out := control.LinkCounters{}
	add := func(m map[string]uint64) {
		for k, v := range m {
			out[k] += v
		}
	}
	for _, d := range f.Dialers {
		add(d.Counters().Map())
	}
	for _, u := range f.uplinks {
		add(u.d.Counters().Map())
	}
	if f.Listener != nil {
		add(f.Listener.Counters().Map())
	}
	if n := f.captureDropped(); n > 0 {
		out["capture_dropped"] = n
	}
	for i, sw := range f.Switches {
		for n := 0; n <= sw.NumPorts(); n++ {
			c := sw.Counters(n)
			if c.XmitPkts == 0 && c.RcvPkts == 0 && c.XmitDiscards == 0 && c.RcvErrors == 0 {
				continue
			}
			pre := fmt.Sprintf("switch_port_%d_", n)
			if len(f.Switches) > 1 {
				pre = fmt.Sprintf("%s_port_%d_", f.switchNames[i], n)
			}
			out[pre+"xmit_pkts"], out[pre+"rcv_pkts"] = c.XmitPkts, c.RcvPkts
			out[pre+"xmit_discards"], out[pre+"rcv_errors"] = c.XmitDiscards, c.RcvErrors
			for r, v := range c.Drops {
				if v != 0 {
					out[pre+"drop_"+strings.ReplaceAll(fabric.DropReason(r).String(), "-", "_")] = v
				}
			}
		}
	}
	return out
}

// switchDevice presents a switch process's switch i (named "switch", or as in
// fabric.topology) as a device for devinfo and stat:
// its external ports with their PortState and PortPhysicalState as its SMA reports
// them, and the switch's LID (IBA 14.2.5.6: a switch's ports share port 0's LID).
func (f *Fabric) switchDevice(i int) control.Device {
	sw := f.Switches[i]
	d := control.Device{Name: f.switchNames[i], NodeDesc: f.switchNames[i],
		Attr: hca.DeviceAttr{NodeGUID: sw.NodeGUID(), SysImageGUID: sw.NodeGUID(), PhysPortCnt: sw.NumPorts(), FWVer: "1.0.0"}}
	for n := 1; n <= sw.NumPorts(); n++ {
		d.Ports = append(d.Ports, control.Port{Num: n, Attr: hca.PortAttr{
			State: hca.PortState(sw.PortState(n)), PhysState: hca.PhysState(sw.PortPhysState(n)),
			LID: sw.LID(), GUID: sw.NodeGUID(), LinkLayer: "InfiniBand", ActiveWidth: 2, ActiveSpeed: 4}})
	}
	return d
}

func guidString(g uint64) string { return fmt.Sprintf("0x%016x", g) }

func portStateName(s uint8) string { return hca.PortState(s).String() }
