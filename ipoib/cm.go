package ipoib

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/inet"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/tun"
	"github.com/pibgw/pibgw/wire"
)

// Connected mode (RFC 4755), as Linux's ipoib_cm.c does it. Connections are one-way: a
// TX RC QP toward each peer we send to, made on demand by the IB CM, and an RX RC QP for
// each peer that connected to us, its receives taken from one SRQ. A message is the
// 4-byte header and one IP packet of up to 65520 bytes: the kernel's 64 KiB segment goes
// out as one RC SEND and reaches the peer's stack as one packet, where datagram mode
// cuts it into path-MTU packets and merges them again.
//
// The interface listens on both service ID forms at all times (a datagram-mode Linux
// host accepts connections too) and connects only in connected mode, to peers whose
// hardware address has the 0x80 flag. pibgw advertises the flag while the interface is
// in connected mode, so a datagram-mode host is reached over UD at its MTU.

const (
	// cmServiceIDLinux | UD QPN is the service ID Linux listens on and connects to
	// (ipoib_cm.c IPOIB_CM_IETF_ID); cmServiceIDAlt | UD QPN is the other reading of
	// RFC 4755 §6.3 (Solaris listens on both).
	cmServiceIDLinux = 0x1000000000000000
	cmServiceIDAlt   = 0x0100000000000000
	// ConnectedMTU is the interface MTU in connected mode (Linux IPOIB_CM_MTU).
	ConnectedMTU = 65520
	// cmRecvMTU is the receive size advertised in REQ/REP private data: the header and
	// a ConnectedMTU packet.
	cmRecvMTU = ConnectedMTU + HeaderLen
	// cmPrivateLen: be32 UD QPN, be32 receive MTU (ipoib_cm.c struct ipoib_cm_data).
	cmPrivateLen = 8
	// cmSRQLen receive buffers of 64 KiB are shared by every RX connection. Linux posts
	// ipoib_recvq_size (256) because its HCA fills them while the CPU is elsewhere; here
	// a message is scattered into a buffer by the goroutine that delivers it, and the
	// interface writes it to the device and re-posts the buffer when the port runs the
	// completion handlers: after at most hca.RxBudget packets. Each may be a whole
	// message — a UDP link's batch can hold a ring's worth of small ones from each of
	// several senders — so the SRQ holds that many: short of a buffer the responder
	// answers RNR, and IPoIB-CM's RNR retry count of 0 ends the connection. (16 buffers,
	// as before, stayed in the CPU's cache better — 2.3 times cheaper a scatter than
	// 128 — but one sender's 32 small messages failed the connection thousands of times
	// a second; 64 moved TCP across hosts and in one process as fast as 16, alternating.)
	cmSRQLen = hca.RxBudget
	// cmRxOff is where a receive lands in its buffer: the header, then the IP packet at
	// tun.MinOffset, with room for the virtio-net header before it.
	cmRxOff = tun.MinOffset - HeaderLen
	// DefaultCMIdleTimeout reaps a connection idle this long (Linux IPOIB_CM_RX_TIMEOUT);
	// connections are checked every 1.5 × the timeout (IPOIB_CM_RX_DELAY).
	DefaultCMIdleTimeout = 512 * time.Second
	// cmMaxQueued packets wait per connection being set up.
	cmMaxQueued = 16
	// cmTxSlots messages are in flight at once per interface (the send ring's slots and
	// the TX QPs' MaxSendWR); a peer's SRQ takes them in one batch (cmSRQLen). Across
	// hosts a message's slot is free again only when its ACK is back through the switch
	// process: with four the sender waited for ACKs (multi-host connected mode 6.0-6.1 ->
	// 6.9-7.4 Gbit/s with eight), and with eight too once the machine moved 10 Gbit/s
	// (2026-11-28, the two alternating, iperf3 8 s: eight 10.0, sixteen 10.9, 32 11.0
	// Gbit/s, medians of 13, 7 and 9; 64, or RC's window of 256 packets raised to 1,024,
	// no faster). A slot is held for an ACK's round trip whatever the message's size, so
	// the ring also bounds a host's small messages per round trip. Linux's
	// ipoib_sendq_size is 128.
	cmTxSlots = 32
	// cmRingSlots is the send ring: cmTxSlots messages in flight and the transmit loop's
	// read buffer (cmState.spare).
	cmRingSlots = cmTxSlots + 1
	// cmSlotLen is a send-ring slot: a read of the device, head-room and the largest
	// segment, so that a message read into the spare slot is sent from where it lies.
	cmSlotLen = txHead + groSegment
)

// Linux's REQ (ipoib_cm_send_req): CM response timeouts 20, max_cm_retries 15,
// responder resources 4, no transport or RNR retries ("the RFC draft warns against
// retries").
const (
	cmRespTimeout   = 20
	cmMaxCMRetries  = 15
	cmResponderRes  = 4
	cmRetryCount    = 0
	cmRNRRetryCount = 0
)

// cmTx states.
const (
	cmConnecting int32 = iota
	cmUp
	cmDead
)

var cmStateNames = [...]string{"connecting", "connected", "dead"}

