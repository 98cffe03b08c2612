package attach_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawControl is an attached process's control socket spoken to byte by byte, as a
// buggy or hostile process could: after a proper hello, anything.
type rawControl struct {
	c      *net.UnixConn
	nextID uint64
}

func dialRaw(tb testing.TB, path string) *rawControl {
	tb.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		tb.Fatal(err)
	}
	r := &rawControl{c: c, nextID: 1 << 40}
	if _, err := c.Write([]byte(`{"id":1,"op":"hello","version":2}`)); err != nil {
		tb.Fatal(err)
	}
	if m, err := r.waitReply(1); err != nil || m["ok"] != true {
		tb.Fatalf("hello refused: %v %v", m, err)
	}
	return r
}

// waitReply reads until the reply to request id, closing any descriptors that come
// (the hello's rings); replies to other requests and events are skipped.
func (r *rawControl) waitReply(id uint64) (map[string]any, error) {
	buf, oob := make([]byte, 1<<16), make([]byte, 1024)
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		n, oobn, _, _, err := r.c.ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, err
		}
		if n == 0 && oobn == 0 {
			return nil, io.EOF // the daemon closed the session
		}
		if oobn > 0 {
			if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, s := range scms {
					fds, _ := unix.ParseUnixRights(&s)
					for _, fd := range fds {
						unix.Close(fd)
					}
				}
			}
		}
		var m map[string]any
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return nil, fmt.Errorf("the daemon sent a message that is not JSON: %q", buf[:n])
		}
		if got, _ := m["id"].(float64); uint64(got) == id {
			return m, nil
		}
	}
}

// probe asks the daemon something every session may ask and waits for the answer.
func (r *rawControl) probe() error {
	r.nextID++
	if _, err := fmt.Fprintf(r.c, `{"id":%d,"op":"devices"}`, r.nextID); err != nil {
		return err
	}
	m, err := r.waitReply(r.nextID)
	if err == nil && m["ok"] != true {
		err = fmt.Errorf("devices refused: %v", m)
	}
	return err
}

// FuzzControl sends an attached session's control socket arbitrary messages — JSON of
// every request with any field values, answers to requests never made, garbage — and
// checks after each that the daemon still answers. A message it cannot take gets an
// errno answer or is ignored; none may crash the daemon or end other work. (The daemon
// closes a session whose message is not JSON at all: that session redials.)
func FuzzControl(f *testing.F) {
	for _, s := range []string{
		`{"id":2,"op":"alloc_qpn","dev":0}`,
		`{"id":2,"op":"alloc_qpn","dev":-1}`,
		`{"id":2,"op":"alloc_qpn","dev":99999999}`,
		`{"id":2,"op":"free_qpn","dev":0,"qpn":16777215}`,
		`{"id":2,"op":"mcast_attach","dev":0,"port":1,"gid":"ff12:401b:ffff::1","qpn":72}`,
		`{"id":2,"op":"mcast_detach","dev":1,"port":255,"gid":"::","qpn":0}`,
		`{"id":2,"op":"cm_listen","dev":0,"port":0,"sid":18446744073709551615}`,
		`{"id":2,"op":"cm_unlisten","dev":0,"port":1,"sid":1}`,
		`{"id":2,"op":"addr","addr":"10.10.0.1"}`,
		`{"id":2,"op":"addr","addr":"not an address"}`,
		`{"id":2,"op":"source","addr":"::1"}`,
		`{"id":2,"op":"neighbor","dev":0,"port":1,"addr":"10.10.0.2","wait_ms":-5}`,
		`{"id":2,"op":"path","dev":0,"port":1,"gid":"fe80::2:c903:0:301","pkey":65535}`,
		`{"id":2,"op":"join","dev":0,"port":1,"gid":"ff12:401b:ffff::1","pkey":0}`,
		`{"id":2,"op":"leave","dev":7,"port":1,"gid":"zz"}`,
		`{"id":2,"op":"route","dev":0,"port":1,"lid":65535,"qpn":1}`,
		`{"id":2,"op":"policed","session":4000000000,"counts":{"police_slid":18446744073709551615}}`,
		`{"id":2,"op":"inspect","kind":"qp","obj":1}`,
		`{"id":2,"op":"trace","lid_filter":1}`,
		`{"id":2,"op":"hello","version":2}`,
		`{"req":12345,"ok":true,"objects":[{}],"more":true}`,
		`{"req":1,"counts":{"x":1}}`,
		`{"id":2,"op":"port","dev":0,"port":1,"attr":{},"pkeys":[1,2]}`,
		`{"id":2,"op":"devices","owners":{"-1":[1,2]}}`,
		`{"id":0,"op":"alloc_qpn"}`,
		`{}`,
		`null`,
		`[]`,
		``,
		"\x00\xff",
	} {
		f.Add([]byte(s))
	}
	_, path := startFabric(f)
	r := dialRaw(f, path)
	f.Cleanup(func() { r.c.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		r.c.Write(data)
		err := r.probe()
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			// The daemon ends a session whose message is not a request at all (not
			// JSON, or fields of the wrong type); it must go on serving everyone, this
			// process's next connection too.
			r.c.Close()
			r = dialRaw(t, path)
			err = r.probe()
		}
		if err != nil {
			t.Fatalf("after %q the daemon does not answer: %v", data, err)
		}
	})
}
