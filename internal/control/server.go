package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Handler answers requests. Handle returns the result of every verb but the streams
// (capture, trace); Capture validates a stream request and returns the function that
// streams it (called after the OK response line went out, with ctx cancelled when the
// client goes away).
type Handler interface {
	Handle(ctx context.Context, req *Request) (any, error)
	Capture(ctx context.Context, req *Request) (stream func(ctx context.Context, w io.Writer) error, err error)
}

// Server serves a Handler on a listener, one request per connection.
type Server struct {
	Handler Handler
	Logger  *slog.Logger

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	retry  AcceptRetry
}

// maxRequest bounds a request line.
const maxRequest = 64 << 10

// Serve accepts connections on ln until Close. It returns nil after Close; a failing
// Accept (out of descriptors) is retried, never the end of serving.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.ln = ln
	s.conns = make(map[net.Conn]struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.Unlock()
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.retry.What, s.retry.Logger = "control socket", s.Logger
	for {
		conn, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			// Out of descriptors (EMFILE, ENFILE) or memory is a moment's trouble, not
			// the daemon's end: wait and accept again, as net/http does.
			if s.retry.Failed(err, s.ctx.Done()) {
				continue
			}
			if s.ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.retry.OK()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return nil
		}
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(conn)
	}
}

// Close stops accepting, ends every connection (captures included) and waits for the
// handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var err error
	if s.ln != nil {
		err = s.ln.Close()
		s.cancel()
		for c := range s.conns {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(io.LimitReader(conn, maxRequest), 4096)
	line, err := br.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return
	}
	conn.SetReadDeadline(time.Time{})
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		writeResponse(conn, nil, errors.New("malformed request: "+err.Error()))
		return
	}
	log := s.Logger.With("verb", req.Verb)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if req.Verb == VerbCapture || req.Verb == VerbTrace {
		stream, err := s.Handler.Capture(ctx, &req)
		if err != nil {
			writeResponse(conn, nil, err)
			return
		}
		if err := writeResponse(conn, nil, nil); err != nil {
			return
		}
		// The client sends nothing more: a read returning means it went away.
		go func() {
			var b [1]byte
			conn.Read(b[:])
			cancel()
		}()
		if err := stream(ctx, conn); err != nil && ctx.Err() == nil {
			log.Warn(req.Verb+" ended", "err", err)
		}
		return
	}
	res, err := s.Handler.Handle(ctx, &req)
	if err != nil {
		log.Debug("control request failed", "err", err)
	}
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	writeResponse(conn, res, err)
}

func writeResponse(w io.Writer, res any, err error) error {
	resp := Response{OK: err == nil}
	if p, ok := res.(Partial); ok {
		res, resp.Missing = p.Result, p.Missing
	}
	if err != nil {
		resp.Error = err.Error()
	} else if res != nil {
		b, merr := json.Marshal(res)
		if merr != nil {
			resp = Response{Error: "encoding result: " + merr.Error()}
		} else {
			resp.Result = b
		}
	}
	b, _ := json.Marshal(resp)
	_, werr := w.Write(append(b, '\n'))
	return werr
}
