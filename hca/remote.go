package hca

import (
	"github.com/pibgw/pibgw/wire"
)

// QPs that live in another process (the attach channel, package attach).
//
// On the daemon's side, a device keeps the QP numbers of attached processes in its QP
// table as forwarding entries: packets for them (unicast by DQPN, multicast by the
// entry's attachment to the group) go to the entry's Forwarder, which hands them to the
// process, instead of to a transport. The process runs the same port checks itself.
//
// On the process's side, a device made with Config.Remote is a mirror of one of the
// daemon's devices: its QP numbers and multicast membership come from the daemon, its
// port state is copied from the daemon's (Port.Mirror), and everything its ports
// transmit goes to their link (the channel to the daemon), which plays the fabric and
// loops back what the daemon's port would loop back.

// Forwarder takes packets for a QP that lives in another process. Forward runs on the
// fabric's goroutine: it must not block and must not keep raw after it returns.
// loopback is set when the packet never left the daemon's port.
type Forwarder interface {
	Forward(p *Port, raw []byte, loopback bool)
}

// Remote is what a mirror device asks of the daemon (Config.Remote).
type Remote interface {
	// AllocQPN reserves a QP number on the daemon's device.
	AllocQPN() (uint32, error)
	// FreeQPN gives it back.
	FreeQPN(qpn uint32)
	// AttachMcast and DetachMcast tell the daemon that QP qpn of this process joined or
	// left multicast group gid on port.
	AttachMcast(port uint8, gid wire.GID, qpn uint32) error
	DetachMcast(port uint8, gid wire.GID, qpn uint32)
	// Poll takes in, without waiting, the packets the daemon has sent this process; it
	// reports whether there were any. An empty CQ.Poll calls it.
	Poll() bool
}

// Waiter is implemented by a Remote that wants to know when its program waits for CQ
// events instead of polling: whatever takes packets in for a program that polls (Poll)
// must then not wait for it to. Arm runs when a CQ of the device is armed
// (ibv_req_notify_cq), Disarm when the CQ raises its event or is destroyed armed.
type Waiter interface {
	Arm()
	Disarm()
}

// waiter is the device's Remote as a Waiter, if it is one.
func (d *Device) waiter() Waiter {
	w, _ := d.cfg.Remote.(Waiter)
	return w
}

