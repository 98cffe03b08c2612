package sa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// The SA client: what ipoib/ and rdmacm/ use to ask the subnet administrator for paths,
// to join and leave multicast groups and to register services. It sends from the port's
// QP1 to the master SM's LID (PortInfo:MasterSMLID) with the GSI Q_Key, matches answers
// by TID (through the port's class 0x03 response dispatcher), retries on the clock, and
// reassembles RMPP answers (ACKing as IBA 13.6.3 asks of a receiver).
//
// Answers may arrive inside SendMAD (in-process fabric) or later from another goroutine;
// the client never holds a lock across SendMAD.

// ClientOptions configures a Client; the zero value is valid.
type ClientOptions struct {
	// Clock times retries and path lifetimes; default the port's device clock.
	Clock clock.Clock
	// Timeout is how long one attempt waits for its answer (default 1 s); Retries how
	// often a request is resent after that (default 3).
	Timeout time.Duration
	Retries int
	// PathTTL is how long a cached PathRecord is used. 0 derives it from the record's
	// PacketLifeTime (4.096 µs × 2^n, at least one second); negative disables the cache.
	PathTTL time.Duration
	// PKeyIndex is the P_Key table index requests are sent with (IBA 15.4.1: the SA
	// answers on the default partition; index 0 holds it).
	PKeyIndex uint16
	// RMPPWindow is the receive window the client offers an RMPP sender; default 32.
	RMPPWindow uint32
	// OnRejoin, if set, is called after the client re-joined a group on its own
	// (client reregistration, SM change): with the new record, or the error.
	OnRejoin func(g MCGroup, err error)
	Logger   *slog.Logger
}

// Errors of the SA client.
var (
	ErrClientClosed = errors.New("sa: client closed")
	ErrTimeout      = errors.New("sa: no answer from the subnet administrator")
	ErrNoSM         = errors.New("sa: port has no master SM LID")
	ErrRMPPAborted  = errors.New("sa: RMPP transfer aborted by the sender")
	ErrBadResponse  = errors.New("sa: malformed answer")
)

// StatusError is a non-zero MAD status in an SA answer (IBA 13.4.7, 15.2.1.1).
type StatusError struct {
	Status uint16
}

func (e *StatusError) Error() string { return "sa: " + wire.SAStatusText(e.Status) }

// IsStatus reports whether err is an SA answer with the given status (e.g.
// wire.SAStatusNoRecords).
func IsStatus(err error, status uint16) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == status
}

// Preallocated errors for the statuses a steady-state caller sees, so that a failing
// query does not allocate.
var saStatusErrors = map[uint16]*StatusError{
	wire.SAStatusNoRecords: {wire.SAStatusNoRecords}, wire.SAStatusInvalidGID: {wire.SAStatusInvalidGID},
	wire.SAStatusReqInvalid: {wire.SAStatusReqInvalid}, wire.SAStatusTooManyRecords: {wire.SAStatusTooManyRecords},
	wire.SAStatusInsufficientComponents: {wire.SAStatusInsufficientComponents},
}

func statusError(s uint16) error {
	if e := saStatusErrors[s]; e != nil {
		return e
	}
	return &StatusError{s}
}

// Client is an SA client on one HCA port.
type Client struct {
	port *hca.Port
	opts ClientOptions
	clk  clock.Clock
	log  *slog.Logger
	mux  *saMux

	ctx    context.Context
	cancel context.CancelFunc
	events *hca.Context
	wg     sync.WaitGroup

	mu      sync.Mutex // never held across SendMAD
	pending map[uint64]*call
	closed  bool

	calls sync.Pool // *call

	pathMu sync.Mutex
	paths  map[pathKey]pathEntry

	mcMu    sync.Mutex
	members map[wire.GID]*membership
	mcLocks map[wire.GID]*groupLock // client_mcast.go
}

