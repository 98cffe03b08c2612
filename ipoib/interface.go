package ipoib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/tun"
	"github.com/pibgw/pibgw/wire"
)

// Errors of New and Run.
var (
	ErrClosed = errors.New("ipoib: interface closed")
)

// Defaults.
const (
	DefaultNeighborTimeout = 60 * time.Second
	// DefaultMaxNeighbors bounds the neighbour table: Linux's gc_thresh3 (1024), with
	// gc_thresh2 and gc_thresh1 at a half and an eighth (512, 128) as Linux has them.
	DefaultMaxNeighbors = 1024
	// DefaultMaxGroups bounds the multicast groups an interface joins or sends to.
	DefaultMaxGroups = 1024
	// rxRingLen receive buffers stay posted: Linux's IPOIB_RX_RING_SIZE. The port reports
	// receives at most hca.RxBudget at a time, and each report re-posts its buffers, so
	// that many never run out. Few, so that the buffers being filled stay in the CPU's
	// cache: 256 instead of 512 (1 MiB of 2 KiB packets, more than this machine's L2 per
	// core) made the datagram-mode receiver's CPU per Gbit/s 15-21 % lower across hosts.
	rxRingLen = 256
	// ctrlSlots are send buffers for ARP, ND and packets that waited for resolution.
	ctrlSlots = 64
	// slotLen holds head-room (or the GRH area) and a 4 KiB IB MTU's worth of payload.
	slotLen = 64 + 4096
	// txHead is the head-room of the tun reads: the 4-byte header goes right before
	// the packet, so the UD send's SGE points into the read buffer.
	txHead = tun.MinOffset
	// rxHead is where the IP packet starts in a receive buffer: GRH area + header.
	rxHead = wire.GRHLen + HeaderLen
	// sqLen bounds the batch of sends the tx loop posts at once.
	maxBatch = 256
	// retryJoin is the first back-off of a failed bring-up; it doubles up to a minute.
	retryJoin = time.Second
	// saTimeout bounds one SA operation of the control loop.
	saTimeout = 10 * time.Second
)

// linkState is what the data path needs to know of the link, replaced whole on change.
type linkState struct {
	up      bool
	qkey    uint32
	ibMTU   int // bytes: the broadcast group's MTU
	bcastAH *hca.AH
	bcast   wire.GID
	mlid    uint16
	group   sa.MCGroup
	lid     uint16
	hw      HWAddr
}

// addrSet is the interface's addresses, replaced whole by SetAddrs.
type addrSet struct {
	prefixes  []netip.Prefix
	linkLocal netip.Addr
}

