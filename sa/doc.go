// Package sa is pibgw's built-in subnet manager and subnet administration.
//
// # Subnet manager
//
// SM (sm.go) runs on one HCA port and manages the fabric only through directed-route
// SMPs (class 0x81) sent from that port's QP0 and answered by the SMAs of HCAs and
// switches (IBA 14.4, following opensm's flow):
//
//   - heavy sweep (sm_sweep.go): breadth-first discovery — NodeInfo through every port
//     whose PortInfo says LinkUp, NodeDescription, SwitchInfo, PortInfo of every switch
//     port and CA port; LIDs (sm_lid.go: one per end port, LMC 0, kept by port GUID for the
//     SM's lifetime, the SM's own port first so it gets LID 1); min-hop routes with the
//     destinations spread over equal-cost ports (route.go); P_Key tables from the
//     partition configuration (partition.go); then SwitchInfo Set (LinearFDBTop, clear
//     PortStateChange), the LinearForwardingTable blocks that changed and P_KeyTable Sets,
//     PortInfo Set (LID, MasterSMLID, GIDPrefix, SubnetTimeout, NeighborMTU) with PortState
//     Armed, and when every port is Armed, Active; finally the multicast trees;
//   - light sweep every Config.SweepInterval (10 s): SwitchInfo Get on every switch; a
//     PortStateChange (or a switch that stops answering) starts a heavy sweep;
//   - traps (sm_trap.go): a Trap(Notice) SMP to the SM's port gets a TrapRepress; trap 128
//     (a switch port's link changed) starts a heavy sweep at once, from the clock;
//   - a port found again behind a second link (two ports with one GUID) is left out and
//     logged once (opensm's ERR 0D01; Stats.DuplicateGUIDs);
//   - SMInfo is answered on the SM's port (priority, SMState MASTER) and its
//     CapabilityMask has IsSM.
//
// The SM has no goroutine: the transaction engine (sm_txn.go) keeps at most
// Config.Window SMPs outstanding, matches responses by TID, resends after
// Config.MADTimeout (timed by the clock.Clock) and gives up after Config.MADRetries. Its
// loop runs in whichever goroutine has work for it (Start, Resweep, SetMulticastGroup, a
// response, a timer), one at a time; responses delivered inside SendSMP, as in-process
// links do, are queued and handled when the send returns. On an in-process fabric a sweep
// is therefore complete when Start or Resweep returns.
//
// # Database for the SA
//
// SM.Topology returns the subnet as of the last heavy sweep: an immutable *Topology
// that may be kept and read without locks (each heavy sweep publishes a new one;
// Topology.Generation counts them).
//
//   - Topology.Nodes (discovery order, the SM's node first), Node(guid), Switches():
//     Node has Type (NodeTypeCA/Switch/Router), GUID, SystemImageGUID, Description,
//     NumPorts, VendorID, DeviceID, Revision, PartitionCap, the raw NodeInfo and (switches)
//     SwitchInfo attributes, LinearFDBCap, MulticastFDBCap, the LFT the SM programmed, and
//     Ports[0..NumPorts] (nil where absent; CAs have no port 0).
//   - Port has GUID, LID, LMC, State, PhysState, MTUCap, NeighborMTU (the link's active
//     MTU), LinkWidthActive, LinkSpeedActive, CapMask, PKeys (the table programmed),
//     Remote (the port at the other end of the link) and the raw PortInfo (Info) as last
//     read or set — what a PortInfoRecord carries. Switch external ports carry the
//     switch's LID.
//   - Topology.Port(portGUID), LIDOf(portGUID), PortByLID(lid) (a CA port or a switch's
//     port 0), Endports() (every port with a LID), PKeys(portGUID), MaxLID(), SMLID,
//     SMPortGUID, GIDPrefix, SubnetTimeout, Partitions.
//   - Paths: Route(slid, dlid) is the list of switches (with in and out ports) a packet
//     passes following the programmed LFTs; HopCount, PathMTU and PathRate (LinkRate
//     units of 100 Mb/s) summarise it for PathRecords. Every path uses SL 0 and LMC 0.
//
// SM.LIDOf(portGUID) and SM.Stats() (SMPs sent, sweeps) are shortcuts.
//
// # Multicast
//
// The SA owns groups (MGIDs, MCMemberRecords); the SM owns MLIDs and forwarding:
//
//   - SM.AllocMLID() reserves the lowest free MLID from 0xC000; SM.FreeMLID(mlid) removes
//     the group's forwarding entries and releases it;
//   - SM.SetMulticastGroup(mlid, []MCMember{{PortGUID, JoinState}}) sets the group's whole
//     membership (call it after every join or leave) and reprograms the
//     MulticastForwardingTable blocks that changed: one spanning tree over the switches,
//     rooted at the switch closest to all members; ports of full members and non-members
//     (JoinFull, JoinNonMember) receive, send-only non-members (JoinSendOnlyNonMember)
//     are on the tree so they can send but receive nothing. Trees are recomputed after
//     every heavy sweep;
//   - SM.MulticastGroup(mlid) returns the membership set.
//
// It does not block on the SA's locks and may be called from a MAD handler.
//
// # Partitions
//
// Config.Partitions lists Partition{Name, PKey, Members []Member{GUID or All, Full},
// IPoIB, MTU, Rate, SL, QKey} in partitions.conf's spirit. The default partition 0x7fff
// (all ports full members unless configured otherwise; the SM's port is always a full
// member) is entry 0 of every table; each further partition a port belongs to adds its
// P_Key, with bit 15 set for full members and clear for limited ones. Tables are written
// with P_KeyTable Set into every CA port, and with Config.PartitionEnforcement into the
// switch ports facing them.
//
// # Test fabrics
//
// Package sa/satest builds fabrics for tests and benchmarks: BackToBack, OneSwitch(n),
// Tree(leaves, perLeaf, spines), SmallTree (4 leaves × 8 HCAs, 2 spines) and FatTree648,
// with Fabric.StartSM.
package sa
