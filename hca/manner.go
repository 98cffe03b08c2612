package hca

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/pibgw/pibgw/trace"
)

// Manner is pib's "behavior" and "manner" module options (pib's driver/pib_main.c): choices the
// specification leaves to the HCA, made so that programs relying on one HCA's choice
// fail here, and pitfall checks that warn (or, strict, fail the verb) when a program does
// something legal but almost certainly wrong. The zero value warns and makes the usual
// choices.
type Manner struct {
	Pitfalls PitfallMode
	// LowestQPN always hands out the lowest free QP number (pib's behavior flag), so a
	// program that confuses a destroyed QP with its successor meets the bug at once.
	LowestQPN bool
	// RandomErrorFields fills the fields of an error completion that ibv_poll_cq(3)
	// leaves undefined (all but wr_id, status, qp_num, vendor_err) with random values.
	RandomErrorFields bool
}

// PitfallMode says what a pitfall check does.
type PitfallMode uint8

const (
	PitfallsWarn   PitfallMode = iota // log a warning (and count, and trace)
	PitfallsOff                       // check nothing
	PitfallsStrict                    // also fail the verb with EINVAL (checks made on packets still only warn)
)

var pitfallModeNames = [...]string{"warn", "off", "strict"}

func (m PitfallMode) String() string {
	if int(m) < len(pitfallModeNames) {
		return pitfallModeNames[m]
	}
	return fmt.Sprintf("PitfallMode(%d)", uint8(m))
}

// ParsePitfallMode reads "warn", "off" or "strict".
func ParsePitfallMode(s string) (PitfallMode, bool) {
	for i, n := range pitfallModeNames {
		if n == s {
			return PitfallMode(i), true
		}
	}
	return 0, false
}

// Pitfall is one check.
type Pitfall uint8

const (
	PitfallPSNWidth           Pitfall = iota // modify_qp: sq_psn/rq_psn wider than 24 bits
	PitfallResetLosesWRs                     // modify_qp to RESET with WRs outstanding
	PitfallUnsignaledFill                    // max_send_wr unsignaled sends in a row
	PitfallDestroyOutstanding                // destroy_qp with send WRs not completed
	PitfallDestroyUnackedCQ                  // destroy_cq with channel events not acknowledged
	PitfallChannelNotRearmed                 // a CQ overran after its channel event, never re-armed
	PitfallRNRRetryForever                   // rnr_retry 7 and the peer never posts a receive
	PitfallRCTimeoutInfinite                 // RC timeout 0: a lost packet hangs the QP forever
	PitfallPathMTUMismatch                   // the two ends of a connection use different path MTUs
	PitfallUDQKeyHighBit                     // UD remote Q_Key with the high bit set
	PitfallRecvNoLocalWrite                  // post_recv into an MR without LOCAL_WRITE
	PitfallRDMANoRemoteAccess                // RDMA/atomic to an MR (or QP) without the remote access it needs
	PitfallPSNMismatch                       // ACKs/NAKs for PSNs never sent: the peer's rq_psn is not this sq_psn
	NumPitfalls
)

// PitfallInfo names a check and states its rule.
type PitfallInfo struct {
	Name string `json:"name"`
	Rule string `json:"rule"`
}

var pitfalls = [NumPitfalls]PitfallInfo{
	{"psn_width", "a PSN is 24 bits; sq_psn/rq_psn's upper bits are ignored (IBA 9.7.1)"},
	{"reset_loses_wrs", "moving a QP to RESET discards its WRs without completions (IBA 10.3.1); go through ERR to get them flushed"},
	{"unsignaled_fill", "unsignaled send WRs keep their send queue slots until a later signaled WR completes (ibv_post_send(3)); signal one every max_send_wr"},
	{"destroy_outstanding", "destroying a QP with send WRs outstanding loses them and their completions: the data may never have left; wait for their completions (or move the QP to ERR and drain the CQ) first"},
	{"destroy_unacked_cq", "every completion event must be acknowledged (ibv_ack_cq_events) before the CQ is destroyed, or libibverbs' ibv_destroy_cq waits forever"},
	{"channel_not_rearmed", "a completion channel delivers one event per ibv_req_notify_cq: re-arm after each event or completions pile up unseen"},
	{"rnr_retry_forever", "rnr_retry 7 retries forever: a peer that never posts a receive hangs the sender (IBA 9.7.5.2.8)"},
	{"rc_timeout_infinite", "RC timeout 0 means an infinite local ACK timeout: a lost packet is never retransmitted (IBA 9.7.6.1.3)"},
	{"path_mtu_mismatch", "both ends of a connection must use the same path MTU: every packet but a message's last carries exactly one PMTU (IBA 9.7.5.2)"},
	{"ud_qkey_high_bit", "a Q_Key with the high bit set is a controlled Q_Key: an HCA may substitute the QP's own (IBA 10.2.5, C10-15)"},
	{"recv_no_local_write", "receive buffers need IBV_ACCESS_LOCAL_WRITE: the HCA writes into them (completion IBV_WC_LOC_PROT_ERR otherwise)"},
	{"rdma_no_remote_access", "the target of an RDMA WRITE, READ or atomic needs the matching IBV_ACCESS_REMOTE_* on its MR and on its QP (IBA 10.6.3.1, 9.7.5.2)"},
	{"psn_mismatch", "each side's sq_psn must be the other's rq_psn: a QP answered for PSNs it never sent retries and fails with IBV_WC_RETRY_EXC_ERR (IBA 9.7.5.1)"},
}

