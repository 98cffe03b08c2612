package sa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// Config configures an SM. The zero value of every field but Port has a default.
type Config struct {
	// Port is the HCA port the SM runs on (required).
	Port *hca.Port
	// Clock times sweeps and MAD timeouts; default the port's device clock.
	Clock  clock.Clock
	Logger *slog.Logger
	// Priority is SMInfo:Priority (0–15).
	Priority uint8
	// SMKey is SMInfo:SM_Key.
	SMKey uint64
	// GIDPrefix is programmed into every port; default fe80::/64.
	GIDPrefix uint64
	// SubnetTimeout is PortInfo:SubnetTimeOut (4.096 µs × 2^n); default 18 as opensm.
	SubnetTimeout uint8
	// SweepInterval is the light-sweep period; default 10 s (opensm's sweep_interval).
	// Negative disables periodic sweeps.
	SweepInterval time.Duration
	// MADTimeout is how long an SMP waits for its response; default 200 ms. MADRetries
	// is how often it is resent before the SM gives up on it; default 3.
	MADTimeout time.Duration
	MADRetries int
	// Window is the most SMPs outstanding at once; default 64.
	Window int
	// SendGoroutines is how many goroutines may carry one batch of at least 16 SMPs into
	// an in-process fabric (each send runs the SMP through the switches and back);
	// default GOMAXPROCS. 1 sends everything from the driver's goroutine. With more, the
	// SM times large batches sent both ways and sends the way that is faster on the
	// machine it runs on (sendTuner).
	SendGoroutines int
	// Partitions configures the P_Key tables (partitions.conf). Empty means the default
	// partition 0x7fff with every port a full member.
	Partitions []Partition
	// PartitionEnforcement also programs switch external ports facing CAs with their
	// CA's P_Keys and turns on inbound/outbound enforcement there.
	PartitionEnforcement bool
}

// SM is the built-in subnet manager (IBA 14.4): it discovers the fabric by
// directed-route SMPs sent from its port, assigns LIDs, computes and programs forwarding
// tables and P_Key tables, brings every port to Active and keeps the subnet so with
// periodic light sweeps. Everything it does to the fabric goes through MADs answered by
// the SMAs.
//
// The SM has no goroutine of its own: its work runs in whichever goroutine starts it
// (Start, Resweep, SetMulticastGroup), delivers a response, or fires a timer, one at a
// time, so it works the same whether responses arrive inside SendMAD (in-process links)
// or later (UDP links). A large batch of SMPs is sent by goroutines that live for that
// batch only (sendBatch); their responses are handled by the driver, in send order.
type SM struct {
	cfg  Config
	port *hca.Port
	clk  clock.Clock
	log  *slog.Logger

	topo atomic.Pointer[Topology]

	smpSent   atomic.Uint64
	trapsIn   atomic.Uint64 // Trap(Notice) SMPs received (handleTrap)
	trapSweep atomic.Bool   // a heavy sweep for a trap is about to start
	smpFailed atomic.Uint64
	sweeps    atomic.Uint64
	light     atomic.Uint64
	routings  atomic.Uint64 // heavy sweeps that ran computeRoutes

	// wire counts the SMPs sent whose response has not arrived (the window's measure
	// for the goroutines of a parallel batch).
	wire atomic.Int64

	mu       sync.Mutex // never held across SendMAD: responses arrive re-entrantly
	running  bool
	again    bool
	inflight map[uint64]*txn
	done     []*txn
	expired  bool
	closed   bool
	// requests from API calls and timers, taken by the driver
	wantHeavy bool
	wantLight bool
	mcDirty   bool
	waiters   []chan struct{} // closed when the next heavy sweep completes
	newParts  []Partition     // SetPartitions' partitions, taken by the next heavy sweep
	groups    map[uint16][]MCMember
	mlidNext  uint16

	timer      clock.Timer
	timerArmed bool
	sweepTimer clock.Timer

	// Driver state, touched only by the goroutine running the driver.
	queue     []*txn
	qhead     int
	free      []*txn
	slab      []txn // txns not yet used (newTxn)
	nInflight int
	onDrain   func()
	busy      bool // a sweep or MFT job is in progress
	buf       [wire.MADLen]byte
	bufs      []*[wire.MADLen]byte // one per goroutine of a parallel batch
	workers   int                  // goroutines a batch may use (GOMAXPROCS at New)
	seq       uint64
	reorder   bool      // the last batch was sent in parallel
	inside    bool      // every response of the last parallel batch arrived inside its send
	tune      sendTuner // whether large in-process batches go out on one goroutine or several
	sent      []int     // per part of a parallel batch: how many it sent
	unsent    []*txn    // scratch: what the parts of a batch left
	sw        *sweep
	curWait   []chan struct{}

	// State kept across sweeps.
	lids    map[uint64]uint16  // port GUID → LID (stable)
	lidUsed []bool             // by LID
	lidFree int                // every LID below it is used
	lfts    map[uint64][]uint8 // switch GUID → LFT programmed (the Node's LFT, never modified)
	// routed is what computeRoutes read of the last topology it routed (routeKey), and
	// routedLFTs the tables it computed, switch by switch in node order: a heavy sweep
	// that finds the same subnet reuses them instead of routing it again.
	routed       []uint64
	routedLFTs   [][]uint8
	routeScratch []uint64
	pkeys        map[pkeyKey][]uint16
	mfts         map[uint64]map[uint16]mftEntry // switch GUID → MLID → ports programmed
	// mftView is a copy of mfts for readers outside the SM's goroutine (the SA's
	// MulticastForwardingTableRecords); the inner maps are never changed once stored.
	mftView  atomic.Pointer[map[uint64]map[uint16]mftEntry]
	firstRun bool
	smLID    uint16
	// dups are the duplicate GUIDs the last heavy sweep found (dupKey), logged when first
	// seen; dupCount is their number, for Stats.
	dups     map[dupKey]bool
	dupCount atomic.Int64
}

