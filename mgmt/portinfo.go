// Package mgmt is the management plane every port of the fabric shares, an HCA's port or
// a switch's: the subnet management agent's rules (IBA 14.2.5: what a SubnSet(PortInfo)
// may ask, how a port's logical state may move) and the performance management agent
// (IBA 16.1: ClassPortInfo, PortCounters, PortCountersExtended over a node's ports).
// hca's and fabric's agents apply them to their own state, so a rule fixed here (for
// opensm, say) is fixed for both.
package mgmt

import "github.com/pibgw/pibgw/wire"

// PortCaps is what a port supports, the limits a PortInfo Set is checked against.
type PortCaps struct {
	WidthSupported uint8 // LinkWidthSupported bits
	SpeedSupported uint8 // LinkSpeedSupported bits
	VLCap          uint8 // PortInfo:VLCap: OperationalVLs may not exceed it
	MTUCap         uint8 // PortInfo:MTUCap, an IBA MTU code: NeighborMTU may not exceed it
}

// PortInfoSet is what a valid SubnSet(PortInfo) changes in a port's link fields; a zero
// field means no change.
type PortInfoSet struct {
	WidthEnabled, WidthActive uint8
	SpeedEnabled, SpeedActive uint8
	NeighborMTU               uint8
	OperVLs                   uint8
	LinkDownDefault           uint8
	PhysState                 uint8 // wire.PhysStatePolling or wire.PhysStateDisabled
	PortState                 uint8 // wire.PortStateDown, Armed or Active
}

// CheckPortInfoSet validates the link fields of a SubnSet(PortInfo) against the port's
// capabilities (IBA 14.2.5.6): LinkWidthEnabled and LinkSpeedEnabled (0 no change, all
// ones for the supported set, else a subset of the supported), NeighborMTU (a valid MTU
// code within MTUCap), OperationalVLs (within VLCap), LinkDownDefaultState (no change,
// Sleep or Polling), PortPhysicalState (no change, Polling or Disabled) and PortState (no
// change, Down, Armed or Active: Init is reached only by training, C14-24). An enabled
// width or speed sets the active one to the widest or fastest enabled. ok is false when
// a field is invalid: the agent then changes nothing and answers status 0x001C.
func CheckPortInfoSet(s wire.PortInfo, c PortCaps) (set PortInfoSet, ok bool) {
	width, ok := wire.LinkEnable(s.LinkWidthEnabled(), wire.LinkWidthNoChange, wire.LinkWidthSetSupported, c.WidthSupported)
	if !ok {
		return set, false
	}
	speed, ok := wire.LinkEnable(s.LinkSpeedEnabled(), wire.LinkSpeedNoChange, wire.LinkSpeedSetSupported, c.SpeedSupported)
	if !ok {
		return set, false
	}
	set = PortInfoSet{
		NeighborMTU: s.NeighborMTU(), OperVLs: s.OperationalVLs(), LinkDownDefault: s.LinkDownDefaultState(),
		PhysState: s.PortPhysicalState(), PortState: s.PortState(),
	}
	if width != 0 {
		set.WidthEnabled, set.WidthActive = width, wire.WidestLinkWidth(width)
	}
	if speed != 0 {
		set.SpeedEnabled, set.SpeedActive = speed, wire.FastestLinkSpeed(speed)
	}
	switch {
	case set.NeighborMTU != 0 && (set.NeighborMTU < wire.MTU256 || set.NeighborMTU > wire.MTU4096 || set.NeighborMTU > c.MTUCap),
		set.OperVLs > c.VLCap,
		set.LinkDownDefault > wire.LinkDownDefaultPolling,
		set.PhysState != wire.PhysStateNoChange && set.PhysState != wire.PhysStatePolling && set.PhysState != wire.PhysStateDisabled,
		set.PortState != wire.PortStateNoChange && set.PortState != wire.PortStateDown &&
			set.PortState != wire.PortStateArmed && set.PortState != wire.PortStateActive:
		return PortInfoSet{}, false
	}
	return set, true
}

// NextPortState is the logical state a port in state cur takes when the SM asks for req
// (IBA 14.2.5.6, 7.2): no change keeps it; Armed only from Init (or Armed: no change);
// Active only from Armed (or Active); Down always — the caller retrains a link that is
// still up back to Init. ok is false for a transition the port refuses.
func NextPortState(cur, req uint8) (next uint8, ok bool) {
	switch req {
	case wire.PortStateNoChange:
		return cur, true
	case wire.PortStateDown:
		return wire.PortStateDown, true
	case wire.PortStateArmed:
		return req, cur == wire.PortStateInit || cur == wire.PortStateArmed
	case wire.PortStateActive:
		return req, cur == wire.PortStateArmed || cur == wire.PortStateActive
	}
	return cur, false
}

// ValidUnicastLID reports whether lid may be a port's LID: 0 (none) or unicast, below the
// multicast range 0xC000 (IBA 4.1.3.2).
func ValidUnicastLID(lid uint16) bool { return lid < 0xC000 }