// NewClient creates an SA client on port.
func NewClient(port *hca.Port, opts ClientOptions) (*Client, error) {
	if port == nil {
		return nil, errors.New("sa: NewClient needs a port")
	}
	if opts.Clock == nil {
		opts.Clock = port.Device().Clock()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Retries <= 0 {
		opts.Retries = 3
	}
	if opts.RMPPWindow == 0 {
		opts.RMPPWindow = 32
	}
	if opts.Logger == nil {
		opts.Logger = port.Device().Logger()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Client{
		port: port, opts: opts, clk: opts.Clock,
		log:     opts.Logger.With("sa_client", fmt.Sprintf("%s/%d", port.Device().Name(), port.Num())),
		pending: make(map[uint64]*call),
		paths:   make(map[pathKey]pathEntry),
		members: make(map[wire.GID]*membership),
	}
	c.calls.New = func() any { return c.newCall() }
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mux = muxFor(port)
	c.mux.addClient(c)
	c.events = port.Device().Open()
	c.wg.Add(1)
	go c.watch()
	return c, nil
}

// Close stops the client: pending requests fail with ErrClientClosed. Memberships are
// not left (the SA drops them when the port goes away or the SM restarts).
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	for _, cl := range c.pending {
		cl.err = ErrClientClosed
		cl.signal()
	}
	c.mu.Unlock()
	c.cancel()
	c.mux.removeClient(c)
	c.events.Close()
	c.wg.Wait()
}

// Port returns the client's port.
func (c *Client) Port() *hca.Port { return c.port }

// call is one outstanding request; pooled, with its timer and channels made once.
type call struct {
	c     *Client
	tid   uint64
	done  chan struct{}
	tick  chan struct{}
	timer clock.Timer
	armed bool

	complete bool
	err      error
	resp     [wire.MADLen]byte // the answer (the first segment of an RMPP answer)
	req      [wire.MADLen]byte

	// RMPP reassembly
	rmpp       bool
	data       []byte
	expect     uint32
	windowLast uint32
}

func (c *Client) newCall() *call {
	cl := &call{c: c, done: make(chan struct{}, 1), tick: make(chan struct{}, 1)}
	cl.timer = c.clk.AfterFunc(time.Hour, cl.fire)
	cl.timer.Stop()
	return cl
}

func (cl *call) signal() {
	select {
	case cl.done <- struct{}{}:
	default:
	}
}

// fire is the timer callback: it wakes the waiter if the call is still armed.
func (cl *call) fire() {
	c := cl.c
	c.mu.Lock()
	if cl.armed {
		cl.armed = false
		select {
		case cl.tick <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
}

func (cl *call) reset() {
	cl.complete, cl.err, cl.rmpp = false, nil, false
	cl.data = cl.data[:0]
	cl.expect, cl.windowLast = 0, 0
	for {
		select {
		case <-cl.done:
			continue
		case <-cl.tick:
			continue
		default:
		}
		break
	}
}

func (c *Client) putCall(cl *call) {
	if cap(cl.data) > 1<<20 {
		cl.data = nil
	}
	c.calls.Put(cl)
}

// smAddr is where requests go: the master SM's LID, QP1.
func (c *Client) smAddr() (hca.MADAddr, error) {
	a := c.port.Query()
	if a.SMLID == 0 {
		return hca.MADAddr{}, ErrNoSM
	}
	return hca.MADAddr{DLID: a.SMLID, SL: a.SMSL, QPN: 1, QKey: hca.GSIQKey, PKeyIndex: c.opts.PKeyIndex}, nil
}

// do sends cl.req (its TID is set here) and waits for the complete answer. On success
// the caller owns cl until putCall.
func (c *Client) do(ctx context.Context, cl *call) error {
	cl.reset()
	tid := c.port.TID()
	wire.MAD(cl.req[:]).SetTID(tid)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClientClosed
	}
	cl.tid = tid
	c.pending[tid] = cl
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, tid)
		cl.armed = false
		c.mu.Unlock()
		cl.timer.Stop()
	}()
	for attempt := 0; ; attempt++ {
		dst, err := c.smAddr()
		if err != nil {
			return err
		}
		if err := c.port.SendMAD(dst, cl.req[:]); err != nil {
			return err
		}
		select {
		case <-cl.done:
			return cl.err
		default:
		}
		c.mu.Lock()
		cl.armed = true
		c.mu.Unlock()
		cl.timer.Reset(c.opts.Timeout)
		select {
		case <-cl.done:
			return cl.err
		case <-cl.tick:
			if attempt >= c.opts.Retries {
				return ErrTimeout
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return ErrClientClosed
		}
	}
}

// handleResponse takes an answer to one of the client's requests; it reports whether
// the TID was the client's.
func (c *Client) handleResponse(m *hca.MAD) bool {
	mad := wire.MAD(m.Data)
	c.mu.Lock()
	cl := c.pending[mad.TID()]
	if cl == nil {
		c.mu.Unlock()
		return false
	}
	if cl.complete {
		c.mu.Unlock()
		// A late RMPP retransmission after completion: ACK its last segment again so the
		// sender can stop.
		if r := wire.RMPPOf(mad); r.Active() && r.Type() == wire.RMPPTypeData && r.Last() {
			c.sendAck(m, r.SegmentNumber(), r.SegmentNumber())
		}
		return true
	}
	r := wire.RMPPOf(mad)
	if !r.Active() {
		copy(cl.resp[:], m.Data)
		cl.complete = true
		cl.signal()
		c.mu.Unlock()
		return true
	}
	if r.Type() != wire.RMPPTypeData {
		// STOP or ABORT from the sender (IBA 13.6.3.2).
		cl.err, cl.complete = ErrRMPPAborted, true
		cl.signal()
		c.mu.Unlock()
		return true
	}
	seg := r.SegmentNumber()
	if seg == 1 && r.First() {
		// A (re)started transfer.
		copy(cl.resp[:], m.Data)
		cl.rmpp, cl.data, cl.expect, cl.windowLast = true, cl.data[:0], 1, 1
	}
	ack := false
	if !cl.rmpp || seg != cl.expect {
		// A gap or a duplicate: ACK what has arrived so the sender goes back.
		ack = cl.rmpp
	} else {
		cl.data = append(cl.data, wire.SAMAD(m.Data).Data()...)
		cl.expect++
		switch {
		case r.Last():
			// PayloadLength of the last segment: its class header and data bytes.
			n := int(r.PayloadLength()) - wire.SAClassHeaderLen
			if n < 0 || n > wire.SADataLen {
				n = wire.SADataLen
			}
			cl.data = cl.data[:int(seg-1)*wire.SADataLen+n]
			cl.complete = true
			ack = true
		case seg >= cl.windowLast:
			ack = true
		}
	}
	acked := cl.expect - 1
	nwl := acked + c.opts.RMPPWindow
	if cl.complete {
		nwl = acked
	}
	if ack {
		cl.windowLast = nwl
	}
	if cl.complete {
		cl.signal()
	}
	c.mu.Unlock()
	if ack && acked > 0 {
		c.sendAck(m, acked, nwl)
	}
	return true
}

// sendAck ACKs segments up to seg and opens the window to nwl (IBA 13.6.3.1).
func (c *Client) sendAck(m *hca.MAD, seg, nwl uint32) {
	var b [wire.MADLen]byte
	copy(b[:wire.SAHeaderLen], m.Data)
	r := wire.RMPPOf(wire.MAD(b[:]))
	clear(r)
	r.SetVersion(wire.RMPPVersion1)
	r.SetType(wire.RMPPTypeAck)
	r.SetRespTime(wire.RMPPNoRespTime)
	r.SetFlags(wire.RMPPFlagActive)
	r.SetSegmentNumber(seg)
	r.SetNewWindowLast(nwl)
	c.port.ReplyMAD(m, b[:])
}

// request prepares cl.req as an SA request.
func (cl *call) request(method uint8, attr uint16, mask uint64, rec []byte) wire.SAMAD {
	m := wire.SAMAD(cl.req[:])
	wire.InitSAMAD(m, method, 0, attr, mask)
	if len(rec) > 0 {
		m.SetAttrOffset(wire.SAAttrOffset(len(rec)))
		copy(m.Data(), rec)
	}
	return m
}

// statusOf returns the answer's error, if its status is not success.
func (cl *call) statusOf() error {
	if s := wire.MAD(cl.resp[:]).Status(); s != 0 {
		return statusError(s)
	}
	return nil
}

// Query sends one SA request (Get, Set or Delete of attr with the record rec under the
// component mask) and returns the answer's record, recLen bytes.
func (c *Client) Query(ctx context.Context, method uint8, attr uint16, mask uint64, rec []byte) ([]byte, error) {
	cl := c.calls.Get().(*call)
	defer c.putCall(cl)
	cl.request(method, attr, mask, rec)
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	if err := cl.statusOf(); err != nil {
		return nil, err
	}
	n := wire.SARecordLen(attr)
	if n == 0 {
		n = wire.SADataLen
	}
	var data []byte
	if cl.rmpp {
		if len(cl.data) < n {
			return nil, wire.ErrMADLen
		}
		data = cl.data[:n]
	} else {
		data = wire.SAMAD(cl.resp[:]).Data()[:n]
	}
	return append([]byte(nil), data...), nil
}

// Table is the answer to a GetTable: records of Len bytes, Stride apart.
type Table struct {
	Data   []byte
	Stride int
	Len    int
}

// Count is the number of records.
func (t Table) Count() int {
	if t.Stride == 0 {
		return 0
	}
	return len(t.Data) / t.Stride
}

// Record returns record i.
func (t Table) Record(i int) []byte { return t.Data[i*t.Stride : i*t.Stride+t.Len] }

// GetTable sends an SA GetTable of attr with the template rec under mask and returns
// every record of the (RMPP) answer.
func (c *Client) GetTable(ctx context.Context, attr uint16, mask uint64, rec []byte) (Table, error) {
	return c.getTable(ctx, attr, 0, mask, rec)
}

// getTable is GetTable with an attribute modifier.
func (c *Client) getTable(ctx context.Context, attr uint16, mod uint32, mask uint64, rec []byte) (Table, error) {
	cl := c.calls.Get().(*call)
	defer c.putCall(cl)
	cl.request(wire.MethodGetTable, attr, mask, rec).MAD().SetAttrMod(mod)
	if err := c.do(ctx, cl); err != nil {
		return Table{}, err
	}
	if err := cl.statusOf(); err != nil {
		return Table{}, err
	}
	n := wire.SARecordLen(attr)
	stride := int(wire.SAMAD(cl.resp[:]).AttrOffset()) * 8
	var data []byte
	if cl.rmpp {
		data = cl.data
	} else {
		data = wire.SAMAD(cl.resp[:]).Data()
	}
	if stride == 0 {
		return Table{Stride: wire.SARecordStride(n), Len: n}, nil
	}
	if n == 0 || n > stride {
		n = stride
	}
	cnt := len(data) / stride
	return Table{Data: append([]byte(nil), data[:cnt*stride]...), Stride: stride, Len: n}, nil
}

// watch follows the port's async events: a client reregistration request, a new master
// SM or a new LID means the SA's state about this port is gone or stale: drop cached
// paths and join the groups again (IBA 14.4.11, o14-4.a).
func (c *Client) watch() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case ev := <-c.events.Events():
			if ev.Port != c.port.Num() {
				continue
			}
			switch ev.Type {
			case hca.EventClientReregister, hca.EventSMChange, hca.EventLIDChange, hca.EventPortActive:
				c.InvalidatePaths()
				// Re-joining is idempotent at the SA, so any of these events is reason
				// enough; a restarted SM that kept its LID shows up only as a
				// reregistration or an SMSL/LID change.
				rejoin := true
				if rejoin {
					c.Rejoin(c.ctx)
				}
			}
		}
	}
}
