package ud

import "github.com/pibgw/pibgw/hca"

// CurrentPSNs implements hca.PSNReporter: ibv_query_qp's sq_psn of a UD QP is the PSN its
// next datagram carries, as rxe_qp_to_attr reports req.psn, once the QP has reached RTS.
func (t *Transport) CurrentPSNs(qp *hca.QP, sq, rq *uint32) {
	if st := state(qp); st != nil && qp.State() >= hca.QPStateRTS && qp.State() != hca.QPStateErr {
		*sq = st.psn.Load() & 0xFFFFFF
	}
}
