package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pibgw/pibgw/fabric"
)

// captureBacklog is how much of a capture may wait in memory for its writer (a capture
// client, a file). Recording never waits for the writer: the packet path must not stall
// on a capture client that reads slowly or not at all, so what does not fit is dropped
// and counted (fabric.CaptureOptions.Backlog).
const captureBacklog = 8 << 20

// captureFlushInterval is how often a capture is written out when its backlog is less
// than half full.
const captureFlushInterval = 100 * time.Millisecond

// startFileCapture starts the configured capture (daemon.capture): every packet from
// bring-up to shutdown, into path.
func (f *Fabric) startFileCapture(path string) error {
	fl, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("daemon.capture: %w", err)
	}
	cw := f.StartCapture(fl, fabric.CaptureOptions{Backlog: captureBacklog})
	f.capMu.Lock()
	for _, c := range f.captures {
		if c.cw == cw {
			c.closer = fl
		}
	}
	f.capMu.Unlock()
	f.log.Info("capturing the fabric", "file", path)
	go func() {
		// Until Close (Fabric.Close) ends the capture.
		err := flushCapture(context.Background(), cw, 0)
		if err != nil && !errors.Is(err, fabric.ErrCaptureClosed) {
			f.log.Warn("daemon.capture: writing failed; the capture stops", "file", path, "err", err)
		}
	}()
	return nil
}

// flushCapture writes cw out every captureFlushInterval, and whenever its backlog is half
// full, until ctx is done, cw fails or is closed, or limit packets (0: no limit) were
// recorded.
func flushCapture(ctx context.Context, cw *fabric.CaptureWriter, limit uint64) error {
	t := time.NewTicker(captureFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-cw.Full():
		}
		if err := cw.Flush(); err != nil {
			return err
		}
		if limit > 0 && cw.Stats().Packets >= limit {
			return nil
		}
	}
}

// streamCapture records the fabric into w until limit packets (0: no limit) were
// recorded or ctx is done. The records w cannot take in time are dropped, counted in
// the capture's records (ERF loss counter) and in the fabric's capture_dropped counter.
func (f *Fabric) streamCapture(ctx context.Context, w io.Writer, limit uint64, snaplen int) error {
	cw := f.StartCapture(w, fabric.CaptureOptions{Limit: limit, Snaplen: snaplen, Backlog: captureBacklog})
	err := flushCapture(ctx, cw, limit)
	f.StopCapture(cw)
	st := cw.Stats()
	f.capDropped.Add(st.Dropped)
	if st.Dropped > 0 {
		f.log.Info("capture client too slow: packets dropped", "dropped", st.Dropped, "captured", st.Packets)
	}
	return err
}

// captureDropped counts the packets every capture, running or ended, dropped because
// its writer was slower than the fabric.
func (f *Fabric) captureDropped() uint64 {
	f.capMu.Lock()
	defer f.capMu.Unlock()
	n := f.capDropped.Load()
	for _, c := range f.captures {
		n += c.cw.Stats().Dropped
	}
	return n
}
