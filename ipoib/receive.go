package ipoib

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// The receive path: the receive CQ's completion handler runs on the goroutine that
// delivered a batch of packets (in process, the sender's: like the kernel's comp_handler
// and NAPI, no goroutine hand-off per burst) and passes the whole burst on; sweep is the
// safety net, on a timer, for whatever the handler could not take. Either way: skip the
// GRH area, strip the header, write the IP packets of a batch to the tun.Device in one
// call, hand ARP and ND to the control receiver (ctrlrx.go), re-post the buffers.

// onCompletions is the receive CQ's completion handler.
func (i *Interface) onCompletions(*hca.CQ) { i.tryDrain() }

// tryDrain drains the receive CQ unless another caller is at it. Whoever holds the lock
// looks again after letting go, so completions that arrived while a caller was turned
// away are not left waiting for the next sweep.
func (i *Interface) tryDrain() {
	for i.rcq.Pending() > 0 {
		if !i.rxp.mu.TryLock() {
			return
		}
		i.drainRx()
		i.rxp.mu.Unlock()
	}
}

// drainRx processes completions until the CQ is empty; rxMu is held.
func (i *Interface) drainRx() {
	r := &i.rxp.ring
	i.rxp.drains.Add(1)
	for {
		n := i.rcq.Poll(r.wcs)
		if n == 0 {
			return
		}
		i.receiveBatch(r.wcs[:n])
	}
}

// sweep is the safety net: every packet delivered to the QP is followed by the
// completion handler, which drains the CQ; what can still be left (completions pushed
// outside a delivery, such as flushes when the QP errors out) is swept up here, on a
// timer of the interface's clock that re-arms itself until the interface closes. The CQ
// is deliberately not armed: an armed CQ would wake a goroutine for every burst and race
// the handler for the lock, adding a goroutine hand-off to every packet's latency.
func (i *Interface) sweep() {
	i.rxp.sweepMu.Lock()
	defer i.rxp.sweepMu.Unlock()
	if i.ctx.Err() != nil {
		return
	}
	// Only completions nobody drained for a whole sweep are stragglers. Taking the lock
	// while the handler keeps up with a stream would make the sender's handler skip its
	// turns while the sweep runs — and if the sweep is then descheduled with the lock
	// held, the receive queue runs dry.
	d := i.rxp.drains.Load()
	if i.rcq.Pending() > 0 && d == i.rxp.sweepDrains {
		i.tryDrain()
	}
	i.rxp.sweepDrains = d
	i.rxp.sweepTimer.Reset(rxSweep)
}

// startSweep arms the sweep (Run); stopSweep disarms it and waits for a sweep under way
// (Close, after cancelling the context), so none runs once the verbs objects are gone.
func (i *Interface) startSweep() {
	i.rxp.sweepMu.Lock()
	if i.ctx.Err() == nil {
		i.rxp.sweepTimer = i.clk.AfterFunc(rxSweep, i.sweep)
	}
	i.rxp.sweepMu.Unlock()
}

func (i *Interface) stopSweep() {
	i.rxp.sweepMu.Lock()
	if i.rxp.sweepTimer != nil {
		i.rxp.sweepTimer.Stop()
	}
	i.rxp.sweepMu.Unlock()
}

// rxSweep is how often sweep looks for completions the handler did not take. Those are
// rare (flushes), so the net is coarse: each sweep is a timer goroutine and a thread
// wake-up: at 10 ms the two interfaces of a default daemon cost it, idle, 9 ms of CPU
// and ~580 context switches a second (perf stat); at 200 ms, 1 ms and 40.
const rxSweep = 200 * time.Millisecond

