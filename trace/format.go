package trace

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pibgw/pibgw/wire"
)

// Record is an event as `pibgw trace` prints it: who recorded it, the event's fields by
// name, and the line a person reads.
type Record struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Owner   string    `json:"owner"` // "daemon" or the attached process's pid
	PID     int       `json:"pid"`
	Kind    string    `json:"kind"`
	Dir     string    `json:"dir,omitempty"`
	Dev     string    `json:"dev,omitempty"`
	Port    uint8     `json:"port,omitempty"`
	QPN     uint32    `json:"qpn,omitempty"`
	What    string    `json:"what,omitempty"`
	Aux     string    `json:"aux,omitempty"`
	WRID    uint64    `json:"wr_id,omitempty"`
	Len     uint64    `json:"len,omitempty"`
	PSN     uint32    `json:"psn,omitempty"`
	Headers *Headers  `json:"headers,omitempty"`
	// Lost is set on a record that stands for events overwritten before they were read.
	Lost uint64 `json:"lost,omitempty"`
	Text string `json:"text"`
}

// ToRecord converts an event for output.
func (ev *Event) ToRecord(owner string, pid int) Record {
	rec := Record{Seq: ev.Seq, Time: time.Unix(0, ev.Nanos), Owner: owner, PID: pid, Kind: ev.Kind.String(),
		Dir: ev.Dir.String(), Dev: ev.Dev, Port: ev.Port, QPN: ev.QPN, What: ev.What, Aux: ev.Aux}
	switch ev.Kind {
	case KindAPI, KindCompletion:
		rec.WRID, rec.Len = ev.A, ev.B
	case KindRetry:
		rec.PSN = uint32(ev.A)
	case KindPacket, KindDrop, KindCM:
		h := ev.Pkt
		rec.Headers = &h
	}
	rec.Text = ev.text()
	return rec
}

// LostRecord stands for n events a reader lost.
func LostRecord(owner string, pid int, n uint64) Record {
	return Record{Time: time.Now(), Owner: owner, PID: pid, Kind: "lost", Lost: n,
		Text: fmt.Sprintf("%d events overwritten before they were read", n)}
}

// text is the event's one-line description (without time and owner).
func (ev *Event) text() string {
	var b strings.Builder
	b.WriteString(ev.Kind.String())
	if ev.Dir != DirNone {
		b.WriteString(" " + ev.Dir.String())
	}
	if ev.Dev != "" {
		b.WriteString(" " + ev.Dev)
		if ev.Port != 0 {
			fmt.Fprintf(&b, "/%d", ev.Port)
		}
	}
	if ev.QPN != 0 || ev.Kind == KindCompletion {
		fmt.Fprintf(&b, " qp %#x", ev.QPN)
	}
	switch ev.Kind {
	case KindAPI:
		b.WriteString(" " + ev.What)
		if ev.Aux != "" {
			b.WriteString(" " + ev.Aux)
		}
		switch {
		case strings.HasPrefix(ev.What, "post_"):
			fmt.Fprintf(&b, " wr_id %d len %d", ev.A, ev.B)
		case ev.What != "modify_qp" && ev.QPN == 0:
			fmt.Fprintf(&b, " id %#x", ev.A)
		}
	case KindCompletion:
		fmt.Fprintf(&b, " %s %s wr_id %d len %d", ev.What, strings.TrimPrefix(ev.Aux, "IBV_WC_"), ev.A, ev.B)
	case KindRetry:
		fmt.Fprintf(&b, " %s from psn %#x, %d retries left", ev.What, ev.A, ev.B)
	case KindEvent:
		b.WriteString(" " + ev.What)
	case KindMark:
		fmt.Fprintf(&b, " %q", ev.What)
	case KindDrop:
		b.WriteString(" " + ev.What + ":")
		ev.Pkt.describe(&b)
	case KindPacket, KindCM:
		ev.Pkt.describe(&b)
	}
	return b.String()
}

var cmNames = map[uint16]string{
	wire.AttrCMReq: "REQ", wire.AttrCMMRA: "MRA", wire.AttrCMRej: "REJ", wire.AttrCMRep: "REP",
	wire.AttrCMRTU: "RTU", wire.AttrCMDReq: "DREQ", wire.AttrCMDRep: "DREP", wire.AttrCMSIDRReq: "SIDR_REQ",
	wire.AttrCMSIDRRep: "SIDR_REP", wire.AttrCMLAP: "LAP", wire.AttrCMAPR: "APR",
}