// Pitfalls lists the checks in order.
func Pitfalls() []PitfallInfo { return pitfalls[:] }

func (p Pitfall) String() string {
	if p < NumPitfalls {
		return pitfalls[p].Name
	}
	return fmt.Sprintf("Pitfall(%d)", uint8(p))
}

// mannerState is a device's Manner, its pitfall counts and where its warnings go.
type mannerState struct {
	m      atomic.Pointer[Manner]
	counts [NumPitfalls]atomic.Uint64
	report atomic.Pointer[PitfallReporter]
}

// PitfallReporter takes a pitfall warning in place of the device's log: the check, the
// object it concerns ("QP 0x48") and what happened.
type PitfallReporter func(p Pitfall, obj, detail string)

// SetPitfallReporter sends the device's pitfall warnings to r instead of its log (nil:
// back to the log). An attached process's devices report them to the daemon, so that a
// library's warnings do not land in its program's own output.
func (d *Device) SetPitfallReporter(r PitfallReporter) {
	if r == nil {
		d.manner.report.Store(nil)
		return
	}
	d.manner.report.Store(&r)
}

// Rule is the check's rule, as the warnings state it.
func (p Pitfall) Rule() string {
	if p < NumPitfalls {
		return pitfalls[p].Rule
	}
	return ""
}

// PitfallByName is the check called name.
func PitfallByName(name string) (Pitfall, bool) {
	for i := range pitfalls {
		if pitfalls[i].Name == name {
			return Pitfall(i), true
		}
	}
	return 0, false
}

// SetManner changes the device's behaviour choices and pitfall checks from now on.
func (d *Device) SetManner(m Manner) { d.manner.m.Store(&m) }

// Manner returns the device's behaviour choices and pitfall mode.
func (d *Device) Manner() Manner {
	if m := d.manner.m.Load(); m != nil {
		return *m
	}
	return Manner{}
}

// PitfallCounts returns how often each check fired on the device, by name.
func (d *Device) PitfallCounts() map[string]uint64 {
	out := make(map[string]uint64, NumPitfalls)
	for i := range d.manner.counts {
		out[pitfalls[i].Name] = d.manner.counts[i].Load()
	}
	return out
}

func (d *Device) pitfallsOn() bool {
	m := d.manner.m.Load()
	return m == nil || m.Pitfalls != PitfallsOff
}

// pitfall reports check p on object obj (a description, "QP 0x48"): logged, counted and
// traced; in strict mode it is also the verb op's error.
func (d *Device) pitfall(p Pitfall, op string, qpn uint32, obj string, format string, a ...any) error {
	m := d.Manner()
	if m.Pitfalls == PitfallsOff {
		return nil
	}
	d.manner.counts[p].Add(1)
	detail := fmt.Sprintf(format, a...)
	if r := d.manner.report.Load(); r != nil {
		(*r)(p, obj, detail)
	} else {
		d.log.Warn("pitfall: "+obj+": "+detail, "pitfall", pitfalls[p].Name, "object", obj, "rule", pitfalls[p].Rule)
	}
	if trace.On() {
		trace.AsyncEvent(d.cfg.Name, 0, qpn, "pitfall "+pitfalls[p].Name+": "+obj+": "+detail)
	}
	if m.Pitfalls == PitfallsStrict && op != "" {
		return errorf(op, EINVAL, "pitfall %s: %s: %s (%s)", pitfalls[p].Name, obj, detail, pitfalls[p].Rule)
	}
	return nil
}

// Pitfall reports a check a transport makes on the QP's traffic (it never fails a verb).
func (qp *QP) Pitfall(p Pitfall, format string, a ...any) {
	if p < NumPitfalls {
		qp.dev.pitfall(p, "", qp.num, fmt.Sprintf("QP %#x", qp.num), format, a...)
	}
}

// ExplainRemoteAccess reports the rdma_no_remote_access pitfall when a request to qp
// with rkey failed for want of access acc that the MR or the QP lacks (a bad key or range
// is another bug, not this one). Transports call it on the failure path only.
func (qp *QP) ExplainRemoteAccess(rkey uint32, acc, qpAccess AccessFlags) {
	if !qp.dev.pitfallsOn() {
		return
	}
	if qpAccess&acc == 0 {
		qp.Pitfall(PitfallRDMANoRemoteAccess, "a request needs %s but the QP's qp_access_flags are %s", AccessString(acc), AccessString(qpAccess))
		return
	}
	if mr := qp.dev.LookupKey(rkey); mr != nil && mr.pd == qp.pd && mr.access&acc == 0 {
		qp.dev.pitfall(PitfallRDMANoRemoteAccess, "", qp.num, fmt.Sprintf("MR %#x", mr.key),
			"QP %#x got a request needing %s; the MR was registered with %s", qp.num, AccessString(acc), AccessString(mr.access))
	}
}

// randomizeError fills the fields ibv_poll_cq(3) leaves undefined in an error completion.
func randomizeError(wc *WC) {
	r := rand.Uint64()
	wc.ByteLen, wc.ImmData = uint32(r), uint32(r>>32)
	r = rand.Uint64()
	wc.SrcQP, wc.SLID, wc.SL, wc.DLIDPathBits = uint32(r)&0xFFFFFF, uint16(r>>24), uint8(r>>40)&15, uint8(r>>48)&0x7F
	wc.PKeyIndex = uint16(rand.Uint32())
	wc.Opcode = WCOpcode(rand.Uint32() & 7)
	wc.WCFlags = WCFlags(rand.Uint32() & 3)
}
