package ibsim

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// clientQueue is how many MADs wait for a client that does not read; more are dropped
// and counted (a real HCA's receive queue overflows the same way).
const clientQueue = 256

// client is one attached libumad2sim process: its port, its data socket, a reader that
// sends its MADs into the fabric and a writer that hands it what arrives for it. Both are
// per client, not per MAD.
type client struct {
	s    *Server
	id   int
	ep   endpoint
	pid  uint32
	issm atomic.Bool

	conn net.Conn
	raw  syscall.RawConn // conn's descriptor, for writes that must not wait
	// busy is held by whoever writes to conn: deliver's one non-blocking attempt, or the
	// writer goroutine, whose write may wait for the client to read.
	busy atomic.Bool
	// The non-blocking write's argument and result, and the function raw.Write runs
	// (made once: a closure per MAD would allocate); guarded by busy.
	wbuf    []byte
	werr    error
	writeFn func(fd uintptr) bool
	out     chan *datagram
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// datagram is one pooled sim_request.
type datagram struct{ b [reqLen]byte }

var datagramPool = sync.Pool{New: func() any { return new(datagram) }}

func newClient(s *Server, id int, ep endpoint, pid uint32) *client {
	return &client{s: s, id: id, ep: ep, pid: pid, out: make(chan *datagram, clientQueue), done: make(chan struct{})}
}

func (c *client) start(conn net.Conn) {
	c.conn = conn
	if sc, ok := conn.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.writeFn = func(fd uintptr) bool {
		_, c.werr = syscall.Write(int(fd), c.wbuf)
		return true // one attempt: never wait for the client on the fabric's goroutine
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
}

// stop closes the data socket and waits for the client's goroutines.
func (c *client) stop() {
	c.once.Do(func() {
		close(c.done)
		if c.conn != nil {
			c.conn.Close()
		}
	})
	c.wg.Wait()
}

// deliver hands the MAD mad, from slid's QP sqp to dlid, to the client without blocking:
// it runs on the fabric's goroutine. The datagram says where the MAD came from as
// libumad2sim reports it to the program (umad addr.lid = slid, addr.qpn = sqp).
func (c *client) deliver(slid, dlid uint16, sqp uint32, mad []byte) {
	d := datagramPool.Get().(*datagram)
	r := simRequest(d.b[:])
	r.SetDLID(dlid)
	r.SetSLID(slid)
	dqp := uint32(1)
	if isSMP(wire.MAD(mad).MgmtClass()) {
		dqp = 0
	}
	r.SetDQP(dqp)
	r.SetSQP(sqp)
	r.SetStatus(0)
	r.setPadding()
	r.SetLength(wire.MADLen)
	copy(r[reqMADOff:], mad)
	if c.tryWrite(d) {
		return
	}
	select {
	case c.out <- d:
	default:
		datagramPool.Put(d)
		c.s.queueFull.Add(1)
	}
}

// tryWrite hands d to the client at once when nothing is queued before it and the socket
// takes it without waiting — the common case, which saves the writer goroutine's wake-up
// on every MAD (opensm keeps only a few SMPs outstanding, so each one's latency counts).
// It reports whether d is done with (sent, or dropped because the client is gone).
func (c *client) tryWrite(d *datagram) bool {
	if c.raw == nil || len(c.out) != 0 || !c.busy.CompareAndSwap(false, true) {
		return false
	}
	c.wbuf = d.b[:]
	err := c.raw.Write(c.writeFn)
	werr := c.werr
	c.wbuf, c.werr = nil, nil
	c.busy.Store(false)
	switch {
	case err == nil && werr == nil:
		c.s.madsOut.Add(1)
	case errors.Is(werr, syscall.EAGAIN):
		return false // full: the writer goroutine waits for it
	case err != nil || gone(werr):
		go c.s.remove(c, "client socket gone")
	}
	datagramPool.Put(d)
	return true
}

func isSMP(class uint8) bool {
	return class == wire.MgmtClassSubnLID || class == wire.MgmtClassSubnDirected
}

func (c *client) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			for {
				select {
				case d := <-c.out:
					datagramPool.Put(d)
				default:
					return
				}
			}
		case d := <-c.out:
			for !c.busy.CompareAndSwap(false, true) {
				runtime.Gosched() // a non-blocking write of deliver's is under way
			}
			_, err := c.conn.Write(d.b[:])
			c.busy.Store(false)
			datagramPool.Put(d)
			if err != nil {
				if gone(err) {
					// The process exited without DISCONNECT (killed): free its slot.
					go c.s.remove(c, "client socket gone")
					return
				}
				continue
			}
			c.s.madsOut.Add(1)
		}
	}
}

// gone reports whether a write failed because the client's socket no longer exists.
func gone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, net.ErrClosed)
}

// readLoop sends the client's MADs into the fabric from its port until the socket closes.
func (c *client) readLoop() {
	defer c.wg.Done()
	var buf [reqLen + 1]byte
	for {
		n, err := c.conn.Read(buf[:])
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-c.done:
				return
			default:
			}
			continue
		}
		if err := checkRequest(buf[:n]); err != nil {
			c.s.badMADs.Add(1)
			c.s.log.Debug("ibsim MAD dropped", "client", c.id, "err", err)
			continue
		}
		c.send(simRequest(buf[:reqLen]))
	}
}

// send puts one validated MAD into the fabric from the client's port: a directed-route
// SMP request through the port's SMI (IBA 14.2.2.1), everything else addressed by the
// datagram's DLID and DQP. A request's TID carries the client's id so that its response
// finds it. What cannot be sent is echoed with status ETIMEDOUT, as ibsim does.
func (c *client) send(r simRequest) {
	mad := r.MAD()
	if r.Length() < wire.MADLen {
		clear(mad[r.Length():]) // libumad2sim sends 256 bytes whatever the length
	}
	resp := r.IsResponseMAD()
	if !resp {
		tid := mad.TID()&^(uint64(0xFFFF)<<tidSlotShift) | hca.TIDExternal | uint64(c.id)<<tidSlotShift
		mad.SetTID(tid)
	}
	err := c.ep.send(r, mad)
	c.s.madsIn.Add(1)
	if err != nil {
		c.s.undeliverable.Add(1)
		c.s.log.Debug("ibsim MAD undeliverable", "client", c.id, "dest", r.String(), "err", err)
		if !resp {
			c.echo(r)
		}
	}
}

// echo returns r to the client with status ETIMEDOUT (libibmad then fails at once).
func (c *client) echo(r simRequest) {
	d := datagramPool.Get().(*datagram)
	copy(d.b[:], r)
	e := simRequest(d.b[:])
	e.SetStatus(statusTimeout)
	select {
	case c.out <- d:
	default:
		datagramPool.Put(d)
		c.s.queueFull.Add(1)
	}
}
