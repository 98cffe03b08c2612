package udplink

import (
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net/netip"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/hkdf"
)

// Authentication. With a pre-shared key every datagram ends in a ChaCha20-Poly1305 tag
// (RFC 8439) computed over the whole datagram as associated data with an empty plaintext:
// packets are authenticated, not encrypted (like IPsec AH), so captures of the UDP link
// still show the IB packets.
//
// A nonce must never repeat under one key (RFC 8439 §4). Handshake messages use a key
// derived from the PSK alone and a random 64-bit header sequence number as nonce; each
// session has its own pair of keys derived from the PSK and both sides' 16-byte randoms
// (HKDF-SHA256, RFC 5869), and numbers its messages 1, 2, … in each direction, so a
// restarted process never reuses a nonce of an earlier session.

// PSKMinLen is the shortest accepted pre-shared key.
const PSKMinLen = 16

// keys derives AEADs from a PSK.
type keys struct{ psk []byte }

func (k keys) derive(info string, salt []byte) cipher.AEAD {
	var key [chacha20poly1305.KeySize]byte
	r := hkdf.New(sha256.New, k.psk, salt, []byte("pibgw udplink v1 "+info))
	if _, err := io.ReadFull(r, key[:]); err != nil {
		panic(err) // HKDF-SHA256 yields up to 8160 bytes
	}
	a, err := chacha20poly1305.New(key[:])
	if err != nil {
		panic(err)
	}
	return a
}

// handshake returns the key of connect, connect-ack and refuse messages.
func (k keys) handshake() cipher.AEAD { return k.derive("handshake", nil) }

// session returns the client-to-server and server-to-client keys of a session.
func (k keys) session(crand, srand []byte) (c2s, s2c cipher.AEAD) {
	salt := make([]byte, 0, 2*randLen)
	salt = append(append(salt, crand...), srand...)
	return k.derive("c2s", salt), k.derive("s2c", salt)
}

// nonce is the AEAD nonce of a message: four zero bytes and the header's sequence number.
type nonce [chacha20poly1305.NonceSize]byte

func (n *nonce) set(seq uint64) { binary.BigEndian.PutUint64(n[4:], seq) }

// seal appends the tag of d (header and body) to d; d must have TagLen bytes of capacity
// to spare. n is scratch owned by the caller.
func seal(a cipher.AEAD, n *nonce, d []byte) []byte {
	n.set(Header(d).Seq())
	return a.Seal(d, n[:], nil, d)
}

// open reports whether the datagram d (header, body, tag) carries a valid tag under a.
func open(a cipher.AEAD, n *nonce, d []byte) bool {
	if len(d) < HeaderLen+TagLen {
		return false
	}
	n.set(Header(d).Seq())
	body := len(d) - TagLen
	_, err := a.Open(d[body:body], n[:], d[body:], d[:body])
	return err == nil
}

// replayWindow accepts each sequence number once, and none older than the window
// (the sliding-window check of RFC 4303 §3.4.3 and RFC 6479: a 1024-bit bitmap, a
// window of 960).
// One goroutine (the receive loop) owns it.
type replayWindow struct {
	top  uint64 // highest accepted
	bits [windowWords]uint64
}

// The bitmap has windowWords words; the window is one word less (RFC 6479 §2), so that
// the word of the oldest sequence number in the window is never the one the newest reuses.
const (
	windowWords = 16
	windowBits  = (windowWords - 1) * 64
)

// check reports whether seq is new, without recording it (before authentication).
func (w *replayWindow) check(seq uint64) bool {
	if seq == 0 {
		return false
	}
	if seq > w.top {
		return true
	}
	if w.top-seq >= windowBits {
		return false
	}
	return w.bits[seq/64%windowWords]&(1<<(seq%64)) == 0
}

// accept records seq, which check accepted.
func (w *replayWindow) accept(seq uint64) {
	if seq > w.top {
		// Clear the words the window slides past.
		from, to := w.top/64+1, seq/64
		switch {
		case to < from: // the same word as top
		case to-from >= windowWords:
			w.bits = [windowWords]uint64{}
		default:
			for i := from; i <= to; i++ {
				w.bits[i%windowWords] = 0
			}
		}
		w.top = seq
	}
	w.bits[seq/64%windowWords] |= 1 << (seq % 64)
}

// Allow-list: without a PSK only datagrams from these prefixes are accepted.

// DefaultAllow is the allow-list used without a PSK when none is configured: loopback.
var DefaultAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func allowed(list []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
