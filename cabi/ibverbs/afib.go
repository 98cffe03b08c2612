//go:build pibgw_cabi

package main

// AF_IB addresses (struct sockaddr_ib) for the rdma_cm calls: libfabric's verbs provider
// binds, resolves and listens with them (one per GID and P_Key of a device) when it sees
// no IPoIB interface of the device, as rdma-core's librdmacm passes them to the kernel.

/*
#include <string.h>
#include <sys/socket.h>
#include <infiniband/ib.h>
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"github.com/pibgw/pibgw/rdmacm"
)

// ibAddrFromC reads a sockaddr_ib (its fields in network order, sib_scope_id in host
// order); ok is false for another family.
func ibAddrFromC(sa *C.struct_sockaddr) (rdmacm.IBAddr, bool) {
	if sa == nil || sa.sa_family != C.AF_IB {
		return rdmacm.IBAddr{}, false
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(sa)), C.sizeof_struct_sockaddr_ib)
	var a rdmacm.IBAddr
	a.PKey = binary.BigEndian.Uint16(b[2:])
	a.Flow = binary.BigEndian.Uint32(b[4:])
	copy(a.GID[:], b[8:24])
	a.SID = binary.BigEndian.Uint64(b[24:])
	a.SIDMask = binary.BigEndian.Uint64(b[32:])
	a.Scope = binary.NativeEndian.Uint64(b[40:])
	return a, true
}

// ibAddrToC writes a as a sockaddr_ib into out (zeroed first).
func ibAddrToC(a rdmacm.IBAddr, out *C.struct_sockaddr_storage) {
	C.memset(unsafe.Pointer(out), 0, C.sizeof_struct_sockaddr_storage)
	b := unsafe.Slice((*byte)(unsafe.Pointer(out)), C.sizeof_struct_sockaddr_ib)
	binary.NativeEndian.PutUint16(b[0:], C.AF_IB)
	binary.BigEndian.PutUint16(b[2:], a.PKey)
	binary.BigEndian.PutUint32(b[4:], a.Flow)
	copy(b[8:24], a.GID[:])
	binary.BigEndian.PutUint64(b[24:], a.SID)
	binary.BigEndian.PutUint64(b[32:], a.SIDMask)
	binary.NativeEndian.PutUint64(b[40:], a.Scope)
}
