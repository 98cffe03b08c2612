package hca

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Object kinds, as `pibgw inspect` names them (pib's debugfs tables: ucontext, pd, mr,
// srq, ah, cq, qp).
const (
	KindContext = "context"
	KindPD      = "pd"
	KindMR      = "mr"
	KindCQ      = "cq"
	KindQP      = "qp"
	KindSRQ     = "srq"
	KindAH      = "ah"
	KindMW      = "mw"   // memory windows (mw.go)
	KindXRCD    = "xrcd" // XRC domains (xrc.go)
)

// Kinds lists the object kinds in the order inspection prints them.
var Kinds = []string{KindContext, KindPD, KindMR, KindCQ, KindQP, KindSRQ, KindAH, KindMW, KindXRCD}

// ObjectInfo is a snapshot of one verbs object for inspection. ID is the QPN for QPs and
// the device-wide object id otherwise; Context and PD are the ids of the objects this one
// belongs to. Owner is filled by whoever collects snapshots from several processes.
type ObjectInfo struct {
	Kind    string    `json:"kind"`
	Device  string    `json:"device"`
	ID      uint32    `json:"id"`
	Owner   string    `json:"owner,omitempty"` // "daemon" or the attached process's pid
	PID     int       `json:"pid,omitempty"`
	Created time.Time `json:"created"`
	Context uint32    `json:"context,omitempty"`
	PD      uint32    `json:"pd,omitempty"`

	Ctx *ContextInfo `json:"ctx,omitempty"`
	MR  *MRInfo      `json:"mr,omitempty"`
	CQ  *CQInfo      `json:"cq,omitempty"`
	QP  *QPInfo      `json:"qp,omitempty"`
	SRQ *SRQInfo     `json:"srq,omitempty"`
	AH  *AHInfo      `json:"ah,omitempty"`
	MW  *MWInfo      `json:"mw,omitempty"`
}

// MWInfo is a memory window: its type, R_Key and, while bound, what it grants access to.
type MWInfo struct {
	Type   uint8  `json:"type"` // 1 or 2
	RKey   uint32 `json:"rkey"`
	Bound  bool   `json:"bound"`
	Addr   uint64 `json:"addr,omitempty"`
	Length uint64 `json:"length,omitempty"`
	Access string `json:"access,omitempty"`
	MR     uint32 `json:"mr,omitempty"`  // the region's L_Key
	QPN    uint32 `json:"qpn,omitempty"` // type 2: the QP it is bound through
}

// ContextInfo is a context's async event queue.
type ContextInfo struct {
	EventsQueued int    `json:"events_queued"`
	EventsLost   uint64 `json:"events_lost"`
}

// MRInfo is a memory region (pib: start, length, L_Key, R_Key).
type MRInfo struct {
	Addr   uint64 `json:"addr"`
	Length int    `json:"length"`
	LKey   uint32 `json:"lkey"`
	RKey   uint32 `json:"rkey"`
	Access string `json:"access"`
}

// CQInfo is a completion queue (pib: state, size, notify).
type CQInfo struct {
	CQE           int    `json:"cqe"`
	Fill          int    `json:"fill"`
	Channel       bool   `json:"channel"`
	Armed         bool   `json:"armed"`
	SolicitedOnly bool   `json:"solicited_only,omitempty"`
	Error         bool   `json:"error"` // overrun or injected (IBV_EVENT_CQ_ERR raised)
	Lost          uint64 `json:"lost"`
	Events        uint32 `json:"events"` // delivered to the channel
	Acked         uint32 `json:"acked"`
	Refs          int    `json:"refs"` // QPs using it, once as send and once as receive CQ
}

// QPInfo is a queue pair (pib: type, state, CQs, queue depths; and the attributes).
type QPInfo struct {
	Type            string         `json:"type"`
	State           string         `json:"state"`
	Port            uint8          `json:"port,omitempty"`
	PKeyIndex       uint16         `json:"pkey_index"`
	QKey            uint32         `json:"qkey,omitempty"`
	SendCQ          uint32         `json:"send_cq"`
	RecvCQ          uint32         `json:"recv_cq"`
	SRQ             uint32         `json:"srq,omitempty"`
	MaxSendWR       uint32         `json:"max_send_wr"`
	MaxRecvWR       uint32         `json:"max_recv_wr"`
	MaxSendSGE      uint32         `json:"max_send_sge"`
	MaxRecvSGE      uint32         `json:"max_recv_sge"`
	MaxInline       uint32         `json:"max_inline_data"`
	SQSigAll        bool           `json:"sq_sig_all,omitempty"`
	RecvPosted      int            `json:"recv_posted"` // receive WRs outstanding (0 with an SRQ)
	SQPSN           uint32         `json:"sq_psn"`
	RQPSN           uint32         `json:"rq_psn"`
	DestQPN         uint32         `json:"dest_qp_num,omitempty"`
	DLID            uint16         `json:"dlid,omitempty"`
	PathMTU         int            `json:"path_mtu,omitempty"`
	Timeout         uint8          `json:"timeout"`
	RetryCnt        uint8          `json:"retry_cnt"`
	RNRRetry        uint8          `json:"rnr_retry"`
	MinRNRTimer     uint8          `json:"min_rnr_timer"`
	MaxRdAtomic     uint8          `json:"max_rd_atomic"`
	MaxDestRdAtomic uint8          `json:"max_dest_rd_atomic"`
	Access          string         `json:"access"`
	Transport       *TransportInfo `json:"transport,omitempty"`
}

// TransportInfo is a connected QP's protocol state (RC/UC), from its transport.
type TransportInfo struct {
	NextPSN       uint32 `json:"next_psn"`     // requester: PSN of the next new request
	AckedPSN      uint32 `json:"acked_psn"`    // requester: last PSN acknowledged
	ExpectedPSN   uint32 `json:"expected_psn"` // responder
	SendQueued    int    `json:"send_queued"`  // send WRs posted and not yet completed
	RetryLeft     uint8  `json:"retry_left"`
	RNRRetryLeft  uint8  `json:"rnr_retry_left"`
	Timeouts      uint64 `json:"timeouts"`
	SeqNAKs       uint64 `json:"seq_naks"`
	RNRNAKs       uint64 `json:"rnr_naks"`
	Retransmitted uint64 `json:"retransmitted"`
	Duplicates    uint64 `json:"duplicates"`
	Ghosts        uint64 `json:"ghosts"` // ACKs/NAKs for PSNs the QP never sent (psn_mismatch)
	LastFatal     string `json:"last_fatal,omitempty"`
}

// QPInspector is implemented by transports that report a QP's protocol state.
type QPInspector interface {
	InspectQP(qp *QP) *TransportInfo
}

// SRQInfo is a shared receive queue.
type SRQInfo struct {
	MaxWR  uint32 `json:"max_wr"`
	MaxSGE uint32 `json:"max_sge"`
	Limit  uint32 `json:"srq_limit"`
	Posted int    `json:"posted"`
	QPs    int32  `json:"qps"`
}

// AHInfo is an address handle's address vector.
type AHInfo struct {
	Port     uint8  `json:"port"`
	DLID     uint16 `json:"dlid"`
	SL       uint8  `json:"sl"`
	IsGlobal bool   `json:"is_global"`
	DGID     string `json:"dgid,omitempty"`
}

// Inspect snapshots the device's objects of the given kind ("" for all), ordered by kind
// and id.
func (d *Device) Inspect(kind string) ([]ObjectInfo, error) {
	if kind != "" && !slices.Contains(Kinds, kind) {
		return nil, fmt.Errorf("unknown object kind %q (want one of %s)", kind, strings.Join(Kinds, ", "))
	}
	out := []ObjectInfo{}
	for obj, created := range d.objects() {
		oi := ObjectInfo{Device: d.Name(), Created: created}
		switch o := obj.(type) {
		case *Context:
			oi.Kind, oi.ID = KindContext, o.id
			oi.Ctx = &ContextInfo{EventsQueued: len(o.events), EventsLost: o.lost.Load()}
		case *PD:
			oi.Kind, oi.ID, oi.Context = KindPD, o.id, o.ctx.id
		case *MR:
			oi.Kind, oi.ID, oi.Context, oi.PD = KindMR, o.key, o.pd.ctx.id, o.pd.id
			oi.MR = &MRInfo{Addr: o.addr, Length: len(o.buf), LKey: o.key, RKey: o.key, Access: AccessString(o.access)}
		case *CQ:
			oi.Kind, oi.ID, oi.Context = KindCQ, o.id, o.ctx.id
			oi.CQ = o.inspect()
		case *QP:
			oi.Kind, oi.ID, oi.Context, oi.PD = KindQP, o.num, o.pd.ctx.id, o.pd.id
			oi.QP = o.inspect()
		case *SRQ:
			oi.Kind, oi.ID, oi.Context, oi.PD = KindSRQ, o.id, o.pd.ctx.id, o.pd.id
			a := o.Query()
			d.mu.RLock()
			refs := o.refs
			d.mu.RUnlock()
			oi.SRQ = &SRQInfo{MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, Limit: a.SRQLimit, Posted: o.Len(), QPs: refs}
		case *MW:
			oi.Kind, oi.ID, oi.Context, oi.PD = KindMW, o.idx, o.pd.ctx.id, o.pd.id
			oi.MW = o.inspect()
		case *XRCD:
			oi.Kind, oi.ID, oi.Context = KindXRCD, o.id, o.ctx.id
		case *AH:
			oi.Kind, oi.ID, oi.Context, oi.PD = KindAH, o.id, o.pd.ctx.id, o.pd.id
			a := o.attr
			oi.AH = &AHInfo{Port: a.PortNum, DLID: a.DLID, SL: a.SL, IsGlobal: a.IsGlobal}
			if a.IsGlobal {
				oi.AH.DGID = netip.AddrFrom16(a.GRH.DGID).String()
			}
		default:
			continue
		}
		if kind == "" || oi.Kind == kind {
			out = append(out, oi)
		}
	}
	SortObjects(out)
	return out, nil
}

// SortObjects orders snapshots by kind (as Kinds lists them), device, owner and id.
func SortObjects(objs []ObjectInfo) {
	slices.SortFunc(objs, func(a, b ObjectInfo) int {
		return cmp.Or(
			cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)),
			cmp.Compare(a.Device, b.Device),
			cmp.Compare(a.PID, b.PID),
			cmp.Compare(a.ID, b.ID))
	})
}

