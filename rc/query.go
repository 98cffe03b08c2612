package rc

import "github.com/pibgw/pibgw/hca"

// CurrentPSNs implements hca.PSNReporter: ibv_query_qp's sq_psn is the requester's next
// PSN and rq_psn the responder's expected one, as rxe_qp_to_attr reports them (req.psn,
// resp.psn), once the QP has reached RTS and RTR.
func (t *Transport) CurrentPSNs(qp *hca.QP, sq, rq *uint32) {
	c := getConn(qp)
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.req.ring != nil {
		*sq = c.req.nextPSN
	}
	c.mu.Unlock()
	c.rmu.Lock()
	if c.resp.res != nil {
		*rq = c.resp.ePSN
	}
	c.rmu.Unlock()
}
