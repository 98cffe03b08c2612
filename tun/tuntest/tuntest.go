// Package tuntest is an in-memory tun.Device for tests of what sits on a device (ipoib):
// a Channel whose IP-stack side is two Go channels, so a test plays the IP stack by
// sending packets on Inbound and receiving the packets the code under test wrote from
// Outbound.
package tuntest

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pibgw/pibgw/tun"
)

// DefaultBatchSize is a new Channel's BatchSize.
const DefaultBatchSize = 128

// Channel is a fake tun.Device. Read returns the packets sent on Inbound (as if the IP
// stack had routed them into the device); Write sends copies of its packets on Outbound
// (as if delivering them to the IP stack), blocking while Outbound is full. After Close,
// Read and Write return tun.ErrClosed; Close closes neither channel (use Done).
type Channel struct {
	// Inbound carries packets (IP, no head-room) for Read to return. Its buffers are
	// not retained after Read.
	Inbound chan []byte
	// Outbound receives a copy of each packet Written, in order.
	Outbound chan []byte

	name      string
	mtu       atomic.Int32
	batch     int
	rmu       sync.Mutex // one Read at a time, guards pending
	pending   []byte     // taken from Inbound, not yet returned
	closed    chan struct{}
	closeOnce sync.Once
	writes    atomic.Uint64
}

var _ tun.Device = (*Channel)(nil)

// NewChannel returns an open Channel with buffered Inbound and Outbound channels of 1024
// packets each.
func NewChannel(name string, mtu int) *Channel {
	c := &Channel{
		Inbound:  make(chan []byte, 1024),
		Outbound: make(chan []byte, 1024),
		name:     name,
		batch:    DefaultBatchSize,
		closed:   make(chan struct{}),
	}
	c.mtu.Store(int32(mtu))
	return c
}

// SetBatchSize changes BatchSize (before use).
func (c *Channel) SetBatchSize(n int) { c.batch = max(n, 1) }

// Read returns the next packets from Inbound: it blocks for one, then takes those
// already queued, up to len(bufs). A packet larger than its buffer is an error.
func (c *Channel) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(bufs) == 0 {
		return 0, nil
	}
	select {
	case <-c.closed:
		return 0, tun.ErrClosed
	default:
	}
	n := 0
	for n < len(bufs) {
		p := c.pending
		c.pending = nil
		if p == nil {
			if n == 0 {
				select {
				case p = <-c.Inbound:
				case <-c.closed:
					return 0, tun.ErrClosed
				}
			} else {
				select {
				case p = <-c.Inbound:
				default:
					return n, nil
				}
			}
		}
		if len(p) > len(bufs[n])-offset {
			if n > 0 {
				c.pending = p
				return n, nil
			}
			return 0, fmt.Errorf("tuntest: %s: %d-byte packet does not fit a %d-byte buffer at offset %d", c.name, len(p), len(bufs[n]), offset)
		}
		sizes[n] = copy(bufs[n][offset:], p)
		n++
	}
	return n, nil
}

// Write sends a copy of each packet bufs[i][offset:] on Outbound.
func (c *Channel) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		p := bytes.Clone(b[offset:])
		select {
		case <-c.closed:
			return i, tun.ErrClosed
		default:
		}
		select {
		case c.Outbound <- p:
			c.writes.Add(1)
		case <-c.closed:
			return i, tun.ErrClosed
		}
	}
	return len(bufs), nil
}

// Writes returns how many packets Write has sent on Outbound.
func (c *Channel) Writes() uint64 { return c.writes.Load() }

// MTU returns the MTU given to NewChannel or SetMTU.
func (c *Channel) MTU() int { return int(c.mtu.Load()) }

// SetMTU records mtu as the MTU.
func (c *Channel) SetMTU(mtu int) error {
	if mtu <= 0 {
		return fmt.Errorf("tuntest: %s: invalid MTU %d", c.name, mtu)
	}
	c.mtu.Store(int32(mtu))
	return nil
}

// Name returns the name given to NewChannel.
func (c *Channel) Name() string { return c.name }

// BatchSize returns DefaultBatchSize unless SetBatchSize changed it.
func (c *Channel) BatchSize() int { return c.batch }

// Close closes the device: blocked and later Reads and Writes return tun.ErrClosed.
func (c *Channel) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// Done is closed when the device is closed.
func (c *Channel) Done() <-chan struct{} { return c.closed }
