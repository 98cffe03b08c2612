// Package ibsim serves OFED ibsim's MAD-relay protocol (ibsim/include/ibsim.h, as
// libumad2sim speaks it) from pibgw's fabric, so unmodified libibumad programs — opensm,
// ibnetdiscover, smpquery, perfquery, saquery, sminfo — run against it with
// LD_PRELOAD=libumad2sim.so. Unlike ibsim, which computes every answer itself, the server
// attaches each client to a real port of the fabric: the MADs a client sends leave that
// port's QP0/QP1 as packets, cross the switch and are answered by the SMAs, PMAs and SA
// of the fabric (or by another client: opensm's SA), and what arrives for the client at
// the port comes back over its socket.
package ibsim

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pibgw/pibgw/wire"
)

// Control messages (struct sim_ctl): 80 bytes in the host's byte order, which is
// little-endian on every machine libumad2sim runs on with pibgw (x86-64, arm64).
const (
	ctlMagic   = 0xDEADBEEF
	ctlLen     = 16 + ctlDataLen
	ctlDataLen = 64 // SIM_CTL_MAX_DATA
)

// sim_ctl types (enum SIM_CTL_TYPES).
const (
	ctlError       = 0 // reply type on failure
	ctlConnect     = 1
	ctlDisconnect  = 2
	ctlGetPort     = 3
	ctlGetVendor   = 4
	ctlGetGID      = 5
	ctlGetGUID     = 6
	ctlGetNodeInfo = 7
	ctlGetPortInfo = 8
	ctlSetIsSM     = 9
	ctlGetPKeys    = 10
)

// ctlMsg is a decoded sim_ctl; data is a view into the datagram.
type ctlMsg struct {
	clientID uint32
	typ      uint32
	len      uint32
	data     []byte // 64 bytes
	raw      []byte // the whole datagram, which becomes the reply
}

var le = binary.LittleEndian

var errBadCtl = errors.New("ibsim: bad control message")

// parseCtl decodes a control datagram. ibsim ignores (answers nothing to) a datagram of
// the wrong size or magic; so does the server, counting it.
func parseCtl(b []byte) (ctlMsg, error) {
	if len(b) != ctlLen {
		return ctlMsg{}, fmt.Errorf("%w: %d bytes, want %d", errBadCtl, len(b), ctlLen)
	}
	if m := le.Uint32(b[0:]); m != ctlMagic {
		return ctlMsg{}, fmt.Errorf("%w: magic %#x", errBadCtl, m)
	}
	return ctlMsg{clientID: le.Uint32(b[4:]), typ: le.Uint32(b[8:]), len: le.Uint32(b[12:]), data: b[16:ctlLen], raw: b[:ctlLen]}, nil
}

// clientInfo is struct sim_client_info (44 bytes at the start of a CONNECT's data).
type clientInfo struct {
	id     uint32 // request: the client's pid (its data port in UDP mode); reply: the slot
	qp     uint32
	issm   uint32
	nodeID string // NUL-padded to 32 bytes
}

func parseClientInfo(d []byte) clientInfo {
	ci := clientInfo{id: le.Uint32(d[0:]), qp: le.Uint32(d[4:]), issm: le.Uint32(d[8:])}
	n := d[12:44]
	for i, c := range n {
		if c == 0 {
			n = n[:i]
			break
		}
	}
	ci.nodeID = string(n)
	return ci
}

func (ci clientInfo) put(d []byte) {
	le.PutUint32(d[0:], ci.id)
	le.PutUint32(d[4:], ci.qp)
	le.PutUint32(d[8:], ci.issm)
	n := d[12:44]
	clear(n)
	copy(n[:31], ci.nodeID) // strncpy(…, sizeof - 1): always NUL-terminated
}

// MAD datagrams (struct sim_request): 288 bytes each way. The LIDs sit in the first two
// bytes of their 32-bit fields in network order (libumad2sim copies umad's __be16 lid into
// a uint32_t); QPNs and the status are big-endian 32-bit, the length big-endian 64-bit.
const (
	reqLen    = 32 + wire.MADLen
	reqMADOff = 32

	// statusTimeout is ETIMEDOUT, the status of a MAD that could not be delivered:
	// libumad2sim hands it to the program as umad's status, and libibmad fails at once.
	statusTimeout = 110
)

