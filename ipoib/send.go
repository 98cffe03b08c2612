package ipoib

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"time"

	"github.com/pibgw/pibgw/hca"
)

// The transmit path: IP packets from the tun.Device in batches, one PostSend of many
// WRs per batch, the 4-byte header written into the read buffers' head-room.

// ctrlWRID marks the WR ID of a control-slot send; tx-loop sends carry their batch index.
const ctrlWRID = 1 << 63

// sender owns the send CQ: whoever needs buffers back reaps it under mu; a goroutine
// woken by the completion channel reaps it for those who wait (only armed while somebody
// waits, so the steady state makes no wake-ups: UD sends complete at post time).
type sender struct {
	i       *Interface
	mu      sync.Mutex
	cond    sync.Cond
	mrs     []*hca.MR // one per ctrlChunk slots made
	lkeys   []uint32  // slot k's MR's L_Key
	slots   [][]byte  // nil until made
	sgl     [][1]hca.SGE
	wrs     [][1]hca.SendWR
	idle    []int
	txOut   int
	waiters int
	closed  bool
	wcs     [64]hca.WC
}

func (s *sender) init(i *Interface, n int) error {
	s.i = i
	s.cond.L = &s.mu
	// The slots are made ctrlChunk at a time as sends need them (addSlotsLocked): an
	// idle interface sends a few ARP and ND packets, and 64 slots of 4 KiB for every
	// P_Key child were a quarter of what it cost (issue 43 item 7).
	s.slots = make([][]byte, n)
	s.lkeys = make([]uint32, n)
	s.sgl = make([][1]hca.SGE, n)
	s.wrs = make([][1]hca.SendWR, n)
	s.idle = make([]int, 0, n)
	i.wg.Add(1)
	go s.watch()
	return nil
}

// ctrlChunk is how many control slots are made at once.
const ctrlChunk = 8

// addSlotsLocked makes the next ctrlChunk slots, idle; false when all are made (or the
// memory cannot be registered).
func (s *sender) addSlotsLocked() bool {
	made := len(s.mrs) * ctrlChunk
	if made >= len(s.slots) {
		return false
	}
	n := min(ctrlChunk, len(s.slots)-made)
	mem := make([]byte, n*slotLen)
	mr, err := s.i.pd.RegMR(mem, hca.AccessLocalWrite)
	if err != nil {
		return false
	}
	s.mrs = append(s.mrs, mr)
	for j := range n {
		k := made + j
		s.slots[k] = mem[j*slotLen : (j+1)*slotLen : (j+1)*slotLen]
		s.lkeys[k] = mr.LKey()
		s.idle = append(s.idle, k)
	}
	return true
}

func (s *sender) wake() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// watch reaps the send CQ when its channel fires.
func (s *sender) watch() {
	defer s.i.wg.Done()
	for {
		select {
		case <-s.i.ctx.Done():
			return
		case cq := <-s.i.sendCh.Events():
			cq.AckEvents(1)
			s.mu.Lock()
			s.reapLocked()
			if s.waiters > 0 {
				_ = cq.ReqNotify(false)
				s.reapLocked()
			}
			s.cond.Broadcast()
			s.mu.Unlock()
		}
	}
}

// reapLocked polls the send CQ and returns the buffers of completed WRs.
func (s *sender) reapLocked() {
	i := s.i
	recover := false
	for {
		n := i.scq.Poll(s.wcs[:])
		for k := 0; k < n; k++ {
			wc := &s.wcs[k]
			if wc.WRID&ctrlWRID != 0 {
				s.idle = append(s.idle, int(wc.WRID&^ctrlWRID))
			} else {
				s.txOut--
			}
			switch wc.Status {
			case hca.WCSuccess:
				i.cnt.inc(cTxPackets)
				i.cnt.add(cTxBytes, uint64(wc.ByteLen)-HeaderLen)
			case hca.WCWRFlushErr:
				i.cnt.inc(cDropSendError)
			default:
				i.cnt.inc(cDropSendError)
				recover = true
			}
		}
		if n < len(s.wcs) {
			break
		}
	}
	if recover && i.qp.State() == hca.QPStateSQE {
		// IBA 10.3.1: a UD send error leaves the QP in SQE; it resumes with SQE→RTS.
		a := hca.QPAttr{QPState: hca.QPStateRTS}
		_ = i.qp.Modify(&a, hca.QPAttrState)
	}
}

// waitLocked blocks until the send CQ has news; false once the interface is closing.
func (s *sender) waitLocked() bool {
	if s.closed {
		return false
	}
	_ = s.i.scq.ReqNotify(false)
	before := s.txOut + len(s.idle)
	s.reapLocked()
	if s.txOut+len(s.idle) != before {
		return true
	}
	s.waiters++
	s.cond.Wait()
	s.waiters--
	return !s.closed
}

func (s *sender) releaseSlot(k int) {
	s.mu.Lock()
	s.idle = append(s.idle, k)
	s.mu.Unlock()
}

