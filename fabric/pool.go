package fabric

import "sync"

// maxPooledPacket covers the largest IBA packet (LRH+GRH+BTH+extension headers+4096-byte
// payload+ICRC+VCRC is under 4.3 KiB); bigger copies are allocated and left to the GC.
const maxPooledPacket = 4608

// pktBuf is a pooled packet copy. Wrappers that must keep a packet past Send (delay,
// reorder, corrupt) copy it into one and put it back once the inner Send returns.
type pktBuf struct{ b []byte }

var packetPool = sync.Pool{New: func() any { return &pktBuf{b: make([]byte, 0, maxPooledPacket)} }}

// copyPacket returns a pooled copy of p.
func copyPacket(p []byte) *pktBuf {
	if len(p) > maxPooledPacket {
		return &pktBuf{b: append([]byte(nil), p...)}
	}
	pb := packetPool.Get().(*pktBuf)
	pb.b = append(pb.b[:0], p...)
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