// describe writes the headers as Wireshark's summary line would show them.
func (h *Headers) describe(b *strings.Builder) {
	fmt.Fprintf(b, " LRH %d→%d sl %d vl %d", h.SLID, h.DLID, h.SL, h.VL)
	if h.GRH {
		b.WriteString(" GRH")
	}
	if !h.HasBTH {
		fmt.Fprintf(b, " len %d", h.Len)
		if !h.Valid {
			b.WriteString(" malformed")
		}
		return
	}
	fmt.Fprintf(b, " BTH %s dqp %#x psn %#x pkey %#04x", h.Opcode, h.DQPN, h.PSN, h.PKey)
	if h.AckReq {
		b.WriteString(" A")
	}
	if h.SE {
		b.WriteString(" SE")
	}
	if h.HasDETH {
		fmt.Fprintf(b, " DETH qkey %#x sqp %#x", h.QKey, h.SrcQP)
	}
	if h.HasXRC {
		fmt.Fprintf(b, " XRCETH srq %#x", h.XRCSRQ)
	}
	if h.HasRETH {
		fmt.Fprintf(b, " RETH va %#x rkey %#x len %d", h.VA, h.RKey, h.DMALen)
	}
	if h.HasAETH {
		b.WriteString(" AETH " + syndromeString(h.Syndrome))
		fmt.Fprintf(b, " msn %d", h.MSN)
	}
	if h.HasImm {
		fmt.Fprintf(b, " imm %#x", h.Imm)
	}
	if h.HasMAD {
		if h.IsCM() {
			name := cmNames[h.MADAttr]
			if name == "" {
				name = fmt.Sprintf("attr %#04x", h.MADAttr)
			}
			fmt.Fprintf(b, " CM %s tid %#x", name, h.MADTID)
		} else {
			fmt.Fprintf(b, " MAD class %#02x method %#02x attr %#04x tid %#x", h.MADClass, h.MADMethod, h.MADAttr, h.MADTID)
		}
	}
	fmt.Fprintf(b, " payload %d", h.PayLen)
	if !h.Valid {
		b.WriteString(" malformed")
	}
}

func syndromeString(s uint8) string {
	v := s & wire.SyndromeValMask
	switch s & wire.SyndromeKindMask {
	case wire.SyndromeACK:
		return fmt.Sprintf("ACK credit %d", v)
	case wire.SyndromeRNRNAK:
		return fmt.Sprintf("RNR_NAK timer %d", v)
	case wire.SyndromeNAK:
		switch v {
		case wire.NAKPSNSequenceError:
			return "NAK PSN_sequence_error"
		case wire.NAKInvalidRequest:
			return "NAK invalid_request"
		case wire.NAKRemoteAccessError:
			return "NAK remote_access_error"
		case wire.NAKRemoteOpError:
			return "NAK remote_operational_error"
		case wire.NAKInvalidRDRequest:
			return "NAK invalid_RD_request"
		}
		return fmt.Sprintf("NAK code %d", v)
	}
	return fmt.Sprintf("syndrome %#02x", s)
}

// Filter selects events: by QP (the event's local QP, or a packet's destination or
// DETH source QP), by LID (a packet's source or destination) and by kind. The zero value
// selects everything. Bookmarks always pass.
type Filter struct {
	QPN   uint32
	LID   uint16
	Kinds []Kind
}

// Match reports whether ev passes f.
func (f *Filter) Match(ev *Event) bool {
	if ev.Kind == KindMark {
		return true
	}
	if len(f.Kinds) > 0 && !slices.Contains(f.Kinds, ev.Kind) {
		return false
	}
	if f.QPN != 0 && ev.QPN != f.QPN && !(ev.Pkt.HasBTH && ev.Pkt.DQPN == f.QPN) && !(ev.Pkt.HasDETH && ev.Pkt.SrcQP == f.QPN) {
		return false
	}
	if f.LID != 0 && (ev.Pkt.Len == 0 || (ev.Pkt.SLID != f.LID && ev.Pkt.DLID != f.LID)) {
		return false
	}
	return true
}

// ParseKinds reads a comma-separated list of kinds ("packet,drop").
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, ok := ParseKind(part)
		if !ok {
			return nil, fmt.Errorf("trace kind %q: want %s", part, strings.Join(KindNames(), ", "))
		}
		out = append(out, k)
	}
	return out, nil
}