func (s *addrSet) has(a netip.Addr) bool {
	if a == s.linkLocal {
		return true
	}
	for _, p := range s.prefixes {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// source picks our address to talk to dst from: one in dst's prefix, else the first of
// the family (for IPv6 link-local destinations, the link-local address).
func (s *addrSet) source(dst netip.Addr) (netip.Addr, bool) {
	if dst.Is6() && dst.IsLinkLocalUnicast() {
		return s.linkLocal, true
	}
	var first netip.Addr
	for _, p := range s.prefixes {
		if p.Addr().Is4() != dst.Is4() {
			continue
		}
		if p.Contains(dst) {
			return p.Addr(), true
		}
		if !first.IsValid() {
			first = p.Addr()
		}
	}
	if !first.IsValid() && dst.Is6() {
		return s.linkLocal, true
	}
	return first, first.IsValid()
}

// isBroadcast reports whether a is the limited broadcast or the directed broadcast of
// one of our IPv4 prefixes.
func (s *addrSet) isBroadcast(a [4]byte) bool {
	if a == [4]byte{255, 255, 255, 255} {
		return true
	}
	for _, p := range s.prefixes {
		if !p.Addr().Is4() || p.Bits() >= 31 {
			continue
		}
		n := p.Masked().Addr().As4()
		bits := p.Bits()
		var b [4]byte
		for i := range b {
			var m byte
			switch {
			case bits >= 8*(i+1):
				m = 0xFF
			case bits <= 8*i:
				m = 0
			default:
				m = byte(0xFF << (8 - (bits - 8*i)))
			}
			b[i] = n[i] | ^m
		}
		if a == b {
			return true
		}
	}
	return false
}

// Interface is one IPoIB interface (ib0, ib0.8001): a UD QP on an HCA port in a
// partition, and a tun.Device on the IP side. Its state is in parts with one job each:
//
//	txp  the transmit path (transmit.go's types): rings, sender, offload segmentation
//	rxp  the receive path: the receive ring, the drain and sweep, GRO
//	ctl  control: bring-up and take-down, the join/leave jobs, ARP/ND handling queue
//	nb   the neighbour table and the path cache (neigh.go)
//	mc   the multicast groups (mcast.go)
//
// Locks, in the order they may be taken (a lock is never taken while one after it is
// held):
//
//	ctl.mu   bring-up, take-down, joins (control loop; SetAdminUp)
//	mc.mu    the multicast groups
//	nb.mu    the neighbour table, the path cache, the dead AHs, Resolve's waiters
//	ctl.jobs.mu, txp.snd.mu, rxp.sweepMu → rxp.mu   leaves: nothing else under them
//
// The data path takes only nb.mu and mc.mu for reading (a map lookup) and txp.snd.mu; it
// never waits for ctl.mu. Packets go out after the table locks are released
// (sendQueued).
type Interface struct {
	cfg  Config
	log  *slog.Logger
	clk  clock.Clock
	port *hca.Port
	sa   *sa.Client
	dev  tun.Device
	pkey uint16 // cfg.PKey with the full-member bit

	hctx           *hca.Context
	pd             *hca.PD
	sendCh, recvCh *hca.CompChannel
	scq, rcq       *hca.CQ
	qp             *hca.QP
	qpn            uint32

	txp transmitPath
	rxp receivePath
	ctl control
	nb  neighTable
	mc  groupTable
	cms cmState

	link   atomic.Pointer[linkState]
	addrs  atomic.Pointer[addrSet]
	routes atomic.Pointer[routeTable] // gateways (SetRoutes); nil when there are none
	state  atomic.Pointer[State]
	mtu    atomic.Int32

	cnt counters

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	running atomic.Bool
	runMu   sync.Mutex // Run's start and timer callbacks against Close (see Run, enterCallback)
	closed  atomic.Bool
	once    sync.Once
}

// New creates the interface: verbs objects, buffers, and (if the port, the P_Key and
// the SA allow it already) the broadcast-group join that brings it up. An interface that
// cannot come up yet stays down with State().Reason saying why, and comes up by itself
// when the port, its P_Key table or the SM change.
func New(cfg Config) (*Interface, error) {
	if cfg.Port == nil {
		return nil, errors.New("ipoib: Config.Port is nil")
	}
	if cfg.Device == nil {
		return nil, errors.New("ipoib: Config.Device is nil")
	}
	if cfg.SA == nil {
		return nil, errors.New("ipoib: Config.SA is nil")
	}
	if cfg.PKey&0x7FFF == 0 {
		return nil, fmt.Errorf("ipoib: P_Key %#04x is invalid", cfg.PKey)
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Device.Name()
	}
	if cfg.NeighborTimeout <= 0 {
		cfg.NeighborTimeout = DefaultNeighborTimeout
	}
	if cfg.MaxNeighbors <= 0 {
		cfg.MaxNeighbors = DefaultMaxNeighbors
	}
	if cfg.MaxGroups <= 0 {
		cfg.MaxGroups = DefaultMaxGroups
	}
	if cfg.CMIdleTimeout <= 0 {
		cfg.CMIdleTimeout = DefaultCMIdleTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = cfg.Port.Device().Clock()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Addrs = slices.Clone(cfg.Addrs)
	i := &Interface{
		cfg: cfg, clk: cfg.Clock, port: cfg.Port, sa: cfg.SA, dev: cfg.Device,
		pkey: cfg.PKey | 0x8000,
		log:  cfg.Logger.With("ipoib", cfg.Name),
		ctl:  control{pkeyIndex: -1},
		nb: neighTable{
			m: make(map[netip.Addr]*neighbor), ahs: make(map[wire.GID]*hca.AH), paths: make(map[wire.GID]sa.Path),
			thresh1: max(1, cfg.MaxNeighbors/8), thresh2: max(1, cfg.MaxNeighbors/2), thresh3: cfg.MaxNeighbors,
		},
		mc:  groupTable{m: make(map[wire.GID]*group)},
		cms: cmState{cm: cfg.CM, idle: cfg.CMIdleTimeout},
	}
	i.ctx, i.cancel = context.WithCancel(context.Background())
	i.link.Store(&linkState{})
	i.addrs.Store(&addrSet{prefixes: cfg.Addrs, linkLocal: LinkLocalFromGUID(cfg.Port.GUID())})
	i.setState(false, "not brought up yet")
	if err := i.setupVerbs(); err != nil {
		i.destroyVerbs()
		return nil, err
	}
	if err := i.startCM(); err != nil {
		i.closeCM()
		i.destroyVerbs()
		return nil, err
	}
	if cfg.Mode == Connected {
		if err := i.SetMode(Connected); err != nil {
			i.closeCM()
			i.destroyVerbs()
			return nil, err
		}
	}
	i.ctl.jobs.init()
	i.ctl.rx = make(chan ctrlPacket, ctrlRxLen)
	i.wg.Add(3)
	go i.controlLoop()
	go i.controlReceiver()
	go i.watchEvents()
	i.ctl.mu.Lock()
	i.bringUp(true)
	i.ctl.mu.Unlock()
	return i, nil
}

func (i *Interface) setupVerbs() error {
	var err error
	i.hctx = i.port.Device().Open()
	if i.pd, err = i.hctx.AllocPD(); err != nil {
		return err
	}
	i.sendCh = i.hctx.CreateCompChannel()
	i.recvCh = i.hctx.CreateCompChannel()
	batch := i.dev.BatchSize()
	if batch < 1 {
		batch = 1
	}
	batch = min(batch, maxBatch)
	sq := batch + ctrlSlots
	if i.scq, err = i.hctx.CreateCQ(2*sq, i.sendCh); err != nil {
		return err
	}
	if i.rcq, err = i.hctx.CreateCQ(2*rxRingLen, i.recvCh); err != nil {
		return err
	}
	i.rcq.SetCompHandler(i.onCompletions)
	if o, ok := i.dev.(tun.Offloader); ok && o.Offloads() {
		i.txp.off = o
	}
	i.qp, err = i.pd.CreateQP(hca.QPInitAttr{
		SendCQ: i.scq, RecvCQ: i.rcq, QPType: hca.QPTypeUD,
		Cap:           hca.QPCap{MaxSendWR: uint32(sq), MaxRecvWR: rxRingLen, MaxSendSGE: 2, MaxRecvSGE: 1},
		IPCsumPartial: i.txp.off != nil,
	})
	if err != nil {
		return err
	}
	i.qpn = i.qp.Num()
	if i.txp.off != nil {
		if err := i.txp.gtx.init(i.pd, batch); err != nil {
			return err
		}
	} else if err := i.txp.ring.init(i.pd, batch); err != nil {
		return err
	}
	if err := i.rxp.ring.init(i.pd, rxRingLen); err != nil {
		return err
	}
	return i.txp.snd.init(i, ctrlSlots)
}

func (i *Interface) destroyVerbs() {
	if i.qp != nil {
		_ = i.qp.Destroy()
	}
	i.txp.ring.free()
	i.txp.gtx.free()
	i.rxp.ring.free()
	i.txp.snd.free()
	if i.scq != nil {
		_ = i.scq.Destroy()
	}
	if i.rcq != nil {
		_ = i.rcq.Destroy()
	}
	i.nb.mu.Lock()
	for _, ah := range i.nb.ahs {
		_ = ah.Destroy()
	}
	for _, ah := range i.nb.dead {
		_ = ah.Destroy()
	}
	i.nb.ahs, i.nb.dead = map[wire.GID]*hca.AH{}, nil
	i.nb.mu.Unlock()
	i.mc.mu.Lock()
	for _, g := range i.mc.m {
		if g.ah != nil {
			_ = g.ah.Destroy()
			g.ah = nil
		}
	}
	i.mc.mu.Unlock()
	if ls := i.link.Load(); ls.bcastAH != nil {
		_ = ls.bcastAH.Destroy()
	}
	if i.pd != nil {
		_ = i.pd.Dealloc()
	}
	if i.hctx != nil {
		_ = i.hctx.Close()
	}
}

// Run moves packets until ctx is done or the interface is closed; it then closes the
// interface (and its tun.Device). It returns nil on an orderly stop and the device's
// error otherwise (an interface closed before Run started has nothing to run: nil).
// Run may be called once.
func (i *Interface) Run(ctx context.Context) error {
	// runMu orders Run's start against Close: either Close sees the transmit loop
	// counted (and waits for it before freeing the verbs objects it uses), or Run sees
	// the interface closed.
	i.runMu.Lock()
	if i.closed.Load() {
		i.runMu.Unlock()
		return nil
	}
	if !i.running.CompareAndSwap(false, true) {
		i.runMu.Unlock()
		return errors.New("ipoib: Run called twice")
	}
	errc := make(chan error, 1)
	i.startSweep()
	i.wg.Add(1)
	i.runMu.Unlock()
	go func() {
		defer i.wg.Done()
		errc <- i.txLoop(i.txSourceFor())
	}()
	var err error
	ended := false // the transmit loop returned (its device closed or failed)
	select {
	case <-ctx.Done():
	case <-i.ctx.Done():
	case err = <-errc:
		ended = true
	}
	i.Close()
	if !ended {
		// Close ended the transmit loop's read; wait for it, bounded.
		late := make(chan struct{})
		t := i.clk.AfterFunc(5*time.Second, func() { close(late) })
		select {
		case err = <-errc:
		case <-late:
		}
		t.Stop()
	}
	if i.closed.Load() && (errors.Is(err, tun.ErrClosed) || errors.Is(err, ErrClosed)) {
		err = nil
	}
	return err
}

// enterCallback admits a timer's callback that sends (the neighbour timers' solicitations)
// unless the interface is closed: Close waits for the admitted ones (i.wg) before it
// frees the verbs objects they post to. False: closed, the callback must not run.
func (i *Interface) enterCallback() bool {
	i.runMu.Lock()
	defer i.runMu.Unlock()
	if i.closed.Load() {
		return false
	}
	i.wg.Add(1)
	return true
}

// Close takes the interface down: it leaves its multicast groups, closes the tun.Device
// (which ends Run) and frees the verbs objects. It is idempotent.
func (i *Interface) Close() error {
	i.once.Do(func() {
		i.runMu.Lock()
		i.closed.Store(true)
		i.runMu.Unlock()
		if i.rcq != nil {
			i.rcq.SetCompHandler(nil)
		}
		i.ctl.mu.Lock()
		if i.ctl.retry != nil {
			i.ctl.retry.Stop()
		}
		i.takeDown("closed", true)
		i.ctl.mu.Unlock()
		i.cancel()
		i.closeCM()
		i.stopSweep()
		_ = i.dev.Close()
		i.ctl.jobs.close()
		i.txp.snd.wake()
		i.wg.Wait()
		i.nb.mu.Lock()
		i.nb.timers.stopAll()
		for ip := range i.nb.m {
			i.nb.wake(ip)
		}
		i.nb.mu.Unlock()
		i.destroyVerbs()
	})
	return nil
}

// State says whether the interface is up and why not.
func (i *Interface) State() State { return *i.state.Load() }

func (i *Interface) setState(up bool, reason string) {
	old := i.state.Load()
	if old != nil && old.Up == up && old.Reason == reason {
		return
	}
	st := &State{Up: up, Reason: reason}
	i.state.Store(st)
	if up {
		i.log.Info("interface up", "mtu", i.mtu.Load(), "qpn", fmt.Sprintf("%#x", i.qpn), "pkey", fmt.Sprintf("%#04x", i.pkey))
		// Peers may hold an old hardware address for ours (a re-created child has a
		// new QPN): tell them.
		i.ctl.jobs.push(func() { i.announce(nil) })
	} else if old != nil && old.Up {
		i.log.Info("interface down", "reason", reason)
	}
	if i.cfg.OnState != nil {
		i.cfg.OnState(*st)
	}
}

// QPN is the interface's UD QP number.
func (i *Interface) QPN() uint32 { return i.qpn }

// HWAddr is the interface's 20-byte hardware address (flags, QPN, port GID); the flags
// have 0x80 (connected mode) while the interface is in connected mode.
func (i *Interface) HWAddr() HWAddr {
	gid, _ := i.port.GID(0)
	var flags uint8
	if i.connectedMode() {
		flags = FlagConnected
	}
	return MakeHWAddr(flags, i.qpn, gid)
}

// Broadcast is the partition's broadcast hardware address.
func (i *Interface) Broadcast() HWAddr { return MulticastHWAddr(BroadcastMGID(i.pkey)) }

// MTU is the interface MTU: in datagram mode the broadcast group's IB MTU − 4 (0 before
// the group was joined), in connected mode 65520.
func (i *Interface) MTU() int { return int(i.mtu.Load()) }

// LinkLocal is the IPv6 link-local address (fe80:: + the port GUID with the U/L bit
// flipped, RFC 4391 §8), for the daemon to configure on the IP side.
func (i *Interface) LinkLocal() netip.Addr { return LinkLocalFromGUID(i.port.GUID()) }

// Name is the interface name.
func (i *Interface) Name() string { return i.cfg.Name }

// PKey is the interface's P_Key (with the full-member bit).
func (i *Interface) PKey() uint16 { return i.pkey }

// Info reports the interface for `pibgw show`.
func (i *Interface) Info() Info {
	ls := i.link.Load()
	return Info{
		Name: i.cfg.Name, Mode: i.Mode(), MTU: i.MTU(), HWAddr: i.HWAddr(), Broadcast: i.Broadcast(),
		PKey: i.pkey, QPN: i.qpn, QKey: ls.qkey, State: i.State(),
		Addrs: slices.Clone(i.addrs.Load().prefixes), Counters: i.cnt.snapshot(),
	}
}

// Counter returns one counter by name (Info.Counters' names), 0 if unknown.
func (i *Interface) Counter(name string) uint64 {
	for k, n := range counterNames {
		if n == name {
			return i.cnt[k].Load()
		}
	}
	return 0
}

// SetAddrs replaces the addresses ARP and ND answer for, and joins the IPv6
// solicited-node groups of the new addresses.
func (i *Interface) SetAddrs(addrs []netip.Prefix) {
	old := i.addrs.Load()
	i.addrs.Store(&addrSet{prefixes: slices.Clone(addrs), linkLocal: old.linkLocal})
	var added []netip.Prefix
	for _, p := range addrs {
		if !old.has(p.Addr()) {
			added = append(added, p)
		}
	}
	i.ctl.jobs.push(func() {
		i.ctl.mu.Lock()
		i.syncOwnGroups()
		i.ctl.mu.Unlock()
		if len(added) > 0 {
			i.announce(added) // as the kernel announces an address added to a link
		}
	})
}

// watchEvents follows the port: P_Key table changes bring the interface up or down, SM
// and LID changes make it rejoin its groups and forget its paths.
func (i *Interface) watchEvents() {
	defer i.wg.Done()
	for {
		select {
		case <-i.ctx.Done():
			return
		case ev := <-i.hctx.Events():
			if ev.Port != i.port.Num() || ev.QP != nil || ev.CQ != nil {
				continue
			}
			switch ev.Type {
			case hca.EventPKeyChange:
				i.ctl.jobs.push(func() { i.kick(false) })
			case hca.EventPortErr:
				i.ctl.jobs.push(func() {
					i.ctl.mu.Lock()
					i.takeDown("port not active", false)
					i.ctl.mu.Unlock()
				})
			case hca.EventPortActive, hca.EventLIDChange, hca.EventSMChange,
				hca.EventClientReregister, hca.EventGIDChange:
				i.ctl.jobs.push(func() {
					i.flushPaths()
					i.kick(true)
				})
			}
		}
	}
}

// kick re-evaluates the link: up if it can be, down if it must be.
func (i *Interface) kick(rejoin bool) {
	i.ctl.mu.Lock()
	defer i.ctl.mu.Unlock()
	if i.closed.Load() {
		return
	}
	i.bringUp(rejoin)
}

// scheduleRetry arms the back-off timer for a failed bring-up.
func (i *Interface) scheduleRetry() {
	if i.ctl.backoff == 0 {
		i.ctl.backoff = retryJoin
	} else {
		i.ctl.backoff = min(2*i.ctl.backoff, time.Minute)
	}
	if i.ctl.retry == nil {
		i.ctl.retry = i.clk.AfterFunc(i.ctl.backoff, func() { i.ctl.jobs.push(func() { i.kick(true) }) })
	} else {
		i.ctl.retry.Reset(i.ctl.backoff)
	}
}

// findPKey returns the table index of our P_Key: the full-member entry, else the
// limited one (IBA 10.9.3 lets a limited member talk to full members).
func (i *Interface) findPKey() int {
	if idx := i.port.FindPKey(i.pkey); idx >= 0 {
		return idx
	}
	return i.port.FindPKey(i.pkey & 0x7FFF)
}

// bringUp (under ctl.mu) joins the broadcast group and readies the QP. rejoin asks for
// a new join even if the interface is up (the SA may have lost its state).
func (i *Interface) bringUp(rejoin bool) {
	ls := i.link.Load()
	if i.ctl.detached != "" {
		i.takeDown(i.ctl.detached, false)
		return
	}
	if i.ctl.adminDown.Load() {
		i.takeDown(reasonAdminDown, false)
		return
	}
	if i.port.State() != hca.PortActive {
		i.takeDown("port not active", false)
		return
	}
	idx := i.findPKey()
	if idx < 0 {
		i.takeDown(fmt.Sprintf("P_Key %#04x not in the port's table", i.pkey), false)
		return
	}
	if ls.up && !rejoin && idx == i.ctl.pkeyIndex && ls.lid == i.port.LID() {
		return
	}
	mgid := BroadcastMGID(i.pkey)
	ctx, cancel := context.WithTimeout(i.ctx, saTimeout)
	g, err := i.sa.Join(ctx, mgid, wire.JoinFullMember, sa.JoinParams{PKey: i.pkey})
	cancel()
	if err != nil {
		i.takeDown("broadcast group not joined: "+err.Error(), false)
		i.scheduleRetry()
		return
	}
	if err := i.readyQP(idx, g.QKey); err != nil {
		i.takeDown("QP: "+err.Error(), false)
		i.scheduleRetry()
		return
	}
	if ls.up && ls.mlid != g.MLID && ls.mlid != 0 {
		_ = i.qp.DetachMcast(ls.bcast, ls.mlid)
	}
	if err := i.qp.AttachMcast(g.MGID, g.MLID); err != nil {
		i.takeDown("attach to the broadcast group: "+err.Error(), false)
		i.scheduleRetry()
		return
	}
	ah := ls.bcastAH
	if ah == nil || ls.mlid != g.MLID || ah.Attr().SL != g.SL {
		ah, err = i.pd.CreateAH(i.groupAH(g))
		if err != nil {
			i.takeDown("broadcast AH: "+err.Error(), false)
			i.scheduleRetry()
			return
		}
		if ls.bcastAH != nil {
			i.nb.mu.Lock()
			i.nb.dead = append(i.nb.dead, ls.bcastAH)
			i.nb.mu.Unlock()
		}
	}
	mtu := hca.MTU(g.MTU).Bytes()
	if mtu == 0 {
		mtu = 2048
	}
	if pm := i.port.ActiveMTU().Bytes(); pm > 0 && pm < mtu {
		mtu = pm
	}
	i.ctl.backoff = 0
	i.link.Store(&linkState{
		up: true, qkey: g.QKey, ibMTU: mtu, bcastAH: ah, bcast: g.MGID, mlid: g.MLID,
		group: g, lid: i.port.LID(), hw: i.HWAddr(),
	})
	i.applyMTU()
	i.setState(true, "")
	i.syncOwnGroups()
	i.rejoinGroups()
}

// groupAH is the address vector of a multicast group (IBA 8.4.1: with a GRH).
func (i *Interface) groupAH(g sa.MCGroup) hca.AHAttr {
	return hca.AHAttr{
		DLID: g.MLID, SL: g.SL, PortNum: i.port.Num(), IsGlobal: true, StaticRate: g.Rate,
		GRH: hca.GlobalRoute{DGID: g.MGID, HopLimit: g.HopLimit, TrafficClass: g.TClass, FlowLabel: g.FlowLabel},
	}
}

// readyQP moves the QP to RTS with P_Key index idx and Q_Key qkey, posting the receive
// ring the first time.
func (i *Interface) readyQP(idx int, qkey uint32) error {
	switch i.qp.State() {
	case hca.QPStateReset:
		a := hca.QPAttr{QPState: hca.QPStateInit, PKeyIndex: uint16(idx), PortNum: i.port.Num(), QKey: qkey}
		if err := i.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrQKey); err != nil {
			return err
		}
		i.rxp.mu.Lock()
		err := i.rxp.ring.postAll(i.qp)
		i.rxp.mu.Unlock()
		if err != nil {
			return err
		}
		a = hca.QPAttr{QPState: hca.QPStateRTR}
		if err := i.qp.Modify(&a, hca.QPAttrState); err != nil {
			return err
		}
		a = hca.QPAttr{QPState: hca.QPStateRTS}
		if err := i.qp.Modify(&a, hca.QPAttrState|hca.QPAttrSQPSN); err != nil {
			return err
		}
		i.ctl.pkeyIndex = idx
		return nil
	case hca.QPStateSQE:
		a := hca.QPAttr{QPState: hca.QPStateRTS}
		if err := i.qp.Modify(&a, hca.QPAttrState); err != nil {
			return err
		}
	}
	if idx != i.ctl.pkeyIndex {
		// The P_Key moved in the table: the index changes in SQD (IBA 10.3.1).
		a := hca.QPAttr{QPState: hca.QPStateSQD}
		if err := i.qp.Modify(&a, hca.QPAttrState); err != nil {
			return err
		}
		a = hca.QPAttr{QPState: hca.QPStateSQD, PKeyIndex: uint16(idx)}
		if err := i.qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex); err != nil {
			return err
		}
		a = hca.QPAttr{QPState: hca.QPStateRTS}
		if err := i.qp.Modify(&a, hca.QPAttrState); err != nil {
			return err
		}
		i.ctl.pkeyIndex = idx
	}
	if i.qp.QKey() != qkey {
		a := hca.QPAttr{QPState: hca.QPStateRTS, QKey: qkey}
		if err := i.qp.Modify(&a, hca.QPAttrState|hca.QPAttrQKey); err != nil {
			return err
		}
	}
	return nil
}

// takeDown (under ctl.mu) marks the link down: the data path drops, multicast
// attachments go, neighbours are forgotten. leave also leaves the groups at the SA
// (on Close; when the P_Key went away the SA has dropped us anyway).
func (i *Interface) takeDown(reason string, leave bool) {
	ls := i.link.Load()
	if ls.up {
		i.link.Store(&linkState{bcastAH: ls.bcastAH, mlid: ls.mlid, bcast: ls.bcast, qkey: ls.qkey})
		_ = i.qp.DetachMcast(ls.bcast, ls.mlid)
		if leave {
			ctx, cancel := context.WithTimeout(i.ctx, time.Second)
			_ = i.sa.Leave(ctx, ls.bcast, wire.JoinFullMember)
			cancel()
		}
		i.dropGroups(leave)
		i.flushNeighbors()
	}
	i.setState(false, reason)
}

// transmitPath is what moves packets from the device to the QP.
type transmitPath struct {
	ring txRing // batched reads of devices without offloads
	snd  sender // control slots (ARP, ND, queued packets) and completion reaping
	// off is the device's offload side when it has one (see offload.go); gtx is that
	// path's transmit buffers.
	off tun.Offloader
	gtx gsoRing
	// icmp builds the ICMP errors tooBig gives the stack (transmit loop only).
	icmp [icmpBufLen]byte
}

// receivePath is what moves packets from the QP to the device.
type receivePath struct {
	mu          sync.Mutex // one receive path at a time (handler or sweep)
	drains      atomic.Uint64
	sweepMu     sync.Mutex  // guards the two below; held while a sweep runs
	sweepTimer  clock.Timer // the receive sweep (see sweep), armed by Run
	sweepDrains uint64      // drains at the last sweep
	ring        rxRing
	gro         groState // merge state of the offload path
}

// control is the interface's slow path: bring-up, joins and leaves (the jobs, run one
// at a time by the control loop), and received ARP/ND (controlReceiver).
type control struct {
	mu        sync.Mutex // serialises bring-up, take-down and joins; the data path never takes it
	pkeyIndex int        // -1 while the QP is in RESET
	retry     clock.Timer
	backoff   time.Duration
	adminDown atomic.Bool // the IP side is set down (SetAdminUp)
	detached  string      // why the IP side is gone for good (Detach); "" while it is there
	jobs      jobQueue
	rx        chan ctrlPacket // received ARP/ND for controlReceiver (ctrlrx.go)
}

// neighTable is the neighbour cache and the path cache, bounded (neigh.go).
type neighTable struct {
	mu      sync.RWMutex
	m       map[netip.Addr]*neighbor
	lastGC  time.Time // the last collection
	thresh1 int       // gc_thresh1, 2, 3 (Config.MaxNeighbors)
	thresh2 int
	thresh3 int
	waiters map[netip.Addr][]chan struct{} // Resolve calls waiting for an entry
	ahs     map[wire.GID]*hca.AH           // unicast AHs by destination GID (the path cache)
	paths   map[wire.GID]sa.Path           // the PathRecords they came from (connected mode's REQ)
	dead    []*hca.AH                      // AHs replaced after a path change, destroyed on Close
	timers  neighTimers                    // the entries' timers (neightimer.go)
}

// groupTable is the interface's multicast groups (mcast.go).
type groupTable struct {
	mu sync.RWMutex
	m  map[wire.GID]*group
	so sendOnlyAging // the send-only groups' expiry (mcast.go)
}
