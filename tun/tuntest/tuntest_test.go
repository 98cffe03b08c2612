package tuntest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pibgw/pibgw/tun"
)

func TestChannelReadWrite(t *testing.T) {
	c := NewChannel("ib0", 2044)
	if c.Name() != "ib0" || c.MTU() != 2044 || c.BatchSize() != DefaultBatchSize {
		t.Fatalf("name %q MTU %d batch %d", c.Name(), c.MTU(), c.BatchSize())
	}
	for i := range 5 {
		c.Inbound <- []byte(fmt.Sprintf("packet %d", i))
	}
	bufs := make([][]byte, 3)
	for i := range bufs {
		bufs[i] = make([]byte, tun.MinOffset+100)
	}
	sizes := make([]int, 3)
	n, err := c.Read(bufs, sizes, tun.MinOffset)
	if err != nil || n != 3 {
		t.Fatalf("Read: %d, %v", n, err)
	}
	n, err = c.Read(bufs, sizes, tun.MinOffset)
	if err != nil || n != 2 || string(bufs[1][tun.MinOffset:tun.MinOffset+sizes[1]]) != "packet 4" {
		t.Fatalf("Read: %d, %v", n, err)
	}
	// Write copies: the caller may reuse its buffers.
	b := append(make([]byte, tun.MinOffset), "out"...)
	if n, err := c.Write([][]byte{b, b}, tun.MinOffset); n != 2 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	copy(b[tun.MinOffset:], "xxx")
	if p := <-c.Outbound; !bytes.Equal(p, []byte("out")) {
		t.Fatalf("Outbound %q", p)
	}
	if c.Writes() != 2 {
		t.Fatalf("Writes %d", c.Writes())
	}
	// Too big for the buffer: an error for the first packet, held back after others.
	c.Inbound <- []byte("short")
	c.Inbound <- make([]byte, 200)
	if n, err := c.Read(bufs, sizes, tun.MinOffset); n != 1 || err != nil {
		t.Fatalf("Read before a big packet: %d, %v", n, err)
	}
	if _, err := c.Read(bufs, sizes, tun.MinOffset); err == nil {
		t.Fatal("oversized packet read without error")
	}
}

func TestChannelClose(t *testing.T) {
	c := NewChannel("ib0", 2044)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read([][]byte{make([]byte, 100)}, []int{0}, 0)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	if err := <-done; !errors.Is(err, tun.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := c.Write([][]byte{{1}}, 0); !errors.Is(err, tun.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
}

// Copy between two Channels moves every packet and stops when one closes.
func TestChannelCopy(t *testing.T) {
	a, b := NewChannel("a", 1500), NewChannel("b", 1500)
	res := make(chan tun.CopyStats, 1)
	go func() {
		st, _ := tun.Copy(b, a)
		res <- st
	}()
	for i := range 1000 {
		a.Inbound <- []byte(fmt.Sprint(i))
	}
	for i := range 1000 {
		if p := <-b.Outbound; string(p) != fmt.Sprint(i) {
			t.Fatalf("packet %d: %q", i, p)
		}
	}
	a.Close()
	st := <-res
	if st.Packets != 1000 || st.Batches == 0 || st.Batches > 1000 {
		t.Fatalf("stats %+v", st)
	}
}
