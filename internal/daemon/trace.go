package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/trace"
)

// traceStream validates a trace request and returns its stream: the daemon's own events
// and those of attached processes (req.PID: one of them, or the daemon alone with its
// own pid), filtered, one JSON trace.Record per line.
func (h *Handler) traceStream(req *control.Request) (func(context.Context, io.Writer) error, error) {
	kinds, err := trace.ParseKinds(req.Kinds)
	if err != nil {
		return nil, err
	}
	f := trace.Filter{QPN: req.ID, LID: req.LID, Kinds: kinds}
	me := os.Getpid()
	own := req.PID == 0 || req.PID == me
	procs := h.Attach != nil && req.PID != me
	if req.PID != 0 && req.PID != me {
		found := false
		if h.Attach != nil {
			for _, s := range h.Attach.Sessions() {
				found = found || s.PID == req.PID
			}
		}
		if !found {
			return nil, fmt.Errorf("no attached process %d (see pibgw ps)", req.PID)
		}
	}
	return func(ctx context.Context, w io.Writer) error {
		out := make(chan []trace.Record, 64)
		send := func(recs []trace.Record) error {
			select {
			case out <- recs:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if own {
			// Recording on before Follow's own Enable: attached processes stop using
			// direct rings, so that the daemon's ports see their packets.
			defer h.D.Fabric.observedChanged()
			defer trace.Enable()()
			h.D.Fabric.observedChanged()
			go trace.Follow(ctx, 0, f, "daemon", me, send)
		}
		if procs {
			h.Attach.Trace(ctx, req.PID, f, func(recs []trace.Record) { send(recs) })
		}
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for {
			select {
			case recs := <-out:
				for i := range recs {
					if err := enc.Encode(&recs[i]); err != nil {
						return err
					}
				}
				if err := bw.Flush(); err != nil {
					return err
				}
			case <-ctx.Done():
				return nil
			}
		}
	}, nil
}

// mark puts a bookmark into the daemon's trace and every attached process's.
func (h *Handler) mark(text string) {
	trace.Mark(text)
	if h.Attach != nil {
		h.Attach.Mark(text)
	}
}
