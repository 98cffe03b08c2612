// Package wire holds the InfiniBand wire formats as typed views over byte
// slices, in the style of gVisor's tcpip/header package: a header is a
// []byte with getter and setter methods, nothing is parsed into structs and
// nothing allocates. Field names follow the InfiniBand Architecture
// Specification, Volume 1 (IBA), and each accessor cites the section that
// defines it.
//
// Callers are responsible for handing a view at least as long as the header
// (the *Len constants); Packet.Parse and ParseMAD check lengths for
// untrusted input.
//
// This package imports the standard library and internal/csum (the RFC 1071
// one's-complement sum behind the checksum-offload fields of a work request); it
// knows nothing of IP.
package wire
