// Package udplink carries a fabric Link over UDP, so that ports in different processes or
// hosts share one fabric: a host's HCA port dials a switch process (Dial), the switch
// listens and gives each host a switch port by port GUID (Listen, SwitchPorts).
//
// Every datagram is one message: a 16-byte link header, a body, and with a pre-shared key
// a 16-byte ChaCha20-Poly1305 tag over header and body. A data message's body is one IB
// packet from the first LRH byte through the ICRC, followed by its VCRC (IBA 7.8.2: the
// VCRC is per hop, computed where a packet leaves the process and verified where it
// arrives). Control messages open a session (connect, connect-ack, refuse), keep it alive
// and close it (keepalive, disconnect).
//
// Link header (all fields big-endian):
//
//	byte 0     version (1)
//	byte 1     message type (MsgConnect … MsgData)
//	bytes 2–3  reserved, zero
//	bytes 4–7  session: chosen by the listener in connect-ack, carried by every later
//	           message of the session; zero in connect and refuse
//	bytes 8–15 sequence number: per session and direction, starting at 1, checked
//	           against a replay window; a random value in handshake messages
//
// With a PSK the tag is checked before any field is interpreted; a datagram that fails is
// dropped and counted. Without one, only source addresses in an allow-list are accepted
// (default: loopback only).
package udplink

import (
	"encoding/binary"
	"fmt"
)

// Version is the link protocol version this package speaks.
const Version = 1

// HeaderLen is the length of the link header.
const HeaderLen = 16

// TagLen is the length of the authentication tag a PSK adds to every datagram.
const TagLen = 16

// MsgType is a link message type (header byte 1).
type MsgType uint8

const (
	MsgConnect    MsgType = 1 // host → switch: open a session for a port GUID
	MsgConnectAck MsgType = 2 // switch → host: session and switch port number
	MsgRefuse     MsgType = 3 // switch → host: no session, with a reason
	MsgKeepalive  MsgType = 4 // either way, every keepalive interval
	MsgDisconnect MsgType = 5 // either way: the session ends
	MsgData       MsgType = 6 // one IB packet and its VCRC
)

func (t MsgType) String() string {
	switch t {
	case MsgConnect:
		return "connect"
	case MsgConnectAck:
		return "connect-ack"
	case MsgRefuse:
		return "refuse"
	case MsgKeepalive:
		return "keepalive"
	case MsgDisconnect:
		return "disconnect"
	case MsgData:
		return "data"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// handshake reports whether t is authenticated with the handshake key (no session yet).
func (t MsgType) handshake() bool { return t == MsgConnect || t == MsgConnectAck || t == MsgRefuse }

// Header is a view of a link header.
type Header []byte

func (h Header) Version() uint8   { return h[0] }
func (h Header) Type() MsgType    { return MsgType(h[1]) }
func (h Header) Reserved() uint16 { return binary.BigEndian.Uint16(h[2:]) }
func (h Header) Session() uint32  { return binary.BigEndian.Uint32(h[4:]) }
func (h Header) Seq() uint64      { return binary.BigEndian.Uint64(h[8:]) }

// put writes a header into h.
func (h Header) put(t MsgType, session uint32, seq uint64) {
	h[0], h[1], h[2], h[3] = Version, uint8(t), 0, 0
	binary.BigEndian.PutUint32(h[4:], session)
	binary.BigEndian.PutUint64(h[8:], seq)
}

// Handshake message bodies.
//
//	connect:     port GUID (8) | sender's time, Unix ns (8) | client random (16)
//	connect-ack: switch port number (2) | reserved (6) | client random (16) | server random (16)
//	refuse:      client random (16) | reason code (1) | text length (1) | text
//	disconnect:  reason code (1)
const (
	connectLen    = 32
	connectAckLen = 40
	refuseMinLen  = 18
	randLen       = 16
)

// Refusal reason codes (refuse and disconnect bodies).
const (
	ReasonNone     = 0
	ReasonFull     = 1 // every switch port is in use
	ReasonShutdown = 2 // the sender is closing
	ReasonRejected = 3 // the acceptor refused for another reason
	// ReasonUnknownSession: the switch has no such session (it restarted, or timed the
	// host out); sent under the handshake key, in answer to a session message.
	ReasonUnknownSession = 4
)

// maxPacket is the largest IB packet a data message carries (LRH through ICRC): LRH 8 +
// GRH 40 + BTH 12 + the largest extension headers + a 4096-byte payload + ICRC stays
// under it.
const maxPacket = 4544

// maxDatagram is the size of a receive buffer: anything longer arrives truncated and is
// dropped.
const maxDatagram = HeaderLen + maxPacket + 2 + TagLen