func (i *Interface) receiveBatch(wcs []hca.WC) {
	r := &i.rxp.ring
	ls := i.link.Load()
	out := r.out[:0]
	repost := r.repost[:0]
	var rxBytes uint64
	for k := range wcs {
		wc := &wcs[k]
		slot := int(wc.WRID)
		if slot < 0 || slot >= len(r.bufs) {
			continue
		}
		if wc.Status != hca.WCSuccess {
			if wc.Status != hca.WCWRFlushErr {
				i.cnt.inc(cDropRecvError)
				repost = append(repost, r.wrs[slot])
			}
			continue
		}
		repost = append(repost, r.wrs[slot])
		if int(wc.ByteLen) < rxHead || int(wc.ByteLen) > len(r.bufs[slot]) {
			i.cnt.inc(cDropMalformed)
			continue
		}
		if !ls.up {
			i.cnt.inc(cDropDown)
			continue
		}
		buf := r.bufs[slot][:wc.ByteLen]
		multicast := wc.WCFlags&hca.WCGRH != 0 && buf[24] == 0xFF // GRH DGID (bytes 24..39)
		if multicast {
			if wc.SrcQP == i.qpn && wc.SLID == ls.lid {
				i.cnt.inc(cDropOwnMulticast)
				continue
			}
			i.cnt.inc(cRxMulticast)
		}
		etype := binary.BigEndian.Uint16(buf[wireGRHLen:])
		payload := buf[rxHead:]
		switch etype {
		case EtherTypeIPv4:
			if len(payload) < 20 || payload[0]>>4 != 4 {
				i.cnt.inc(cDropMalformed)
				continue
			}
		case EtherTypeIPv6:
			if len(payload) < ipv6HeaderLen || payload[0]>>4 != 6 {
				i.cnt.inc(cDropMalformed)
				continue
			}
			if payload[6] == protoICMPv6 && len(payload) > ipv6HeaderLen && isND(payload[ipv6HeaderLen]) {
				i.cnt.inc(cRxND)
				i.queueControl(etype, payload)
				continue
			}
		case EtherTypeARP:
			if len(payload) >= arpLen && [4]byte(payload[28:32]) == [4]byte(payload[52:56]) {
				i.cnt.inc(cRxAnnounce) // gratuitous: spa = tpa
			} else {
				i.cnt.inc(cRxARP)
			}
			i.queueControl(etype, payload)
			continue
		default:
			i.cnt.inc(cDropUnknownType)
			continue
		}
		if i.txp.off != nil {
			i.groAdd(buf, wc.WCFlags)
			continue
		}
		out = append(out, buf)
		rxBytes += uint64(len(payload))
	}
	i.groFlush()
	if len(out) > 0 {
		i.cnt.inc(cRxBatches)
		written, err := i.dev.Write(out, rxHead)
		if written < 0 {
			written = 0
		}
		if err != nil && written == len(out) {
			written--
		}
		i.cnt.add(cRxPackets, uint64(written))
		if written == len(out) {
			i.cnt.add(cRxBytes, rxBytes)
		} else {
			for _, b := range out[:written] {
				i.cnt.add(cRxBytes, uint64(len(b)-rxHead))
			}
			i.cnt.add(cDropTunWrite, uint64(len(out)-written))
		}
	}
	if len(repost) > 0 {
		if _, err := i.qp.PostRecv(repost); err != nil {
			i.log.Debug("re-posting receive buffers", "err", err)
		}
	}
	if err := r.grow(i.qp, len(wcs)); err != nil {
		i.log.Debug("adding receive buffers", "err", err)
	}
	clear(out)
	r.out = out[:0]
	r.repost = repost[:0]
}

const wireGRHLen = rxHead - HeaderLen

// handleARP answers requests for our addresses and learns senders (RFC 826's merge:
// update a known entry, create one when the request is for us).
func (i *Interface) handleARP(p []byte, ls *linkState) {
	a := arpPacket(p)
	if !a.valid() {
		i.cnt.inc(cDropMalformed)
		return
	}
	sha, spa, tpa := a.sha(), a.spa(), a.tpa()
	if sha == ls.hw {
		i.cnt.inc(cDropOwnMulticast)
		return
	}
	addrs := i.addrs.Load()
	forUs := addrs.has(tpa)
	now := i.clk.Now()
	if spa == tpa && !forUs {
		// A gratuitous ARP (RFC 5227 §3): it changes an entry whose hardware address
		// moved, and confirms nothing (Linux's arp_process leaves such entries STALE).
		i.learnIfMoved(spa, sha, now)
		return
	}
	i.learn(spa, sha, now, forUs)
	if a.op() != arpOpRequest || !forUs {
		// A gratuitous ARP (spa = tpa, RFC 5227 §3) is an announcement, not a request
		// for someone else: it only updated the cache above.
		if !forUs && a.op() == arpOpRequest && spa != tpa {
			i.cnt.inc(cDropNotForUs)
		}
		return
	}
	var b [arpLen]byte
	reply := buildARP(b[:], arpOpReply, ls.hw, tpa, sha, spa)
	if spa.IsUnspecified() {
		// An ARP probe (RFC 5227): answer to the broadcast group.
		i.sendARP(ls.bcastAH, MulticastQPN, reply)
		return
	}
	i.sendToNeighbor(spa, EtherTypeARP, reply)
}

// isOurs reports whether a is one of the interface's addresses.
func (i *Interface) isOurs(a netip.Addr) bool { return i.addrs.Load().has(a) }