// simRequest is a view of a sim_request datagram.
type simRequest []byte

// The fields, as ibsim.h names them.
func (r simRequest) DLID() uint16       { return binary.BigEndian.Uint16(r[0:]) }
func (r simRequest) SLID() uint16       { return binary.BigEndian.Uint16(r[4:]) }
func (r simRequest) DQP() uint32        { return binary.BigEndian.Uint32(r[8:]) }
func (r simRequest) Length() uint64     { return binary.BigEndian.Uint64(r[24:]) }
func (r simRequest) MAD() wire.MAD      { return wire.MAD(r[reqMADOff:reqLen]) }
func (r simRequest) SetDLID(lid uint16) { binary.BigEndian.PutUint32(r[0:], uint32(lid)<<16) }
func (r simRequest) SetSLID(lid uint16) { binary.BigEndian.PutUint32(r[4:], uint32(lid)<<16) }
func (r simRequest) SetDQP(q uint32)    { binary.BigEndian.PutUint32(r[8:], q) }
func (r simRequest) SetSQP(q uint32)    { binary.BigEndian.PutUint32(r[12:], q) }
func (r simRequest) SetStatus(s uint32) { binary.BigEndian.PutUint32(r[16:], s) }
func (r simRequest) setPadding()        { clear(r[20:24]) }
func (r simRequest) SetLength(n uint64) { binary.BigEndian.PutUint64(r[24:], n) }

func (r simRequest) String() string {
	return fmt.Sprintf("dlid %d slid %d dqp %d", r.DLID(), r.SLID(), r.DQP())
}

// IsDirected reports a directed-route SMP, IsSMP any SMP, IsResponseMAD a response (or a
// TrapRepress, which answers a trap).
func (r simRequest) IsDirected() bool { return r.MAD().MgmtClass() == wire.MgmtClassSubnDirected }
func (r simRequest) IsSMP() bool      { return isSMP(r.MAD().MgmtClass()) }
func (r simRequest) IsResponseMAD() bool {
	m := r.MAD()
	return m.IsResponse() || m.Method() == wire.MethodTrapRepress
}

// errBadMAD says why a client's MAD datagram was dropped.
var errBadMAD = errors.New("ibsim: bad MAD datagram")

// checkRequest validates a MAD datagram from a client as ibsim does (sim_mad.c): the
// size, the MAD's base and class version, and a directed-route SMP's header (hop pointer
// 0, D matching the response bit, permissive DrSLID/DrDLID on a request).
func checkRequest(b []byte) error {
	if len(b) != reqLen {
		return fmt.Errorf("%w: %d bytes, want %d", errBadMAD, len(b), reqLen)
	}
	r := simRequest(b)
	if r.Length() > wire.MADLen {
		return fmt.Errorf("%w: length %d > %d", errBadMAD, r.Length(), wire.MADLen)
	}
	m := r.MAD()
	if m.BaseVersion() != wire.MADBaseVersion {
		return fmt.Errorf("%w: base version %d", errBadMAD, m.BaseVersion())
	}
	if m.ClassVersion() > 2 {
		return fmt.Errorf("%w: class version %d", errBadMAD, m.ClassVersion())
	}
	if r.IsDirected() {
		s := wire.SMP(m)
		if s.HopCount() > wire.SMPMaxHops {
			return fmt.Errorf("%w: hop count %d", errBadMAD, s.HopCount())
		}
		if !m.IsResponse() {
			// IBA 14.2.2.1: the originating SM starts a request at hop pointer 0 with
			// the direction bit clear.
			if s.D() || s.HopPointer() != 0 {
				return fmt.Errorf("%w: directed-route request with D=%v hop pointer %d", errBadMAD, s.D(), s.HopPointer())
			}
		} else if !s.D() {
			return fmt.Errorf("%w: directed-route response without the direction bit", errBadMAD)
		}
	}
	return nil
}