// ReserveQPN allocates a QP number for a QP that lives elsewhere: packets to it go to f.
// The number comes from the same space as the device's own QPs, so it is unique on every
// port of the device.
func (d *Device) ReserveQPN(f Forwarder) (uint32, error) {
	if f == nil {
		return 0, errorf("reserve_qpn", EINVAL, "no forwarder")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts.qp >= MaxQP {
		return 0, errorf("reserve_qpn", ENOMEM, "device has %d QPs (max_qp)", MaxQP)
	}
	qp := &QP{dev: d, typ: QPTypeUD, fwd: f}
	qp.num = d.allocQPNLocked()
	d.qps.store(qp.num, qp)
	d.counts.qp++
	return qp.num, nil
}

// ReleaseQPN frees a number ReserveQPN gave f, detaching it from every group.
func (d *Device) ReleaseQPN(qpn uint32, f Forwarder) error {
	d.mu.Lock()
	qp := d.qps.load(qpn)
	if qp == nil || qp.fwd != f {
		d.mu.Unlock()
		return errorf("release_qpn", EINVAL, "QP %#x is not reserved by this owner", qpn)
	}
	d.qps.store(qpn, nil)
	d.counts.qp--
	d.mu.Unlock()
	for _, p := range d.ports {
		p.mcMu.Lock()
		for gid := range p.mcast {
			p.detachLocked(gid, qp)
		}
		p.mcMu.Unlock()
	}
	return nil
}

// AttachRemote attaches a reserved QP number to multicast group gid on port p.
func (p *Port) AttachRemote(gid wire.GID, qpn uint32, f Forwarder) error {
	const op = "attach_mcast"
	qp := p.dev.qps.load(qpn)
	if qp == nil || qp.fwd != f {
		return errorf(op, EINVAL, "QP %#x is not reserved by this owner", qpn)
	}
	if gid[0] != 0xFF {
		return errorf(op, EINVAL, "GID %x is not a multicast GID", gid)
	}
	p.mcMu.Lock()
	defer p.mcMu.Unlock()
	for _, q := range p.mcast[gid] {
		if q == qp {
			return nil
		}
	}
	if len(p.mcast) >= MaxMcastGroups && p.mcast[gid] == nil {
		return errorf(op, ENOMEM, "port has %d multicast groups (max_mcast_grp)", MaxMcastGroups)
	}
	if len(p.mcast[gid]) >= MaxMcastQPAttach {
		return errorf(op, ENOMEM, "group has %d QPs (max_mcast_qp_attach)", MaxMcastQPAttach)
	}
	p.mcast[gid] = append(append([]*QP(nil), p.mcast[gid]...), qp)
	return nil
}

// DetachRemote detaches a reserved QP number from group gid on port p.
func (p *Port) DetachRemote(gid wire.GID, qpn uint32, f Forwarder) {
	qp := p.dev.qps.load(qpn)
	if qp == nil || qp.fwd != f {
		return
	}
	p.mcMu.Lock()
	p.detachLocked(gid, qp)
	p.mcMu.Unlock()
}

// forwardedBefore reports whether an earlier entry of a group's QPs has forwarder f: a
// process gets each multicast packet once and replicates it to its own QPs.
func forwardedBefore(qps []*QP, i int, f Forwarder) bool {
	for _, q := range qps[:i] {
		if q.fwd == f {
			return true
		}
	}
	return false
}

// Mirror sets the port's state from the daemon's (a mirror device's ports follow the
// port they stand for), raising the async events the change implies.
func (p *Port) Mirror(a PortAttr, pkeys [PKeyTableLen]uint16) {
	p.update(func(pi *portInfo) {
		pi.state, pi.phys = a.State, a.PhysState
		pi.lid, pi.lmc = a.LID, a.LMC
		pi.smLID, pi.smSL = a.SMLID, a.SMSL
		if a.ActiveMTU.Bytes() != 0 {
			pi.activeMTU = a.ActiveMTU
		}
		pi.gidPrefix = a.GIDPrefix
		pi.capMask = a.PortCapFlags
		pi.subnetTimeout = a.SubnetTimeout
		pi.pkeys = pkeys
	})
}

// Remote reports whether the device is a mirror of a device in another process.
func (d *Device) Remote() bool { return d.cfg.Remote != nil }

// remoteDQPN returns the destination QP of a finished packet, or 0 if it cannot tell.
func remoteDQPN(b []byte) uint32 {
	off := wire.LRHLen
	if wire.LRH(b).LNH() == wire.LNHGlobal {
		off += wire.GRHLen
	}
	if len(b) < off+wire.BTHLen {
		return 0
	}
	return wire.BTH(b[off:]).DestQP()
}

// WatchPorts calls f with a port's number after every change of its state (LID, P_Keys,
// MTU, …), on the goroutine that made the change. f must not block. The returned
// function stops the calls.
func (d *Device) WatchPorts(f func(port uint8)) (cancel func()) {
	box := &portWatcher{f: f}
	d.mu.Lock()
	d.watchers = append(d.watchers, box)
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, w := range d.watchers {
			if w == box {
				d.watchers = append(d.watchers[:i:i], d.watchers[i+1:]...)
				return
			}
		}
	}
}

type portWatcher struct{ f func(uint8) }

func (d *Device) portChanged(n uint8) {
	d.mu.RLock()
	ws := d.watchers
	d.mu.RUnlock()
	for _, w := range ws {
		w.f(n)
	}
}

// ForwarderOf returns the forwarder a QP number was reserved for (ReserveQPN), or nil if
// it is not reserved (free, or a QP of this process).
func (d *Device) ForwarderOf(qpn uint32) Forwarder {
	qp := d.qps.load(qpn)
	if qp == nil {
		return nil
	}
	return qp.fwd
}

// AddDirect adds to the port's counters packets that an attached process sent from it
// (xmit) or received on it through a direct ring to another attached process, past the
// port (the attach channel's cut-through): pkts unicast packets, words 4-byte words
// (LRH through VCRC) in all.
func (p *Port) AddDirect(xmit bool, pkts, words uint64) {
	c := &p.counters
	if xmit {
		c.Add(CntXmitPkts, pkts)
		c.Add(CntUnicastXmitPkts, pkts)
		c.Add(CntXmitData, words)
		return
	}
	c.Add(CntRcvPkts, pkts)
	c.Add(CntUnicastRcvPkts, pkts)
	c.Add(CntRcvData, words)
}
