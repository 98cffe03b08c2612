#include "textflag.h"

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
