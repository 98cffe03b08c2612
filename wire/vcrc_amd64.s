#include "textflag.h"

// REDUCE_START (crc32Reduce, crc16Reduce below) loads A into X0, B into X1, k[0], k[1]
// into X4, P and μ into X5, the fold by 128 bits into X6 and the mask of the low n bits
// into X3; it folds A onto B, then the upper 64 bits of X1 onto the lower by k[0].
#define REDUCE_START(mask) \
	MOVQ      a0+0(FP), X0; \
	MOVQ      a1+8(FP), AX; \
	PINSRQ    $1, AX, X0; \
	MOVQ      b0+16(FP), X1; \
	MOVQ      b1+24(FP), AX; \
	PINSRQ    $1, AX, X1; \
	MOVQ      k+32(FP), DX; \
	MOVOU     0(DX), X4; \
	MOVOU     16(DX), X5; \
	MOVOU     32(DX), X6; \
	MOVL      mask, AX; \
	MOVQ      AX, X3; \
	MOVO      X0, X2; \
	PCLMULQDQ $0x00, X6, X0; \
	PCLMULQDQ $0x11, X6, X2; \
	PXOR      X0, X1; \
	PXOR      X2, X1; \
	MOVO      X1, X2; \
	PCLMULQDQ $0x00, X4, X2; \
	PSRLDQ    $8, X1; \
	PXOR      X2, X1

// REDUCE_FOLD folds the low n bits (n/8 = bytes) onto the rest by k[1].
#define REDUCE_FOLD(bytes) \
	MOVO      X1, X2; \
	PAND      X3, X2; \
	PCLMULQDQ $0x10, X4, X2; \
	PSRLDQ    bytes, X1; \
	PXOR      X2, X1

// REDUCE_BARRETT leaves the register in bits n…2n−1 of X1.
#define REDUCE_BARRETT \
	MOVO      X1, X2; \
	PAND      X3, X2; \
	PCLMULQDQ $0x10, X5, X2; \
	PAND      X3, X2; \
	PCLMULQDQ $0x00, X5, X2; \
	PXOR      X2, X1

// func vcrcFold(init uint64, p []byte, k *[4]uint64) (lo, hi uint64)
// k[0], k[1]: the fold-by-4 constants (low, high lane word); k[2], k[3]: fold-by-1.
TEXT ·vcrcFold(SB), NOSPLIT, $0-56
	MOVQ init+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVQ  AX, X8
	PXOR  X8, X0
	ADDQ  $64, SI
	SUBQ  $64, CX
	MOVOU 0(DX), X9   // fold by 4 (512 bits)
	MOVOU 16(DX), X10 // fold by 1 (128 bits)

loop4:
	CMPQ CX, $64
	JB   fold1
	MOVO      X0, X4
	MOVO      X1, X5
	MOVO      X2, X6
	MOVO      X3, X7
	PCLMULQDQ $0x00, X9, X0
	PCLMULQDQ $0x00, X9, X1
	PCLMULQDQ $0x00, X9, X2
	PCLMULQDQ $0x00, X9, X3
	PCLMULQDQ $0x11, X9, X4
	PCLMULQDQ $0x11, X9, X5
	PCLMULQDQ $0x11, X9, X6
	PCLMULQDQ $0x11, X9, X7
	PXOR      X4, X0
	PXOR      X5, X1
	PXOR      X6, X2
	PXOR      X7, X3
	MOVOU     0(SI), X4
	MOVOU     16(SI), X5
	MOVOU     32(SI), X6
	MOVOU     48(SI), X7
	PXOR      X4, X0
	PXOR      X5, X1
	PXOR      X6, X2
	PXOR      X7, X3
	ADDQ      $64, SI
	SUBQ      $64, CX
	JMP       loop4

fold1:
	// The four lanes into one: X0 folds onto X1, that onto X2, that onto X3.
	MOVO      X0, X4
	PCLMULQDQ $0x00, X10, X0
	PCLMULQDQ $0x11, X10, X4
	PXOR      X4, X0
	PXOR      X1, X0
	MOVO      X0, X4
	PCLMULQDQ $0x00, X10, X0
	PCLMULQDQ $0x11, X10, X4
	PXOR      X4, X0
	PXOR      X2, X0
	MOVO      X0, X4
	PCLMULQDQ $0x00, X10, X0
	PCLMULQDQ $0x11, X10, X4
	PXOR      X4, X0
	PXOR      X3, X0

loop1:
	CMPQ CX, $16
	JB   done
	MOVO      X0, X4
	PCLMULQDQ $0x00, X10, X0
	PCLMULQDQ $0x11, X10, X4
	PXOR      X4, X0
	MOVOU     0(SI), X4
	PXOR      X4, X0
	ADDQ      $16, SI
	SUBQ      $16, CX
	JMP       loop1

done:
	MOVQ   X0, AX
	PEXTRQ $1, X0, BX
	MOVQ   AX, lo+40(FP)
	MOVQ   BX, hi+48(FP)
	RET

// func fold512(init uint64, p []byte, k *[6]uint64) (lo, hi uint64)
// vcrcFold with AVX-512 VPCLMULQDQ: sixteen 128-bit lanes in four ZMM registers, 256 bytes
// a round, then four lanes (one ZMM) 64 bytes a round, then vcrcFold's tail. len(p) ≥ 256,
// a multiple of 16. k[0], k[1]: fold by 16 lanes (2048 bits); k[2], k[3]: by 4 (512);
// k[4], k[5]: by 1 (128).
TEXT ·fold512(SB), NOSPLIT, $0-56
	MOVQ init+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVQ     AX, X8 // zeroes the rest of Z8
	VPXORQ    Z8, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX
	VBROADCASTI32X4 0(DX), Z9   // fold by 16 lanes
	VBROADCASTI32X4 16(DX), Z10 // fold by 4 lanes

