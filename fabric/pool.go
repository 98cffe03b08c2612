package fabric

import (
	"sync"

	"github.com/pibgw/pibgw/wire"
)

// maxPooledPacket covers the largest IBA packet (LRH+GRH+BTH+extension headers+4096-byte
// payload+ICRC+VCRC is under 4.3 KiB); bigger copies are allocated and left to the GC.
const maxPooledPacket = 4608

// pktBuf is a pooled packet copy. Wrappers that must keep a packet past Send (delay,
// reorder, corrupt) copy it into one and put it back once the inner Send returns.
type pktBuf struct{ b []byte }

var packetPool = sync.Pool{New: func() any { return &pktBuf{b: make([]byte, 0, maxPooledPacket)} }}

// copyPacket returns a pooled copy of p. A payload by reference is copied in
// (wire.Materialize): the copy outlives the sender's call, and the bytes it names are
// the sender's only until then.
func copyPacket(p []byte) *pktBuf {
	var pb *pktBuf
	if len(p) > maxPooledPacket {
		pb = &pktBuf{b: make([]byte, len(p))}
	} else {
		pb = packetPool.Get().(*pktBuf)
		pb.b = pb.b[:len(p)]
	}
	wire.CopyPacket(pb.b, p)
	wire.Materialize(pb.b)
	return pb
}

// free returns pb to the pool.
func (pb *pktBuf) free() {
	if cap(pb.b) != maxPooledPacket {
		return
	}
	pb.b = pb.b[:0]
	packetPool.Put(pb)
}