// cmState is the interface's connected-mode side.
type cmState struct {
	cm        *ibcm.CM // nil: connected mode is not available
	mode      atomic.Int32
	listeners []*ibcm.ID
	idle      time.Duration

	mu     sync.Mutex
	closed bool
	tx     map[HWAddr]*cmTx
	rx     map[uint32]*cmRx // by RX QP number
	reap   clock.Timer
	rxr    *cmRxRes // made at the first REQ
	txcq   *hca.CQ  // send CQ of the TX QPs, made at the first connection
	txch   *hca.CompChannel
	bounce *hca.MR // one message, for packets that waited for their connection

	// txmu serialises posting on TX QPs and reaping their completions (the transmit
	// loop, and the CM goroutine sending what waited for a connection).
	txmu  sync.Mutex
	txwcs [16]hca.WC
	txsgl [1]hca.SGE // the send's gather list and WR, reused: no allocation per message
	txwr  [1]hca.SendWR
	// The send ring: a message is posted from a slot, which is free again at its
	// completion, so that cmTxSlots messages are in flight at once — a SEND to another
	// process completes only when its ACK is back (a round trip through the switch),
	// where in process it completes while it is posted. The transmit loop reads the
	// device into the spare slot (txReadBuf), and a message read there is posted from
	// it, a free slot becoming the spare: no copy. A message from elsewhere (the bounce
	// buffer, a device without offloads) is copied into a free slot when its peer is in
	// another process. Under txmu.
	ring     *hca.MR
	slotTx   [cmRingSlots]*cmTx // the connection a busy slot's message went out on
	slotGen  [cmRingSlots]uint16
	freeSlot []int
	slots    [cmRingSlots]ringSlot
	// spare is the slot the transmit loop reads into, nil while there is no ring; set
	// under txmu, read without it (a read never waits for a sender).
	spare atomic.Pointer[ringSlot]

	rxmu  sync.Mutex // one drain of the RX CQ at a time
	rxwcs [64]hca.WC
}

// cmTx is a connection toward a peer.
type cmTx struct {
	hw    HWAddr
	id    *ibcm.ID
	qp    *hca.QP
	state atomic.Int32
	mtu   int          // largest IP packet the peer takes (its receive MTU − 4)
	last  atomic.Int64 // clock nanoseconds of the last send
	queue [][]byte     // header + packet, waiting for the connection (under cmState.mu)
	// remote: a SEND did not complete while it was posted (the peer is in another
	// process); its messages go through the send ring. Under cmState.txmu.
	remote bool
}

// cmRx is a connection a peer made to us.
type cmRx struct {
	id   *ibcm.ID
	qp   *hca.QP
	last atomic.Int64 // clock nanoseconds of the last receive
}

// cmRxRes is the receive side shared by every RX connection.
type cmRxRes struct {
	srq  *hca.SRQ
	cq   *hca.CQ
	mr   *hca.MR
	bufs [][]byte
	sgl  [][1]hca.SGE
	wrs  []hca.RecvWR
}

// connectedMode reports whether the interface is in connected mode.
func (i *Interface) connectedMode() bool { return Mode(i.cms.mode.Load()) == Connected }

// Mode is the interface's mode.
func (i *Interface) Mode() Mode { return Mode(i.cms.mode.Load()) }

// startCM listens on the IPoIB-CM service IDs of the UD QPN (New).
func (i *Interface) startCM() error {
	c := &i.cms
	c.tx = make(map[HWAddr]*cmTx)
	c.rx = make(map[uint32]*cmRx)
	if c.cm == nil {
		return nil
	}
	for _, base := range []uint64{cmServiceIDLinux, cmServiceIDAlt} {
		id := c.cm.NewID(i.onListenCM, nil)
		if err := id.Listen(base|uint64(i.qpn), 0); err != nil {
			return fmt.Errorf("ipoib: listen on service ID %#x: %w", base|uint64(i.qpn), err)
		}
		c.listeners = append(c.listeners, id)
	}
	c.reap = i.clk.AfterFunc(c.idle*3/2, i.reapIdle)
	return nil
}

// SetMode switches the interface between datagram and connected mode while traffic
// flows, as writing /sys/class/net/ib0/mode does: connected mode sets the MTU to 65520
// and warns about multicast; datagram mode puts the MTU back to the broadcast group's −
// 4 and closes the connections we made (those peers made to us stay until they close).
func (i *Interface) SetMode(m Mode) error {
	c := &i.cms
	switch m {
	case Connected:
		if c.cm == nil {
			return errors.New("ipoib: connected mode needs the port's CM (Config.CM)")
		}
		if i.txp.off == nil {
			return errors.New("ipoib: connected mode needs a device with offloads (a kernel TUN)")
		}
	case Datagram:
	default:
		return fmt.Errorf("ipoib: unknown mode %d", m)
	}
	i.ctl.mu.Lock()
	defer i.ctl.mu.Unlock()
	if Mode(c.mode.Swap(int32(m))) == m {
		return nil
	}
	if m == Connected {
		// ipoib_set_mode's warning.
		i.log.Warn("enabling connected mode will cause multicast packet drops")
	} else {
		i.closeTx()
	}
	// ipoib_set_mode turns TSO off for connected mode (an RC message is one packet of up
	// to 65520 bytes, and the kernel must not hand over more) and back on for datagram
	// mode. Linux turns checksum offload off too, since no per-packet offload of an HCA
	// can finish a checksum over a message cut into path-MTU packets; pibgw's RC does it
	// per message (wire.SetMsgCsumPending), so the kernel leaves checksums partial and a
	// peer in this process never computes them at all.
	if sw, ok := i.dev.(tun.OffloadSwitcher); ok {
		o := tun.OffloadsAll
		if m == Connected {
			o = tun.OffloadsCsum
		}
		if err := sw.SetOffloads(o); err != nil {
			i.log.Warn("switching checksum and segmentation offloads", "mode", m.String(), "err", err)
		}
	}
	i.applyMTU()
	if ls := i.link.Load(); ls.up {
		// The hardware address's 0x80 flag changed: tell the peers.
		n := *ls
		n.hw = i.HWAddr()
		i.link.Store(&n)
		i.ctl.jobs.push(func() { i.announce(nil) })
	}
	i.log.Info("mode set", "mode", m.String(), "mtu", i.MTU())
	return nil
}

// applyMTU (ctl.mu held) sets the MTU the mode gives: 65520 in connected mode, the
// broadcast group's MTU − 4 in datagram mode (0 until the group is joined).
func (i *Interface) applyMTU() {
	mtu := 0
	if ls := i.link.Load(); ls.ibMTU > 0 {
		mtu = ls.ibMTU - HeaderLen
	}
	if i.connectedMode() {
		mtu = ConnectedMTU
	}
	if mtu == 0 || int(i.mtu.Load()) == mtu {
		return
	}
	i.mtu.Store(int32(mtu))
	if err := i.dev.SetMTU(mtu); err != nil {
		i.log.Warn("setting the MTU on the IP side", "mtu", mtu, "err", err)
	}
}

