package hca

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/pibgw/pibgw/internal/csum"
	"github.com/pibgw/pibgw/wire"
)

// Payloads by reference (wire.SetPayloadRef): an in-process RC requester may name the
// bytes of a packet in its registered memory instead of copying them in, and the
// receiving port hands the transport those bytes (receiveOne). Devices are found by a
// process-wide number, held weakly so that a device nobody uses any more is collected
// (its slot stays: a number is never reused).

var (
	refMu   sync.Mutex
	refDevs atomic.Pointer[[]weak.Pointer[Device]] // by refID - 1, copied on write
)

func init() { wire.SetPayloadSource(resolvePayload) }

// registerRefs gives d its number for payload references.
func (d *Device) registerRefs() {
	refMu.Lock()
	defer refMu.Unlock()
	var devs []weak.Pointer[Device]
	if p := refDevs.Load(); p != nil {
		devs = *p
	}
	devs = append(devs[:len(devs):len(devs)], weak.Make(d))
	refDevs.Store(&devs)
	d.refID = uint32(len(devs))
}

// resolvePayload is wire's PayloadSource: the n bytes at addr of the region with local
// key key on device dev, if they lie inside it.
func resolvePayload(dev, key uint32, addr uint64, n int) []byte {
	p := refDevs.Load()
	if p == nil || dev == 0 || int(dev) > len(*p) {
		return nil
	}
	d := (*p)[dev-1].Value()
	if d == nil {
		return nil
	}
	mr := d.LookupKey(key)
	if mr == nil {
		return nil
	}
	b, ok := mr.Slice(addr, uint32(n))
	if !ok {
		return nil
	}
	return b
}

// PayloadRefs reports whether the device's transports may send payloads by reference:
// only a device whose packets stay in this process until a port of it or of the fabric
// makes them observable. A mirror of a daemon's device (Config.Remote) sends every packet
// to another process.
func (d *Device) PayloadRefs() bool { return d.cfg.Remote == nil && payloadRefsOn.Load() }

// payloadRefsOn turns payload references off for the whole process (SetPayloadRefs).
var payloadRefsOn atomic.Bool

func init() { payloadRefsOn.Store(true) }

// SetPayloadRefs turns payload references on or off for every device of the process
// (benchmarks compare both; packets already built keep theirs).
func SetPayloadRefs(on bool) { payloadRefsOn.Store(on) }

// RefAt returns a payload reference to the n bytes at offset off of the message sgl
// describes, when they lie inside one SGE; ok is false when they do not (the caller
// copies them, GatherAt). A key or range the QP may not use gives the status GatherAt
// would.
func (qp *QP) RefAt(sgl []SGE, off uint64, n int) (dev, key uint32, addr uint64, st WCStatus, ok bool) {
	for _, s := range sgl {
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		if uint64(s.Length)-off < uint64(n) {
			return 0, 0, 0, WCSuccess, false
		}
		mr := qp.dev.LookupKey(s.LKey)
		if mr == nil || mr.pd != qp.pd {
			return 0, 0, 0, WCLocProtErr, true
		}
		if _, in := mr.Slice(s.Addr+off, uint32(n)); !in {
			return 0, 0, 0, WCLocProtErr, true
		}
		return qp.dev.refID, s.LKey, s.Addr + off, WCSuccess, true
	}
	return 0, 0, 0, WCLocLenErr, true
}

// SumAt returns the folded 16-bit one's-complement sum (RFC 1071) of the message sgl
// describes from offset off to its end, read where it lies: a checksum engine's pass
// for a message it could not defer (wire.SetMsgCsumPending).
func (qp *QP) SumAt(sgl []SGE, off uint64) (uint16, WCStatus) {
	var total uint64
	pos := 0
	for _, s := range sgl {
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		mr := qp.dev.LookupKey(s.LKey)
		if mr == nil || mr.pd != qp.pd {
			return 0, WCLocProtErr
		}
		b, ok := mr.Slice(s.Addr+off, uint32(uint64(s.Length)-off))
		if !ok {
			return 0, WCLocProtErr
		}
		v := csum.Fold(csum.Sum(b, 0))
		if pos%2 == 1 {
			v = bits.ReverseBytes16(v) // a piece that starts at an odd byte (RFC 1071 §2(B))
		}
		total += uint64(v)
		pos += len(b)
		off = 0
	}
	return csum.Fold(total), WCSuccess
}
