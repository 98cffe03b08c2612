package ibsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/pibgw/pibgw/wire"
	"golang.org/x/sys/unix"
)

// clientQueue is how many MADs wait for a client that does not read; more are dropped
// and counted (a real HCA's receive queue overflows the same way).
const clientQueue = 256

// client is one attached libumad2sim process: its port, its data socket, a reader that
// sends its MADs into the fabric and a writer that hands it what arrives for it when the
// socket is full. Both are per client, not per MAD.
//
// The data socket is a plain blocking descriptor, not a net.Conn: the reader waits in
// recvmmsg(2) itself, so a MAD wakes exactly the reader's thread, which takes what the
// socket holds in the same call and answers each MAD on the spot, as ibsim's one loop
// does — no trip through Go's network poller and scheduler, no poll(2) before the read
// nor a read that finds the socket empty (each of which cost µs per MAD, more than the
// MAD's trip through the fabric, when opensm keeps only a few SMPs outstanding). Writes
// do not block (MSG_DONTWAIT); the writer goroutine waits in poll(2) only for a client
// whose socket is full.
type client struct {
	s    *Server
	id   int
	gen  uint8 // the slot's generation when the client took it (requestTID)
	ep   endpoint
	pid  uint32
	issm atomic.Bool
	// requests counts the requests the client sent: one that sent none is a server
	// (serveVendorClasses); served has bit class-0x30 set for each vendor class of range 2
	// it answered a request of (vendorAgent).
	requests atomic.Uint64
	served   atomic.Uint32

	fd     int           // the data socket (blocking; shutdown(2) wakes the reader)
	peer   unix.Sockaddr // the client's data socket address (reap)
	stopfd int           // an eventfd stop writes to, waking the writer
	// busy is held by whoever writes to fd: deliver's one attempt, or the writer
	// goroutine, which waits for the socket when the client does not read.
	busy atomic.Bool
	// ready is set once fd is: the client is in its slot, where deliver finds it, while
	// its socket is still being made.
	ready atomic.Bool
	out   chan *datagram
	done  chan struct{}
	once  sync.Once
	rwg   sync.WaitGroup // the reader
	wg    sync.WaitGroup // the writer
}

// datagram is one pooled sim_request.
type datagram struct{ b [reqLen]byte }

var datagramPool = sync.Pool{New: func() any { return new(datagram) }}

func newClient(s *Server, id int, ep endpoint, pid uint32) *client {
	return &client{s: s, id: id, ep: ep, pid: pid, fd: -1, stopfd: -1, out: make(chan *datagram, clientQueue), done: make(chan struct{})}
}

// start serves the data socket fd, which the client now owns (closed on failure too).
func (c *client) start(fd int) error {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("eventfd: %w", err)
	}
	c.fd, c.stopfd = fd, efd
	c.ready.Store(true)
	c.rwg.Add(1)
	c.wg.Add(1)
	go c.readLoop()
	go c.writeLoop()
	return nil
}

// stop wakes and waits for the client's goroutines, then closes its descriptors (not
// before: a descriptor number closed under a waiting goroutine could be reused).
func (c *client) stop() {
	c.once.Do(func() {
		close(c.done)
		if c.stopfd < 0 {
			return
		}
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1) // eventfd(2): add 1 to the counter
		unix.Write(c.stopfd, one[:])
		// The reader blocks in recvmmsg(2): shutting the socket's receive side wakes it
		// with an empty datagram (a Unix socket's and a UDP socket's alike).
		unix.Shutdown(c.fd, unix.SHUT_RD)
		c.rwg.Wait()
		c.wg.Wait()
		unix.Close(c.fd)
		unix.Close(c.stopfd)
	})
	c.rwg.Wait()
	c.wg.Wait()
}

// wait blocks in poll(2) until fd has events (POLLOUT for the writer; POLLIN for the
// reader after a failed read) or stop is called; it reports false once the client is
// stopping or the socket failed.
func (c *client) wait(events int16) bool {
	pfd := [2]unix.PollFd{{Fd: int32(c.fd), Events: events}, {Fd: int32(c.stopfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(pfd[:], -1)
		if err == unix.EINTR {
			continue
		}
		// POLLERR (a UDP client's ICMP error) is for the next read or write to report.
		return err == nil && pfd[1].Revents == 0 && (pfd[0].Revents&events != 0 || pfd[0].Revents&(unix.POLLHUP|unix.POLLNVAL) == 0)
	}
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
	if !c.ready.Load() || len(c.out) != 0 || !c.busy.CompareAndSwap(false, true) {
		return false
	}
	err := sendNow(c.fd, d.b[:])
	c.busy.Store(false)
	switch {
	case err == nil:
		c.s.madsOut.Add(1)
	case err == unix.EAGAIN:
		return false // full: the writer goroutine waits for it
	case gone(err):
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
			err := c.write(d)
			datagramPool.Put(d)
			switch {
			case err == nil:
				c.s.madsOut.Add(1)
			case gone(err):
				// The process exited without DISCONNECT (killed): free its slot.
				go c.s.remove(c, "client socket gone")
				return
			case errors.Is(err, net.ErrClosed):
				return
			}
		}
	}
}

// write sends d, waiting in poll(2) while the client's socket is full.
func (c *client) write(d *datagram) error {
	for {
		for !c.busy.CompareAndSwap(false, true) {
			runtime.Gosched() // a non-blocking write of deliver's is under way
		}
		err := sendNow(c.fd, d.b[:])
		c.busy.Store(false)
		if err != unix.EAGAIN {
			return err
		}
		if !c.wait(unix.POLLOUT) {
			return net.ErrClosed
		}
	}
}

// gone reports whether a write failed because the client's socket no longer exists.
func gone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, net.ErrClosed)
}

// readLoop sends the client's MADs into the fabric from its port until the client stops.
// It blocks in recvmmsg(2), which returns with the first datagram and whatever else the
// socket holds then (opensm sends a few SMPs at once): one system call per wake-up.
func (c *client) readLoop() {
	defer c.rwg.Done()
	// The reader holds an OS thread while it waits in recvmmsg(2). Locked and never
	// unlocked, that thread exits with the client instead of idling in the runtime's
	// pool: hundreds of clients come and go without leaving their threads behind.
	runtime.LockOSThread()
	rb := newRecvBatch()
	for {
		n, err := rb.recv(c.fd)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			if c.stopping() {
				return
			}
			// A UDP client's ICMP error, reported once. Whatever it was, wait in poll(2)
			// before the next read, so that an error that stays cannot spin the reader.
			c.s.log.Debug("ibsim data read", "client", c.id, "err", err)
			if !c.wait(unix.POLLIN) {
				return
			}
			continue
		}
		for i := range n {
			b := rb.datagram(i)
			if len(b) == 0 && c.stopping() {
				return
			}
			if err := checkRequest(b); err != nil {
				c.s.badMADs.Add(1)
				c.s.log.Debug("ibsim MAD dropped", "client", c.id, "err", err)
				continue
			}
			c.send(simRequest(b))
		}
	}
}

func (c *client) stopping() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
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
		mad.SetTID(c.requestTID(mad.TID()))
		if c.requests.Add(1) == 1 {
			c.s.serveVendorClasses(c.ep) // no server of vendor classes any more
		}
	} else if class := mad.MgmtClass(); class >= vendorRange2First && class <= vendorRange2Last {
		c.served.Or(1 << (class - vendorRange2First))
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
