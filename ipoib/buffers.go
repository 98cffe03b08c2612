package ipoib

import (
	"github.com/pibgw/pibgw/hca"
)

// Registered buffers. Every packet buffer of an interface lives in one of three MRs,
// allocated once: the tun read buffers of the tx loop (the UD send's SGE points straight
// at them, the IPoIB header written into the head-room), the receive ring (GRH area,
// header, packet: handed to the tun write with the packet at rxHead), and the control
// slots (ARP, ND, packets that waited for a neighbour or a group).

// txRing is the tx loop's batch of tun read buffers.
type txRing struct {
	mr    *hca.MR
	bufs  [][]byte
	sizes []int
	sgl   [][1]hca.SGE
	wrs   []hca.SendWR
}

func (r *txRing) init(pd *hca.PD, batch int) error {
	mem := make([]byte, batch*slotLen)
	mr, err := pd.RegMR(mem, hca.AccessLocalWrite)
	if err != nil {
		return err
	}
	r.mr = mr
	r.bufs = make([][]byte, batch)
	r.sizes = make([]int, batch)
	r.sgl = make([][1]hca.SGE, batch)
	r.wrs = make([]hca.SendWR, 0, batch)
	for k := range r.bufs {
		r.bufs[k] = mem[k*slotLen : (k+1)*slotLen : (k+1)*slotLen]
	}
	return nil
}

func (r *txRing) free() {
	if r.mr != nil {
		_ = r.mr.Dereg()
		r.mr = nil
	}
}

// rxRing is the receive ring: slot k is posted with WRID k. Its buffers are made as it
// needs them: none until the QP is first readied (a child whose P_Key is not in the
// table has none), rxRingStart then, and twice as many each time one report of
// completions used a quarter of those posted, up to the ring's length (rxRingLen). Each step
// is its own MR, deregistered at free; the memory goes back with the interface.
type rxRing struct {
	pd     *hca.PD
	mrs    []*hca.MR
	posted int // slots made and posted: [0, posted)
	bufs   [][]byte
	sgl    [][1]hca.SGE
	wrs    []hca.RecvWR // wrs[k] posts slot k
	repost []hca.RecvWR
	wcs    []hca.WC
	out    [][]byte
}

// rxRingStart is how many receive buffers an interface posts first: a report carries at
// most hca.RxBudget completions, whose buffers are re-posted before the next ones fill,
// so that many are enough for a quiet interface (260 KiB instead of rxRingLen's 1 MiB).
const rxRingStart = hca.RxBudget

// groSegment is the largest segment a TUN read or write carries (64 KiB).
const groSegment = 65536

func (r *rxRing) init(pd *hca.PD, n int) error {
	r.pd = pd
	r.bufs = make([][]byte, n)
	r.sgl = make([][1]hca.SGE, n)
	r.wrs = make([]hca.RecvWR, n)
	r.repost = make([]hca.RecvWR, 0, n)
	r.wcs = make([]hca.WC, 128)
	r.out = make([][]byte, 0, 128)
	return nil
}

// add makes slots [posted, m) and posts them.
func (r *rxRing) add(qp *hca.QP, m int) error {
	m = min(m, len(r.bufs))
	if m <= r.posted {
		return nil
	}
	mem := make([]byte, (m-r.posted)*slotLen)
	mr, err := r.pd.RegMR(mem, hca.AccessLocalWrite)
	if err != nil {
		return err
	}
	r.mrs = append(r.mrs, mr)
	for k := r.posted; k < m; k++ {
		o := (k - r.posted) * slotLen
		r.bufs[k] = mem[o : o+slotLen : o+slotLen]
		r.sgl[k][0] = hca.SGE{Addr: hca.BufAddr(r.bufs[k]), Length: slotLen, LKey: mr.LKey()}
		r.wrs[k] = hca.RecvWR{WRID: uint64(k), SGL: r.sgl[k][:]}
	}
	n, err := qp.PostRecv(r.wrs[r.posted:m])
	r.posted += max(n, 0)
	return err
}

// grow follows a report of n completions (under rxp.mu): one that used a quarter of the
// posted buffers or more doubles them, so that a busy interface soon has the whole ring
// (a report carries at most hca.RxBudget, so half would never be reached from 128).
func (r *rxRing) grow(qp *hca.QP, n int) error {
	if r.posted == 0 || r.posted >= len(r.bufs) || n < r.posted/4 {
		return nil
	}
	return r.add(qp, 2*r.posted)
}

// postAll posts the ring's buffers to a QP just moved out of RESET: the first
// rxRingStart, or again those made before.
func (r *rxRing) postAll(qp *hca.QP) error {
	if r.posted == 0 {
		return r.add(qp, rxRingStart)
	}
	_, err := qp.PostRecv(r.wrs[:r.posted])
	return err
}

func (r *rxRing) free() {
	for _, mr := range r.mrs {
		_ = mr.Dereg()
	}
	r.mrs = nil
}
