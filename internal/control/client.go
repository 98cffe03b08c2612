package control

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/trace"
)

// DefaultPath is the control socket's default path.
const DefaultPath = "/run/pibgw/pibgw.sock"

// NoDaemonError says nothing listens on the socket.
type NoDaemonError struct{ Path string }

func (e *NoDaemonError) Error() string {
	return fmt.Sprintf("no daemon running at %s (start one with: sudo pibgw up)", e.Path)
}

// IsNoDaemon reports whether err is a NoDaemonError.
func IsNoDaemon(err error) bool {
	var nd *NoDaemonError
	return errors.As(err, &nd)
}

// RemoteError is an error the daemon answered with.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return e.Msg }

// Client talks to a daemon.
type Client struct {
	Path string
	// Timeout bounds a whole request (not a capture); default 10 s.
	Timeout time.Duration
}

// NewClient returns a client for the socket at path (DefaultPath if "").
func NewClient(path string) *Client {
	if path == "" {
		path = DefaultPath
	}
	return &Client{Path: path, Timeout: 10 * time.Second}
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Path)
	if err == nil {
		return conn, nil
	}
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
		return nil, &NoDaemonError{Path: c.Path}
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("%s: permission denied (the control socket is root's: use sudo)", c.Path)
	}
	return nil, fmt.Errorf("%s: %w", c.Path, err)
}

// Alive reports whether a daemon answers on the socket.
func (c *Client) Alive(ctx context.Context) bool {
	var st Status
	return c.Do(ctx, Request{Verb: VerbStatus}, &st) == nil
}

// Do sends req and decodes the result into result (which may be nil).
func (c *Client) Do(ctx context.Context, req Request, result any) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	resp, _, err := roundTrip(conn, req)
	if err != nil {
		return err
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("%s: malformed %s answer: %w", c.Path, req.Verb, err)
		}
	}
	if len(resp.Missing) > 0 {
		return &IncompleteError{Missing: resp.Missing}
	}
	return nil
}

// roundTrip writes req and reads the response line. The reader holds what followed it.
func roundTrip(conn net.Conn, req Request) (*Response, *bufio.Reader, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return nil, nil, fmt.Errorf("sending %s request: %w", req.Verb, err)
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("the daemon closed the connection without answering %s", req.Verb)
		}
		return nil, nil, fmt.Errorf("reading %s answer: %w", req.Verb, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, nil, fmt.Errorf("malformed %s answer: %w", req.Verb, err)
	}
	if !resp.OK {
		return nil, nil, &RemoteError{Msg: resp.Error}
	}
	return &resp, br, nil
}

// Capture asks for a capture and copies the pcap stream to w until the daemon ends it
// (count packets captured, daemon stopping) or ctx is cancelled (then the connection is
// closed, which stops the daemon's capture). It returns the number of bytes copied.
func (c *Client) Capture(ctx context.Context, req Request, w io.Writer) (int64, error) {
	req.Verb = VerbCapture
	conn, err := c.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_, br, err := roundTrip(conn, req)
	if err != nil {
		return 0, err
	}
	// Only whole pcap records reach w, so a capture cut short (Ctrl-C, daemon gone) is
	// still a valid file.
	pw := &pcapFramer{w: w}
	_, err = io.Copy(pw, br)
	if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return pw.n, err
}

// pcapFramer passes a pcap stream through, holding back an incomplete trailing record.
type pcapFramer struct {
	w   io.Writer
	buf []byte
	hdr bool  // file header written
	n   int64 // bytes written to w
}

const (
	pcapFileHeaderLen   = 24
	pcapRecordHeaderLen = 16
)

func (f *pcapFramer) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	end := 0
	if !f.hdr {
		if len(f.buf) < pcapFileHeaderLen {
			return len(p), nil
		}
		f.hdr, end = true, pcapFileHeaderLen
	}
	for len(f.buf)-end >= pcapRecordHeaderLen {
		incl := int(binary.LittleEndian.Uint32(f.buf[end+8:]))
		if len(f.buf)-end < pcapRecordHeaderLen+incl {
			break
		}
		end += pcapRecordHeaderLen + incl
	}
	if end > 0 {
		n, err := f.w.Write(f.buf[:end])
		f.n += int64(n)
		if err != nil {
			return 0, err
		}
		f.buf = append(f.buf[:0], f.buf[end:]...)
	}
	return len(p), nil
}

// Trace asks for the trace stream and calls fn with each record until ctx is cancelled
// (the connection is closed, which ends the daemon's stream), the daemon stops, or fn
// returns an error.
func (c *Client) Trace(ctx context.Context, req Request, fn func(trace.Record) error) error {
	req.Verb = VerbTrace
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_, br, err := roundTrip(conn, req)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(br)
	for {
		var rec trace.Record
		if err := dec.Decode(&rec); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("trace stream: %w", err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}
