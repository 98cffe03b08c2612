package rc

import (
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/trace"
)

var _ hca.QPInspector = (*Transport)(nil)

// InspectQP reports an RC/UC QP's PSNs, queue and recovery counters for `pibgw inspect`
// (hca.QPInspector); nil before the QP reached INIT.
func (t *Transport) InspectQP(qp *hca.QP) *hca.TransportInfo {
	c := getConn(qp)
	if c == nil {
		return nil
	}
	ti := &hca.TransportInfo{
		Timeouts: c.stats.Timeouts.Load(), SeqNAKs: c.stats.SeqNAKs.Load(), RNRNAKs: c.stats.RNRNAKs.Load(),
		Retransmitted: c.stats.Retransmitted.Load(), Duplicates: c.stats.Duplicates.Load(),
		Ghosts: c.stats.Ghosts.Load(),
	}
	c.mu.Lock()
	ti.NextPSN, ti.AckedPSN, ti.SendQueued = c.req.nextPSN, c.req.ackedPSN, c.req.count
	ti.RetryLeft, ti.RNRRetryLeft = c.req.retryLeft, c.req.rnrLeft
	c.mu.Unlock()
	c.rmu.Lock()
	ti.ExpectedPSN, ti.LastFatal = c.resp.ePSN, c.resp.lastFatal
	c.rmu.Unlock()
	return ti
}

// traceRetry records a retransmission (trace.KindRetry).
func traceRetry(c *conn, cause string, psn uint32, left uint8) {
	trace.Retry(c.qp.Device().Name(), c.qp.Num(), cause, psn, left)
}
