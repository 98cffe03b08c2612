package hca

import "sync"

// RecvWQE is a receive WQE as a transport consumes it.
type RecvWQE struct {
	WRID   uint64
	NumSGE int
	SGE    [MaxSGE]SGE

	pd *PD // an XRC SRQ's WQE: the PD its SGEs are checked against (else the QP's)
	cq *CQ // an XRC SRQ's WQE: the CQ it completes on (else the QP's receive CQ)
}

// SGL returns the WQE's scatter list.
func (w *RecvWQE) SGL() []SGE { return w.SGE[:w.NumSGE] }

// Len is the total length of the scatter list.
func (w *RecvWQE) Len() uint64 {
	var n uint64
	for _, s := range w.SGE[:w.NumSGE] {
		n += uint64(s.Length)
	}
	return n
}

// recvQueue is a ring of receive WQEs: a QP's RQ or an SRQ.
type recvQueue struct {
	mu      sync.Mutex
	ring    []RecvWQE
	head, n int
	maxSGE  int
}

func newRecvQueue(maxWR, maxSGE int) recvQueue {
	return recvQueue{ring: make([]RecvWQE, maxWR), maxSGE: maxSGE}
}

// post appends wrs; it returns how many were posted and the errno for the first one that
// was not (ibv_post_recv's bad_wr).
func (q *recvQueue) post(op string, wrs []RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGL) > q.maxSGE {
			return i, errorf(op, EINVAL, "wr %d has %d SGEs, max_recv_sge is %d", i, len(wr.SGL), q.maxSGE)
		}
		if q.n == len(q.ring) {
			return i, errorf(op, ENOMEM, "receive queue full (%d WRs)", len(q.ring))
		}
		j := q.head + q.n
		if j >= len(q.ring) {
			j -= len(q.ring)
		}
		w := &q.ring[j]
		w.WRID = wr.WRID
		w.NumSGE = copy(w.SGE[:], wr.SGL)
		q.n++
	}
	return len(wrs), nil
}

// take pops the oldest WQE into w, reporting false when the queue is empty. It also
// returns the number left.
func (q *recvQueue) take(w *RecvWQE) (bool, int) {
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		return false, 0
	}
	src := &q.ring[q.head]
	w.WRID, w.NumSGE = src.WRID, src.NumSGE
	copy(w.SGE[:src.NumSGE], src.SGE[:src.NumSGE])
	q.head++
	if q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
	left := q.n
	q.mu.Unlock()
	return true, left
}

// drain removes every WQE, returning their WR IDs.
func (q *recvQueue) drain() []uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]uint64, 0, q.n)
	for q.n > 0 {
		ids = append(ids, q.ring[q.head].WRID)
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	return ids
}

func (q *recvQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// SRQInitAttr is ibv_srq_init_attr.
type SRQInitAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// SRQAttrMask is ibv_srq_attr_mask.
type SRQAttrMask uint32

const (
	SRQMaxWR SRQAttrMask = 1 << 0
	SRQLimit SRQAttrMask = 1 << 1
)

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	pd    *PD
	xrcd  *XRCD // XRC SRQs (xrc.go): their domain, CQ and number
	cq    *CQ
	num   uint32
	id    uint32
	rq    recvQueue
	refs  int32
	limMu sync.Mutex
	limit uint32 // armed when non-zero (ibv_modify_srq(3) srq_limit)
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > MaxSRQWR {
		return nil, errorf("create_srq", EINVAL, "max_wr %d out of range 1..%d", attr.MaxWR, MaxSRQWR)
	}
	if attr.MaxSGE > MaxSGE {
		return nil, errorf("create_srq", EINVAL, "max_sge %d above %d", attr.MaxSGE, MaxSGE)
	}
	if attr.SRQLimit > attr.MaxWR {
		return nil, errorf("create_srq", EINVAL, "srq_limit %d above max_wr %d", attr.SRQLimit, attr.MaxWR)
	}
	if attr.MaxSGE == 0 {
		attr.MaxSGE = 1
	}
	d := pd.ctx.dev
	d.mu.Lock()
	if d.counts.srq >= MaxSRQ {
		d.mu.Unlock()
		return nil, errorf("create_srq", ENOMEM, "device has %d SRQs (max_srq)", MaxSRQ)
	}
	d.counts.srq++
	id := d.nextID()
	d.mu.Unlock()
	pd.refs.Add(1)
	s := &SRQ{pd: pd, id: id, rq: newRecvQueue(int(attr.MaxWR), int(attr.MaxSGE)), limit: attr.SRQLimit}
	d.register(s)
	return s, nil
}

// ID is the object id pibgw's inspection shows.
func (s *SRQ) ID() uint32 { return s.id }

// PD is the SRQ's protection domain.
func (s *SRQ) PD() *PD { return s.pd }

// PostRecv posts receive WRs (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) { return s.rq.post("post_srq_recv", wrs) }

// Modify sets the limit (arming the limit event) or, unsupported here, resizes
// (ibv_modify_srq).
func (s *SRQ) Modify(maxWR, limit uint32, mask SRQAttrMask) error {
	if mask&SRQMaxWR != 0 {
		return errorf("modify_srq", EINVAL, "resizing an SRQ is not supported")
	}
	if mask&SRQLimit != 0 {
		if limit > uint32(len(s.rq.ring)) {
			return errorf("modify_srq", EINVAL, "srq_limit %d above max_wr %d", limit, len(s.rq.ring))
		}
		s.limMu.Lock()
		s.limit = limit
		s.limMu.Unlock()
	}
	return nil
}

// Query returns max_wr, max_sge and the armed limit (ibv_query_srq).
func (s *SRQ) Query() SRQInitAttr {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	return SRQInitAttr{MaxWR: uint32(len(s.rq.ring)), MaxSGE: uint32(s.rq.maxSGE), SRQLimit: s.limit}
}

// Len is the number of WQEs queued.
func (s *SRQ) Len() int { return s.rq.len() }

func (s *SRQ) take(w *RecvWQE) bool {
	ok, left := s.rq.take(w)
	if ok {
		s.limMu.Lock()
		fire := s.limit != 0 && uint32(left) < s.limit
		if fire {
			s.limit = 0 // the event disarms the limit (IBV_EVENT_SRQ_LIMIT_REACHED, ibv_modify_srq(3))
		}
		s.limMu.Unlock()
		if fire {
			s.pd.ctx.dev.raise(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
		}
	}
	return ok
}

// Destroy destroys the SRQ; EBUSY while QPs use it (ibv_destroy_srq).
func (s *SRQ) Destroy() error {
	d := s.pd.ctx.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.refs > 0 {
		return errorf("destroy_srq", EBUSY, "SRQ %d is used by %d QPs", s.id, s.refs)
	}
	d.counts.srq--
	s.destroyXRC(d)
	s.pd.refs.Add(-1)
	d.unregister(s)
	return nil
}
