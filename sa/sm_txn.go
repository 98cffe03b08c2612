package sa

import (
	"cmp"
	"slices"
	"sync"
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
	seq      uint64 // order of sending, for handling a parallel batch's completions in order
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
		t = sm.free[k-1] // zeroed by release
		sm.free = sm.free[:k-1]
	} else {
		// New txns come from slabs: the first sweep of a large fabric queues hundreds of
		// thousands at once (the LFT blocks of every switch), one allocation each before.
		if len(sm.slab) == 0 {
			sm.slab = make([]txn, txnSlab)
		}
		t = &sm.slab[0]
		sm.slab = sm.slab[1:]
	}
	t.op, t.node, t.port, t.mod, t.path = o, n, port, mod, path
	return t
}

// txnSlab is how many txns newTxn allocates at once.
const txnSlab = 512

func (sm *SM) release(t *txn) {
	*t = txn{}
	sm.free = append(sm.free, t)
}

// send transmits t alone (a resend).
func (sm *SM) send(t *txn, now time.Time) {
	sm.seq++
	t.seq = sm.seq
	sm.prepare(t, now)
	sm.nInflight++
	sm.transmit(t, &sm.buf)
}

// prepare gives t its TID and deadline and records it as outstanding, before its SMP
// leaves: on an in-process fabric the response arrives inside the send. Several
// goroutines of a batch may prepare different txns at once.
func (sm *SM) prepare(t *txn, now time.Time) {
	t.tid = sm.port.TID()
	t.deadline = now.Add(sm.cfg.MADTimeout)
	t.tries++
	sm.mu.Lock()
	sm.inflight[t.tid] = t
	sm.mu.Unlock()
	sm.wire.Add(1)
	sm.smpSent.Add(1)
}

// transmit builds t's SMP in buf and sends it (IBA 14.2.2: directed route from the SM,
// DrSLID and DrDLID permissive, hop pointer 0, the initial path from t.path). It only
// reads t, so several goroutines may transmit different prepared txns at once; t must
// not be touched after the send, whose response may be handled at once.
func (sm *SM) transmit(t *txn, buf *[wire.MADLen]byte) {
	b := buf[:]
	clear(b)
	m := wire.MAD(b)
	m.SetBaseVersion(wire.MADBaseVersion)
	m.SetMgmtClass(wire.MgmtClassSubnDirected)
	m.SetClassVersion(wire.ClassVersionSM)
	m.SetMethod(opAttr[t.op].method)
	m.SetAttrID(opAttr[t.op].attr)
	m.SetAttrMod(t.mod)
	m.SetTID(t.tid)
	smp := wire.SMP(b)
	smp.SetMKey(0)
	smp.SetHopPointer(0)
	smp.SetHopCount(uint8(len(t.path)))
	smp.SetDrSLID(0xFFFF)
	smp.SetDrDLID(0xFFFF)
	copy(smp.InitialPath()[1:], t.path)
	copy(smp.SMPData(), t.data[:])
	// SendSMP is the originating SMI (IBA 14.2.2.1): hop count 0 is answered by our own
	// SMA, otherwise the hop pointer starts at 1 and the SMP leaves by InitialPath[1].
	_ = sm.port.SendSMP(hca.MADAddr{DLID: 0xFFFF, QPN: 0}, b)
}

// parallelMin is the smallest batch the driver splits over several goroutines: on an
// in-process fabric each send carries the SMP through every switch on its path and back
// (about 2 µs at three hops), which is worth spreading over the cores when a sweep of a
// large fabric has thousands of SMPs queued; small batches stay on the driver's goroutine
// exactly as before.
const parallelMin = 16

// insideBatch is how many queued SMPs one parallel batch may take once the SM has seen
// every response of a batch arrive inside its send (an in-process fabric): the goroutines
// then still keep at most Window SMPs awaiting a response (sm.wire), as each send returns
// with its answer, and the hand-off to them is paid once per 1024 SMPs rather than per 64.
const insideBatch = 1024

// sendBatch sends queued requests: up to the window's free slots, or, when responses
// arrive inside the sends, up to insideBatch. A batch of at least parallelMin is split
// over up to SendGoroutines goroutines that live only for this batch (one per part, never
// one per SMP); a part stops early when Window SMPs await a response, and what it did
// not send goes back to the head of the queue. Responses may arrive in any order; the
// driver handles a batch's completions in send order (seq), so the sweep's results do not
// depend on the scheduling.
func (sm *SM) sendBatch(now time.Time) {
	n := min(len(sm.queue)-sm.qhead, sm.cfg.Window-sm.nInflight)
	if sm.inside && sm.workers > 1 {
		n = min(len(sm.queue)-sm.qhead, max(n, insideBatch))
	}
	batch := sm.queue[sm.qhead : sm.qhead+n]
	k := min(sm.workers, len(batch)/(parallelMin/2))
	mode := -1
	if k >= 2 && len(batch) >= parallelMin && sm.inside {
		// In process, every SMP crosses the SM's port and its first switch, whose
		// counters and the SM's own state all goroutines share: whether more goroutines
		// are faster depends on the machine and its load, so the SM times both.
		mode = sm.tune.pick()
		if mode == 0 {
			k = 1
		}
	}
	if mode >= 0 {
		start := time.Now()
		sm.sendParts(batch, k, now)
		sm.tune.record(mode, time.Since(start), len(batch))
		return
	}
	if len(batch) < parallelMin || k < 2 {
		for _, t := range batch {
			sm.send(t, now)
		}
		clear(batch)
		sm.qhead += n
		return
	}
	sm.sendParts(batch, k, now)
}

