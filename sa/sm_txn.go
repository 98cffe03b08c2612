package sa

import (
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// The SM's transaction engine: requests queue up, at most Window are outstanding, a
// response is matched to its request by TID, and a request without a response is resent
// after MADTimeout up to MADRetries times and then fails. One driver loop (drive) runs at a
// time; responses and timer firings only record what happened and kick it.

type op uint8

const (
	opNodeInfo op = iota
	opNodeDesc
	opPortInfo
	opSwitchInfo
	opSwitchInfoSet
	opLFTSet
	opPortInfoSet
	opPortActive
	opPKeySet
	opMFTSet
	opLightSwitchInfo
)

var opAttr = [...]struct {
	attr   uint16
	method uint8
}{
	opNodeInfo:        {wire.AttrNodeInfo, wire.MethodGet},
	opNodeDesc:        {wire.AttrNodeDescription, wire.MethodGet},
	opPortInfo:        {wire.AttrPortInfo, wire.MethodGet},
	opSwitchInfo:      {wire.AttrSwitchInfo, wire.MethodGet},
	opSwitchInfoSet:   {wire.AttrSwitchInfo, wire.MethodSet},
	opLFTSet:          {wire.AttrLinearForwardingTable, wire.MethodSet},
	opPortInfoSet:     {wire.AttrPortInfo, wire.MethodSet},
	opPortActive:      {wire.AttrPortInfo, wire.MethodSet},
	opPKeySet:         {wire.AttrPKeyTable, wire.MethodSet},
	opMFTSet:          {wire.AttrMulticastForwardingTable, wire.MethodSet},
	opLightSwitchInfo: {wire.AttrSwitchInfo, wire.MethodGet},
}

// txn is one SMP exchange. Requests carry their data for Sets; the response's SMP data
// replaces it.
type txn struct {
	op     op
	node   *Node // the node addressed (nil: a NodeInfo probe of an unknown node)
	parent *Node // NodeInfo probes: the node the probe leaves from
	port   uint8 // the port concerned (PortInfo), or the parent's exit port (probe)
	mod    uint32
	path   []uint8
	data   [wire.SMPDataLen]byte

	tid      uint64
	deadline time.Time
	tries    int
	status   uint16
	failed   bool
}

// enqueue adds a request; the caller has filled it from newTxn.
func (sm *SM) enqueue(t *txn) { sm.queue = append(sm.queue, t) }

func (sm *SM) newTxn(o op, n *Node, port uint8, mod uint32, path []uint8) *txn {
	var t *txn
	if k := len(sm.free); k > 0 {
		t = sm.free[k-1]
		sm.free = sm.free[:k-1]
		*t = txn{}
	} else {
		t = new(txn)
	}
	t.op, t.node, t.port, t.mod, t.path = o, n, port, mod, path
	return t
}

func (sm *SM) release(t *txn) {
	*t = txn{}
	sm.free = append(sm.free, t)
}

// send builds and transmits t's SMP (IBA 14.2.2: directed route from the SM, DrSLID and
// DrDLID permissive, hop pointer 0, the initial path from t.path).
func (sm *SM) send(t *txn, now time.Time) {
	b := sm.buf[:]
	clear(b)
	m := wire.MAD(b)
	m.SetBaseVersion(wire.MADBaseVersion)
	m.SetMgmtClass(wire.MgmtClassSubnDirected)
	m.SetClassVersion(wire.ClassVersionSM)
	m.SetMethod(opAttr[t.op].method)
	m.SetAttrID(opAttr[t.op].attr)
	m.SetAttrMod(t.mod)
	t.tid = sm.port.TID()
	m.SetTID(t.tid)
	smp := wire.SMP(b)
	smp.SetMKey(0)
	smp.SetHopPointer(0)
	smp.SetHopCount(uint8(len(t.path)))
	smp.SetDrSLID(0xFFFF)
	smp.SetDrDLID(0xFFFF)
	copy(smp.InitialPath()[1:], t.path)
	copy(smp.SMPData(), t.data[:])
	t.deadline = now.Add(sm.cfg.MADTimeout)
	t.tries++
	sm.mu.Lock()
	sm.inflight[t.tid] = t
	sm.mu.Unlock()
	sm.nInflight++
	sm.smpSent.Add(1)
	// SendSMP is the originating SMI (IBA 14.2.2.1): hop count 0 is answered by our own
	// SMA, otherwise the hop pointer starts at 1 and the SMP leaves by InitialPath[1].
	_ = sm.port.SendSMP(hca.MADAddr{DLID: 0xFFFF, QPN: 0}, b)
}

// handleResponse is the port's handler for SMP responses. It runs on the delivering
// goroutine, possibly inside one of the SM's own SendMAD calls.
func (sm *SM) handleResponse(m *hca.MAD) {
	mad := wire.MAD(m.Data)
	tid := mad.TID()
	sm.mu.Lock()
	t := sm.inflight[tid]
	if t == nil {
		sm.mu.Unlock()
		return
	}
	delete(sm.inflight, tid)
	if mad.MgmtClass() == wire.MgmtClassSubnDirected {
		t.status = wire.SMP(m.Data).DRStatus()
	} else {
		t.status = mad.Status()
	}
	copy(t.data[:], wire.SMP(m.Data).SMPData())
	sm.done = append(sm.done, t)
	sm.mu.Unlock()
	sm.kick()
}

func (sm *SM) timeoutFired() {
	sm.mu.Lock()
	sm.expired = true
	sm.timerArmed = false
	sm.mu.Unlock()
	sm.kick()
}

// kick runs the driver unless another goroutine is running it, in which case that one
// runs it again before it stops.
func (sm *SM) kick() {
	sm.mu.Lock()
	if sm.running {
		sm.again = true
		sm.mu.Unlock()
		return
	}
	sm.running = true
	sm.mu.Unlock()
	for {
		sm.drive()
		sm.mu.Lock()
		if !sm.again {
			sm.running = false
			sm.mu.Unlock()
			return
		}
		sm.again = false
		sm.mu.Unlock()
	}
}

// drive processes responses and expiries, sends queued requests within the window,
// moves jobs on when their batch drains and starts new jobs.
func (sm *SM) drive() {
	var done []*txn
	for {
		sm.mu.Lock()
		done = append(done[:0], sm.done...)
		sm.done = sm.done[:0]
		expired := sm.expired
		sm.expired = false
		closed := sm.closed
		sm.mu.Unlock()
		if closed {
			return
		}
		progress := len(done) > 0
		for _, t := range done {
			sm.nInflight--
			if t.status != 0 {
				t.failed = true
				sm.smpFailed.Add(1)
			}
			sm.complete(t)
			sm.release(t)
		}
		if expired {
			progress = sm.expire() || progress
		}
		if sm.qhead < len(sm.queue) && sm.nInflight < sm.cfg.Window {
			now := sm.clk.Now()
			for sm.qhead < len(sm.queue) && sm.nInflight < sm.cfg.Window {
				t := sm.queue[sm.qhead]
				sm.queue[sm.qhead] = nil
				sm.qhead++
				sm.send(t, now)
			}
			progress = true
		}
		if sm.qhead == len(sm.queue) {
			sm.queue, sm.qhead = sm.queue[:0], 0
		}
		if sm.qhead == 0 && len(sm.queue) == 0 && sm.nInflight == 0 {
			if f := sm.onDrain; f != nil {
				sm.onDrain = nil
				f()
				progress = true
			} else if sm.startJob() {
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	if sm.nInflight > 0 {
		sm.mu.Lock()
		if !sm.timerArmed && !sm.closed {
			sm.timerArmed = true
			sm.timer.Reset(sm.cfg.MADTimeout)
		}
		sm.mu.Unlock()
	}
}

// expire resends or fails every outstanding request past its deadline.
func (sm *SM) expire() bool {
	now := sm.clk.Now()
	var late []*txn
	sm.mu.Lock()
	for tid, t := range sm.inflight {
		if !now.Before(t.deadline) {
			delete(sm.inflight, tid)
			late = append(late, t)
		}
	}
	sm.mu.Unlock()
	for _, t := range late {
		sm.nInflight--
		if t.tries <= sm.cfg.MADRetries {
			sm.send(t, now)
			continue
		}
		t.failed = true
		sm.smpFailed.Add(1)
		sm.log.Debug("SMP timed out", "attr", opAttr[t.op].attr, "path", t.path, "mod", t.mod)
		sm.complete(t)
		sm.release(t)
	}
	return len(late) > 0
}

// startJob begins the next piece of work the API or timers asked for.
func (sm *SM) startJob() bool {
	sm.mu.Lock()
	heavy, light, mc := sm.wantHeavy, sm.wantLight, sm.mcDirty
	var ws []chan struct{}
	switch {
	case heavy:
		sm.wantHeavy, sm.wantLight, sm.mcDirty = false, false, false
		ws = sm.waiters
		sm.waiters = nil
	case light:
		sm.wantLight = false
	case mc:
		sm.mcDirty = false
	}
	sm.mu.Unlock()
	switch {
	case heavy:
		sm.curWait = ws
		sm.startHeavySweep()
	case light:
		if sm.topo.Load() == nil {
			sm.mu.Lock()
			sm.wantHeavy = true
			sm.mu.Unlock()
			return true
		}
		sm.startLightSweep()
	case mc:
		sm.startMulticast(nil)
	default:
		return false
	}
	return true
}

// complete dispatches a finished exchange to the job that sent it.
func (sm *SM) complete(t *txn) {
	switch t.op {
	case opLightSwitchInfo:
		sm.lightDone(t)
	case opMFTSet:
		if t.failed {
			sm.mcFailed(t)
		}
	default:
		if sm.sw != nil {
			sm.sw.complete(t)
		}
	}
}
