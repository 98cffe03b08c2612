package fabric

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/wire"
)

// FaultConfig selects the faults a FaultLink injects. The zero value injects nothing.
type FaultConfig struct {
	// Seed seeds the PCG generator: the same seed and the same sequence of sends give
	// the same faults.
	Seed uint64
	// Probabilities per packet, 0..1.
	Loss      float64 // drop the packet
	Duplicate float64 // deliver it twice
	Reorder   float64 // hold it back and deliver it after the next packet
	Corrupt   float64 // flip one bit after the LRH, so it still routes and fails the ICRC
	// Delay delivers every packet this much later, through Clock.AfterFunc.
	Delay time.Duration
	// Clock runs delayed deliveries; nil means clock.Real.
	Clock clock.Clock
}

// FaultCounters counts what a FaultLink did.
type FaultCounters struct {
	Packets    uint64 // offered to Send
	Passed     uint64 // handed to the inner link (duplicates included)
	Lost       uint64
	Duplicated uint64
	Reordered  uint64
	Corrupted  uint64
	Delayed    uint64
}

// FaultLink is a Link wrapper that injects loss, duplication, reordering, corruption and
// delay. Decisions are taken under a mutex in the order packets are sent; the inner
// link is called after the mutex is released.
type FaultLink struct {
	inner Link

	mu   sync.Mutex
	cfg  FaultConfig
	clk  clock.Clock
	rng  *rand.Rand
	held *pktBuf // the packet Reorder holds back

	packets, passed, lost, duplicated, reordered, corrupted, delayed atomic.Uint64

	batches sync.Pool // *faultBatch
}

// NewFaultLink wraps inner.
func NewFaultLink(inner Link, cfg FaultConfig) *FaultLink {
	f := &FaultLink{inner: inner, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	f.setConfig(cfg)
	f.batches.New = func() any {
		b := &faultBatch{f: f}
		b.fire = b.send
		return b
	}
	return f
}

// FaultWrapper returns a wrapper for WithLinkWrapper and Cable.Wrap that puts a new
// FaultLink with cfg on a link, and reports it through created if that is not nil.
func FaultWrapper(cfg FaultConfig, created func(*FaultLink)) func(Link) Link {
	return func(l Link) Link {
		f := NewFaultLink(l, cfg)
		if created != nil {
			created(f)
		}
		return f
	}
}

// SetConfig changes the faults from the next packet on. The random stream continues; the
// Seed field is only used by NewFaultLink.
func (f *FaultLink) SetConfig(cfg FaultConfig) {
	f.mu.Lock()
	f.setConfig(cfg)
	f.mu.Unlock()
}

func (f *FaultLink) setConfig(cfg FaultConfig) {
	f.cfg = cfg
	f.clk = cfg.Clock
	if f.clk == nil {
		f.clk = clock.Real{}
	}
}

// Config returns the current configuration.
func (f *FaultLink) Config() FaultConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}

// Counters returns a snapshot of the fault counters.
func (f *FaultLink) Counters() FaultCounters {
	return FaultCounters{
		Packets: f.packets.Load(), Passed: f.passed.Load(), Lost: f.lost.Load(),
		Duplicated: f.duplicated.Load(), Reordered: f.reordered.Load(),
		Corrupted: f.corrupted.Load(), Delayed: f.delayed.Load(),
	}
}

// faultBatch is what one Send hands to the inner link, and the pooled copies to free
// once it has.
type faultBatch struct {
	f    *FaultLink
	pkts [][]byte
	bufs []*pktBuf
	fire func() // b.send, bound once so a delayed batch costs no closure
}

func (b *faultBatch) send() {
	if len(b.pkts) > 0 {
		b.f.passed.Add(uint64(len(b.pkts)))
		b.f.inner.Send(b.pkts)
	}
	for i, pb := range b.bufs {
		pb.free()
		b.bufs[i] = nil
	}
	clear(b.pkts)
	b.pkts, b.bufs = b.pkts[:0], b.bufs[:0]
	b.f.batches.Put(b)
}

