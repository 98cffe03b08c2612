package rc

import (
	"fmt"
	"os"

	"github.com/pibgw/pibgw/hca"
)

// DebugState describes a QP's requester and responder for test failures.
func DebugState(qp *hca.QP) string {
	c := getConn(qp)
	c.mu.Lock()
	r := &c.req
	s := fmt.Sprintf("req: head=%d next=%d tail=%d count=%d nextPSN=%#x acked=%#x rdOut=%d timerOn=%v rnrWait=%v retryLeft=%d reissues=%d nak=%v/%#x",
		r.head, r.next, r.tail, r.count, r.nextPSN, r.ackedPSN, r.rdAtomicOut, r.timerOn, r.rnrWait, r.retryLeft, r.reissues, r.nakSet, r.nakPSN)
	for i, k := r.head, 0; k < r.count && k < 4; i, k = r.slot(i+1), k+1 {
		w := &r.ring[i]
		s += fmt.Sprintf("\n  wqe %d: %s first=%#x npkts=%d sent=%d recvd=%d issued=%v reissue=%v done=%v", i, w.wr.Opcode, w.firstPSN, w.npkts, w.sent, w.recvd, w.issued, w.reissue, w.done)
	}
	c.mu.Unlock()
	c.rmu.Lock()
	s += fmt.Sprintf("\nresp: ePSN=%#x msn=%d nakSent=%v inSend=%v inWrite=%v out=%d/%d", c.resp.ePSN, c.resp.msn, c.resp.nakSent, c.resp.inSend, c.resp.inWrite, c.resp.outHead, len(c.resp.out)) + fmt.Sprintf(" oosLast=%#x", c.resp.oosLast) + " fatal=" + c.resp.lastFatal
	c.rmu.Unlock()
	return s
}

func init() { debugTimeouts = os.Getenv("RC_DEBUG") != "" }

// StallDrainer makes qp's connection behave as if another goroutine were draining it,
// so what the responder owes stays queued until release is called.
func StallDrainer(qp *hca.QP) (release func()) {
	c := getConn(qp)
	c.running.Store(true)
	return func() { c.running.Store(false) }
}
