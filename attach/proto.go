// Package attach is the channel through which other local processes use the daemon's
// HCAs (the uverbs role). The daemon plays the kernel: it owns the
// ports, QP0/QP1, the SM/SA and the routing of packets and MADs, and polices what
// processes send; an attached process owns its QPs, CQs, SRQs, MRs and AHs and runs the
// same hca/ud/rc code on them, on mirror devices (hca.Config.Remote) whose ports send to
// and receive from the daemon.
//
// The channel has two parts. Control: a Unix SOCK_SEQPACKET socket (Server.Path, served
// by `pibgw up`) carrying one JSON message per datagram — requests with an id and their
// replies, and port-state events the daemon pushes — and, with the hello reply, the file
// descriptors of the data rings. Data: two shared-memory rings per process
// (internal/shmring), one each way, with eventfd doorbells; each record is one IB packet
// (LRH through ICRC) tagged with the device and port it belongs to. The daemon copies a
// packet out of the process's ring before it checks it, so the process cannot change it
// after the check. Unicast data packets between two attached processes take a third kind
// of ring, one per ordered pair of processes, past the daemon (direct.go).
//
// When the control socket closes — the process exited or died — the daemon frees
// everything the process had: its QP numbers (packets to them are dropped, so its peers
// see what they would see on hardware: RC retries exhausted), its multicast attachments,
// its CM listeners.
package attach

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/wire"
)

// DefaultPath is the attach socket `pibgw up` serves unless daemon.attach says otherwise.
const DefaultPath = "/run/pibgw/attach.sock"

// Version is the protocol version; a client and a daemon of different versions refuse
// each other with a message naming both. 2: the hello carries the generation page, and
// processes ask for routes and take direct rings (direct.go).
const Version = 2

// ringSize is the size of each data ring: a thousand 4 KiB packets, several RC windows.
const ringSize = 4 << 20

// maxMsg bounds a control message.
const maxMsg = 1 << 16

// Ops.
const (
	opHello       = "hello"
	opAllocQPN    = "alloc_qpn"
	opFreeQPN     = "free_qpn"
	opMcastAttach = "mcast_attach"
	opMcastDetach = "mcast_detach"
	opListen      = "cm_listen"
	opUnlisten    = "cm_unlisten"
	opAddr        = "addr"     // the device of a local address
	opDevices     = "devices"  // every IPoIB device
	opSource      = "source"   // the source address toward a destination
	opNeighbor    = "neighbor" // IP → GID through the daemon's IPoIB neighbour tables
	opPath        = "path"     // a PathRecord through the daemon's SA client
	opJoin        = "join"     // SA multicast join for the process
	opLeave       = "leave"
	opPort        = "port" // event: a port's new state
)

// msg is every control message: a request (Op and ID), a reply (ID, OK/Err) or an
// event (Op, ID 0). Only the fields an op uses are set.
type msg struct {
	ID    uint64 `json:"id,omitempty"`
	Op    string `json:"op,omitempty"`
	OK    bool   `json:"ok,omitempty"`
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`

	Version int          `json:"version,omitempty"`
	Session uint32       `json:"session,omitempty"` // also the CM ID prefix
	PID     int          `json:"pid,omitempty"`
	Devices []deviceInfo `json:"devices,omitempty"`

	Dev   int    `json:"dev,omitempty"`
	Port  uint8  `json:"port,omitempty"`
	QPN   uint32 `json:"qpn,omitempty"`
	GID   string `json:"gid,omitempty"`
	SID   uint64 `json:"sid,omitempty"`
	Mask  uint64 `json:"mask,omitempty"`
	PKey  uint16 `json:"pkey,omitempty"`
	QKey  uint32 `json:"qkey,omitempty"`
	Addr  string `json:"addr,omitempty"`
	Addr2 string `json:"addr2,omitempty"`
	// WaitMS bounds a neighbour resolution: what is left of the caller's timeout.
	WaitMS int64 `json:"wait_ms,omitempty"`

	Attr  *hca.PortAttr             `json:"attr,omitempty"`
	PKeys *[hca.PKeyTableLen]uint16 `json:"pkeys,omitempty"`
	Path  *sa.Path                  `json:"path,omitempty"`
	Group *sa.MCGroup               `json:"group,omitempty"`
	Ports []portRef                 `json:"ports,omitempty"`

	// Requests from the daemon to the process (debug.go).
	Req     uint64            `json:"req,omitempty"`
	Kind    string            `json:"kind,omitempty"`
	Obj     uint32            `json:"obj,omitempty"`
	Objects []json.RawMessage `json:"objects,omitempty"`
	More    bool              `json:"more,omitempty"`
	// Manner in the hello reply: the daemon's behaviour choices and pitfall checks, which
	// the process's mirror devices take.
	Manner *hca.Manner `json:"manner,omitempty"`
	// Trace in the hello reply: someone traces, record from the start (trace.go).
	Trace bool `json:"trace,omitempty"`
	// Object and Detail: a pitfall warning's (manner.go; Kind is the check's name).
	Object string `json:"object,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Counts answers a pitfalls request: the checks that fired, by name (debug.go).
	Counts map[string]uint64 `json:"counts,omitempty"`
	// Direct rings (direct.go): a route request's destination LID; the answer's
	// generation, whether the path is direct and the ring's number; a direct_in's
	// barrier and the sender's QP numbers by device.
	LID     uint16           `json:"lid,omitempty"`
	Gen     uint64           `json:"gen,omitempty"`
	Direct  bool             `json:"direct,omitempty"`
	Ring    uint64           `json:"ring,omitempty"`
	Barrier uint64           `json:"barrier,omitempty"`
	Owners  map[int][]uint32 `json:"owners,omitempty"`
	// fds are the descriptors that came with a message (not encoded).
	fds []int
	// LIDFilter is a trace request's LID filter.
	LIDFilter uint16 `json:"lid_filter,omitempty"`
}