func (m Mode) String() string {
	if m == Connected {
		return "connected"
	}
	return "datagram"
}

func cmPrivate(qpn uint32) []byte {
	b := make([]byte, cmPrivateLen)
	binary.BigEndian.PutUint32(b, qpn&0xFFFFFF)
	binary.BigEndian.PutUint32(b[4:], cmRecvMTU)
	return b
}

// parseCMPrivate reads a peer's UD QPN and receive MTU (the high byte of the QPN word is
// ignored, as Linux does).
func parseCMPrivate(b []byte) (qpn uint32, mtu int, ok bool) {
	if len(b) < cmPrivateLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(b) & 0xFFFFFF, int(binary.BigEndian.Uint32(b[4:])), true
}

// ---- The passive side: RX connections.

// onListenCM accepts a REQ (ipoib_cm_req_handler): an RC QP on the SRQ, RTR and RTS
// from the REQ, the REP with our UD QPN and receive MTU.
func (i *Interface) onListenCM(id *ibcm.ID, ev *ibcm.Event) {
	if ev.Type != ibcm.EventReqReceived {
		return
	}
	if _, _, ok := parseCMPrivate(ev.Private); !ok {
		i.cnt.inc(cCMRejected)
		_ = id.SendRej(wire.RejConsumerReject, nil, nil)
		return
	}
	rx, err := i.acceptRx(id, ev.Req)
	if err != nil {
		i.cnt.inc(cCMRejected)
		i.log.Debug("connected mode: refusing a connection", "from", ev.From.SLID, "err", err)
		_ = id.SendRej(wire.RejNoQP, nil, nil)
		return
	}
	id.SetHandler(func(id *ibcm.ID, ev *ibcm.Event) { i.onRxCM(rx, ev) })
}

func (i *Interface) acceptRx(id *ibcm.ID, req *ibcm.ReqParam) (*cmRx, error) {
	c := &i.cms
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	r, err := i.rxResLocked()
	if err != nil {
		return nil, err
	}
	qp, err := i.pd.CreateQP(hca.QPInitAttr{
		SendCQ: r.cq, RecvCQ: r.cq, SRQ: r.srq, QPType: hca.QPTypeRC,
		Cap:           hca.QPCap{MaxSendWR: 1, MaxSendSGE: 1},
		IPCsumPartial: true, // writeWhole hands TCP and UDP to the kernel as CHECKSUM_PARTIAL
	})
	if err != nil {
		return nil, err
	}
	psn := rand.Uint32() & 0xFFFFFF
	err = i.initRC(qp, req.PKey)
	if err == nil {
		err = i.rtrRTS(qp, req.Path.MTU, req.Path.DLID, req.Path.SL, req.Path.PacketLifeTime,
			req.QPN, psn, req.StartingPSN, req.RetryCount, req.RNRRetryCount)
	}
	if err != nil {
		_ = qp.Destroy()
		return nil, err
	}
	rx := &cmRx{id: id, qp: qp}
	rx.last.Store(i.clk.Now().UnixNano())
	if err := id.SendRep(ibcm.RepParam{QPN: qp.Num(), StartingPSN: psn, RNRRetryCount: req.RNRRetryCount,
		SRQ: true, Private: cmPrivate(i.qpn)}); err != nil {
		_ = qp.Destroy()
		return nil, err
	}
	c.rx[qp.Num()] = rx
	return rx, nil
}

// initRC takes a new RC QP to INIT on our port, at the table index of pkey (the
// full-member entry, else the limited one).
func (i *Interface) initRC(qp *hca.QP, pkey uint16) error {
	idx := i.port.FindPKey(pkey | 0x8000)
	if idx < 0 {
		idx = i.port.FindPKey(pkey & 0x7FFF)
	}
	if idx < 0 {
		return fmt.Errorf("P_Key %#04x not in the port's table", pkey)
	}
	a := hca.QPAttr{QPState: hca.QPStateInit, PKeyIndex: uint16(idx), PortNum: i.port.Num()}
	return qp.Modify(&a, hca.QPAttrState|hca.QPAttrPKeyIndex|hca.QPAttrPort|hca.QPAttrAccessFlags)
}

// rtrRTS takes an INIT RC QP to RTR and RTS toward the peer's QP destQPN at dlid (IBA
// 10.3.1), on a path of IB MTU mtu (the port's active MTU at most). rqPSN is the Starting
// PSN this side sent in its REQ or REP, sqPSN the one the peer sent: a Starting PSN is
// what its sender's receive queue expects (Linux: ipoib_cm_req_handler's rq_psn is the
// REP's, ib_cm takes each side's sq_psn from the message it received).
func (i *Interface) rtrRTS(qp *hca.QP, mtu uint8, dlid uint16, sl, lifeTime uint8,
	destQPN, rqPSN, sqPSN uint32, retry, rnrRetry uint8) error {
	pmtu := hca.MTU(mtu)
	if am := i.port.ActiveMTU(); pmtu == 0 || am < pmtu {
		pmtu = am
	}
	a := hca.QPAttr{QPState: hca.QPStateRTR, PathMTU: pmtu, DestQPNum: destQPN, RQPSN: rqPSN,
		AHAttr: hca.AHAttr{DLID: dlid, SL: sl, PortNum: i.port.Num()}}
	if err := qp.Modify(&a, hca.QPAttrState|hca.QPAttrAV|hca.QPAttrPathMTU|hca.QPAttrDestQPN|
		hca.QPAttrRQPSN|hca.QPAttrMaxDestRdAtomic|hca.QPAttrMinRNRTimer); err != nil {
		return err
	}
	a = hca.QPAttr{QPState: hca.QPStateRTS, SQPSN: sqPSN, Timeout: min(lifeTime+1, 31), RetryCnt: retry, RNRRetry: rnrRetry}
	return qp.Modify(&a, hca.QPAttrState|hca.QPAttrSQPSN|hca.QPAttrTimeout|hca.QPAttrRetryCnt|
		hca.QPAttrRNRRetry|hca.QPAttrMaxQPRdAtomic)
}

