package mgmt

import (
	"fmt"
	"testing"

	"github.com/pibgw/pibgw/wire"
)

// recNode records which storage method AnswerSMA called, with its port arguments.
type recNode struct {
	sw   bool
	call string
}

func (n *recNode) IsSwitch() bool                  { return n.sw }
func (n *recNode) NumPorts() int                   { return 4 }
func (n *recNode) NodeDesc() string                { return "node" }
func (n *recNode) FillNodeInfo(wire.NodeInfo, int) { n.call = "nodeinfo" }
func (n *recNode) PortGUID(in int) uint64          { return uint64(in) }
func (n *recNode) PortInfo(p, in int, set, _ wire.PortInfo) uint16 {
	n.call = fmt.Sprintf("portinfo %d from %d set=%v", p, in, set != nil)
	return 0
}
func (n *recNode) PKeyCap(int) int { return 64 }
func (n *recNode) PKeyBlock(p, blk int, _, _ wire.PKeyTable) {
	n.call = fmt.Sprintf("pkey %d/%d", p, blk)
}
func (n *recNode) SL2VL(i, o int, _, _ []byte)          { n.call = fmt.Sprintf("sl2vl %d>%d", i, o) }
func (n *recNode) VLArb(p int, blk uint32, _, _ []byte) { n.call = fmt.Sprintf("vlarb %d/%d", p, blk) }
func (n *recNode) SMInfo(int, uint8, uint32, []byte) (uint16, bool) {
	n.call = "sminfo"
	return 0, !n.sw
}
func (n *recNode) SwitchInfo(_, _ []byte) uint16      { n.call = "switchinfo"; return 0 }
func (n *recNode) LFTBlock(b int, _, _ []byte) uint16 { n.call = fmt.Sprintf("lft %d", b); return 0 }
func (n *recNode) MFTBlock(p, b int, _, _ []byte) uint16 {
	n.call = fmt.Sprintf("mft %d/%d", p, b)
	return 0
}

func TestAnswerSMA(t *testing.T) {
	const bad, nosupp = wire.StatusInvalidAttrOrModVal, wire.StatusMethodAttrNotSupp
	for _, c := range []struct {
		sw     bool
		method uint8
		attr   uint16
		mod    uint32
		status uint16
		call   string
	}{
		{false, wire.MethodSet, wire.AttrNodeInfo, 0, nosupp, ""},
		{false, wire.MethodSet, wire.AttrNodeDescription, 0, nosupp, ""},
		{false, wire.MethodGet, wire.AttrGUIDInfo, 1, bad, ""},
		// PortInfo: 0 on a CA is the receiving port (2), on a switch port 0; bit 31 masked.
		{false, wire.MethodGet, wire.AttrPortInfo, 0, 0, "portinfo 2 from 2 set=false"},
		{true, wire.MethodSet, wire.AttrPortInfo, 1<<31 | 0, 0, "portinfo 0 from 2 set=true"},
		{true, wire.MethodGet, wire.AttrPortInfo, 5, bad, ""},
		// P_KeyTable: a CA's is the receiving port's; 64 entries are two blocks.
		{false, wire.MethodGet, wire.AttrPKeyTable, 3<<16 | 1, 0, "pkey 2/1"},
		{true, wire.MethodGet, wire.AttrPKeyTable, 3<<16 | 1, 0, "pkey 3/1"},
		{true, wire.MethodGet, wire.AttrPKeyTable, 3<<16 | 2, bad, ""},
		{true, wire.MethodGet, wire.AttrPKeyTable, 5 << 16, bad, ""},
		{false, wire.MethodGet, wire.AttrSLtoVLMappingTable, 0x0304, 0, "sl2vl 2>2"},
		{true, wire.MethodGet, wire.AttrSLtoVLMappingTable, 0x0304, 0, "sl2vl 3>4"},
		{true, wire.MethodGet, wire.AttrSLtoVLMappingTable, 0x10304, bad, ""},
		{false, wire.MethodGet, wire.AttrVLArbitrationTable, 3<<16 | 4, 0, "vlarb 2/3"},
		{true, wire.MethodGet, wire.AttrVLArbitrationTable, 3<<16 | 4, 0, "vlarb 4/3"},
		{true, wire.MethodGet, wire.AttrVLArbitrationTable, 5<<16 | 1, bad, ""},
		{false, wire.MethodGet, wire.AttrSMInfo, 0, 0, "sminfo"},
		{true, wire.MethodGet, wire.AttrSMInfo, 0, nosupp, "sminfo"},
		{false, wire.MethodGet, wire.AttrSwitchInfo, 0, nosupp, ""},
		{true, wire.MethodSet, wire.AttrSwitchInfo, 0, 0, "switchinfo"},
		{true, wire.MethodGet, wire.AttrLinearForwardingTable, 7, 0, "lft 7"},
		{true, wire.MethodGet, wire.AttrLinearForwardingTable, 1 << 16, bad, ""},
		{false, wire.MethodGet, wire.AttrLinearForwardingTable, 0, nosupp, ""},
		{true, wire.MethodGet, wire.AttrMulticastForwardingTable, 0<<28 | 3, 0, "mft 0/3"},
		{true, wire.MethodGet, wire.AttrMulticastForwardingTable, 1 << 28, bad, ""}, // ports 16… on a 4-port switch
		{true, wire.MethodGet, 0x7777, 0, nosupp, ""},
	} {
		n := &recNode{sw: c.sw}
		data := make([]byte, wire.SMPDataLen)
		out := make([]byte, wire.SMPDataLen)
		st := AnswerSMA(n, 2, c.method, c.attr, c.mod, data, out)
		if st != c.status || n.call != c.call {
			t.Errorf("switch=%v method %#x attr %#x mod %#x: status %#x call %q, want %#x %q",
				c.sw, c.method, c.attr, c.mod, st, n.call, c.status, c.call)
		}
	}
}
