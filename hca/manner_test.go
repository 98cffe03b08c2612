package hca

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// mannerDevice is a device with do-nothing UD and RC transports and the given manner.
func mannerDevice(t *testing.T, m Manner) *Device {
	t.Helper()
	d, err := NewDevice(Config{Name: "pib_0", NodeGUID: 0x0002c90300000300, Manner: m,
		Transports: map[QPType]Transport{QPTypeUD: nopTransport{}, QPTypeRC: &queueTransport{}}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// queueTransport keeps every send queued until complete, and reports them
// (QPInspector), as a connected transport does until the peer acknowledges.
type queueTransport struct {
	nopTransport
	mu     sync.Mutex
	queued map[*QP]int
}

func (q *queueTransport) PostSend(qp *QP, _ *SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queued == nil {
		q.queued = map[*QP]int{}
	}
	q.queued[qp]++
	return nil
}

func (q *queueTransport) complete(qp *QP) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.queued, qp)
}

func (q *queueTransport) InspectQP(qp *QP) *TransportInfo {
	q.mu.Lock()
	defer q.mu.Unlock()
	return &TransportInfo{SendQueued: q.queued[qp]}
}

// mannerEnv is a context, PD, CQ with a channel and a registered buffer.
type mannerEnv struct {
	d   *Device
	ctx *Context
	pd  *PD
	ch  *CompChannel
	cq  *CQ
	buf []byte
	mr  *MR // LOCAL_WRITE
	ro  *MR // no LOCAL_WRITE
}

func newMannerEnv(t *testing.T, m Manner) *mannerEnv {
	t.Helper()
	e := &mannerEnv{d: mannerDevice(t, m)}
	e.ctx = e.d.Open()
	e.pd, _ = e.ctx.AllocPD()
	e.ch = e.ctx.CreateCompChannel()
	var err error
	if e.cq, err = e.ctx.CreateCQ(8, e.ch); err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, 8192)
	if e.mr, err = e.pd.RegMR(e.buf[:4096], AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if e.ro, err = e.pd.RegMR(e.buf[4096:], AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *mannerEnv) qp(t *testing.T, typ QPType, sendWR uint32) *QP {
	t.Helper()
	qp, err := e.pd.CreateQP(QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: typ, Cap: QPCap{MaxSendWR: sendWR, MaxRecvWR: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// udInit is a UD QP in INIT with Q_Key 1.
func (e *mannerEnv) udInit(t *testing.T) *QP {
	t.Helper()
	qp := e.qp(t, QPTypeUD, 4)
	mustModify(t, qp, QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrQKey)
	return qp
}

// udRTS is a UD QP in RTS with Q_Key 0x11, and an AH to send with.
func (e *mannerEnv) udRTS(t *testing.T) (*QP, *AH) {
	t.Helper()
	qp := e.qp(t, QPTypeUD, 4)
	mustModify(t, qp, QPAttr{QPState: QPStateInit, PortNum: 1, QKey: 0x11}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrQKey)
	mustModify(t, qp, QPAttr{QPState: QPStateRTR}, QPAttrState)
	mustModify(t, qp, QPAttr{QPState: QPStateRTS}, QPAttrState|QPAttrSQPSN)
	ah, err := e.pd.CreateAH(AHAttr{DLID: 2, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	return qp, ah
}

func mustModify(t *testing.T, qp *QP, a QPAttr, mask QPAttrMask) {
	t.Helper()
	if err := qp.Modify(&a, mask); err != nil {
		t.Fatal(err)
	}
}

// toRTS brings an RC QP to RTS with the given timeout.
func toRTS(t *testing.T, qp *QP, timeout uint8) {
	t.Helper()
	mustModify(t, qp, QPAttr{QPState: QPStateInit, PortNum: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags)
	mustModify(t, qp, QPAttr{QPState: QPStateRTR, PathMTU: MTU1024, DestQPNum: 0x99, AHAttr: AHAttr{DLID: 2, PortNum: 1}},
		QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer)
	mustModify(t, qp, QPAttr{QPState: QPStateRTS, Timeout: timeout, RetryCnt: 7, RNRRetry: 7},
		QPAttrState|QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic)
}

func (e *mannerEnv) recv(t *testing.T, qp *QP, mr *MR) error {
	t.Helper()
	_, err := qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}})
	return err
}

// Each pitfall check the hca makes: a program that falls into it is warned once, naming
// the rule; one that does the right thing is not.
func TestPitfalls(t *testing.T) {
	for _, c := range []struct {
		rule      string
		bad, good func(t *testing.T, e *mannerEnv)
	}{
		{"psn_width",
			func(t *testing.T, e *mannerEnv) {
				qp := e.qp(t, QPTypeRC, 4)
				mustModify(t, qp, QPAttr{QPState: QPStateInit, PortNum: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags)
				mustModify(t, qp, QPAttr{QPState: QPStateRTR, PathMTU: MTU1024, DestQPNum: 0x99, RQPSN: 0x1000000, AHAttr: AHAttr{DLID: 2, PortNum: 1}},
					QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer)
			},
			func(t *testing.T, e *mannerEnv) { toRTS(t, e.qp(t, QPTypeRC, 4), 14) }},
		{"reset_loses_wrs",
			func(t *testing.T, e *mannerEnv) {
				qp := e.udInit(t)
				e.recv(t, qp, e.mr)
				mustModify(t, qp, QPAttr{QPState: QPStateReset}, QPAttrState)
			},
			func(t *testing.T, e *mannerEnv) {
				qp := e.udInit(t)
				e.recv(t, qp, e.mr)
				mustModify(t, qp, QPAttr{QPState: QPStateErr}, QPAttrState) // flushed with completions
				mustModify(t, qp, QPAttr{QPState: QPStateReset}, QPAttrState)
			}},
		{"unsignaled_fill",
			func(t *testing.T, e *mannerEnv) {
				qp := e.qp(t, QPTypeRC, 4)
				toRTS(t, qp, 14)
				for range 4 {
					qp.PostSend([]SendWR{{Opcode: WRSend}})
				}
			},
			func(t *testing.T, e *mannerEnv) {
				qp := e.qp(t, QPTypeRC, 4)
				toRTS(t, qp, 14)
				for i := range 12 {
					f := SendFlags(0)
					if i%4 == 3 {
						f = SendSignaled
					}
					qp.PostSend([]SendWR{{Opcode: WRSend, SendFlags: f}})
				}
			}},
		{"destroy_outstanding",
			func(t *testing.T, e *mannerEnv) {
				qp := e.qp(t, QPTypeRC, 4) // the queueing transport: sends stay queued
				toRTS(t, qp, 14)
				qp.PostSend([]SendWR{{Opcode: WRSend, SendFlags: SendSignaled}})
				qp.Destroy()
			},
			func(t *testing.T, e *mannerEnv) {
				qp := e.qp(t, QPTypeRC, 4)
				toRTS(t, qp, 14)
				e.recv(t, qp, e.mr) // receives may be outstanding
				qp.PostSend([]SendWR{{Opcode: WRSend, SendFlags: SendSignaled}})
				qp.tr.(*queueTransport).complete(qp)
				qp.Destroy()
			}},
		{"destroy_unacked_cq",
			func(t *testing.T, e *mannerEnv) {
				e.cq.ReqNotify(false)
				e.cq.Push(&WC{WRID: 1}, false)
				<-e.ch.Events()
				e.cq.Destroy()
			},
			func(t *testing.T, e *mannerEnv) {
				e.cq.ReqNotify(false)
				e.cq.Push(&WC{WRID: 1}, false)
				e.cq.AckEvents(len(e.ch.Events()))
				e.cq.Destroy()
			}},
		{"channel_not_rearmed",
			func(t *testing.T, e *mannerEnv) {
				e.cq.ReqNotify(false)
				for i := range 9 { // one event, then the CQ (8 entries) overruns
					e.cq.Push(&WC{WRID: uint64(i)}, false)
				}
			},
			func(t *testing.T, e *mannerEnv) {
				var wc [8]WC
				for i := range 20 {
					e.cq.ReqNotify(false)
					e.cq.Push(&WC{WRID: uint64(i)}, false)
					<-e.ch.Events()
					e.cq.AckEvents(1)
					e.cq.Poll(wc[:])
				}
			}},
		{"rc_timeout_infinite",
			func(t *testing.T, e *mannerEnv) { toRTS(t, e.qp(t, QPTypeRC, 4), 0) },
			func(t *testing.T, e *mannerEnv) { toRTS(t, e.qp(t, QPTypeRC, 4), 14) }},
		{"ud_qkey_high_bit",
			func(t *testing.T, e *mannerEnv) {
				qp, ah := e.udRTS(t)
				qp.PostSend([]SendWR{{Opcode: WRSend, AH: ah, RemoteQPN: 0x99, RemoteQKey: 0x80001234}})
			},
			func(t *testing.T, e *mannerEnv) {
				qp, ah := e.udRTS(t)
				qp.PostSend([]SendWR{{Opcode: WRSend, AH: ah, RemoteQPN: 0x99, RemoteQKey: 0x1234}})
			}},
		{"recv_no_local_write",
			func(t *testing.T, e *mannerEnv) {
				qp := e.udInit(t)
				e.recv(t, qp, e.ro)
			},
			func(t *testing.T, e *mannerEnv) {
				qp := e.udInit(t)
				e.recv(t, qp, e.mr)
			}},
	} {
		t.Run(c.rule, func(t *testing.T) {
			bad := newMannerEnv(t, Manner{})
			c.bad(t, bad)
			if n := bad.d.PitfallCounts()[c.rule]; n != 1 {
				t.Errorf("a program falling into %s: the check fired %d times, want once (counts %v)", c.rule, n, bad.d.PitfallCounts())
			}
			good := newMannerEnv(t, Manner{})
			c.good(t, good)
			for name, n := range good.d.PitfallCounts() {
				if n != 0 {
					t.Errorf("a correct program: pitfall %s fired %d times", name, n)
				}
			}
			off := newMannerEnv(t, Manner{Pitfalls: PitfallsOff})
			c.bad(t, off)
			if n := off.d.PitfallCounts()[c.rule]; n != 0 {
				t.Errorf("pitfalls off: %s counted %d", c.rule, n)
			}
		})
	}
}

// Strict mode fails the verb that falls into a pitfall, with EINVAL naming the rule.
func TestPitfallsStrict(t *testing.T) {
	e := newMannerEnv(t, Manner{Pitfalls: PitfallsStrict})
	qp := e.udInit(t)
	err := e.recv(t, qp, e.ro)
	if !errors.Is(err, syscall.EINVAL) || err == nil || !strings.Contains(err.Error(), "recv_no_local_write") {
		t.Fatalf("post_recv into a read-only MR in strict mode: %v", err)
	}
	if qp.rqLen() != 0 {
		t.Fatal("the refused receive was posted")
	}
	uc := e.qp(t, QPTypeRC, 4)
	toRTS(t, uc, 14)
	uc.PostSend([]SendWR{{Opcode: WRSend, SendFlags: SendSignaled}})
	if err := uc.Destroy(); err == nil || !strings.Contains(err.Error(), "destroy_outstanding") {
		t.Fatalf("destroy with a send outstanding in strict mode: %v", err)
	}
	rc := e.qp(t, QPTypeRC, 4)
	mustModify(t, rc, QPAttr{QPState: QPStateInit, PortNum: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags)
	err = rc.Modify(&QPAttr{QPState: QPStateRTR, PathMTU: MTU1024, DestQPNum: 0x99, RQPSN: 1 << 24, AHAttr: AHAttr{DLID: 2, PortNum: 1}},
		QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer)
	if err == nil || rc.State() != QPStateInit {
		t.Fatalf("rq_psn wider than 24 bits in strict mode: %v, state %v", err, rc.State())
	}
}

// lowest_qpn hands out the lowest free number; by default numbers move on.
func TestLowestQPN(t *testing.T) {
	for _, lowest := range []bool{false, true} {
		e := newMannerEnv(t, Manner{LowestQPN: lowest})
		a, b := e.qp(t, QPTypeUD, 1), e.qp(t, QPTypeUD, 1)
		na := a.Num()
		a.Destroy()
		c := e.qp(t, QPTypeUD, 1)
		if got := c.Num() == na; got != lowest {
			t.Errorf("lowest_qpn %v: QPs %#x %#x, after destroying the first the next got %#x", lowest, na, b.Num(), c.Num())
		}
	}
}

// random_error_fields scrambles what ibv_poll_cq(3) leaves undefined in an error
// completion, and only that.
func TestRandomErrorFields(t *testing.T) {
	e := newMannerEnv(t, Manner{RandomErrorFields: true})
	var seen int
	for i := range 8 {
		e.cq.Push(&WC{WRID: uint64(i), Status: WCWRFlushErr, QPNum: 0x48, VendorErr: 7}, false)
		var wc [1]WC
		e.cq.Poll(wc[:])
		if wc[0].WRID != uint64(i) || wc[0].Status != WCWRFlushErr || wc[0].QPNum != 0x48 || wc[0].VendorErr != 7 {
			t.Fatalf("defined fields changed: %+v", wc[0])
		}
		if wc[0].ByteLen != 0 || wc[0].SrcQP != 0 || wc[0].SLID != 0 {
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("undefined fields of error completions stayed zero")
	}
	e.cq.Push(&WC{WRID: 9, Status: WCSuccess, ByteLen: 5}, false)
	var wc [1]WC
	if e.cq.Poll(wc[:]); wc[0].ByteLen != 5 || wc[0].SrcQP != 0 {
		t.Fatalf("a successful completion was changed: %+v", wc[0])
	}
}