// rxResLocked makes the SRQ, its CQ and buffers the first time (mu held).
func (i *Interface) rxResLocked() (*cmRxRes, error) {
	c := &i.cms
	if c.rxr != nil {
		return c.rxr, nil
	}
	r := &cmRxRes{}
	var err error
	fail := func() (*cmRxRes, error) {
		r.free()
		return nil, err
	}
	if r.srq, err = i.pd.CreateSRQ(hca.SRQInitAttr{MaxWR: cmSRQLen, MaxSGE: 1}); err != nil {
		return fail()
	}
	if r.cq, err = i.hctx.CreateCQ(2*cmSRQLen, nil); err != nil {
		return fail()
	}
	slot := tun.MinOffset + ConnectedMTU
	mem := make([]byte, cmSRQLen*slot)
	if r.mr, err = i.pd.RegMR(mem, hca.AccessLocalWrite); err != nil {
		return fail()
	}
	r.bufs = make([][]byte, cmSRQLen)
	r.sgl = make([][1]hca.SGE, cmSRQLen)
	r.wrs = make([]hca.RecvWR, cmSRQLen)
	for k := range r.bufs {
		r.bufs[k] = mem[k*slot : (k+1)*slot : (k+1)*slot]
		r.sgl[k][0] = hca.SGE{Addr: hca.BufAddr(r.bufs[k][cmRxOff:]), Length: cmRecvMTU, LKey: r.mr.LKey()}
		r.wrs[k] = hca.RecvWR{WRID: uint64(k), SGL: r.sgl[k][:]}
	}
	if _, err = r.srq.PostRecv(r.wrs); err != nil {
		return fail()
	}
	r.cq.SetCompHandler(i.onCMCompletions)
	c.rxr = r
	return r, nil
}

func (r *cmRxRes) free() {
	if r.cq != nil {
		r.cq.SetCompHandler(nil)
		_ = r.cq.Destroy()
	}
	if r.srq != nil {
		_ = r.srq.Destroy()
	}
	if r.mr != nil {
		_ = r.mr.Dereg()
	}
}

// onRxCM follows an RX connection: established on the RTU, closed by the peer's DREQ
// or a failed REP.
func (i *Interface) onRxCM(rx *cmRx, ev *ibcm.Event) {
	switch ev.Type {
	case ibcm.EventRTUReceived, ibcm.EventUserEstablished:
		i.cnt.inc(cCMRxConnected)
	case ibcm.EventDReqReceived:
		_ = rx.id.SendDRep(nil)
		i.dropRx(rx)
	case ibcm.EventRepError, ibcm.EventRejReceived:
		i.cnt.inc(cCMFailed)
		i.dropRx(rx)
	}
}

// dropRx forgets an RX connection and destroys its QP (its outstanding receives belong
// to the SRQ and stay there).
func (i *Interface) dropRx(rx *cmRx) {
	c := &i.cms
	c.mu.Lock()
	if c.rx[rx.qp.Num()] != rx {
		c.mu.Unlock()
		return
	}
	delete(c.rx, rx.qp.Num())
	c.mu.Unlock()
	_ = rx.qp.Destroy()
}

// onCMCompletions is the RX CQ's handler: like the UD receive path, it runs on the
// goroutine that delivered the message and writes each packet to the device whole.
func (i *Interface) onCMCompletions(cq *hca.CQ) {
	c := &i.cms
	for cq.Pending() > 0 {
		if !c.rxmu.TryLock() {
			return
		}
		for {
			n := cq.Poll(c.rxwcs[:])
			if n == 0 {
				break
			}
			i.cmReceive(c.rxwcs[:n])
		}
		c.rxmu.Unlock()
	}
}

func (i *Interface) cmReceive(wcs []hca.WC) {
	c := &i.cms
	r := c.rxr
	now := i.clk.Now().UnixNano()
	var lastQP uint32
	for k := range wcs {
		wc := &wcs[k]
		slot := int(wc.WRID)
		if slot < 0 || slot >= len(r.bufs) {
			continue
		}
		if wc.Status != hca.WCSuccess {
			if wc.Status != hca.WCWRFlushErr {
				i.cnt.inc(cDropRecvError)
			}
			i.cmRepost(r, slot)
			continue
		}
		if wc.QPNum != lastQP {
			lastQP = wc.QPNum
			c.mu.Lock()
			if rx := c.rx[wc.QPNum]; rx != nil {
				rx.last.Store(now)
			}
			c.mu.Unlock()
		}
		buf := r.bufs[slot]
		n := int(wc.ByteLen)
		if n < HeaderLen+20 || n > cmRecvMTU {
			i.cnt.inc(cDropMalformed)
			i.cmRepost(r, slot)
			continue
		}
		etype := binary.BigEndian.Uint16(buf[cmRxOff:])
		pkt := buf[tun.MinOffset : cmRxOff+n]
		i.cnt.inc(cRxCM)
		switch {
		case etype == EtherTypeIPv4 && pkt[0]>>4 == 4,
			etype == EtherTypeIPv6 && pkt[0]>>4 == 6 && len(pkt) >= ipv6HeaderLen:
			if etype == EtherTypeIPv6 && pkt[6] == protoICMPv6 && len(pkt) > ipv6HeaderLen && isND(pkt[ipv6HeaderLen]) {
				i.cnt.inc(cRxND)
				i.queueControl(etype, pkt)
				break
			}
			i.writeWhole(buf[:cmRxOff+n])
		case etype == EtherTypeARP:
			i.cnt.inc(cRxARP)
			i.queueControl(etype, pkt)
		default:
			i.cnt.inc(cDropUnknownType)
		}
		i.cmRepost(r, slot)
	}
}

func (i *Interface) cmRepost(r *cmRxRes, slot int) {
	if _, err := r.srq.PostRecv(r.wrs[slot : slot+1]); err != nil {
		i.log.Debug("re-posting a connected-mode receive buffer", "err", err)
	}
}

