package ud

import (
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
)

// Static rate control (IBA 9.11): a send through an AH whose static rate is below its
// port's (hca.AH.Pace) leaves no faster than that rate. A UD send completes when its
// packet leaves, so such a send is built when it is posted — its payload gathered, as
// an HCA fetches it — and queued; the QP's pacer transmits it when the rate allows and
// completes it then. Sends posted while any wait queue behind them whatever their AH:
// a send queue executes and completes in order.

// queuedSend is a posted send waiting for its turn: its packet, or the status its WR
// failed with, and what its completion needs.
type queuedSend struct {
	buf      *[maxPacket]byte // pooled; pkt is in it
	pkt      []byte
	pace     int64 // its AH's rate (0: not paced itself, only queued behind one)
	status   hca.WCStatus
	wrid     uint64
	opcode   hca.WROpcode
	length   uint32
	signaled bool
}

var pktPool = sync.Pool{New: func() any { return new([maxPacket]byte) }}

// pacer is a UD QP's queue of paced sends.
type pacer struct {
	queued  atomic.Int32 // sends posted and not yet sent or flushed: the fast path checks it
	running atomic.Bool  // a goroutine drains the queue
	pending atomic.Bool  // more to drain

	mu    sync.Mutex
	queue []queuedSend
	pacer hca.Pacer
	timer clock.Timer
	armed bool
	// flush asks the drainer to drop the queue: flushComplete completes each send with
	// IBV_WC_WR_FLUSH_ERR, flushSilent not. The drainer does it, after the sends it took
	// before have completed, so that completions stay in order.
	flush int
}

const (
	flushComplete = 1 + iota
	flushSilent
)

// postPaced queues wr (built now) and drains the queue as far as the rate allows.
func (t *Transport) postPaced(qp *hca.QP, port *hca.Port, st *qpState, wr *hca.SendWR) error {
	buf := pktPool.Get().(*[maxPacket]byte)
	n, status, err := t.build(qp, port, wr, buf[:])
	if err != nil {
		pktPool.Put(buf)
		return err
	}
	p := &st.pace
	p.mu.Lock()
	if depth := int(qp.Cap().MaxSendWR); len(p.queue) >= depth {
		p.mu.Unlock()
		pktPool.Put(buf)
		return hca.Errorf("post_send", hca.ENOMEM, "send queue full: %d sends wait for the AH's static rate", depth)
	}
	p.queue = append(p.queue, queuedSend{buf: buf, pkt: buf[:n], pace: wr.AH.Pace(), status: status, wrid: wr.WRID,
		opcode: wr.Opcode, length: uint32(hca.MessageLen(wr.SGL)), signaled: qp.Signaled(wr)})
	p.queued.Add(1)
	p.mu.Unlock()
	t.drain(qp, port, st)
	return nil
}

// drain sends the queued packets the rate allows, in order, and completes them; one
// goroutine at a time (a post, or the pacer's timer), the others leave it a flag.
func (t *Transport) drain(qp *hca.QP, port *hca.Port, st *qpState) {
	p := &st.pace
	p.pending.Store(true)
	for p.pending.Load() {
		if !p.running.CompareAndSwap(false, true) {
			return
		}
		for p.pending.Swap(false) {
			for t.drainOnce(qp, port, st) {
			}
		}
		p.running.Store(false)
	}
}

// drainOnce sends up to batchMax queued packets; it reports whether there may be more
// it can send now.
func (t *Transport) drainOnce(qp *hca.QP, port *hca.Port, st *qpState) bool {
	p := &st.pace
	clk := qp.Device().Clock()
	var out [batchMax]queuedSend
	n := 0
	p.mu.Lock()
	if mode := p.flush; mode != 0 {
		q := p.queue
		p.queue, p.flush = nil, 0
		p.mu.Unlock()
		for _, s := range q {
			pktPool.Put(s.buf)
			if mode == flushComplete {
				qp.CompleteSend(&hca.WC{WRID: s.wrid, Status: hca.WCWRFlushErr, Opcode: hca.WCSend})
			}
			p.queued.Add(-1)
		}
		return false
	}
	now := clk.Now()
	for n < batchMax && len(p.queue) > 0 {
		q := p.queue[0]
		if q.pace != 0 && q.status == hca.WCSuccess {
			if wait := p.pacer.Wait(now); wait > 0 {
				if !p.armed {
					p.armed = true
					if p.timer == nil {
						p.timer = clk.AfterFunc(wait, func() {
							p.mu.Lock()
							p.armed = false
							p.mu.Unlock()
							t.drain(qp, port, st)
						})
					} else {
						p.timer.Reset(wait)
					}
				}
				break
			}
			p.pacer.Charge(now, len(q.pkt), q.pace)
		}
		out[n] = q
		n++
		p.queue[0] = queuedSend{}
		p.queue = p.queue[1:]
		if q.status != hca.WCSuccess {
			break
		}
	}
	more := n == batchMax && len(p.queue) > 0
	p.mu.Unlock()
	if n == 0 {
		return false
	}
	var pkts [batchMax][]byte
	k := 0
	for _, q := range out[:n] {
		if q.status == hca.WCSuccess {
			pkts[k] = q.pkt
			k++
		}
	}
	if k > 0 {
		port.TransmitQP(qp, pkts[:k])
	}
	for _, q := range out[:n] {
		pktPool.Put(q.buf) // the port copied what it sent
		if q.status != hca.WCSuccess {
			// The WR failed as it was built (a local protection error): as on the fast
			// path it completes in error and the QP enters SQE (IBA 10.8.3); what is
			// queued behind it is flushed.
			qp.SendError(&hca.SendWR{WRID: q.wrid, Opcode: q.opcode}, q.status)
			p.queued.Add(-1)
			t.flushPaced(qp, st, true)
			return false
		}
		if q.signaled {
			wc := hca.WC{WRID: q.wrid, Status: hca.WCSuccess, Opcode: hca.WCSend, ByteLen: q.length}
			if q.opcode == hca.WRSendWithImm {
				wc.WCFlags = hca.WCWithImm // rxe's make_send_cqe, mlx5's handle_good_req
			}
			qp.CompleteSend(&wc)
		}
		p.queued.Add(-1)
	}
	return more
}

// flushPaced drops the queued sends: with complete (the QP in ERR or SQE), each
// completes with IBV_WC_WR_FLUSH_ERR, signaled or not; without (RESET), silently. The
// drainer does it — now, or when the goroutine draining finishes its batch.
func (t *Transport) flushPaced(qp *hca.QP, st *qpState, complete bool) {
	p := &st.pace
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.mu.Unlock()
		return
	}
	if complete {
		p.flush = flushComplete
	} else if p.flush == 0 {
		p.flush = flushSilent
	}
	p.mu.Unlock()
	t.drain(qp, qp.Port(), st)
}
