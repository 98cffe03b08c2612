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

// rxRing is the receive ring: slot k is posted with WRID k.
type rxRing struct {
	mr     *hca.MR
	bufs   [][]byte
	sgl    [][1]hca.SGE
	wrs    []hca.RecvWR // wrs[k] posts slot k
	repost []hca.RecvWR
	wcs    []hca.WC
	out    [][]byte
}

// groSegment is the largest segment a TUN read or write carries (64 KiB).
const groSegment = 65536

func (r *rxRing) init(pd *hca.PD, n int) error {
	mem := make([]byte, n*slotLen)
	mr, err := pd.RegMR(mem, hca.AccessLocalWrite)
	if err != nil {
		return err
	}
	r.mr = mr
	r.bufs = make([][]byte, n)
	r.sgl = make([][1]hca.SGE, n)
	r.wrs = make([]hca.RecvWR, n)
	r.repost = make([]hca.RecvWR, 0, n)
	r.wcs = make([]hca.WC, 128)
	r.out = make([][]byte, 0, 128)
	for k := range r.bufs {
		r.bufs[k] = mem[k*slotLen : (k+1)*slotLen : (k+1)*slotLen]
		r.sgl[k][0] = hca.SGE{Addr: hca.BufAddr(r.bufs[k]), Length: slotLen, LKey: mr.LKey()}
		r.wrs[k] = hca.RecvWR{WRID: uint64(k), SGL: r.sgl[k][:]}
	}
	return nil
}

func (r *rxRing) postAll(qp *hca.QP) error {
	_, err := qp.PostRecv(r.wrs)
	return err
}

func (r *rxRing) free() {
	if r.mr != nil {
		_ = r.mr.Dereg()
		r.mr = nil
	}
}
