#include "textflag.h"

// func sumWords(b []byte) uint64
// The sum of b's little-endian 32-bit words, each zero-extended into one of sixteen
// 64-bit lanes; len(b) is a multiple of 64 and at most maxVecLen.
TEXT ·sumWords(SB), NOSPLIT, $0-32
	MOVQ  b_base+0(FP), SI
	MOVQ  b_len+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	TESTQ CX, CX
	JZ    done

loop:
	VPMOVZXDQ 0(SI), Y4
	VPMOVZXDQ 16(SI), Y5
	VPMOVZXDQ 32(SI), Y6
	VPMOVZXDQ 48(SI), Y7
	VPADDQ    Y4, Y0, Y0
	VPADDQ    Y5, Y1, Y1
	VPADDQ    Y6, Y2, Y2
	VPADDQ    Y7, Y3, Y3
	ADDQ      $64, SI
	SUBQ      $64, CX
	JNZ       loop

done:
	VPADDQ       Y1, Y0, Y0
	VPADDQ       Y3, Y2, Y2
	VPADDQ       Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPEXTRQ      $1, X0, AX
	VMOVQ        X0, DX
	ADDQ         DX, AX
	VZEROUPPER
	MOVQ         AX, ret+24(FP)
	RET
