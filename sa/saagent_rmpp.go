package sa

import (
	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// The RMPP sender of GetTable answers (IBA 13.6.3, sender side): the records are cut into
// segments of 200 bytes, each sent as a DATA packet (Active; First on segment 1 with the
// total PayloadLength; Last on the final one with its own). The window starts at one
// segment and grows to the receiver's NewWindowLast with every ACK; an ACK of the last
// segment ends the transfer. Without an ACK the sender goes back to the first
// unacknowledged segment after RMPPTimeout, and aborts after RMPPRetries tries.
//
// Sends happen outside the agent's lock, one pump at a time per transfer: an ACK that
// arrives inside SendMAD (in-process fabric) only moves the window, and the pump already
// running sends what it now allows, so the stack does not grow with the segment count.

type rmppKey struct {
	tid  uint64
	lid  uint16
	qpn  uint32
	attr uint16
}

type rmppSend struct {
	a    *Agent
	key  rmppKey
	to   hca.MADAddr
	grh  hca.GlobalRoute
	hdr  [wire.SAHeaderLen]byte
	data []byte
	segs uint32
	// first and last PayloadLength
	plFirst, plLast uint32

	acked      uint32 // last segment acknowledged
	windowLast uint32
	next       uint32 // next segment to send
	sending    bool
	done       bool
	retries    int
	timer      clock.Timer
	buf        [wire.MADLen]byte
}

// sendTable starts an RMPP transfer of recs as the GetTableResp to m.
func (a *Agent) sendTable(m *hca.MAD, recs []byte, attrOffset uint16) {
	req := wire.SAMAD(m.Data)
	s := &rmppSend{
		a:    a,
		key:  rmppKey{tid: req.MAD().TID(), lid: m.From.SLID, qpn: m.From.QPN, attr: req.MAD().AttrID()},
		data: append([]byte(nil), recs...),
		to: hca.MADAddr{DLID: m.From.SLID, SL: m.From.SL, QPN: m.From.QPN, QKey: m.From.QKey,
			PKeyIndex: m.From.PKeyIndex},
	}
	if s.to.QPN <= 1 {
		s.to.QKey = hca.GSIQKey
	}
	if m.From.GRH != nil {
		s.grh = *m.From.GRH
		s.to.GRH = &s.grh
	}
	copy(s.hdr[:], m.Data[:wire.SAHeaderLen])
	h := wire.SAMAD(s.hdr[:])
	h.MAD().SetMethod(wire.MethodGetTableResp)
	h.MAD().SetStatus(0)
	h.SetAttrOffset(attrOffset)
	s.segs = uint32(wire.RMPPSegments(len(s.data), wire.SADataLen))
	s.plFirst, s.plLast = wire.RMPPPayloadLengths(len(s.data), wire.SADataLen, wire.SAClassHeaderLen)
	s.windowLast, s.next = 1, 1 // IBA 13.6.3.3: the window opens at one segment

	a.mu.Lock()
	if old := a.sends[s.key]; old != nil {
		// A retried request: the new transfer replaces the old one.
		old.done = true
		if old.timer != nil {
			old.timer.Stop()
		}
	}
	a.sends[s.key] = s
	a.mu.Unlock()
	s.pump()
}

// segment writes DATA segment n (1-based) into s.buf. Called with a.mu held.
func (s *rmppSend) segment(n uint32) []byte {
	b := s.buf[:]
	copy(b, s.hdr[:])
	r := wire.RMPPOf(wire.MAD(b))
	clear(r)
	r.SetVersion(wire.RMPPVersion1)
	r.SetType(wire.RMPPTypeData)
	r.SetRespTime(wire.RMPPNoRespTime)
	flags := uint8(wire.RMPPFlagActive)
	var pl uint32
	if n == 1 {
		flags |= wire.RMPPFlagFirst
		pl = s.plFirst
	}
	if n == s.segs {
		flags |= wire.RMPPFlagLast
		pl = s.plLast
	}
	r.SetFlags(flags)
	r.SetSegmentNumber(n)
	r.SetPayloadLength(pl)
	d := wire.SAMAD(b).Data()
	off := int(n-1) * wire.SADataLen
	k := 0
	if off < len(s.data) {
		k = copy(d, s.data[off:])
	}
	clear(d[k:])
	return b
}

// pump sends every segment the window allows; only one pump runs per transfer.
func (s *rmppSend) pump() {
	a := s.a
	a.mu.Lock()
	if s.sending || s.done {
		a.mu.Unlock()
		return
	}
	s.sending = true
	for !s.done && s.next <= s.windowLast && s.next <= s.segs {
		b := s.segment(s.next)
		s.next++
		a.mu.Unlock()
		a.port.SendMAD(s.to, b)
		a.mu.Lock()
	}
	s.sending = false
	if !s.done {
		s.armLocked()
	}
	a.mu.Unlock()
}

func (s *rmppSend) armLocked() {
	if s.timer == nil {
		s.timer = s.a.clk.AfterFunc(s.a.cfg.RMPPTimeout, s.timeout)
		return
	}
	s.timer.Reset(s.a.cfg.RMPPTimeout)
}

// timeout resends from the first unacknowledged segment, or aborts.
func (s *rmppSend) timeout() {
	a := s.a
	a.mu.Lock()
	if s.done || s.sending {
		a.mu.Unlock()
		return
	}
	s.retries++
	if s.retries > a.cfg.RMPPRetries {
		s.finishLocked()
		var cb [wire.MADLen]byte
		b := s.control(cb[:], wire.RMPPTypeAbort, wire.RMPPStatusTooManyRetries)
		a.mu.Unlock()
		a.port.SendMAD(s.to, b)
		return
	}
	s.next = s.acked + 1
	a.mu.Unlock()
	s.pump()
}

// control writes an ABORT or STOP for the transfer into b. Called with a.mu held.
func (s *rmppSend) control(b []byte, t wire.RMPPType, status uint8) []byte {
	copy(b, s.hdr[:])
	r := wire.RMPPOf(wire.MAD(b))
	clear(r)
	r.SetVersion(wire.RMPPVersion1)
	r.SetType(t)
	r.SetRespTime(wire.RMPPNoRespTime)
	r.SetFlags(wire.RMPPFlagActive)
	r.SetStatus(status)
	clear(wire.SAMAD(b).Data())
	return b
}

func (s *rmppSend) finishLocked() {
	s.done = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.a.sends[s.key] == s {
		delete(s.a.sends, s.key)
	}
}

// rmppControl takes an ACK, STOP or ABORT for one of the agent's transfers; it reports
// whether the MAD belonged to one.
func (a *Agent) rmppControl(m *hca.MAD) bool {
	mad := wire.MAD(m.Data)
	key := rmppKey{tid: mad.TID(), lid: m.From.SLID, qpn: m.From.QPN, attr: mad.AttrID()}
	r := wire.RMPPOf(mad)
	a.mu.Lock()
	s := a.sends[key]
	if s == nil {
		a.mu.Unlock()
		return false
	}
	switch r.Type() {
	case wire.RMPPTypeAck:
		seg, nwl := r.SegmentNumber(), r.NewWindowLast()
		if seg > s.segs || nwl < seg {
			// IBA 13.6.3.3: a bad ACK aborts the transfer.
			status := uint8(wire.RMPPStatusSegmentTooBig)
			if nwl < seg {
				status = wire.RMPPStatusWindowTooSmall
			}
			s.finishLocked()
			var cb [wire.MADLen]byte
			b := s.control(cb[:], wire.RMPPTypeAbort, status)
			a.mu.Unlock()
			a.port.SendMAD(s.to, b)
			return true
		}
		if seg > s.acked {
			s.acked = seg
			s.retries = 0
		}
		if nwl > s.windowLast {
			s.windowLast = min(nwl, s.segs)
		}
		if s.acked >= s.segs {
			s.finishLocked()
			a.mu.Unlock()
			return true
		}
		if s.next <= s.acked {
			s.next = s.acked + 1
		}
		a.mu.Unlock()
		s.pump()
		return true
	default: // STOP or ABORT from the receiver
		s.finishLocked()
		a.mu.Unlock()
		return true
	}
}
