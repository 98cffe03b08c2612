package sa

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// The SA agent (IBA 15): the class 0x03 request handler on the SM's port. It answers
// from the SM's Topology (PathRecord, NodeRecord, PortInfoRecord) and from its own state
// (multicast groups, service registrations). Single-MAD answers go back in the handler's
// goroutine; GetTable answers go out through RMPP (saagent_rmpp.go), whose ACKs come back
// to the agent's class 0x03 response handler.

// MulticastProgrammer is the SM's multicast API: MLIDs and the MFTs that forward each
// group to the ports of its receiving members. *SM implements it; SetMulticastGroup
// takes a group's whole membership after every join or leave.
type MulticastProgrammer interface {
	AllocMLID() (uint16, error)
	FreeMLID(mlid uint16)
	SetMulticastGroup(mlid uint16, members []MCMember) error
}

// AgentConfig configures an SA agent. Port and Topology are required.
type AgentConfig struct {
	// Port is the SM's port; the agent registers there.
	Port *hca.Port
	// Topology returns the subnet as last swept (SM.Topology).
	Topology func() *Topology
	// Multicast programs MFTs from group membership; nil leaves forwarding alone.
	Multicast MulticastProgrammer
	// Partitions are the partitions whose IPoIB broadcast groups are pre-created (those
	// with IPoIB set); nil means the Topology's partitions, re-read after every heavy
	// sweep, or opensm's default partition before the first.
	Partitions []Partition
	// Clock drives RMPP retransmission and service leases; default the port's device
	// clock.
	Clock clock.Clock
	// Logger; default the device's logger.
	Logger *slog.Logger
	// PacketLifeTime is the PacketLifeTime the SA reports on paths and groups (4.096 µs ×
	// 2^n); default 18 as OpenSM's packet_life_time.
	PacketLifeTime uint8
	// SMKey, when non-zero, is required in requests that change state.
	SMKey uint64
	// RMPPTimeout is how long the RMPP sender waits for an ACK before resending the
	// window; default 200 ms. RMPPRetries bounds the resends; default 4.
	RMPPTimeout time.Duration
	RMPPRetries int
	// SMInfo, when set, fills the SM's SMInfo attribute (IBA 14.2.5.13, as a SubnGet
	// answers it) for SMInfoRecords; StartSA sets it to the SM's.
	SMInfo func(out []byte)
	// MFTs, when set, returns the multicast forwarding entries programmed, by switch GUID
	// and MLID (SM.MFTs), for MulticastForwardingTableRecords; StartSA sets it.
	MFTs func() map[uint64]map[uint16][4]uint64
	// MaxSendOnlyGroups bounds the groups without a receiving member (mcast.go); default
	// DefaultMaxSendOnlyGroups, negative: no bound.
	MaxSendOnlyGroups int
}

// Agent is the subnet administrator.
type Agent struct {
	cfg  AgentConfig
	port *hca.Port
	clk  clock.Clock
	log  *slog.Logger

	mux *saMux

	mu       sync.Mutex // never held across SendMAD
	groups   map[wire.GID]*mcGroup
	byMLID   map[uint16]*mcGroup
	mlidNext uint16
	mgidSeq  uint64
	bcastGen uint64 // Topology generation whose partitions have broadcast groups
	bcastSet bool
	services []*serviceEntry
	sends    map[rmppKey]*rmppSend
	mc       mcStats // mcast.go

	bufs sync.Pool // *saBuf
}

type saBuf struct {
	mad  [wire.MADLen]byte
	recs []byte
}

// ErrAgentConfig is returned by NewAgent for a missing Port or Topology.
var ErrAgentConfig = errors.New("sa: AgentConfig needs Port and Topology")

// NewAgent creates the SA on cfg.Port and registers it as the class 0x03 request
// handler; RMPP ACKs for its GetTable answers reach it through the port's class 0x03
// response dispatcher (saagent_mux.go), which SA clients on the same port share.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Port == nil || cfg.Topology == nil {
		return nil, ErrAgentConfig
	}
	if cfg.Clock == nil {
		cfg.Clock = cfg.Port.Device().Clock()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Port.Device().Logger()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PacketLifeTime == 0 {
		cfg.PacketLifeTime = 18
	}
	if cfg.RMPPTimeout <= 0 {
		cfg.RMPPTimeout = 200 * time.Millisecond
	}
	if cfg.RMPPRetries <= 0 {
		cfg.RMPPRetries = 4
	}
	a := &Agent{
		cfg: cfg, port: cfg.Port, clk: cfg.Clock,
		log:      cfg.Logger.With("sa", cfg.Port.Device().Name()),
		groups:   make(map[wire.GID]*mcGroup),
		byMLID:   make(map[uint16]*mcGroup),
		mlidNext: saMLIDBase,
		sends:    make(map[rmppKey]*rmppSend),
	}
	a.bufs.New = func() any { return new(saBuf) }
	a.ensureBroadcastGroups(a.topology())
	a.mux = muxFor(cfg.Port)
	a.mux.setAgent(a)
	cfg.Port.RegisterMADHandler(wire.MgmtClassSubnAdm, false, hca.MADHandlerFunc(a.handleRequest))
	return a, nil
}

