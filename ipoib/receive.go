package ipoib

import (
	"encoding/binary"
	"net/netip"
	"runtime"

	"github.com/pibgw/pibgw/hca"
)

// The receive path: poll the receive CQ in batches (blocking on the completion channel
// when it is empty), skip the GRH area, strip the header, write the IP packets of a
// batch to the tun.Device in one call, handle ARP and ND, re-post the buffers.

func (i *Interface) rxLoop() {
	r := &i.rx
	for {
		n := i.rcq.Poll(r.wcs)
		if n == 0 {
			if err := i.rcq.ReqNotify(false); err != nil {
				return
			}
			// A completion that arrived before the CQ was armed raised no event.
			if n = i.rcq.Poll(r.wcs); n == 0 {
				select {
				case cq := <-i.recvCh.Events():
					cq.AckEvents(1)
					continue
				case <-i.ctx.Done():
					return
				}
			}
		}
		// Software interrupt moderation: a sender posts packets in bursts, and a tun
		// write of the whole burst lets the kernel coalesce it (GRO) into a few large
		// segments. Keep polling while the burst is still arriving; stop as soon as a
		// poll finds nothing new, so a lone packet (a ping) is not held back.
		for n < len(r.wcs) {
			runtime.Gosched()
			m := i.rcq.Poll(r.wcs[n:])
			if m == 0 {
				break
			}
			n += m
		}
		i.receiveBatch(r.wcs[:n])
	}
}

func (i *Interface) receiveBatch(wcs []hca.WC) {
	r := &i.rx
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
				i.handleND(payload)
				continue
			}
		case EtherTypeARP:
			i.cnt.inc(cRxARP)
			i.handleARP(payload, ls)
			continue
		default:
			i.cnt.inc(cDropUnknownType)
			continue
		}
		// A TCP segment that will head a coalesced write (the first of its flow in the
		// batch, or the first after ~60 KB of it) is copied into a buffer with room to
		// coalesce into (rxRing.gro); the others go to the stack from their receive
		// slots, which are re-posted after the write.
		if r.needsHead(etype, payload) {
			g := r.gro[len(out)][:len(buf)]
			copy(g[rxHead:], payload)
			buf = g
		}
		out = append(out, buf)
		rxBytes += uint64(len(payload))
	}
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
	clear(out)
	r.out = out[:0]
	r.flows = r.flows[:0]
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
	i.learn(spa, sha, now, forUs)
	if a.op() != arpOpRequest || !forUs {
		if !forUs && a.op() == arpOpRequest {
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