// writeWhole writes one received packet, at tun.MinOffset of buf, to the device.
//
// A TCP or UDP packet goes to the kernel as CHECKSUM_PARTIAL, its checksum field set to
// the pseudo-header sum, as datagram mode writes the segments it merges (groFlush): the
// message came over an RC connection, whose ICRC (IBA 7.8.1) covers it end to end, so
// the receive side is an HCA that reports the IP checksum good (Linux ipoib sets
// CHECKSUM_UNNECESSARY for IB_WC_IP_CSUM_OK). TUN has no such flag for writes — it
// ignores VIRTIO_NET_HDR_F_DATA_VALID — but local delivery takes a partial checksum as
// checked (skb_csum_unnecessary), and a packet the kernel forwards gets its checksum
// completed on the way out. The kernel then never sums the 64 KiB again on receive.
// An IPv4 UDP datagram without a checksum (0, RFC 768) is left as it is.
func (i *Interface) writeWhole(buf []byte) {
	var err error
	if i.txp.off == nil {
		err = i.writeRaw(buf)
	} else {
		ip := buf[tun.MinOffset:]
		var g tun.GSO
		if iphl, proto, csumOff, ok := inet.Transport(ip); ok &&
			(proto == inet.ProtoTCP || ip[0]>>4 == 6 || binary.BigEndian.Uint16(ip[iphl+csumOff:]) != 0) {
			inet.SetPartial(ip, iphl, proto, csumOff)
			g = tun.GSO{NeedsCsum: true, CsumStart: uint16(iphl), CsumOffset: uint16(csumOff)}
		}
		err = i.txp.off.WriteGSO(buf, tun.MinOffset, g, nil)
	}
	if err != nil {
		i.cnt.inc(cDropTunWrite)
		return
	}
	i.cnt.inc(cRxPackets)
	i.cnt.add(cRxBytes, uint64(len(buf)-tun.MinOffset))
}

// writeRaw writes the packet at tun.MinOffset of buf to the device as it is (no
// offload metadata).
func (i *Interface) writeRaw(buf []byte) error {
	if i.txp.off != nil {
		return i.txp.off.WriteGSO(buf, tun.MinOffset, tun.GSO{}, nil)
	}
	_, err := i.dev.Write([][]byte{buf}, tun.MinOffset)
	return err
}

// ---- The active side: TX connections.

// cmRoute is the connection a unicast packet to hw goes over in connected mode, made
// (and started) if there is none; nil when the peer does not do connected mode.
func (i *Interface) cmRoute(hw HWAddr) *cmTx {
	if hw.Flags()&FlagConnected == 0 {
		return nil
	}
	c := &i.cms
	c.mu.Lock()
	tx := c.tx[hw]
	if tx == nil && !c.closed {
		tx = &cmTx{hw: hw}
		tx.last.Store(i.clk.Now().UnixNano())
		c.tx[hw] = tx
		c.mu.Unlock()
		go i.connectTx(tx)
		return tx
	}
	c.mu.Unlock()
	return tx
}

// connectTx creates the TX QP and sends the REQ (ipoib_cm_tx_init).
func (i *Interface) connectTx(tx *cmTx) {
	c := &i.cms
	i.nb.mu.RLock()
	path, ok := i.nb.paths[tx.hw.GID()]
	i.nb.mu.RUnlock()
	if !ok {
		i.failTx(tx, errors.New("no path"))
		return
	}
	cq, err := i.txCQ()
	if err != nil {
		i.failTx(tx, err)
		return
	}
	qp, err := i.pd.CreateQP(hca.QPInitAttr{
		SendCQ: cq, RecvCQ: cq, QPType: hca.QPTypeRC,
		Cap: hca.QPCap{MaxSendWR: cmTxSlots, MaxRecvWR: 1, MaxSendSGE: 2, MaxRecvSGE: 1},
	})
	if err != nil {
		i.failTx(tx, err)
		return
	}
	if err := i.initRC(qp, i.pkey); err != nil {
		_ = qp.Destroy()
		i.failTx(tx, err)
		return
	}
	psn := rand.Uint32() & 0xFFFFFF
	id := c.cm.NewID(func(id *ibcm.ID, ev *ibcm.Event) { i.onTxCM(tx, path, psn, ev) }, nil)
	c.mu.Lock()
	tx.qp, tx.id = qp, id
	closed := c.closed || c.tx[tx.hw] != tx
	c.mu.Unlock()
	if closed {
		i.failTx(tx, ErrClosed)
		return
	}
	err = id.SendReq(ibcm.ReqParam{
		ServiceID: cmServiceIDLinux | uint64(tx.hw.QPN()), QPN: qp.Num(), QPType: hca.QPTypeRC,
		StartingPSN: psn, PKey: i.pkey, Path: path, ResponderRes: cmResponderRes,
		RemoteCMResponseTimeout: cmRespTimeout, LocalCMResponseTimeout: cmRespTimeout,
		RetryCount: cmRetryCount, RNRRetryCount: cmRNRRetryCount, MaxCMRetries: cmMaxCMRetries,
		SRQ: true, Private: cmPrivate(i.qpn),
	})
	if err != nil {
		i.failTx(tx, err)
	}
}

// txCQ is the send CQ of every TX QP, made the first time.
func (i *Interface) txCQ() (*hca.CQ, error) {
	c := &i.cms
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.txcq != nil {
		return c.txcq, nil
	}
	ch := i.hctx.CreateCompChannel()
	cq, err := i.hctx.CreateCQ(256, ch)
	if err != nil {
		return nil, err
	}
	mem := make([]byte, tun.MinOffset+ConnectedMTU)
	mr, err := i.pd.RegMR(mem, hca.AccessLocalWrite)
	if err != nil {
		_ = cq.Destroy()
		return nil, err
	}
	ring, err := i.pd.RegMR(make([]byte, cmRingSlots*cmSlotLen), hca.AccessLocalWrite)
	if err != nil {
		_ = mr.Dereg()
		_ = cq.Destroy()
		return nil, err
	}
	c.txmu.Lock()
	c.ring, c.freeSlot = ring, c.freeSlot[:0]
	for k := range cmRingSlots {
		c.freeSlot = append(c.freeSlot, k)
		c.slotTx[k] = nil
	}
	for k := range cmRingSlots {
		c.slots[k] = ringSlot{ring.Bytes()[k*cmSlotLen : (k+1)*cmSlotLen : (k+1)*cmSlotLen], ring.LKey(), k}
	}
	c.spare.Store(&c.slots[c.takeFree()])
	c.txcq, c.txch, c.bounce = cq, ch, mr
	c.txmu.Unlock()
	return cq, nil
}

