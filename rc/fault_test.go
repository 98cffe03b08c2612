package rc_test

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rc"
)

func pattern(b []byte, seq uint64) {
	for i := range b {
		b[i] = byte(seq*131 + uint64(i)*7)
	}
}

func hasPattern(b []byte, seq uint64) bool {
	for i := range b {
		if b[i] != byte(seq*131+uint64(i)*7) {
			return false
		}
	}
	return true
}

// TestRCUnderFaults runs a mix of SEND, SEND with immediate, RDMA WRITE (with
// immediate), READ and FETCH_ADD over links that lose 5 %, reorder 5 % and duplicate 1 %
// of packets in both directions, and checks every message arrives exactly once, in order,
// intact; READs return the right bytes; the FETCH_ADD counter ends exactly right.
func TestRCUnderFaults(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	base := uint64(1)
	if v, err := strconv.ParseUint(os.Getenv("PIBGW_FAULT_SEED"), 10, 64); err == nil {
		base = v
	}
	clk := newFakeClock()
	var faults []*fabric.FaultLink
	wrap := func(i int, d fabric.Direction, l fabric.Link) fabric.Link {
		f := fabric.NewFaultLink(l, fabric.FaultConfig{Seed: base + uint64(2*i+int(d)), Loss: 0.05, Reorder: 0.05, Duplicate: 0.01, Clock: clk})
		faults = append(faults, f)
		return f
	}
	const (
		window    = 64
		slot      = 4096
		recvBase  = 0
		writeBase = 256 * slot
		readBase  = 512 * slot
		counterAt = 640 * slot
		mtu       = hca.MTU1024
	)
	f, a, b := connect(t, connOpts{mtu: mtu, bufLen: 1 << 22, clk: clk, timeout: 12, retry: 7, rnrRetry: 7, depth: 256, cqe: 1 << 16, wrap: wrap})
	if f.Attached() {
		// Attached, the NAKs come back while the window is still in flight, and go-back-N
		// resends much more per loss: a tenth of the messages meets more faults than all
		// of them do in process (and takes longer).
		n /= 10
	}
	// b's read area holds a fixed pattern; its counter starts at 0.
	pattern(b.buf[readBase:readBase+2*slot], 999)
	recvSlots := 128
	for i := 0; i < recvSlots; i++ {
		b.postRecv(t, uint64(i), recvBase+i*slot, slot)
	}
	f.Sync() // attached, b's "process" reads the pattern

	type sent struct {
		op   hca.WROpcode
		size int
		off  int
	}
	log := make([]sent, n)
	var (
		posted, completed, recvSeq int
		recvWanted                 []int // seqs of messages that consume a receive WQE, in order
		fetchAdds                  uint64
		wcs                        [64]hca.WC
		stalls                     int
	)
	for completed < n {
		for posted < n && posted-completed < window {
			seq := posted
			size := (seq * 7919) % 3000
			s := sent{size: size}
			wr := hca.SendWR{WRID: uint64(seq), SendFlags: hca.SendSignaled}
			aslot := (seq % 128) * slot
			switch seq % 10 {
			case 0, 1, 2:
				s.op = hca.WRSend
				binary.LittleEndian.PutUint64(a.buf[aslot:], uint64(seq))
				if size < 8 {
					size, s.size = 8, 8
				}
				pattern(a.buf[aslot+8:aslot+size], uint64(seq))
				wr.SGL = []hca.SGE{a.sge(aslot, size)}
			case 3:
				s.op = hca.WRSendWithImm
				wr.ImmData = uint32(seq)
				pattern(a.buf[aslot:aslot+size], uint64(seq))
				wr.SGL = []hca.SGE{a.sge(aslot, size)}
			case 4, 5:
				s.op = hca.WRRDMAWrite
				s.off = writeBase + (seq%128)*slot
				pattern(a.buf[aslot:aslot+size], uint64(seq))
				wr.SGL = []hca.SGE{a.sge(aslot, size)}
				wr.RemoteAddr, wr.RKey = b.mr.Addr()+uint64(s.off), b.mr.RKey()
			case 6:
				s.op = hca.WRRDMAWriteWithImm
				s.off = writeBase + (seq%128)*slot
				wr.ImmData = uint32(seq)
				pattern(a.buf[aslot:aslot+size], uint64(seq))
				wr.SGL = []hca.SGE{a.sge(aslot, size)}
				wr.RemoteAddr, wr.RKey = b.mr.Addr()+uint64(s.off), b.mr.RKey()
			case 7, 8:
				s.op = hca.WRRDMARead
				s.off = (seq * 37) % slot
				clear(a.buf[aslot : aslot+size])
				wr.SGL = []hca.SGE{a.sge(aslot, size)}
				wr.RemoteAddr, wr.RKey = b.mr.Addr()+uint64(readBase+s.off), b.mr.RKey()
			case 9:
				s.op = hca.WRAtomicFetchAndAdd
				wr.SGL = []hca.SGE{a.sge(aslot, 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = b.mr.Addr()+counterAt, b.mr.RKey(), 1
			}
			wr.Opcode = s.op
			log[seq] = s
			if s.op == hca.WRSend || s.op == hca.WRSendWithImm || s.op == hca.WRRDMAWriteWithImm {
				recvWanted = append(recvWanted, seq)
			}
			a.post(t, wr)
			posted++
		}
		progress := false
		for k := a.scq.Poll(wcs[:]); k > 0; k = a.scq.Poll(wcs[:]) {
			progress = true
			f.Sync() // b wrote the WRITEs' data before it acknowledged them
			for _, wc := range wcs[:k] {
				seq := int(wc.WRID)
				if wc.Status != hca.WCSuccess {
					t.Fatalf("WR %d (%s) completed with %s\na: %s\nb: %s", seq, log[seq].op, wc.Status, rc.DebugState(a.qp), rc.DebugState(b.qp))
				}
				if seq != completed {
					t.Fatalf("send completion for WR %d, want %d (out of order or twice)", seq, completed)
				}
				s := log[seq]
				aslot := (seq % 128) * slot
				switch s.op {
				case hca.WRRDMAWrite, hca.WRRDMAWriteWithImm:
					if !hasPattern(b.buf[s.off:s.off+s.size], uint64(seq)) {
						t.Fatalf("WRITE %d: remote memory differs", seq)
					}
				case hca.WRRDMARead:
					want := b.buf[readBase+s.off : readBase+s.off+s.size]
					if string(a.buf[aslot:aslot+s.size]) != string(want) {
						t.Fatalf("READ %d: data differs", seq)
					}
				case hca.WRAtomicFetchAndAdd:
					if got := binary.LittleEndian.Uint64(a.buf[aslot:]); got != fetchAdds {
						t.Fatalf("FETCH_ADD %d returned %d, want %d (executed twice or lost)", seq, got, fetchAdds)
					}
					fetchAdds++
				}
				completed++
			}
		}
		for k := b.rcq.Poll(wcs[:]); k > 0; k = b.rcq.Poll(wcs[:]) {
			progress = true
			for _, wc := range wcs[:k] {
				if wc.Status != hca.WCSuccess {
					t.Fatalf("receive completion %s\nb: %s", wc.Status, rc.DebugState(b.qp))
				}
				if recvSeq >= len(recvWanted) {
					t.Fatalf("more receive completions than messages")
				}
				seq := recvWanted[recvSeq]
				recvSeq++
				s := log[seq]
				rslot := int(wc.WRID)
				buf := b.buf[recvBase+rslot*slot:]
				switch s.op {
				case hca.WRSend:
					if got := binary.LittleEndian.Uint64(buf); got != uint64(seq) || int(wc.ByteLen) != s.size || !hasPattern(buf[8:s.size], uint64(seq)) {
						t.Fatalf("SEND %d: got seq %d len %d", seq, got, wc.ByteLen)
					}
				case hca.WRSendWithImm:
					if wc.ImmData != uint32(seq) || int(wc.ByteLen) != s.size || !hasPattern(buf[:s.size], uint64(seq)) {
						t.Fatalf("SEND_WITH_IMM %d: imm %d len %d", seq, wc.ImmData, wc.ByteLen)
					}
				case hca.WRRDMAWriteWithImm:
					if wc.ImmData != uint32(seq) || wc.Opcode != hca.WCRecvRDMAWithImm {
						t.Fatalf("WRITE_WITH_IMM %d: imm %d opcode %s", seq, wc.ImmData, wc.Opcode)
					}
				}
				b.postRecv(t, wc.WRID, recvBase+rslot*slot, slot)
			}
		}
		if !progress && !f.Settled() {
			// Attached devices still have packets on their way: no timer may fire yet.
			runtime.Gosched()
			continue
		}
		if !progress {
			// Nothing moved: let timers (ACK timeout, RNR) fire, and release held packets.
			for _, fl := range faults {
				fl.Flush()
			}
			clk.Advance(20 * time.Millisecond)
			stalls++
			if stalls > 10*n {
				t.Fatalf("stuck at %d/%d completions\na: %s\nb: %s", completed, n, rc.DebugState(a.qp), rc.DebugState(b.qp))
			}
		}
	}
	if recvSeq != len(recvWanted) {
		t.Fatalf("%d receive completions, want %d", recvSeq, len(recvWanted))
	}
	f.Sync()
	if got := binary.LittleEndian.Uint64(b.buf[counterAt:]); got != fetchAdds {
		t.Fatalf("counter %d, want %d", got, fetchAdds)
	}
	var lost, dup, reord uint64
	for _, fl := range faults {
		c := fl.Counters()
		lost += c.Lost
		dup += c.Duplicated
		reord += c.Reordered
	}
	t.Logf("%d messages; faults: %d lost, %d reordered, %d duplicated; %d timer advances", n, lost, reord, dup, stalls)
	if lost == 0 || dup == 0 || reord == 0 {
		t.Fatal("the fault links injected nothing")
	}
}
