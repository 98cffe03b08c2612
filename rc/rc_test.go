package rc_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/hca/hcatest"
)

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// TestRCEveryOpcode moves every RC operation across MTUs 256 and 4096 for sizes from 0
// to 16 MiB, with SGE lists and inline sends, and checks data and completions.
func TestRCEveryOpcode(t *testing.T) {
	sizes := []int{0, 1, 255, 256, 257, 4095, 4096, 4097, 65536, 1 << 20, 16 << 20}
	if testing.Short() {
		sizes = sizes[:9]
	}
	for _, mtu := range []hca.MTU{hca.MTU256, hca.MTU4096} {
		for _, typ := range []hca.QPType{hca.QPTypeRC, hca.QPTypeUC} {
			o := connOpts{typ: typ, mtu: mtu, bufLen: 2*(16<<20) + 8192,
				access: hca.AccessLocalWrite | hca.AccessRemoteWrite | hca.AccessRemoteRead | hca.AccessRemoteAtomic | hca.AccessMWBind}
			tsizes := sizes
			if hcatest.AttachedFromEnv() {
				// Attached, the responses cross two rings and the daemon: a 16 MiB READ
				// can outlast timeout 14's 67 ms (under the race detector it does), and
				// the READ responses between the first and the last do not restart the
				// requester's ACK timer. 4.3 s.
				o.timeout = 20
				// And the daemon drops packets for a process that falls 20 ms behind (its
				// head-of-queue lifetime), as a loaded machine may make it: RC resends
				// them, and UC sends only messages that fit in the rings (4 MiB each),
				// which no slow reader can make overflow.
				o.retry = 7
				if typ == hca.QPTypeUC {
					tsizes = slices.DeleteFunc(slices.Clone(sizes), func(n int) bool { return n > 1<<20 })
				}
			}
			f, a, b := connect(t, o)
			half := len(a.buf) / 2
			ops := []hca.WROpcode{hca.WRSend, hca.WRSendWithImm, hca.WRSendWithInv, hca.WRRDMAWrite, hca.WRRDMAWriteWithImm, hca.WRRDMARead}
			if typ == hca.QPTypeUC {
				ops = []hca.WROpcode{hca.WRSend, hca.WRSendWithImm, hca.WRRDMAWrite, hca.WRRDMAWriteWithImm}
			}
			for _, op := range ops {
				for _, size := range tsizes {
					for _, sgl := range []int{1, 3} {
						name := fmt.Sprintf("%s/mtu%d/%s/%dB/%dsge", typ, mtu.Bytes(), op, size, sgl)
						t.Run(name, func(t *testing.T) {
							seed := uint64(size*31 + int(op) + sgl)
							src := a.buf[:size]
							fill(src, seed)
							var sges []hca.SGE
							if sgl == 1 {
								sges = []hca.SGE{a.sge(0, size)}
							} else {
								p1, p2 := size/3, 2*size/3
								sges = []hca.SGE{a.sge(0, p1), a.sge(p1, p2-p1), a.sge(p2, size-p2)}
							}
							dst := b.buf[half : half+size]
							clear(dst)
							wr := hca.SendWR{WRID: seed, Opcode: op, SGL: sges, SendFlags: hca.SendSignaled, ImmData: 0xabcd0000 + uint32(size),
								RemoteAddr: b.mr.Addr() + uint64(half), RKey: b.mr.RKey(), InvalidateRKey: 0x1234}
							if op == hca.WRSendWithInv {
								// The R_Key invalidated is a type 2 window's that b binds first.
								wr.InvalidateRKey = b.bindType2(t, 0, 64, hca.AccessRemoteRead)
							}
							needRecv := op == hca.WRSend || op == hca.WRSendWithImm || op == hca.WRSendWithInv || op == hca.WRRDMAWriteWithImm
							if needRecv {
								b.postRecv(t, seed, half, size+1)
							}
							if op == hca.WRRDMARead {
								// READ pulls b's memory into a's SGL.
								fill(dst, seed+1)
								clear(src)
							}
							f.Sync() // attached, b's side reads and writes these buffers in b's "process"
							a.post(t, wr)
							swc := waitWC(t, a.scq, nil)
							if swc.Status != hca.WCSuccess || swc.WRID != seed || swc.Opcode != hca.WCOpcodeOf(op) {
								t.Fatalf("send WC %+v", swc)
							}
							if op == hca.WRRDMARead {
								if swc.ByteLen != uint32(size) {
									t.Errorf("READ byte_len %d", swc.ByteLen)
								}
								if !bytes.Equal(src, dst) {
									t.Fatal("READ data differs")
								}
								noWC(t, f, b.rcq)
								return
							}
							if needRecv {
								rwc := waitWC(t, b.rcq, nil)
								if rwc.Status != hca.WCSuccess || rwc.WRID != seed || rwc.ByteLen != uint32(size) || rwc.SrcQP != a.qp.Num() || rwc.QPNum != b.qp.Num() {
									t.Fatalf("recv WC %+v", rwc)
								}
								wantOp, wantFlags := hca.WCRecv, hca.WCFlags(0)
								switch op {
								case hca.WRSendWithImm:
									wantFlags = hca.WCWithImm
								case hca.WRSendWithInv:
									wantFlags = hca.WCWithInv
								case hca.WRRDMAWriteWithImm:
									wantOp, wantFlags = hca.WCRecvRDMAWithImm, hca.WCWithImm
								}
								if rwc.Opcode != wantOp || rwc.WCFlags != wantFlags {
									t.Fatalf("recv WC opcode %s flags %#x, want %s %#x", rwc.Opcode, rwc.WCFlags, wantOp, wantFlags)
								}
								if wantFlags == hca.WCWithImm && rwc.ImmData != wr.ImmData || wantFlags == hca.WCWithInv && rwc.ImmData != wr.InvalidateRKey {
									t.Fatalf("imm/inv %#x", rwc.ImmData)
								}
							} else {
								// Also waits for a UC WRITE's data: its sender completes when
								// the packets leave, before they arrive (attached devices).
								noWC(t, f, b.rcq)
							}
							if !bytes.Equal(src, dst) {
								t.Fatal("data differs")
							}
						})
					}
				}
			}
		}
	}
}