// onTxCM follows a TX connection: the REP takes the QP to RTS and the RTU goes back
// (ipoib_cm_rep_handler); a REJ, a REQ that timed out, or the peer's DREQ end it.
func (i *Interface) onTxCM(tx *cmTx, path sa.Path, psn uint32, ev *ibcm.Event) {
	switch ev.Type {
	case ibcm.EventRepReceived:
		_, mtu, ok := parseCMPrivate(ev.Private)
		if !ok || mtu <= HeaderLen+20 {
			_ = tx.id.SendRej(wire.RejConsumerReject, nil, nil)
			i.failTx(tx, errors.New("REP without IPoIB-CM private data"))
			return
		}
		rep := ev.Rep
		if err := i.rtrRTS(tx.qp, path.MTU, path.DLID, path.SL, path.PacketLifeTime,
			rep.QPN, psn, rep.StartingPSN, cmRetryCount, rep.RNRRetryCount); err != nil {
			_ = tx.id.SendRej(wire.RejConsumerReject, nil, nil)
			i.failTx(tx, err)
			return
		}
		if err := tx.id.SendRTU(nil); err != nil {
			i.failTx(tx, err)
			return
		}
		tx.mtu = min(mtu, cmRecvMTU) - HeaderLen
		c := &i.cms
		c.mu.Lock()
		tx.state.Store(cmUp)
		q := tx.queue
		tx.queue = nil
		c.mu.Unlock()
		i.cnt.inc(cCMTxConnected)
		i.log.Debug("connected", "peer", tx.hw.String(), "qpn", tx.qp.Num(), "remote_qpn", rep.QPN, "mtu", tx.mtu)
		i.sendWaiting(tx, q)
	case ibcm.EventRejReceived, ibcm.EventReqError, ibcm.EventRepError:
		i.failTx(tx, fmt.Errorf("connection refused or timed out (%v, reason %d)", ev.Type, ev.Reason))
	case ibcm.EventDReqReceived:
		_ = tx.id.SendDRep(nil)
		i.dropTx(tx, false)
	}
}

// failTx ends a connection that could not be made or broke (counted cm_failed): what
// waited for it is dropped, and the neighbours at that address resolve again
// (ipoib_neigh_free), as Linux does after a REJ or a TX error other than a flush.
func (i *Interface) failTx(tx *cmTx, err error) {
	if i.dropTx(tx, true) {
		i.cnt.inc(cCMFailed)
		i.log.Debug("connected mode: connection failed", "peer", tx.hw.String(), "err", err)
	}
}

// dropTx forgets a TX connection; it reports whether this call did. forget also
// forgets the neighbours at its address.
func (i *Interface) dropTx(tx *cmTx, forget bool) bool {
	c := &i.cms
	c.mu.Lock()
	if tx.state.Swap(cmDead) == cmDead {
		c.mu.Unlock()
		return false
	}
	if c.tx[tx.hw] == tx {
		delete(c.tx, tx.hw)
	}
	dropped := len(tx.queue)
	tx.queue = nil
	id, qp := tx.id, tx.qp
	c.mu.Unlock()
	i.cnt.add(cDropNoNeighbor, uint64(dropped))
	if id != nil {
		id.Destroy() // DREQ if it was established
	}
	if qp != nil {
		// Under txmu: the transmit loop may be waiting for a completion on it. The
		// slots of its messages are free again; a completion of theirs still in the
		// CQ finds its slot's generation moved on and frees nothing.
		c.txmu.Lock()
		_ = qp.Destroy()
		for k, t := range c.slotTx {
			if t == tx {
				c.releaseSlot(k)
			}
		}
		c.txmu.Unlock()
	}
	if forget {
		i.nb.mu.Lock()
		for _, n := range i.nb.m {
			if n.hw == tx.hw {
				i.cnt.add(cDropNoNeighbor, uint64(i.nb.forget(n)))
			}
		}
		i.nb.mu.Unlock()
	}
	return true
}

// closeTx ends every TX connection (datagram mode, Close).
func (i *Interface) closeTx() {
	c := &i.cms
	c.mu.Lock()
	txs := slices.Collect(maps.Values(c.tx))
	c.mu.Unlock()
	for _, tx := range txs {
		i.dropTx(tx, false)
	}
}