// sendParts sends batch, the next len(batch) queued requests, in k parts, part 0 on the
// driver's goroutine and the others on one goroutine each (see sendBatch).
func (sm *SM) sendParts(batch []*txn, k int, now time.Time) {
	n := len(batch)
	for _, t := range batch {
		sm.seq++
		t.seq = sm.seq
	}
	sm.reorder = true
	for len(sm.bufs) < k {
		sm.bufs = append(sm.bufs, new([wire.MADLen]byte))
	}
	if len(sm.sent) < k {
		sm.sent = make([]int, k)
	}
	window := int64(sm.cfg.Window)
	per := (len(batch) + k - 1) / k
	part := func(i int) {
		p := batch[min(i*per, len(batch)):min((i+1)*per, len(batch))]
		buf := sm.bufs[i]
		j := 0
		for ; j < len(p) && sm.wire.Load() < window; j++ {
			sm.prepare(p[j], now)
			sm.transmit(p[j], buf)
		}
		sm.sent[i] = j
	}
	var wg sync.WaitGroup
	for i := 1; i < k; i++ {
		wg.Go(func() { part(i) })
	}
	part(0)
	wg.Wait()
	// What a part left unsent goes back to the head of the queue, in order.
	unsent := sm.unsent[:0]
	for i := range k {
		p := batch[min(i*per, len(batch)):min((i+1)*per, len(batch))]
		sm.nInflight += sm.sent[i]
		unsent = append(unsent, p[sm.sent[i]:]...)
	}
	clear(batch)
	sm.qhead += n - len(unsent)
	copy(sm.queue[sm.qhead:], unsent)
	clear(unsent)
	sm.unsent = unsent[:0]
	// Every response arrived inside its send: the fabric is in process.
	sm.inside = len(unsent) == 0 && sm.wire.Load() == 0
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
	sm.wire.Add(-1)
	if mad.MgmtClass() == wire.MgmtClassSubnDirected {
		t.status = wire.SMP(m.Data).DRStatus()
	} else {
		t.status = mad.Status()
	}
	copy(t.data[:], wire.SMP(m.Data).SMPData())
	sm.done = append(sm.done, t)
	sm.kickLocked()
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
	sm.kickLocked()
}

// kickLocked is kick with sm.mu held, which it releases (a response, recorded under the
// lock, takes it once instead of twice).
func (sm *SM) kickLocked() {
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
		if sm.reorder {
			// A batch went out on several goroutines: take its completions in send order.
			sm.reorder = false
			slices.SortFunc(done, func(a, b *txn) int { return cmp.Compare(a.seq, b.seq) })
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
			sm.sendBatch(sm.clk.Now())
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
			sm.wire.Add(-1)
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

// sendTuner chooses, batch by batch, between sending a large in-process batch from the
// driver's goroutine alone (mode 0) and splitting it over SendGoroutines (mode 1), by the
// wall time per SMP each took in its last tuneSamples batches (the median: a batch the
// scheduler preempted is slow, none is ever fast by chance). Both modes are tried first;
// then the faster runs, and every reprobeEvery-th batch the other one is timed again, so
// that a change in the machine's load is followed. On the 2-core machine issue 42 was
// measured on, one goroutine was 1.29× faster: every SMP crosses the SM's port and the
// first switch, whose counters, and the SM's TID table, all the goroutines then share;
// on a machine busy with other work, two goroutines may get more of the CPU than one.
type sendTuner struct {
	nsPerSMP [2][tuneSamples]float64 // the last samples of each mode, a ring
	samples  [2]int
	batches  int
}

const (
	tuneSamples  = 5
	reprobeEvery = 16
)

func (st *sendTuner) pick() int {
	st.batches++
	for m := range 2 {
		if st.samples[m] < tuneSamples {
			return m
		}
	}
	best := 0
	if st.median(1) < st.median(0) {
		best = 1
	}
	if st.batches%reprobeEvery == 0 {
		return 1 - best
	}
	return best
}

func (st *sendTuner) median(mode int) float64 {
	v := st.nsPerSMP[mode]
	slices.Sort(v[:])
	return v[tuneSamples/2]
}

func (st *sendTuner) record(mode int, d time.Duration, smps int) {
	if smps == 0 {
		return
	}
	st.nsPerSMP[mode][st.samples[mode]%tuneSamples] = float64(d.Nanoseconds()) / float64(smps)
	st.samples[mode]++
}