func TestRCInlineSend(t *testing.T) {
	_, a, b := connect(t, connOpts{})
	msg := []byte("inline data lives in no MR at all")
	b.postRecv(t, 1, 0, 64)
	a.post(t, hca.SendWR{WRID: 1, Opcode: hca.WRSend, SendFlags: hca.SendInline | hca.SendSignaled,
		SGL: []hca.SGE{{Addr: hca.BufAddr(msg), Length: uint32(len(msg))}}})
	if wc := waitWC(t, a.scq, nil); wc.Status != hca.WCSuccess {
		t.Fatal(wc.Status)
	}
	if wc := waitWC(t, b.rcq, nil); wc.ByteLen != uint32(len(msg)) || string(b.buf[:len(msg)]) != string(msg) {
		t.Fatalf("WC %+v data %q", wc, b.buf[:len(msg)])
	}
}

func TestRCAtomics(t *testing.T) {
	f, a, b := connect(t, connOpts{})
	target := 4096
	binary.LittleEndian.PutUint64(b.buf[target:], 10)
	post := func(op hca.WROpcode, cmpAdd, swap uint64) uint64 {
		f.Sync() // attached, b's "process" operates on its buffer
		a.post(t, hca.SendWR{WRID: 9, Opcode: op, SendFlags: hca.SendSignaled, SGL: []hca.SGE{a.sge(0, 8)},
			RemoteAddr: b.mr.Addr() + uint64(target), RKey: b.mr.RKey(), CompareAdd: cmpAdd, Swap: swap})
		wc := waitWC(t, a.scq, nil)
		if wc.Status != hca.WCSuccess || wc.Opcode != hca.WCOpcodeOf(op) {
			t.Fatalf("%s WC %+v", op, wc)
		}
		return binary.LittleEndian.Uint64(a.buf[:8])
	}
	if got := post(hca.WRAtomicFetchAndAdd, 5, 0); got != 10 {
		t.Fatalf("FETCH_ADD returned %d, want 10", got)
	}
	if got := post(hca.WRAtomicCmpAndSwp, 99, 1); got != 15 {
		t.Fatalf("CMP_SWAP (no match) returned %d, want 15", got)
	}
	if got := post(hca.WRAtomicCmpAndSwp, 15, 1000); got != 15 {
		t.Fatalf("CMP_SWAP (match) returned %d", got)
	}
	f.Sync()
	if v := binary.LittleEndian.Uint64(b.buf[target:]); v != 1000 {
		t.Fatalf("remote value %d, want 1000", v)
	}
}