// send posts one control packet (etype + payload) from a control slot.
func (s *sender) send(ah *hca.AH, qpn, qkey uint32, etype uint16, payload []byte) bool {
	i := s.i
	if len(payload)+HeaderLen > slotLen {
		i.cnt.inc(cDropTooBig)
		return false
	}
	s.mu.Lock()
	for len(s.idle) == 0 {
		s.reapLocked()
		if len(s.idle) > 0 || s.addSlotsLocked() {
			break
		}
		if len(s.mrs) == 0 { // none could be made: nothing will come back to wait for
			s.mu.Unlock()
			i.cnt.inc(cDropSendError)
			return false
		}
		if !s.waitLocked() {
			s.mu.Unlock()
			return false
		}
	}
	k := s.idle[len(s.idle)-1]
	s.idle = s.idle[:len(s.idle)-1]
	s.mu.Unlock()
	b := s.slots[k]
	binary.BigEndian.PutUint32(b, uint32(etype)<<16)
	n := HeaderLen + copy(b[HeaderLen:], payload)
	s.sgl[k][0] = hca.SGE{Addr: hca.BufAddr(b), Length: uint32(n), LKey: s.lkeys[k]}
	s.wrs[k][0] = hca.SendWR{
		WRID: ctrlWRID | uint64(k), SGL: s.sgl[k][:], Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		AH: ah, RemoteQPN: qpn, RemoteQKey: qkey,
	}
	if _, err := i.qp.PostSend(s.wrs[k][:]); err != nil {
		i.cnt.inc(cDropSendError)
		s.releaseSlot(k)
		return false
	}
	return true
}

func (s *sender) free() {
	for _, mr := range s.mrs {
		_ = mr.Dereg()
	}
	s.mrs = nil
}

// postTx posts the batch and waits until its buffers are free again.
func (i *Interface) postTx(wrs []hca.SendWR) {
	s := &i.txp.snd
	s.mu.Lock()
	s.txOut += len(wrs)
	s.mu.Unlock()
	for len(wrs) > 0 {
		n, err := i.qp.PostSend(wrs)
		if err == nil {
			break
		}
		// wrs[n] was refused and nothing after it posted.
		i.cnt.inc(cDropSendError)
		s.mu.Lock()
		s.txOut--
		s.mu.Unlock()
		wrs = wrs[n+1:]
	}
	s.mu.Lock()
	for s.txOut > 0 {
		s.reapLocked()
		if s.txOut <= 0 || !s.waitLocked() {
			break
		}
	}
	s.mu.Unlock()
}

// dest classifies one outgoing IP packet: where it goes (AH, QPN) and its EtherType, or
// !ok when it was queued (for a neighbour or a group), consumed (a membership report) or
// dropped (counted). fromStack marks packets the IP stack sent, as opposed to ND
// messages pibgw builds itself; partial marks a CHECKSUM_PARTIAL packet.
func (i *Interface) dest(pkt []byte, ls *linkState, now time.Time, fromStack, partial bool) (ah *hca.AH, qpn uint32, etype uint16, ok bool) {
	if len(pkt) < 20 {
		i.cnt.inc(cDropMalformed)
		return nil, 0, 0, false
	}
	if len(pkt)+HeaderLen > ls.ibMTU {
		if fromStack && (pkt[0]>>4 == 4 || pkt[0]>>4 == 6) {
			i.tooBig(pkt, ls.ibMTU-HeaderLen)
		} else {
			i.cnt.inc(cDropTooBig)
		}
		return nil, 0, 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		etype = EtherTypeIPv4
		if fromStack && pkt[9] == protoIGMP {
			i.membershipReport(pkt)
			return nil, 0, 0, false
		}
		d := [4]byte(pkt[16:20])
		switch {
		case d[0]&0xF0 == 0xE0: // 224.0.0.0/4
			ah, ok = i.groupAHFor(MGIDForIPv4(netip.AddrFrom4(d), i.pkey, scopeLinkLocal), netip.AddrFrom4(d), etype, pkt, partial)
			if ok {
				i.cnt.inc(cTxMulticast)
			}
			return ah, MulticastQPN, etype, ok
		case i.addrs.Load().isBroadcast(d):
			i.cnt.inc(cTxMulticast)
			return ls.bcastAH, MulticastQPN, etype, true
		}
		ah, qpn, ok = i.neighborAH(i.nextHop(netip.AddrFrom4(d)), now, etype, pkt, partial)
		return ah, qpn, etype, ok
	case 6:
		if len(pkt) < ipv6HeaderLen {
			i.cnt.inc(cDropMalformed)
			return nil, 0, 0, false
		}
		etype = EtherTypeIPv6
		if fromStack && i.stackICMPv6(pkt) {
			return nil, 0, 0, false
		}
		d := netip.AddrFrom16([16]byte(pkt[24:40]))
		if pkt[24] == 0xFF {
			ah, ok = i.groupAHFor(MGIDForIPv6(d, i.pkey, scopeLinkLocal), d, etype, pkt, partial)
			if ok {
				i.cnt.inc(cTxMulticast)
			}
			return ah, MulticastQPN, etype, ok
		}
		ah, qpn, ok = i.neighborAH(i.nextHop(d), now, etype, pkt, partial)
		return ah, qpn, etype, ok
	}
	i.cnt.inc(cDropMalformed)
	return nil, 0, 0, false
}

// xmit sends an IP packet pibgw built (ND) or one that waited: copied into a control
// slot, or queued again if its destination is still unresolved.
func (i *Interface) xmit(pkt []byte) {
	ls := i.link.Load()
	if !ls.up {
		i.cnt.inc(cDropDown)
		return
	}
	ah, qpn, etype, ok := i.dest(pkt, ls, i.clk.Now(), false, false)
	if ok {
		i.txp.snd.send(ah, qpn, ls.qkey, etype, pkt)
	}
}

// sendARP sends an ARP packet to ah/qpn.
func (i *Interface) sendARP(ah *hca.AH, qpn uint32, arp []byte) {
	ls := i.link.Load()
	if !ls.up || ah == nil {
		return
	}
	if i.txp.snd.send(ah, qpn, ls.qkey, EtherTypeARP, arp) {
		i.cnt.inc(cTxARP)
	}
}
