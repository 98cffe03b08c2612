package hca

import (
	"github.com/pibgw/pibgw/trace"
)

// Trace hooks (package trace): each call site checks trace.On() first, so that with no
// one tracing a hook costs one atomic load. These record; they never change behaviour.

func (p *Port) traceTx(qpn uint32, pkts [][]byte) {
	for _, b := range pkts {
		trace.Packet(p.dev.cfg.Name, p.num, trace.DirTx, qpn, b)
	}
}

func (p *Port) traceRx(pkts [][]byte) {
	for _, b := range pkts {
		trace.Packet(p.dev.cfg.Name, p.num, trace.DirRx, 0, b)
	}
}

// drop counts a received packet dropped for the reason c names (and traces it).
func (p *Port) drop(c Counter, raw []byte) {
	p.counters.Inc(c)
	if trace.On() {
		trace.Drop(p.dev.cfg.Name, p.num, trace.DirRx, counterNames[c], raw)
	}
}

// Drop is drop for transports: a received packet dropped for the reason c names, counted
// in the port's counter c and traced.
func (p *Port) Drop(c Counter, raw []byte) {
	if c >= 0 && c < numCounters {
		p.drop(c, raw)
	}
}

// dropTx counts n packets the port could not send for the reason c names.
func (p *Port) dropTx(c Counter, pkts [][]byte) {
	p.counters.Add(c, uint64(len(pkts)))
	if trace.On() {
		for _, b := range pkts {
			trace.Drop(p.dev.cfg.Name, p.num, trace.DirTx, counterNames[c], b)
		}
	}
}

// TransmitQP is Transmit for packets of one QP: the trace knows which QP sent them even
// when the packets do not say (RC's do not carry the source QPN).
func (p *Port) TransmitQP(qp *QP, pkts [][]byte) {
	if trace.On() {
		p.traceTx(qp.num, pkts)
	}
	p.transmit(pkts)
}

func wcStatusName(s WCStatus) string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "UNKNOWN"
}

func wrOpcodeName(o WROpcode) string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return "UNKNOWN"
}

func (cq *CQ) traceCompletion(wc *WC) {
	trace.Completion(cq.ctx.dev.cfg.Name, wc.QPNum, wcStatusName(wc.Status), wc.Opcode.String(), wc.WRID, wc.ByteLen)
}

func (qp *QP) tracePostSend(wrs []SendWR) {
	for i := range wrs {
		trace.API(qp.dev.cfg.Name, qp.num, "post_send", wrOpcodeName(wrs[i].Opcode), wrs[i].WRID, MessageLen(wrs[i].SGL))
	}
}

func (qp *QP) tracePostRecv(wrs []RecvWR) {
	for i := range wrs {
		trace.API(qp.dev.cfg.Name, qp.num, "post_recv", "", wrs[i].WRID, MessageLen(wrs[i].SGL))
	}
}

func (qp *QP) traceModify(from, to QPState) {
	aux := ""
	if from != to {
		aux = from.String() + "->" + to.String()
	}
	trace.API(qp.dev.cfg.Name, qp.num, "modify_qp", aux, 0, 0)
}

func (d *Device) traceEvent(ev *AsyncEvent) {
	var qpn uint32
	if ev.QP != nil {
		qpn = ev.QP.num
	}
	name := "UNKNOWN"
	if int(ev.Type) < len(eventNames) {
		name = eventNames[ev.Type]
	}
	trace.AsyncEvent(d.cfg.Name, ev.Port, qpn, name)
}

// traceObject records the verbs call that created (or destroyed) obj: open_device,
// alloc_pd, reg_mr, create_cq, create_qp, create_srq, create_ah, … (A is the object's
// id, the QPN for QPs).
func (d *Device) traceObject(obj any, created bool) {
	var calls [2]string // the creating and the destroying call
	var qpn uint32
	var id uint64
	switch o := obj.(type) {
	case *Context:
		calls, id = [2]string{"open_device", "close_device"}, uint64(o.id)
	case *PD:
		calls, id = [2]string{"alloc_pd", "dealloc_pd"}, uint64(o.id)
	case *MR:
		calls, id = [2]string{"reg_mr", "dereg_mr"}, uint64(o.key)
	case *CQ:
		calls, id = [2]string{"create_cq", "destroy_cq"}, uint64(o.id)
	case *QP:
		calls, qpn, id = [2]string{"create_qp", "destroy_qp"}, o.num, uint64(o.num)
	case *SRQ:
		calls, id = [2]string{"create_srq", "destroy_srq"}, uint64(o.id)
	case *AH:
		calls, id = [2]string{"create_ah", "destroy_ah"}, uint64(o.id)
	default:
		return
	}
	call := calls[0]
	if !created {
		call = calls[1]
	}
	trace.API(d.cfg.Name, qpn, call, "", id, 0)
}