// portRef names a port of the daemon and the P_Key of an IPoIB interface on it.
type portRef struct {
	Dev  int    `json:"dev"`
	Port uint8  `json:"port"`
	PKey uint16 `json:"pkey"`
}

// deviceInfo is a device as the hello reply describes it.
type deviceInfo struct {
	Name         string                     `json:"name"`
	NodeGUID     uint64                     `json:"node_guid"`
	SysImageGUID uint64                     `json:"sys_image_guid"`
	NodeDesc     string                     `json:"node_desc"`
	FWVer        string                     `json:"fw_ver"`
	VendorID     uint32                     `json:"vendor_id"`
	VendorPartID uint32                     `json:"vendor_part_id"`
	HWVer        uint32                     `json:"hw_ver"`
	MaxMTU       hca.MTU                    `json:"max_mtu"`
	Ports        []hca.PortAttr             `json:"ports"`
	PKeys        [][hca.PKeyTableLen]uint16 `json:"pkeys"`
}

func describe(d *hca.Device) deviceInfo {
	a := d.Query()
	di := deviceInfo{
		Name: d.Name(), NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID, NodeDesc: d.NodeDesc(),
		FWVer: a.FWVer, VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
	}
	for _, p := range d.Ports() {
		di.MaxMTU = p.MaxMTU()
		di.Ports = append(di.Ports, p.Query())
		di.PKeys = append(di.PKeys, p.PKeys())
	}
	return di
}

// tag names a port in a data ring record: the device's index and the port number.
func tag(dev int, port uint8) uint16 { return uint16(dev)<<8 | uint16(port) }

func untag(t uint16) (dev int, port uint8) { return int(t >> 8), uint8(t) }

// Record flags.
const flagLoopback = 1 // the packet never left the daemon's port

// conn is a control socket with fd passing.
type conn struct{ c *net.UnixConn }

func (c conn) write(m *msg, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxMsg {
		return fmt.Errorf("attach: control message of %d bytes", len(b))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// read returns the next message and any descriptors that came with it.
func (c conn) read(buf, oob []byte) (*msg, []int, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, nil, net.ErrClosed // SOCK_SEQPACKET: the peer closed
	}
	var fds []int
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, s := range scms {
				if f, err := unix.ParseUnixRights(&s); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(fds)
		return nil, nil, fmt.Errorf("attach: control message truncated")
	}
	m := new(msg)
	if err := json.Unmarshal(buf[:n], m); err != nil {
		closeAll(fds)
		return nil, nil, fmt.Errorf("attach: bad control message: %w", err)
	}
	return m, fds, nil
}

func closeAll(fds []int) {
	for _, f := range fds {
		unix.Close(f)
	}
}

// peerCred returns the process at the other end of a Unix socket.
func peerCred(c *net.UnixConn) (pid, uid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, serr
	}
	return int(cred.Pid), int(cred.Uid), nil
}

// Error is a refused request, with the errno the daemon gave (as librdmacm and
// libibverbs report them).
type Error struct {
	Op    string
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string { return fmt.Sprintf("attach: %s: %s", e.Op, e.Msg) }

// Unwrap lets errors.Is(err, syscall.EADDRNOTAVAIL) and the like work.
func (e *Error) Unwrap() error { return e.Errno }

func gidString(g wire.GID) string { return netip.AddrFrom16(g).String() }

func parseGID(s string) (wire.GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return wire.GID{}, fmt.Errorf("bad GID %q", s)
	}
	return wire.GID(a.As16()), nil
}
