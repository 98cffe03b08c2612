package hca

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
)

// Limits a soft HCA advertises (ibv_query_device); at least pib's (driver/pib.h).
const (
	MaxPorts         = 32
	MaxQP            = 131072
	MaxQPWR          = 16351
	MaxSGE           = 32
	MaxCQ            = 65535
	MaxCQE           = 4194303
	MaxMR            = 65535
	MaxPD            = 65535
	MaxSRQ           = 65535
	MaxSRQWR         = 16351
	MaxAH            = 65535
	MaxInline        = 2048
	MaxQPRdAtom      = 16
	MaxQPInitRdAtom  = 128
	MaxMcastGroups   = 8192
	MaxMcastQPAttach = 128
	MaxMsgSize       = 1 << 30
	GIDTableLen      = 16
	PKeyTableLen     = 32
	DefaultPKey      = 0xFFFF
)

// Transport runs the wire protocol of one QP type (ud/, rc/).
type Transport interface {
	// PostSend executes or queues one send WR that hca has validated against the QP's
	// state, type and capabilities. It is called without any QP lock held.
	PostSend(qp *QP, wr *SendWR) error
	// Receive handles one packet addressed to qp that passed the port's checks (ICRC,
	// DLID, P_Key). p and its bytes are valid only during the call.
	Receive(qp *QP, p *Packet)
	// Modified tells the transport that qp moved from one state to another (to reset
	// PSNs, start or stop timers, flush).
	Modified(qp *QP, from, to QPState)
}

// Config describes a device. The zero value of every field but Name has a default.
type Config struct {
	Name         string // "pib_0"
	NodeGUID     uint64
	SysImageGUID uint64 // default: NodeGUID with byte 1 = 0x02, as pib derives it
	NumPorts     int    // 1…32, default 1
	FWVer        string // default "1.0.0"
	VendorID     uint32 // default 0x0001 (pib's)
	VendorPartID uint32 // default 1
	HWVer        uint32
	NodeDesc     string // NodeDescription, default "pibgw <Name>"
	MaxMTU       MTU    // default MTU4096
	// Transports by QP type; ud.Register fills UD, SMI and GSI, rc.Register RC and UC.
	Transports map[QPType]Transport
	// Remote makes the device a mirror of a device in another process (remote.go): QP
	// numbers and multicast membership come from there and every packet goes out
	// through the ports' links.
	Remote Remote
	// Manner is pib's behaviour choices and pitfall checks (manner.go); SetManner
	// changes it later.
	Manner Manner
	Clock  clock.Clock
	Logger *slog.Logger
}

// DeviceAttr is ibv_device_attr.
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        uint32
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEECRdAtom          int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	MaxEEInitRdAtom       int
	AtomicCap             int // IBV_ATOMIC_NONE 0, HCA 1, GLOB 2
	MaxEE                 int
	MaxRDD                int
	MaxMW                 int
	MaxRawIPv6QP          int
	MaxRawEthyQP          int
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxFMR                int
	MaxMapPerFMR          int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              int
	LocalCAAckDelay       uint8
	PhysPortCnt           int
	MaxInlineData         int
}

// ibv_device_cap_flags pibgw sets.
const (
	DeviceBadPKeyCntr     = 1 << 1
	DeviceBadQKeyCntr     = 1 << 2
	DeviceRawMulti        = 1 << 3
	DeviceAutoPathMig     = 1 << 4 // automatic path migration (apm.go)
	DevicePortActiveEvent = 1 << 10
	DeviceSysImageGUID    = 1 << 11
	DeviceRCRNRNAKGen     = 1 << 12
	DeviceSRQResize       = 1 << 13
	DeviceMemWindow       = 1 << 17 // memory windows (mw.go)
	DeviceXRC             = 1 << 20 // XRC (xrc.go)
	DeviceMemWindowType2B = 1 << 24
)

// Device is one soft HCA.
type Device struct {
	cfg   Config
	attr  DeviceAttr
	ports []*Port
	clk   clock.Clock
	epoch time.Time // the device clock's zero (CoreClock)
	log   *slog.Logger

	mu       sync.RWMutex
	qps      numTable[QP] // by QPN (QP0 and QP1 live on their ports)
	nextQPN  uint32
	mrs      slotTable[MR] // by key index (key >> 8)
	nextMR   uint32        // the lowest key index never used
	freeMR   []uint32
	keyGen   uint8
	mws      mwTable  // memory windows (mw.go)
	xrc      xrcState // XRC domains and SRQs (xrc.go)
	counts   objectCounts
	contexts map[*Context]struct{}
	watchers []*portWatcher

	// unsentKicks counts the connections whose batch's responses (rc's ACKs) are still
	// to be sent (Packet.DeferKick): a completion is not handed to a poller meanwhile
	// (CQ.Poll, settleKicks).
	unsentKicks atomic.Int32

	ids    atomic.Uint32 // object ids for inspection
	refID  uint32        // the device's number in payload references (payload_ref.go)
	reg    registry      // every object, for inspection (registry.go)
	manner mannerState   // behaviour choices and pitfall checks (manner.go)
}

type objectCounts struct{ pd, cq, mr, srq, ah, qp int }

