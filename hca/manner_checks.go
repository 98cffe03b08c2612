package hca

import "fmt"

// The pitfall checks made at verb calls (manner.go has the rules). Each is skipped when
// pitfalls are off; in strict mode its error is the verb's.

func (qp *QP) what() string { return fmt.Sprintf("%s QP %#x", qp.typ, qp.num) }

// outstanding returns the send WRs the transport still holds and the receive WRs posted.
func (qp *QP) outstanding() (send, recv int) {
	recv = qp.rqLen()
	if in, ok := qp.tr.(QPInspector); ok {
		if ti := in.InspectQP(qp); ti != nil {
			send = ti.SendQueued
		}
	}
	return send, recv
}

// checkModify runs the checks of a modify_qp before it is applied (no lock held: the
// transport's is taken to count outstanding WRs).
func (qp *QP) checkModify(a *QPAttr, mask QPAttrMask) error {
	d := qp.dev
	if !d.pitfallsOn() {
		return nil
	}
	const op = "modify_qp"
	if mask&QPAttrState != 0 && a.QPState == QPStateReset && qp.State() != QPStateReset && qp.num > 1 {
		if s, r := qp.outstanding(); s+r > 0 {
			if err := d.pitfall(PitfallResetLosesWRs, op, qp.num, qp.what(), "moved to RESET with %d send and %d receive WRs outstanding: they are lost without completions", s, r); err != nil {
				return err
			}
		}
	}
	if qp.typ == QPTypeRC && mask&QPAttrTimeout != 0 && a.Timeout == 0 {
		if err := d.pitfall(PitfallRCTimeoutInfinite, op, qp.num, qp.what(), "timeout 0: the local ACK timer is infinite, a lost packet hangs the QP"); err != nil {
			return err
		}
	}
	if qp.typ == QPTypeUD && qp.num > 1 && mask&QPAttrQKey != 0 && a.QKey&0x80000000 != 0 {
		if err := d.pitfall(PitfallUDQKeyHighBit, op, qp.num, qp.what(), "qkey %#x has the high bit set: a controlled Q_Key, which only privileged consumers may use", a.QKey); err != nil {
			return err
		}
	}
	return nil
}

// checkPostSend counts unsignaled sends of connected QPs and checks UD Q_Keys.
func (qp *QP) checkPostSend(wrs []SendWR) error {
	const op = "post_send"
	switch qp.typ {
	case QPTypeRC, QPTypeUC:
		for i := range wrs {
			if qp.Signaled(&wrs[i]) {
				qp.unsig.Store(0)
				continue
			}
			if n := qp.unsig.Add(1); n == int32(qp.cap.MaxSendWR) && qp.dev.pitfallsOn() {
				if err := qp.dev.pitfall(PitfallUnsignaledFill, op, qp.num, qp.what(), "%d unsignaled sends in a row fill max_send_wr %d: none of their slots is freed until a signaled WR completes", n, qp.cap.MaxSendWR); err != nil {
					return err
				}
			}
		}
	case QPTypeUD:
		for i := range wrs {
			k := wrs[i].RemoteQKey
			if k&0x80000000 == 0 || !qp.dev.pitfallsOn() {
				continue
			}
			if own := qp.QKey(); k != own {
				if err := qp.dev.pitfall(PitfallUDQKeyHighBit, op, qp.num, qp.what(), "wr %d's remote_qkey %#x has the high bit set: the HCA sends the QP's Q_Key %#x instead", wrs[i].WRID, k, own); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkPostRecv checks that receive buffers are writable by the HCA.
func (qp *QP) checkPostRecv(wrs []RecvWR) error {
	d := qp.dev
	if !d.pitfallsOn() {
		return nil
	}
	for i := range wrs {
		for _, sge := range wrs[i].SGL {
			if mr := d.LookupKey(sge.LKey); mr != nil && mr.access&AccessLocalWrite == 0 && sge.Length > 0 {
				if err := d.pitfall(PitfallRecvNoLocalWrite, "post_recv", qp.num, fmt.Sprintf("MR %#x", mr.key), "%s posted receive wr %d into it, registered with %s", qp.what(), wrs[i].WRID, AccessString(mr.access)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