// Close unregisters the agent and abandons its RMPP transfers.
func (a *Agent) Close() {
	a.port.RegisterMADHandler(wire.MgmtClassSubnAdm, false, nil)
	a.mux.setAgent(nil)
	a.mu.Lock()
	for k, s := range a.sends {
		if s.timer != nil {
			s.timer.Stop()
		}
		delete(a.sends, k)
	}
	a.mu.Unlock()
}

func (a *Agent) topology() *Topology { return a.cfg.Topology() }

func (a *Agent) getBuf() *saBuf { return a.bufs.Get().(*saBuf) }

func (a *Agent) putBuf(b *saBuf) {
	b.recs = b.recs[:0]
	a.bufs.Put(b)
}

// handleRequest answers one SA request.
func (a *Agent) handleRequest(m *hca.MAD) {
	req := wire.SAMAD(m.Data)
	h := req.MAD()
	method := h.Method()
	if h.ClassVersion() != wire.ClassVersionSA {
		a.replyError(m, wire.StatusBadVersion)
		return
	}
	// An ACK, STOP or ABORT of a GetTable answer's transfer comes as a request when the
	// receiver's RMPP flips the DATA's method, as Linux's does (mad_rmpp.c format_ack:
	// the ACK reaches the agent that sends the answers, which takes the requests).
	// A request RMPP DATA (a multi-MAD request) is not something pibgw's SA takes:
	// every request it supports fits one MAD.
	if r := req.RMPP(); r.Active() && r.Type() != wire.RMPPTypeData {
		a.rmppControl(m)
		return
	}
	switch h.AttrID() {
	case wire.AttrClassPortInfo:
		if method != wire.MethodGet {
			a.replyError(m, wire.StatusMethodAttrNotSupp)
			return
		}
		a.replyClassPortInfo(m)
	case wire.AttrPathRecord:
		a.handlePathRecord(m)
	case wire.AttrMCMemberRecord:
		a.handleMCMember(m)
	case wire.AttrNodeRecord:
		a.handleNodeRecord(m)
	case wire.AttrPortInfoRecord:
		a.handlePortInfoRecord(m)
	case wire.AttrServiceRecord:
		a.handleServiceRecord(m)
	case wire.AttrLinkRecord:
		a.handleLinkRecord(m)
	case wire.AttrSwitchInfoRecord:
		a.handleSwitchInfoRecord(m)
	case wire.AttrLinearFwdTableRecord:
		a.handleLFTRecord(m)
	case wire.AttrPKeyTableRecord:
		a.handlePKeyTableRecord(m)
	case wire.AttrGUIDInfoRecord:
		a.handleGUIDInfoRecord(m)
	case wire.AttrSMInfoRecord:
		a.handleSMInfoRecord(m)
	case wire.AttrMulticastFwdTblRecord:
		a.handleMFTRecord(m)
	default:
		switch method {
		case wire.MethodGet, wire.MethodGetTable, wire.MethodSet, wire.MethodDelete:
			a.replyError(m, wire.StatusMethodAttrNotSupp)
		default:
			a.replyError(m, wire.StatusMethodNotSupported)
		}
	}
}

// respMethod is the response method of a request method (IBA 15.2.2: Set answers with
// GetResp).
func respMethod(method uint8) uint8 {
	switch method {
	case wire.MethodSet, wire.MethodGet:
		return wire.MethodGetResp
	case wire.MethodGetTable:
		return wire.MethodGetTableResp
	case wire.MethodDelete:
		return wire.MethodDeleteResp
	}
	return method | wire.MethodResponse
}