// cmTake sends an IP packet read from the device — msg[HeaderLen:], msg in a buffer
// registered as lkey, its first HeaderLen bytes head-room for the header — over a
// connection if connected mode applies to it, and reports whether it took the packet
// (sent, queued or dropped). Multicast, ND, and peers without the 0x80 flag are left
// to the UD path.
func (i *Interface) cmTake(msg []byte, lkey uint32, meta tun.GSO, ls *linkState, now time.Time) bool {
	pkt := msg[HeaderLen:]
	if len(pkt) < 20 {
		return false
	}
	var dst [16]byte
	var d4 [4]byte
	var etype uint16
	switch pkt[0] >> 4 {
	case 4:
		d4 = [4]byte(pkt[16:20])
		if d4[0]&0xF0 == 0xE0 || i.addrs.Load().isBroadcast(d4) {
			return false
		}
		etype = EtherTypeIPv4
	case 6:
		if len(pkt) < ipv6HeaderLen || pkt[24] == 0xFF {
			return false
		}
		if pkt[6] == protoICMPv6 && len(pkt) > ipv6HeaderLen && isND(pkt[ipv6HeaderLen]) {
			return false
		}
		dst = [16]byte(pkt[24:40])
		etype = EtherTypeIPv6
	default:
		return false
	}
	addr := netip.AddrFrom16(dst)
	if etype == EtherTypeIPv4 {
		addr = netip.AddrFrom4(d4)
	}
	_, hw, ok := i.neighborLookup(i.nextHop(addr), now)
	if !ok {
		if len(pkt) > ls.ibMTU-HeaderLen {
			// Too big for UD: it waits for the neighbour here (sendQueued takes it over
			// the connection), where the UD path would answer it with an ICMP.
			i.resolve(i.nextHop(addr), now, etype, pkt, meta.NeedsCsum)
			return true
		}
		return false
	}
	tx := i.cmRoute(hw)
	if tx == nil {
		return false
	}
	var at csumAt
	if meta.NeedsCsum {
		cs, co := int(meta.CsumStart), int(meta.CsumOffset)
		if cs+co+2 > len(pkt) {
			i.cnt.inc(cDropMalformed)
			return true
		}
		_, proto, _, tok := inet.Transport(pkt)
		at = csumAt{uint16(cs), uint16(co), tok && proto == inet.ProtoUDP}
	}
	switch tx.state.Load() {
	case cmUp:
		if len(pkt) > tx.mtu {
			i.tooBig(pkt, tx.mtu)
			return true
		}
		tx.last.Store(now.UnixNano())
		binary.BigEndian.PutUint32(msg, uint32(etype)<<16)
		i.cms.txmu.Lock()
		i.cmPostLocked(tx, msg, lkey, at)
		i.cms.txmu.Unlock()
	case cmConnecting:
		if at.pending() {
			// Queued until the connection is up, then sent from a copy: done here.
			inet.CompleteAt(pkt[at.start:], int(at.offset), at.udp)
		}
		i.cmEnqueue(tx, etype, pkt)
	default:
		return false
	}
	return true
}

// cmPostLocked sends one message (msg, in a buffer registered as lkey) on tx's QP; msg
// may be reused on return. In process the SEND completes while it is posted, and msg is
// sent as it is; toward another process (tx.remote, learnt from the first SEND that did
// not) it is copied into a free slot of the send ring. Without a free slot it waits for
// a completion. A completion in error other than a flush ends the
// connection (ipoib_cm_handle_tx_wc). txmu is held.
func (i *Interface) cmPostLocked(tx *cmTx, msg []byte, lkey uint32, at csumAt) {
	c := &i.cms
	if tx.state.Load() != cmUp || c.ring == nil || len(msg) > cmSlotLen {
		i.cnt.inc(cDropSendError)
		return
	}
	i.cmReapLocked(false)
	if len(c.freeSlot) == 0 {
		// Every message of the ring in flight: across processes, until the peer's ACKs
		// come back (the counter tells a multi-host sender waiting on the round trip).
		i.cnt.inc(cCMTxRingFull)
	}
	for len(c.freeSlot) == 0 {
		if !i.cmReapLocked(true) {
			return // closing
		}
	}
	k := c.takeFree()
	inSpare := c.spare.Load().holds(msg)
	if inSpare {
		// Read into the spare slot: sent from there, the free slot is the next spare.
		k = c.spare.Swap(&c.slots[k]).k
	}
	c.slotTx[k] = tx
	gen := c.slotGen[k]
	c.txsgl[0] = hca.SGE{Addr: hca.BufAddr(msg), Length: uint32(len(msg)), LKey: lkey}
	if tx.remote && !inSpare {
		buf := c.slots[k].b[:len(msg)]
		copy(buf, msg)
		c.txsgl[0] = hca.SGE{Addr: hca.BufAddr(buf), Length: uint32(len(buf)), LKey: c.ring.LKey()}
	}
	wrid := uint64(len(msg))<<32 | uint64(gen)<<16 | uint64(k)
	c.txwr[0] = hca.SendWR{WRID: wrid, SGL: c.txsgl[:], Opcode: hca.WRSend, SendFlags: hca.SendSignaled}
	if at.pending() {
		// The HCA's checksum engine finishes it over the message (from the IPoIB
		// header's end), deferred while the message stays in this process.
		c.txwr[0].SendFlags |= hca.SendIPCsum
		c.txwr[0].CsumStart, c.txwr[0].CsumOffset, c.txwr[0].CsumNoZero = at.start+HeaderLen, at.offset, at.udp
	}
	if _, err := tx.qp.PostSend(c.txwr[:]); err != nil {
		c.releaseSlot(k)
		i.cnt.inc(cDropSendError)
		return
	}
	// In process the SEND has completed already: reap it now, keeping the ring free.
	i.cmReapLocked(false)
	if !tx.remote && c.slotTx[k] == tx && c.slotGen[k] == gen {
		// It did not complete while posted: the peer is in another process. From now on
		// this connection's messages from outside the ring are copied into it; one that
		// went out from msg itself keeps msg as it is until its completion.
		tx.remote = true
		for !inSpare && c.slotTx[k] == tx && c.slotGen[k] == gen {
			if !i.cmReapLocked(true) {
				return
			}
		}
	}
}

// takeFree takes a free slot; there is one. txmu is held.
func (c *cmState) takeFree() int {
	k := c.freeSlot[len(c.freeSlot)-1]
	c.freeSlot = c.freeSlot[:len(c.freeSlot)-1]
	return k
}

// ringSlot is send-ring slot k: its memory and local key.
type ringSlot struct {
	b   []byte
	key uint32
	k   int
}

// holds reports whether msg lies inside slot s (false for a nil s: no ring).
func (s *ringSlot) holds(msg []byte) bool {
	if s == nil || len(msg) == 0 {
		return false
	}
	lo, at := hca.BufAddr(s.b), hca.BufAddr(msg)
	return at >= lo && at+uint64(len(msg)) <= lo+uint64(len(s.b))
}

// txReadBuf is the buffer the transmit loop reads the device into, with its local key:
// the send ring's spare slot once connected mode has made the ring, else the offload
// path's read buffer in g.
func (i *Interface) txReadBuf(g *gsoRing) ([]byte, uint32) {
	if r := i.cms.spare.Load(); r != nil {
		return r.b, r.key
	}
	return g.buf, g.mr.LKey()
}