// dupKey is a port GUID found behind a second link: the port, and the port it was reached
// from the second time.
type dupKey struct {
	guid     uint64
	port     uint8
	fromGUID uint64
	fromPort uint8
}

type pkeyKey struct {
	guid uint64
	port uint8
}

// ErrClosed is returned by calls on a closed SM.
var ErrClosed = errors.New("sa: subnet manager closed")

// New returns an SM for cfg.Port. Call Start to sweep.
func New(cfg Config) (*SM, error) {
	if cfg.Port == nil {
		return nil, errors.New("sa: Config.Port is required")
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
	if cfg.GIDPrefix == 0 {
		cfg.GIDPrefix = hca.DefaultGIDPrefix
	}
	if cfg.SubnetTimeout == 0 {
		cfg.SubnetTimeout = 18
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.MADTimeout <= 0 {
		cfg.MADTimeout = 200 * time.Millisecond
	}
	if cfg.MADRetries <= 0 {
		cfg.MADRetries = 3
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.SendGoroutines <= 0 {
		cfg.SendGoroutines = runtime.GOMAXPROCS(0)
	}
	parts, err := normalizePartitions(cfg.Partitions)
	if err != nil {
		return nil, err
	}
	cfg.Partitions = parts
	sm := &SM{
		cfg: cfg, port: cfg.Port, clk: cfg.Clock, log: cfg.Logger.With("sm", cfg.Port.Device().Name()),
		inflight: make(map[uint64]*txn),
		groups:   make(map[uint16][]MCMember),
		mlidNext: mlidBase,
		lids:     make(map[uint64]uint16),
		lidUsed:  make([]bool, 1),
		lfts:     make(map[uint64][]uint8),
		pkeys:    make(map[pkeyKey][]uint16),
		mfts:     make(map[uint64]map[uint16]mftEntry),
		firstRun: true,
		workers:  cfg.SendGoroutines,
	}
	sm.timer = sm.clk.AfterFunc(time.Hour, sm.timeoutFired)
	sm.timer.Stop()
	return sm, nil
}

// Start registers the SM on its port (SMP responses, SMInfo, CapabilityMask:IsSM),
// starts the first heavy sweep and arms the periodic light sweep. On an in-process
// fabric the sweep has finished when Start returns; otherwise wait with WaitSweep.
func (sm *SM) Start() error {
	sm.mu.Lock()
	if sm.closed {
		sm.mu.Unlock()
		return ErrClosed
	}
	sm.mu.Unlock()
	sm.port.RegisterMADHandler(wire.MgmtClassSubnDirected, true, hca.MADHandlerFunc(sm.handleResponse))
	sm.port.RegisterMADHandler(wire.MgmtClassSubnLID, true, hca.MADHandlerFunc(sm.handleResponse))
	sm.registerSMInfo()
	sm.port.SetTrapHandler(hca.MADHandlerFunc(sm.handleTrap))
	// IBA 14.2.5.6: the port an SM runs on advertises IsSM.
	sm.port.SetCapMask(sm.port.Query().PortCapFlags | hca.CapIsSM)
	if sm.cfg.SweepInterval > 0 {
		sm.sweepTimer = sm.clk.AfterFunc(sm.cfg.SweepInterval, sm.lightSweepFired)
	}
	sm.Resweep()
	return nil
}

// Close stops the sweeps and unregisters the SM from its port.
func (sm *SM) Close() {
	sm.mu.Lock()
	if sm.closed {
		sm.mu.Unlock()
		return
	}
	sm.closed = true
	ws := sm.waiters
	sm.waiters = nil
	sm.mu.Unlock()
	if sm.sweepTimer != nil {
		sm.sweepTimer.Stop()
	}
	sm.timer.Stop()
	sm.port.RegisterMADHandler(wire.MgmtClassSubnDirected, true, nil)
	sm.port.RegisterMADHandler(wire.MgmtClassSubnLID, true, nil)
	sm.port.SetTrapHandler(nil)
	sm.unregisterSMInfo()
	sm.port.SetCapMask(sm.port.Query().PortCapFlags &^ hca.CapIsSM)
	for _, w := range ws {
		close(w)
	}
}

// Resweep asks for a heavy sweep (rediscover everything, reroute, reprogram what
// changed). It returns a channel closed when that sweep has finished; on in-process
// fabrics it is already closed on return.
func (sm *SM) Resweep() <-chan struct{} {
	ch := make(chan struct{})
	sm.mu.Lock()
	if sm.closed {
		sm.mu.Unlock()
		close(ch)
		return ch
	}
	sm.wantHeavy = true
	sm.waiters = append(sm.waiters, ch)
	sm.mu.Unlock()
	sm.kick()
	return ch
}

// WaitSweep waits for the heavy sweep in progress, or the next one, to finish.
func (sm *SM) WaitSweep(ctx context.Context) error {
	select {
	case <-sm.Resweep():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LightSweep runs the light sweep now (what the periodic timer does): it reads every
// switch's SwitchInfo and starts a heavy sweep if one reports a port state change or
// does not answer.
func (sm *SM) LightSweep() {
	sm.mu.Lock()
	sm.wantLight = true
	sm.mu.Unlock()
	sm.kick()
}

func (sm *SM) lightSweepFired() {
	sm.mu.Lock()
	closed := sm.closed
	sm.mu.Unlock()
	if closed {
		return
	}
	sm.LightSweep()
	sm.sweepTimer.Reset(sm.cfg.SweepInterval)
}

// Topology returns the subnet as of the last completed heavy sweep (nil before the
// first). The result is immutable.
func (sm *SM) Topology() *Topology { return sm.topo.Load() }

// Port is the port the SM runs on.
func (sm *SM) Port() *hca.Port { return sm.port }

// LIDOf returns the LID assigned to the port with GUID portGUID.
func (sm *SM) LIDOf(portGUID uint64) (uint16, bool) {
	t := sm.topo.Load()
	if t == nil {
		return 0, false
	}
	return t.LIDOf(portGUID)
}

// Stats counts the SM's work.
type Stats struct {
	SMPsSent    uint64 // every SMP sent, retries included
	SMPsFailed  uint64 // SMPs given up after retries, or answered with an error status
	HeavySweeps uint64
	// Routings is how many heavy sweeps computed the routes; the others found the
	// subnet they had routed last (nodes, links, LIDs) and kept its forwarding tables.
	Routings     uint64
	LightSweeps  uint64
	Outstanding  int
	LastSweepLID uint16 // highest LID after the last heavy sweep
	Traps        uint64 // Trap(Notice) SMPs received and repressed; trap 128 starts a heavy sweep
	// DuplicateGUIDs is how many ports the last heavy sweep reached that have the GUID of
	// a port it had already found elsewhere (opensm's ERR 0D01): left unconfigured.
	DuplicateGUIDs int
}

// Stats returns the SM's counters.
func (sm *SM) Stats() Stats {
	s := Stats{
		SMPsSent: sm.smpSent.Load(), SMPsFailed: sm.smpFailed.Load(),
		HeavySweeps: sm.sweeps.Load(), LightSweeps: sm.light.Load(), Traps: sm.trapsIn.Load(),
		Routings: sm.routings.Load(),
	}
	s.DuplicateGUIDs = int(sm.dupCount.Load())
	sm.mu.Lock()
	s.Outstanding = len(sm.inflight)
	sm.mu.Unlock()
	if t := sm.topo.Load(); t != nil {
		s.LastSweepLID = t.maxLID
	}
	return s
}

func (sm *SM) String() string {
	return fmt.Sprintf("sm(%s port %d)", sm.port.Device().Name(), sm.port.Num())
}
