package hca

// Error injection, as pib's debugfs inject_err offered: tests and users provoke the
// error paths an application must handle without having to break the fabric.

// InjectFatal moves the QP to ERR, flushes it and raises IBV_EVENT_QP_FATAL (pib:
// "QP <qpn>").
func (qp *QP) InjectFatal() {
	qp.SetError()
	qp.dev.raise(AsyncEvent{Type: EventQPFatal, QP: qp})
}

// InjectError puts the CQ in error and raises IBV_EVENT_CQ_ERR (pib: "CQ <id>").
func (cq *CQ) InjectError() {
	cq.mu.Lock()
	cq.overflowed = true
	cq.mu.Unlock()
	cq.ctx.dev.raise(AsyncEvent{Type: EventCQErr, CQ: cq})
}

// InjectError raises IBV_EVENT_SRQ_ERR (pib: "SRQ <id>").
func (s *SRQ) InjectError() {
	s.pd.ctx.dev.raise(AsyncEvent{Type: EventSRQErr, SRQ: s})
}