func (cq *CQ) inspect() *CQInfo {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return &CQInfo{CQE: len(cq.ring), Fill: cq.n, Channel: cq.ch != nil, Armed: cq.armed,
		SolicitedOnly: cq.armed && cq.solOnly, Error: cq.overflowed, Lost: cq.lost,
		Events: cq.events, Acked: cq.acked, Refs: int(cq.refs.Load())}
}

// cqID is a CQ's id, 0 for none (the XRC QPs have no receive CQ, XRC_RECV no send CQ).
func cqID(cq *CQ) uint32 {
	if cq == nil {
		return 0
	}
	return cq.id
}

func (qp *QP) inspect() *QPInfo {
	a := qp.Attr()
	qi := &QPInfo{
		Type: qp.typ.String(), State: a.QPState.String(), Port: a.PortNum, PKeyIndex: a.PKeyIndex,
		QKey: a.QKey, SendCQ: cqID(qp.sendCQ), RecvCQ: cqID(qp.recvCQ),
		MaxSendWR: qp.cap.MaxSendWR, MaxRecvWR: qp.cap.MaxRecvWR, MaxSendSGE: qp.cap.MaxSendSGE,
		MaxRecvSGE: qp.cap.MaxRecvSGE, MaxInline: qp.cap.MaxInlineData, SQSigAll: qp.sigAll,
		RecvPosted: qp.rqLen(), SQPSN: a.SQPSN, RQPSN: a.RQPSN, DestQPN: a.DestQPNum,
		DLID: a.AHAttr.DLID, PathMTU: a.PathMTU.Bytes(), Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, MinRNRTimer: a.MinRNRTimer, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, Access: AccessString(a.QPAccessFlags),
	}
	if qp.srq != nil {
		qi.SRQ = qp.srq.id
	}
	if in, ok := qp.tr.(QPInspector); ok {
		qi.Transport = in.InspectQP(qp)
	}
	return qi
}