// NewDevice creates a device with its ports Down and no link attached.
func NewDevice(cfg Config) (*Device, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("hca: device name is empty")
	}
	if cfg.NumPorts == 0 {
		cfg.NumPorts = 1
	}
	if cfg.NumPorts < 1 || cfg.NumPorts > MaxPorts {
		return nil, fmt.Errorf("hca: %s: num_ports %d out of range 1..%d", cfg.Name, cfg.NumPorts, MaxPorts)
	}
	if cfg.NodeGUID == 0 {
		return nil, fmt.Errorf("hca: %s: node GUID is zero", cfg.Name)
	}
	if cfg.SysImageGUID == 0 {
		cfg.SysImageGUID = cfg.NodeGUID&^0xFF00 | 0x0200
	}
	if cfg.FWVer == "" {
		cfg.FWVer = "1.0.0"
	}
	if cfg.VendorID == 0 {
		cfg.VendorID = 0x0001
	}
	if cfg.VendorPartID == 0 {
		cfg.VendorPartID = 1
	}
	if cfg.NodeDesc == "" {
		cfg.NodeDesc = "pibgw " + cfg.Name
	}
	if cfg.MaxMTU == 0 {
		cfg.MaxMTU = MTU4096
	}
	if cfg.MaxMTU.Bytes() == 0 {
		return nil, fmt.Errorf("hca: %s: max MTU encoding %d invalid", cfg.Name, cfg.MaxMTU)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Device{
		cfg:      cfg,
		clk:      cfg.Clock,
		epoch:    cfg.Clock.Now(),
		log:      cfg.Logger.With("device", cfg.Name),
		nextQPN:  firstUserQPN,
		nextMR:   1, // key index 0 is never used
		contexts: make(map[*Context]struct{}),
	}
	d.attr = DeviceAttr{
		FWVer: cfg.FWVer, NodeGUID: cfg.NodeGUID, SysImageGUID: cfg.SysImageGUID,
		MaxMRSize: MaxMsgSize * 4, PageSizeCap: 0xFFFFF000,
		VendorID: cfg.VendorID, VendorPartID: cfg.VendorPartID, HWVer: cfg.HWVer,
		MaxQP: MaxQP, MaxQPWR: MaxQPWR,
		DeviceCapFlags: DeviceBadPKeyCntr | DeviceBadQKeyCntr | DevicePortActiveEvent |
			DeviceSysImageGUID | DeviceRCRNRNAKGen | DeviceMemWindow | DeviceMemWindowType2B | DeviceAutoPathMig | DeviceXRC,
		MaxSGE: MaxSGE, MaxSGERd: MaxSGE, MaxCQ: MaxCQ, MaxCQE: MaxCQE, MaxMR: MaxMR, MaxPD: MaxPD,
		MaxQPRdAtom: MaxQPRdAtom, MaxResRdAtom: MaxQPRdAtom * MaxQP, MaxQPInitRdAtom: MaxQPInitRdAtom,
		AtomicCap: 1, MaxMW: MaxMW, MaxMcastGrp: MaxMcastGroups, MaxMcastQPAttach: MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxMcastGroups * MaxMcastQPAttach,
		MaxAH:                 MaxAH, MaxSRQ: MaxSRQ, MaxSRQWR: MaxSRQWR, MaxSRQSGE: MaxSGE,
		MaxPKeys: PKeyTableLen, LocalCAAckDelay: 15, PhysPortCnt: cfg.NumPorts,
		MaxInlineData: MaxInline,
	}
	for i := 1; i <= cfg.NumPorts; i++ {
		d.ports = append(d.ports, newPort(d, uint8(i)))
	}
	d.SetManner(cfg.Manner)
	d.registerRefs()
	return d, nil
}

// Name is the device name, e.g. "pib_0".
func (d *Device) Name() string { return d.cfg.Name }

// NodeDesc is the NodeDescription string.
func (d *Device) NodeDesc() string { return d.cfg.NodeDesc }

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr { return d.attr }

// NumPorts returns the number of ports.
func (d *Device) NumPorts() int { return len(d.ports) }

// Port returns port n (1-based), or nil.
func (d *Device) Port(n int) *Port {
	if n < 1 || n > len(d.ports) {
		return nil
	}
	return d.ports[n-1]
}

// Ports returns every port in order.
func (d *Device) Ports() []*Port { return d.ports }

// Clock returns the device's clock.
func (d *Device) Clock() clock.Clock { return d.clk }

// CoreClockKHz is the frequency of the device clock, in kHz (ibv_device_attr_ex's
// hca_core_clock): it counts nanoseconds.
const CoreClockKHz = 1_000_000

// CoreClock reads the device clock (ibv_query_rt_values_ex's raw clock): nanoseconds since
// the device was made, as the completion timestamps of a CQ with SetTimestamps.
func (d *Device) CoreClock() uint64 { return uint64(d.clk.Now().Sub(d.epoch)) }

// WallClock converts a reading of the device clock to nanoseconds since the Unix epoch
// (ibv_wc_read_completion_wallclock_ns).
func (d *Device) WallClock(core uint64) uint64 { return uint64(d.epoch.UnixNano()) + core }

// Logger returns the device's logger.
func (d *Device) Logger() *slog.Logger { return d.log }

func (d *Device) transport(t QPType) Transport {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.cfg.Transports[t]
}

// SetTransport registers the transport for a QP type (used by ud.Register / rc.Register).
func (d *Device) SetTransport(t QPType, tr Transport) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg.Transports == nil {
		d.cfg.Transports = make(map[QPType]Transport)
	}
	d.cfg.Transports[t] = tr
}

func (d *Device) nextID() uint32 { return d.ids.Add(1) }

// lookupQP finds a QP by number.
func (d *Device) lookupQP(qpn uint32) *QP { return d.qps.load(qpn) }
