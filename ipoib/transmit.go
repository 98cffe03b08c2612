package ipoib

import (
	"encoding/binary"
	"errors"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/tun"
)

// The transmit loop, one for every device. A device with offloads gives one segment per
// read (up to 64 KiB, with its virtio-net metadata); a device without gives a batch of
// packets, which plainSource presents as a batch of segments that ask for no GSO. The
// loop classifies each (dest), sends a packet in place — the UD send's SGE points at the
// read buffer, the IPoIB header written into its head-room — and cuts a large segment
// into path-MTU sends (sendSegmented); one PostSend per batch.

// txBatch is one read of the device: n segments in registered buffers, each at txHead
// with head-room for the IPoIB header. A device with offloads fills one segment with its
// GSO metadata; a device without fills up to a batch of packets, with no GSO.
type txBatch struct {
	bufs  [][]byte
	sizes []int
	meta  tun.GSO // of the single segment of an offload read; zero (GSONone) otherwise
	sgl   [][1]hca.SGE
	lkey  uint32
	wrs   []hca.SendWR
}

// txSource fills the transmit loop's batch.
type txSource interface {
	read(b *txBatch) (int, error)
}

// gsoSource reads a device with offloads: one segment per read, into the interface's
// read buffer (txReadBuf: gtx's, or the connected-mode send ring's spare slot).
type gsoSource struct{ i *Interface }

func (s gsoSource) read(b *txBatch) (int, error) {
	b.bufs[0], b.lkey = s.i.txReadBuf(&s.i.txp.gtx)
	n, meta, err := s.i.txp.off.ReadGSO(b.bufs[0], txHead)
	if err != nil {
		return 0, err
	}
	b.sizes[0], b.meta = n, meta
	return 1, nil
}

// plainSource reads a device without offloads: a batch of packets per read, none to be
// segmented — an Offloader whose segments never ask for GSO.
type plainSource struct{ dev tun.Device }

func (s plainSource) read(b *txBatch) (int, error) { return s.dev.Read(b.bufs, b.sizes, txHead) }

// txSourceFor is the interface's transmit source and the batch it reads into.
func (i *Interface) txSourceFor() (txSource, *txBatch) {
	if i.txp.off != nil {
		g := &i.txp.gtx
		return gsoSource{i}, &txBatch{
			bufs: [][]byte{g.buf}, sizes: make([]int, 1), sgl: make([][1]hca.SGE, 1),
			lkey: g.mr.LKey(), wrs: make([]hca.SendWR, 0, 1),
		}
	}
	r := &i.txp.ring
	return plainSource{i.dev}, &txBatch{bufs: r.bufs, sizes: r.sizes, sgl: r.sgl, lkey: r.mr.LKey(), wrs: r.wrs}
}

// txLoop reads the device and sends what it reads, until the device closes.
func (i *Interface) txLoop(src txSource, b *txBatch) error {
	for {
		n, err := src.read(b)
		i.cnt.inc(cTxBatches)
		if err != nil {
			if i.closed.Load() || errors.Is(err, tun.ErrClosed) {
				return nil
			}
			return err
		}
		ls := i.link.Load()
		if !ls.up {
			i.cnt.add(cDropDown, uint64(n))
			continue
		}
		now := i.clk.Now()
		cm := i.connectedMode()
		if b.meta.Type != tun.GSONone {
			if cm && i.cmTake(b.bufs[0][txHead-HeaderLen:txHead+b.sizes[0]], b.lkey, b.meta, ls, now) {
				continue
			}
			i.sendSegmented(b.bufs[0], b.lkey, b.sizes[0], b.meta, ls)
			continue
		}
		wrs := b.wrs[:0]
		for k := 0; k < n; k++ {
			if cm && i.cmTake(b.bufs[k][txHead-HeaderLen:txHead+b.sizes[k]], b.lkey, b.meta, ls, now) {
				continue
			}
			pkt := b.bufs[k][txHead : txHead+b.sizes[k]]
			var at csumAt
			if b.meta.NeedsCsum {
				var ok bool
				if at, ok = i.partialCsum(pkt, b.meta); !ok {
					continue
				}
			}
			ah, qpn, etype, ok := i.dest(pkt, ls, now, true, at.pending())
			if !ok {
				continue
			}
			wrs = append(wrs, inPlaceWR(b.bufs[k][txHead-HeaderLen:txHead], len(pkt), b.sgl[k][:], b.lkey,
				uint64(k), etype, at, ah, qpn, ls))
		}
		if len(wrs) > 0 {
			i.postTx(wrs)
		}
	}
}

// inPlaceWR is the one-SGE send of a packet of n bytes that lies just after hdr, the
// IPoIB header's head-room in its read buffer.
func inPlaceWR(hdr []byte, n int, sgl []hca.SGE, lkey uint32, wrid uint64, etype uint16, at csumAt, ah *hca.AH, qpn uint32, ls *linkState) hca.SendWR {
	binary.BigEndian.PutUint32(hdr, uint32(etype)<<16)
	sgl[0] = hca.SGE{Addr: hca.BufAddr(hdr), Length: uint32(n + HeaderLen), LKey: lkey}
	wr := hca.SendWR{
		WRID: wrid, SGL: sgl, Opcode: hca.WRSend, SendFlags: hca.SendSignaled,
		AH: ah, RemoteQPN: qpn, RemoteQKey: ls.qkey,
	}
	at.apply(&wr)
	return wr
}
