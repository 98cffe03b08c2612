package mgmt

import "github.com/pibgw/pibgw/wire"

// SMANode is a node's side of the SMA: its identity and the attribute storage of its
// ports. AnswerSMA has checked the modifier before it calls a method: port numbers are
// within NumPorts, blocks within the table. set is the request's attribute data on a
// SubnSet and nil on a SubnGet; out receives the attribute's value (a copy of the
// request's data on entry).
type SMANode interface {
	IsSwitch() bool
	NumPorts() int
	NodeDesc() string
	// FillNodeInfo writes NodeInfo as seen through port in.
	FillNodeInfo(n wire.NodeInfo, in int)
	// PortGUID is port in's GUID (GUIDInfo block 0, entry 0; GUIDCap is 1).
	PortGUID(in int) uint64
	// PortInfo applies set to port n (returning the status of the Set) and writes n's
	// PortInfo, LocalPortNum = in.
	PortInfo(n, in int, set, out wire.PortInfo) uint16
	// PKeyCap is the size of port n's P_Key table.
	PKeyCap(n int) int
	// PKeyBlock applies set to block blk of port n's P_Key table and writes the block.
	PKeyBlock(n, blk int, set, out wire.PKeyTable)
	// SL2VL applies set to the SLtoVLMappingTable from port inPort to port outPort and
	// writes it.
	SL2VL(inPort, outPort int, set, out []byte)
	// VLArb applies set to block blk (1..4) of port n's VLArbitrationTable and writes it.
	VLArb(n int, blk uint32, set, out []byte)
	// SMInfo answers SMInfo for the SM on port in; ok is false when none runs there.
	SMInfo(in int, method uint8, mod uint32, out []byte) (status uint16, ok bool)
	// The switch's tables (IsSwitch): SwitchInfo, a LinearForwardingTable block, a
	// MulticastForwardingTable block at position pos; each returns the MAD status.
	SwitchInfo(set, out []byte) uint16
	LFTBlock(blk int, set, out []byte) uint16
	MFTBlock(pos, blk int, set, out []byte) uint16
}

// AnswerSMA answers one SubnGet/SubnSet of attr with modifier mod that arrived at port in
// of n (IBA 14.2.5): the attribute's value goes into out and the MAD status is returned.
// The rules every node follows live here: read-only attributes refuse a Set (0x000C),
// modifiers out of range are 0x001C, attributes a node kind does not have are 0x000C;
// on a CA the tables are the receiving port's (the modifier's port fields are ignored),
// on a switch the modifier names the port.
func AnswerSMA(n SMANode, in int, method uint8, attr uint16, mod uint32, set, out []byte) uint16 {
	const bad = wire.StatusInvalidAttrOrModVal
	isSet := method == wire.MethodSet
	var req []byte
	if isSet {
		req = set
	}
	sw := n.IsSwitch()
	switch attr {
	case wire.AttrNodeDescription:
		if isSet {
			return wire.StatusMethodAttrNotSupp
		}
		wire.NodeDescription(out).SetString(n.NodeDesc())
	case wire.AttrNodeInfo:
		if isSet {
			return wire.StatusMethodAttrNotSupp
		}
		n.FillNodeInfo(wire.NodeInfo(out), in)
	case wire.AttrGUIDInfo:
		// GUIDCap is 1: block 0 holds the port GUID, which the SM cannot change.
		if mod != 0 {
			return bad
		}
		clear(out[:wire.GUIDInfoLen])
		wire.GUIDInfo(out).SetGUID(0, n.PortGUID(in))
	case wire.AttrPortInfo:
		// IBA 14.2.5.6: the modifier is the port number (on a CA, 0 is the port the SMP
		// came in on); bit 31 says the SM understands extended speeds.
		p := int(mod &^ wire.PortInfoAttrModSMSupportsExtSpeeds)
		if p > n.NumPorts() {
			return bad
		}
		if p == 0 && !sw {
			p = in
		}
		return n.PortInfo(p, in, wire.PortInfo(req), wire.PortInfo(out))
	case wire.AttrPKeyTable:
		// IBA 14.2.5.7: bits 31-16 the port (a CA's table is the receiving port's), 15-0
		// the block of 32 entries.
		p, blk := int(mod>>16), int(mod&0xFFFF)
		if !sw {
			p = in
		}
		if p > n.NumPorts() || (blk+1)*wire.PKeyTableBlockSize > n.PKeyCap(p) {
			return bad
		}
		n.PKeyBlock(p, blk, wire.PKeyTable(req), wire.PKeyTable(out))
	case wire.AttrSLtoVLMappingTable:
		// IBA 14.2.5.8: on a switch bits 15-8 the input port, 7-0 the output port.
		inP, outP := in, in
		if sw {
			inP, outP = int(mod>>8&0xFF), int(mod&0xFF)
			if mod>>16 != 0 || inP > n.NumPorts() || outP > n.NumPorts() {
				return bad
			}
		}
		n.SL2VL(inP, outP, req, out)
	case wire.AttrVLArbitrationTable:
		// IBA 14.2.5.9: bits 31-16 the block (1-2 low-priority, 3-4 high-priority
		// entries), on a switch 7-0 the port.
		blk, p := mod>>16, in
		if sw {
			p = int(mod & 0xFF)
		}
		if blk < wire.VLArbLowBlock0 || blk > wire.VLArbHighBlock1 || p > n.NumPorts() {
			return bad
		}
		n.VLArb(p, blk, req, out)
	case wire.AttrSMInfo:
		st, ok := n.SMInfo(in, method, mod, out)
		if !ok {
			return wire.StatusMethodAttrNotSupp
		}
		return st
	case wire.AttrSwitchInfo, wire.AttrLinearForwardingTable, wire.AttrMulticastForwardingTable:
		if !sw {
			return wire.StatusMethodAttrNotSupp
		}
		switch attr {
		case wire.AttrSwitchInfo:
			return n.SwitchInfo(req, out)
		case wire.AttrLinearForwardingTable:
			if mod > 0xFFFF {
				return bad
			}
			return n.LFTBlock(int(mod), req, out)
		default:
			// IBA 14.2.5.12: bits 31-28 the position (ports 16·pos … 16·pos+15), 8-0 the
			// block of 32 MLIDs.
			pos, blk := int(mod>>28), int(mod&0x1FF)
			if mod&0x0FFFFE00 != 0 || pos*16 > n.NumPorts() {
				return bad
			}
			return n.MFTBlock(pos, blk, req, out)
		}
	default:
		// RandomForwardingTable and the rest.
		return wire.StatusMethodAttrNotSupp
	}
	return 0
}