// AccessString names access flags as ibv_access_flags does, "|"-separated ("-" for none).
func AccessString(a AccessFlags) string {
	names := []struct {
		f AccessFlags
		n string
	}{
		{AccessLocalWrite, "LOCAL_WRITE"}, {AccessRemoteWrite, "REMOTE_WRITE"},
		{AccessRemoteRead, "REMOTE_READ"}, {AccessRemoteAtomic, "REMOTE_ATOMIC"},
		{AccessMWBind, "MW_BIND"}, {AccessZeroBased, "ZERO_BASED"},
	}
	var parts []string
	for _, x := range names {
		if a&x.f != 0 {
			parts = append(parts, x.n)
			a &^= x.f
		}
	}
	if a != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(a)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "|")
}

// LookupCQ finds a CQ of the device by its object id.
func (d *Device) LookupCQ(id uint32) *CQ {
	for obj := range d.objects() {
		if cq, ok := obj.(*CQ); ok && cq.id == id {
			return cq
		}
	}
	return nil
}

// LookupSRQ finds an SRQ of the device by its object id.
func (d *Device) LookupSRQ(id uint32) *SRQ {
	for obj := range d.objects() {
		if s, ok := obj.(*SRQ); ok && s.id == id {
			return s
		}
	}
	return nil
}

// LookupLocalQP finds a QP this process runs (QP0 and QP1 included, on the first port
// that has them when qpn is 0 or 1): not the device's entries that forward to attached
// processes.
func (d *Device) LookupLocalQP(qpn uint32) *QP {
	for obj := range d.objects() {
		if qp, ok := obj.(*QP); ok && qp.num == qpn {
			return qp
		}
	}
	return nil
}