// replyError answers with status and the request's data echoed (IBA 13.4.7). A
// GetTable error goes back as one RMPP segment, as OpenSM sends it.
func (a *Agent) replyError(m *hca.MAD, status uint16) {
	b := a.getBuf()
	resp := wire.SAMAD(b.mad[:])
	copy(resp, m.Data)
	h := resp.MAD()
	method := h.Method()
	h.SetMethod(respMethod(method))
	h.SetStatus(status)
	r := resp.RMPP()
	clear(r)
	if method == wire.MethodGetTable {
		r.SetVersion(wire.RMPPVersion1)
		r.SetType(wire.RMPPTypeData)
		r.SetRespTime(wire.RMPPNoRespTime)
		r.SetFlags(wire.RMPPFlagActive | wire.RMPPFlagFirst | wire.RMPPFlagLast)
		r.SetSegmentNumber(1)
		r.SetPayloadLength(wire.SAClassHeaderLen)
		clear(resp.Data())
	}
	a.port.ReplyMAD(m, resp)
	a.putBuf(b)
}

// replyRecord answers a Get/Set/Delete with one record.
func (a *Agent) replyRecord(m *hca.MAD, rec []byte) {
	b := a.getBuf()
	resp := wire.SAMAD(b.mad[:])
	copy(resp[:wire.SAHeaderLen], m.Data)
	h := resp.MAD()
	h.SetMethod(respMethod(h.Method()))
	h.SetStatus(0)
	clear(resp.RMPP())
	resp.SetAttrOffset(wire.SAAttrOffset(len(rec)))
	d := resp.Data()
	n := copy(d, rec)
	clear(d[n:])
	a.port.ReplyMAD(m, resp)
	a.putBuf(b)
}

// replyRecords answers a request with the records in recs (stride bytes each): Get
// takes exactly one, GetTable any number through RMPP.
func (a *Agent) replyRecords(m *hca.MAD, recs []byte, recLen int) {
	stride := wire.SARecordStride(recLen)
	n := len(recs) / stride
	if wire.MAD(m.Data).Method() != wire.MethodGetTable {
		switch {
		case n == 0:
			a.replyError(m, wire.SAStatusNoRecords)
		case n > 1:
			a.replyError(m, wire.SAStatusTooManyRecords)
		default:
			a.replyRecord(m, recs[:recLen])
		}
		return
	}
	a.sendTable(m, recs, wire.SAAttrOffset(recLen))
}

// capMask2SendOnlyFull is ClassPortInfo:CapabilityMask2's SendOnlyFullMemberSupport.
const capMask2SendOnlyFull = 1 << 12

// replyClassPortInfo answers SA ClassPortInfo (IBA 13.4.8.1, 15.2.5.1).
func (a *Agent) replyClassPortInfo(m *hca.MAD) {
	var rec [wire.ClassPortInfoLen]byte
	rec[0] = wire.MADBaseVersion
	rec[1] = wire.ClassVersionSA
	// CapabilityMask2 (27 bits above RespTimeValue): SendOnlyFullMemberSupport, bit 12
	// (IBA 1.3; Linux's IB_SA_CAP_MASK2_SENDONLY_FULL_MEM_SUPPORT).
	binary.BigEndian.PutUint32(rec[4:], capMask2SendOnlyFull<<5|uint32(a.cfg.PacketLifeTime&0x1F)) // + RespTimeValue
	a.replyRecord(m, rec[:])
}

// requireSMKey checks SM_Key on state-changing requests.
func (a *Agent) smKeyOK(req wire.SAMAD) bool {
	return a.cfg.SMKey == 0 || req.SMKey() == a.cfg.SMKey || req.SMKey() == 0
}

// gidOfPort is the port's GID with the subnet's prefix.
func gidOfPort(t *Topology, p *Port) wire.GID {
	prefix := t.GIDPrefix
	if prefix == 0 {
		prefix = wire.DefaultGIDPrefix
	}
	return wire.MakeGID(prefix, p.GUID)
}

// portByGID finds the end port with gid, checking the subnet prefix.
func portByGID(t *Topology, gid wire.GID) *Port {
	prefix := t.GIDPrefix
	if prefix == 0 {
		prefix = wire.DefaultGIDPrefix
	}
	if gid.SubnetPrefix() != prefix {
		return nil
	}
	return t.Port(gid.InterfaceID())
}

// StartSA creates the SA agent for sm on the SM's port, reading sm's Topology and
// programming multicast through sm. cfg's Port, Topology and Multicast are filled in.
func StartSA(sm *SM, cfg AgentConfig) (*Agent, error) {
	cfg.Port = sm.Port()
	cfg.Topology = sm.Topology
	cfg.Multicast = sm
	cfg.SMInfo = func(out []byte) { sm.smInfo(wire.MethodGet, 0, out) }
	cfg.MFTs = sm.MFTs
	if cfg.Clock == nil {
		cfg.Clock = sm.clk
	}
	return NewAgent(cfg)
}