// releaseSlot frees send-ring slot k; its generation moves on so that a late completion
// of the message it held frees nothing. txmu is held.
func (c *cmState) releaseSlot(k int) {
	if c.slotTx[k] == nil {
		return
	}
	c.slotTx[k] = nil
	c.slotGen[k]++
	c.freeSlot = append(c.freeSlot, k)
}

// cmReapLocked takes the send completions there are, freeing their slots; with wait it
// waits for at least one. It reports false if the interface closed while it waited.
// txmu is held.
func (i *Interface) cmReapLocked(wait bool) bool {
	c := &i.cms
	for {
		k := c.txcq.Poll(c.txwcs[:])
		if k == 0 && wait {
			_ = c.txcq.ReqNotify(false)
			if k = c.txcq.Poll(c.txwcs[:]); k == 0 {
				select {
				case cq := <-c.txch.Events():
					cq.AckEvents(1)
					continue
				case <-i.ctx.Done():
					return false
				}
			}
		}
		for _, wc := range c.txwcs[:k] {
			slot, gen := int(wc.WRID&0xFFFF), uint16(wc.WRID>>16)
			if slot >= cmRingSlots || c.slotGen[slot] != gen || c.slotTx[slot] == nil {
				continue // its connection was dropped and the slot freed already
			}
			tx := c.slotTx[slot]
			c.releaseSlot(slot)
			switch wc.Status {
			case hca.WCSuccess:
				i.cnt.inc(cTxPackets)
				i.cnt.inc(cTxCM)
				i.cnt.add(cTxBytes, wc.WRID>>32-HeaderLen)
			case hca.WCWRFlushErr:
				i.cnt.inc(cDropSendError)
			default:
				i.cnt.inc(cDropSendError)
				go i.failTx(tx, fmt.Errorf("send completed with %v", wc.Status))
			}
		}
		if k < len(c.txwcs) {
			return true
		}
		wait = false
	}
}

// cmEnqueue sends an IP packet that waited for its neighbour over tx: queued while tx
// is being set up, from the bounce buffer once it is up.
func (i *Interface) cmEnqueue(tx *cmTx, etype uint16, pkt []byte) {
	c := &i.cms
	m := make([]byte, HeaderLen+len(pkt))
	binary.BigEndian.PutUint32(m, uint32(etype)<<16)
	copy(m[HeaderLen:], pkt)
	c.mu.Lock()
	if tx.state.Load() == cmConnecting && len(tx.queue) < cmMaxQueued {
		tx.queue = append(tx.queue, m)
		c.mu.Unlock()
		return
	}
	up := tx.state.Load() == cmUp
	c.mu.Unlock()
	if !up {
		i.cnt.inc(cDropNoNeighbor)
		return
	}
	i.sendWaiting(tx, [][]byte{m})
}

// sendWaiting sends the packets that waited for tx to come up, from the bounce buffer.
func (i *Interface) sendWaiting(tx *cmTx, q [][]byte) {
	c := &i.cms
	for _, m := range q {
		if len(m)-HeaderLen > tx.mtu {
			i.tooBig(m[HeaderLen:], tx.mtu)
			continue
		}
		c.txmu.Lock()
		b := c.bounce.Bytes()[:len(m)]
		copy(b, m)
		i.cmPostLocked(tx, b, c.bounce.LKey(), csumAt{})
		c.txmu.Unlock()
	}
}

// reapIdle ends connections idle longer than the idle timeout (ipoib_cm_rx_reap; TX
// connections likewise), then re-arms itself.
func (i *Interface) reapIdle() {
	c := &i.cms
	limit := i.clk.Now().Add(-c.idle).UnixNano()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	var rxs []*cmRx
	for _, rx := range c.rx {
		if rx.last.Load() < limit {
			rxs = append(rxs, rx)
		}
	}
	var txs []*cmTx
	for _, tx := range c.tx {
		if tx.state.Load() == cmUp && tx.last.Load() < limit {
			txs = append(txs, tx)
		}
	}
	c.reap.Reset(c.idle * 3 / 2)
	c.mu.Unlock()
	for _, rx := range rxs {
		rx.id.Destroy() // DREQ
		i.dropRx(rx)
		i.cnt.inc(cCMReaped)
	}
	for _, tx := range txs {
		if i.dropTx(tx, false) {
			i.cnt.inc(cCMReaped)
		}
	}
}

// closeCM ends connected mode (Close): listeners, connections, the shared objects.
func (i *Interface) closeCM() {
	c := &i.cms
	for _, l := range c.listeners {
		l.Destroy()
	}
	i.closeTx()
	c.mu.Lock()
	c.closed = true
	if c.reap != nil {
		c.reap.Stop()
	}
	rxs := slices.Collect(maps.Values(c.rx))
	c.mu.Unlock()
	for _, rx := range rxs {
		rx.id.Destroy()
		i.dropRx(rx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rxr != nil {
		c.rxmu.Lock()
		c.rxr.free()
		c.rxmu.Unlock()
		c.rxr = nil
	}
	if c.txcq != nil {
		// Under txmu too: the transmit loop reaps the CQ under it (its wait for a
		// completion ended with the context).
		c.txmu.Lock()
		_ = c.txcq.Destroy()
		_ = c.bounce.Dereg()
		_ = c.ring.Dereg()
		c.txcq, c.ring = nil, nil
		c.spare.Store(nil)
		c.txmu.Unlock()
	}
}

// cmNeighbor describes the connection toward hw for `pibgw neigh`.
func (i *Interface) cmNeighbor(hw HWAddr, n *Neighbor) {
	c := &i.cms
	c.mu.Lock()
	defer c.mu.Unlock()
	tx := c.tx[hw]
	if tx == nil {
		return
	}
	n.Connected = tx.state.Load() == cmUp
	n.CMState = cmStateNames[tx.state.Load()]
	if tx.qp != nil {
		n.QPN = tx.qp.Num()
		if n.Connected {
			n.RemoteQPN = tx.qp.Attr().DestQPNum
		}
	}
}
