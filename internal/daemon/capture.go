package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pibgw/pibgw/fabric"
)

// startFileCapture starts the configured capture (daemon.capture): every packet from
// bring-up to shutdown, into path.
func (f *Fabric) startFileCapture(path string) error {
	fl, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("daemon.capture: %w", err)
	}
	cw := f.StartCapture(fl, fabric.CaptureOptions{})
	f.capMu.Lock()
	for _, c := range f.captures {
		if c.cw == cw {
			c.closer = fl
		}
	}
	f.capMu.Unlock()
	f.log.Info("capturing the fabric", "file", path)
	return nil
}

// captureFlushInterval is how often a streamed capture is flushed to its client.
const captureFlushInterval = 100 * time.Millisecond

// streamCapture records the fabric into w until limit packets (0: no limit) were
// recorded or ctx is done.
func (f *Fabric) streamCapture(ctx context.Context, w io.Writer, limit uint64, snaplen int) error {
	cw := f.StartCapture(w, fabric.CaptureOptions{Limit: limit, Snaplen: snaplen})
	defer f.StopCapture(cw)
	t := time.NewTicker(captureFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := cw.Flush(); err != nil {
			return err
		}
		if limit > 0 && cw.Stats().Packets >= limit {
			return nil
		}
	}
}