loop16:
	CMPQ       CX, $256
	JB         fold4
	VPCLMULQDQ $0x00, Z9, Z0, Z4
	VPCLMULQDQ $0x11, Z9, Z0, Z0
	VPCLMULQDQ $0x00, Z9, Z1, Z5
	VPCLMULQDQ $0x11, Z9, Z1, Z1
	VPCLMULQDQ $0x00, Z9, Z2, Z6
	VPCLMULQDQ $0x11, Z9, Z2, Z2
	VPCLMULQDQ $0x00, Z9, Z3, Z7
	VPCLMULQDQ $0x11, Z9, Z3, Z3
	VPTERNLOGQ $0x96, 0(SI), Z4, Z0
	VPTERNLOGQ $0x96, 64(SI), Z5, Z1
	VPTERNLOGQ $0x96, 128(SI), Z6, Z2
	VPTERNLOGQ $0x96, 192(SI), Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop16

fold4:
	// Z0 onto Z1, that onto Z2, that onto Z3: each 512 bits on.
	VPCLMULQDQ $0x00, Z10, Z0, Z4
	VPCLMULQDQ $0x11, Z10, Z0, Z5
	VPTERNLOGQ $0x96, Z4, Z5, Z1
	VPCLMULQDQ $0x00, Z10, Z1, Z4
	VPCLMULQDQ $0x11, Z10, Z1, Z5
	VPTERNLOGQ $0x96, Z4, Z5, Z2
	VPCLMULQDQ $0x00, Z10, Z2, Z4
	VPCLMULQDQ $0x11, Z10, Z2, Z5
	VPTERNLOGQ $0x96, Z4, Z5, Z3

loop4:
	CMPQ       CX, $64
	JB         lanes
	VPCLMULQDQ $0x00, Z10, Z3, Z4
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	VPTERNLOGQ $0x96, 0(SI), Z4, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        loop4

lanes:
	// The four lanes of Z3 into one, as vcrcFold does with X0..X3.
	VMOVDQU         32(DX), X10 // fold by 1 lane
	VEXTRACTI32X4   $1, Z3, X1
	VEXTRACTI32X4   $2, Z3, X2
	VEXTRACTI32X4   $3, Z3, X11
	VPCLMULQDQ      $0x00, X10, X3, X4
	VPCLMULQDQ      $0x11, X10, X3, X5
	VPTERNLOGQ      $0x96, X4, X5, X1
	VPCLMULQDQ      $0x00, X10, X1, X4
	VPCLMULQDQ      $0x11, X10, X1, X5
	VPTERNLOGQ      $0x96, X4, X5, X2
	VPCLMULQDQ      $0x00, X10, X2, X4
	VPCLMULQDQ      $0x11, X10, X2, X5
	VPTERNLOGQ      $0x96, X4, X5, X11

loop1x:
	CMPQ       CX, $16
	JB         donex
	VPCLMULQDQ $0x00, X10, X11, X4
	VPCLMULQDQ $0x11, X10, X11, X5
	VPTERNLOGQ $0x96, 0(SI), X4, X5
	VMOVDQA64  X5, X11
	ADDQ       $16, SI
	SUBQ       $16, CX
	JMP        loop1x

donex:
	VMOVQ   X11, AX
	VPEXTRQ $1, X11, BX
	VZEROUPPER
	MOVQ    AX, lo+40(FP)
	MOVQ    BX, hi+48(FP)
	RET

// A fold's remainder to the CRC register, by carry-less multiplication instead of the
// slicing tables, whose lines miss the cache when a packet's bytes have just gone through
// it. For a bit-reflected CRC of degree n, the register after 32 bytes A‖B from zero holds
// (A·x^128 + B)·x^n mod P: A folds onto B (k[4], k[5]: fold by 128 bits, as in vcrcFold),
// the upper 64 bits of the result onto the lower (k[0] = x^(64+n) mod P), n bits at a time
// onto the rest (k[1] = x^(2n) mod P) until 2n bits remain, and Barrett's reduction
// (k[2] = P, k[3] = ⌊x^(2n)/P⌋) leaves the register in bits n…2n−1; k[0]…k[3]
// bit-reflected over n+1 bits (reduceConsts). As Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ Instruction" (2009) ends, and Linux's crc32-pclmul with the
// same constants. A zero A leaves B's register: a fold's remainder alone.

// func crc32Reduce(a0, a1, b0, b1 uint64, k *[6]uint64) uint32
TEXT ·crc32Reduce(SB), NOSPLIT, $0-44
	REDUCE_START($0xffffffff) // 96 bits
	REDUCE_FOLD($4)           // 64
	REDUCE_BARRETT
	PEXTRD $1, X1, AX
	MOVL   AX, ret+40(FP)
	RET

// func crc16Reduce(a0, a1, b0, b1 uint64, k *[6]uint64) uint16
TEXT ·crc16Reduce(SB), NOSPLIT, $0-42
	REDUCE_START($0xffff) // 80 bits
	REDUCE_FOLD($2)       // 64
	REDUCE_FOLD($2)       // 48
	REDUCE_FOLD($2)       // 32
	REDUCE_BARRETT
	PEXTRW $1, X1, AX
	MOVW   AX, ret+40(FP)
	RET