// Send implements Link.
func (f *FaultLink) Send(pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	f.packets.Add(uint64(len(pkts)))
	b := f.batches.Get().(*faultBatch)

	f.mu.Lock()
	cfg := f.cfg
	delay := cfg.Delay > 0
	for _, p := range pkts {
		// Draw every roll for every packet, so that changing one rate does not shift
		// the decisions taken for the others.
		lossR, corR, dupR, reoR := f.rng.Float64(), f.rng.Float64(), f.rng.Float64(), f.rng.Float64()
		if lossR < cfg.Loss {
			f.lost.Add(1)
			continue
		}
		q, copied := p, false
		if corR < cfg.Corrupt && len(p) > wire.LRHLen {
			pb := copyPacket(p)
			// The damage must be to a packet with a real ICRC, or nobody could detect it.
			wire.Finalize(pb.b)
			bit := f.corruptBit(p)
			pb.b[bit/8] ^= 1 << (bit % 8)
			b.bufs = append(b.bufs, pb)
			q, copied = pb.b, true
			f.corrupted.Add(1)
		}
		if delay && !copied {
			pb := copyPacket(p)
			b.bufs = append(b.bufs, pb)
			q = pb.b
		}
		n := 1
		if dupR < cfg.Duplicate {
			n = 2
			f.duplicated.Add(1)
		}
		// Reorder: hold this packet back; the next packet sent releases it after itself.
		hold := f.held == nil && reoR < cfg.Reorder
		if hold {
			f.held = copyPacket(q)
			f.reordered.Add(1)
			n--
		}
		for ; n > 0; n-- {
			b.pkts = append(b.pkts, q)
			if !hold && f.held != nil {
				b.pkts = append(b.pkts, f.held.b)
				b.bufs = append(b.bufs, f.held)
				f.held = nil
			}
		}
	}
	clk := f.clk
	f.mu.Unlock()

	if delay && len(b.pkts) > 0 {
		f.delayed.Add(uint64(len(b.pkts)))
		clk.AfterFunc(cfg.Delay, b.fire)
		return
	}
	b.send()
}

// Flush delivers a packet that Reorder is holding back, if any.
func (f *FaultLink) Flush() {
	f.mu.Lock()
	h := f.held
	f.held = nil
	f.mu.Unlock()
	if h == nil {
		return
	}
	b := f.batches.Get().(*faultBatch)
	b.pkts = append(b.pkts, h.b)
	b.bufs = append(b.bufs, h)
	b.send()
}

// corruptBit picks the bit Corrupt flips: after the LRH, so the packet still routes, and
// outside the fields the ICRC does not cover (IBA 7.8.1: BTH.Resv8a, and GRH.TClass,
// FlowLabel and HopLmt in global packets), so the receiver's ICRC check always catches
// it. Bit 0 is the most significant bit of byte 0.
func (f *FaultLink) corruptBit(p []byte) int {
	lnh := wire.LRH(p).LNH()
	bth := -1
	grh := lnh == wire.LNHGlobal && len(p) >= wire.LRHLen+wire.GRHLen
	switch {
	case lnh == wire.LNHLocal:
		bth = wire.LRHLen
	case grh:
		bth = wire.LRHLen + wire.GRHLen
	}
	for {
		bit := wire.LRHLen*8 + f.rng.IntN((len(p)-wire.LRHLen)*8)
		byteOff, msb := bit/8, bit%8
		if bth >= 0 && byteOff == bth+4 {
			continue // BTH.Resv8a
		}
		if grh {
			g := byteOff - wire.LRHLen
			if (g == 0 && msb >= 4) || g == 1 || g == 2 || g == 3 || g == 7 {
				continue // TClass, FlowLabel, HopLmt
			}
		}
		return byteOff*8 + (7 - msb)
	}
}
