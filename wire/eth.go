package wire

import "encoding/binary"

// RDETH is the Reliable Datagram Extended Transport Header (IBA 9.3.1),
// 4 bytes: Reserved(8) EECnxt(24).
type RDETH []byte

// EECnxt returns the 24-bit EE context (IBA 9.3.1).
func (h RDETH) EECnxt() uint32 { return binary.BigEndian.Uint32(h) & 0x00ffffff }

// SetEECnxt sets the EE context and clears the reserved byte.
func (h RDETH) SetEECnxt(v uint32) { binary.BigEndian.PutUint32(h, v&0x00ffffff) }

// DETH is the Datagram Extended Transport Header (IBA 9.3.2), 8 bytes:
// Q_Key(32) Reserved(8) SrcQP(24).
type DETH []byte

// QKey returns the queue key (IBA 9.3.2).
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h[0:]) }

// SrcQP returns the 24-bit source QP number (IBA 9.3.2).
func (h DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(h[4:]) & 0x00ffffff }

// SetQKey sets the queue key.
func (h DETH) SetQKey(v uint32) { binary.BigEndian.PutUint32(h[0:], v) }

// SetSrcQP sets the source QP and clears the reserved byte.
func (h DETH) SetSrcQP(v uint32) { binary.BigEndian.PutUint32(h[4:], v&0x00ffffff) }

// RETH is the RDMA Extended Transport Header (IBA 9.3.3), 16 bytes:
// VA(64) R_Key(32) DMALen(32).
type RETH []byte

// VA returns the virtual address (IBA 9.3.3).
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key (IBA 9.3.3).
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// DMALen returns the DMA length in bytes (IBA 9.3.3).
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// SetVA sets the virtual address.
func (h RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// SetRKey sets the remote key.
func (h RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// SetDMALen sets the DMA length.
func (h RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(h[12:], v) }

// AtomicETH is the Atomic Extended Transport Header (IBA 9.3.4), 28 bytes:
// VA(64) R_Key(32) SwapData(64) CompareData(64). For FetchAdd, SwapData
// carries the add value.
type AtomicETH []byte

// VA returns the virtual address (IBA 9.3.4).
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key (IBA 9.3.4).
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SwapData returns the swap (or add) data (IBA 9.3.4).
func (h AtomicETH) SwapData() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// CompareData returns the compare data (IBA 9.3.4).
func (h AtomicETH) CompareData() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// SetVA sets the virtual address.
func (h AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// SetRKey sets the remote key.
func (h AtomicETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// SetSwapData sets the swap (or add) data.
func (h AtomicETH) SetSwapData(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }

// SetCompareData sets the compare data.
func (h AtomicETH) SetCompareData(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header
// (IBA 9.3.6), 8 bytes: the original remote data.
type AtomicAckETH []byte

// OrigRemData returns the original remote data (IBA 9.3.6).
func (h AtomicAckETH) OrigRemData() uint64 { return binary.BigEndian.Uint64(h) }

// SetOrigRemData sets the original remote data.
func (h AtomicAckETH) SetOrigRemData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// ImmDt is the Immediate Data Extended Transport Header (IBA 9.3.7),
// 4 bytes.
type ImmDt []byte

// Imm returns the immediate data, as a big-endian number (the verbs
// imm_data is the same four bytes in network order).
func (h ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(h) }

// SetImm sets the immediate data.
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }

// XRCETH is the XRC Extended Transport Header (IBA Annex A14, XRC), 4 bytes: 8 reserved
// bits and the 24-bit number of the XRC SRQ at the responder that receives the request.
// It follows the BTH of every XRC request.
type XRCETH []byte

// SRQ returns XRCSRQ, the destination XRC SRQ number.
func (h XRCETH) SRQ() uint32 { return binary.BigEndian.Uint32(h) & 0xFFFFFF }

// SetSRQ sets XRCSRQ (and clears the reserved bits).
func (h XRCETH) SetSRQ(v uint32) { binary.BigEndian.PutUint32(h, v&0xFFFFFF) }

// IETH is the Invalidate Extended Transport Header (IBA 9.3.8), 4 bytes:
// the R_Key to invalidate.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h, v) }
