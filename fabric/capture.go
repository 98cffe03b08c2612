package fabric

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/wire"
)

// Captures are classic pcap files of link type 197 (ERF), each record an ERF header of
// type 21 (InfiniBand) followed by the packet and its VCRC: the one layout tshark 4.0
// dissects as InfiniBand from the first LRH byte with no preferences set (pcap link type
// 247 is not recognised there).
//
// pcap record: ts_sec, ts_nsec, incl_len, orig_len (little-endian, nanosecond magic).
// ERF header (16 bytes, as Wireshark's wiretap/erf.c and pcap-common.c read it):
//
//	0  ts    8 bytes little-endian: seconds << 32 | binary fraction of a second
//	8  type  1 byte: 21, InfiniBand
//	9  flags 1 byte: bits 0-1 capture interface, bit 2 varying-length record
//	10 rlen  2 bytes big-endian: record length, ERF header + captured bytes
//	12 lctr  2 bytes big-endian: loss counter, 0
//	14 wlen  2 bytes big-endian: wire length, packet + VCRC
//
// The VCRC bytes follow wire.AppendVCRC (least significant byte first); Wireshark shows
// the field as a big-endian number and does not verify it.
const (
	pcapMagicNanos  = 0xa1b23c4d
	pcapMagicMicros = 0xa1b2c3d4
	pcapHeaderLen   = 24
	pcapRecordLen   = 16
	// LinkTypeERF is the pcap link type of ERF records.
	LinkTypeERF = 197
	// ERFTypeInfiniBand is the ERF record type of an InfiniBand packet from the LRH.
	ERFTypeInfiniBand = 21
	// ERFHeaderLen is the length of an ERF record header without extension headers.
	ERFHeaderLen = 16

	erfFlagIfaceMask = 0x03
	erfFlagVarLen    = 0x04

	maxERFRecord = 0xFFFF // rlen is 16 bits
)

// CaptureOptions configures NewCaptureWriter. The zero value is valid.
type CaptureOptions struct {
	// Clock stamps the records; nil means clock.Real.
	Clock clock.Clock
	// Snaplen keeps at most this many bytes of each packet (VCRC included); 0 keeps all.
	Snaplen int
	// Limit stops recording after this many packets; 0 records without limit.
	Limit uint64
	// BufferSize is the write buffer size; 0 means 64 KiB.
	BufferSize int
	// Backlog, when > 0, makes recording never wait for the writer: records are kept in
	// memory, at most Backlog bytes, until Flush writes them out on its caller's
	// goroutine, and a record that does not fit is dropped and counted
	// (CaptureStats.Dropped, and the ERF loss counter of the next record). A capture
	// streamed to a reader that may be slow or gone uses it, so that the packet path
	// never blocks on it. 0 writes through a buffer of BufferSize bytes, calling the
	// writer on the recording goroutine whenever the buffer fills.
	Backlog int
}

// CaptureStats counts what a CaptureWriter saw.
type CaptureStats struct {
	Packets uint64 // recorded
	Bytes   uint64 // recorded packet bytes, VCRC included
	Skipped uint64 // not recorded: over Limit, or after Close or an error
	Dropped uint64 // not recorded: the Backlog was full (the writer is slower than the fabric)
}

// ErrCaptureClosed is returned by Flush after Close.
var ErrCaptureClosed = errors.New("fabric: capture closed")

// CaptureWriter writes packets to a pcap stream. It is safe for concurrent use; records
// are buffered until Flush or Close.
type CaptureWriter struct {
	clk     clock.Clock
	snaplen int
	limit   uint64

	mu     sync.Mutex
	bw     *bufio.Writer
	err    error
	closed bool
	stats  CaptureStats
	// With a Backlog, records are appended to pend (as out); Flush swaps it for spare
	// and writes it to w without holding mu. flushMu orders the Flushes.
	backlog int
	w       io.Writer
	out     io.Writer
	pend    *backlogBuf
	spare   *backlogBuf
	flushMu sync.Mutex
	full    chan struct{}
	// unreported counts drops not yet noted in a record's ERF loss counter.
	unreported uint64
	hdr        [pcapRecordLen + ERFHeaderLen + wire.VCRCLen]byte
	// scratch holds a copy of a packet whose deferred ICRC is finalized for the file.
	scratch []byte
}

// NewCaptureWriter starts a capture on w; the pcap file header goes into the buffer at
// once. w is not closed by Close.
func NewCaptureWriter(w io.Writer, opts CaptureOptions) *CaptureWriter {
	size := opts.BufferSize
	if size <= 0 {
		size = 64 << 10
	}
	cw := &CaptureWriter{clk: opts.Clock, snaplen: opts.Snaplen, limit: opts.Limit, full: make(chan struct{}, 1)}
	if opts.Backlog > 0 {
		cw.backlog, cw.w = opts.Backlog, w
		cw.pend, cw.spare = &backlogBuf{}, &backlogBuf{}
		cw.out = cw.pend
	} else {
		cw.bw = bufio.NewWriterSize(w, size)
		cw.out = cw.bw
	}
	if cw.clk == nil {
		cw.clk = clock.Real{}
	}
	if cw.snaplen <= 0 || cw.snaplen > maxERFRecord-ERFHeaderLen {
		cw.snaplen = maxERFRecord - ERFHeaderLen
	}
	var h [pcapHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagicNanos)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], uint32(ERFHeaderLen+cw.snaplen))
	binary.LittleEndian.PutUint32(h[20:], LinkTypeERF)
	_, cw.err = cw.out.Write(h[:])
	return cw
}

// backlogBuf is the memory a CaptureWriter with a Backlog records into.
type backlogBuf struct{ b []byte }

func (b *backlogBuf) Write(p []byte) (int, error) {
	b.b = append(b.b, p...)
	return len(p), nil
}

// WritePackets records pkts (each LRH through ICRC) on capture interface 0.
func (cw *CaptureWriter) WritePackets(pkts [][]byte) { cw.WritePacketsOn(0, pkts) }

// WritePacketsOn records pkts on ERF capture interface iface (0..3), which Wireshark
// shows as separate interfaces: a capture of both directions of a cable can tell them
// apart.
func (cw *CaptureWriter) WritePacketsOn(iface uint8, pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	now := cw.clk.Now()
	sec, nsec := uint64(now.Unix()), uint64(now.Nanosecond())
	// The ERF fraction is nsec/1e9 in units of 2^-32 s, rounded to nearest; Wireshark's
	// conversion back rounds too, so nanoseconds survive the round trip.
	ts := sec<<32 | (nsec<<32+500_000_000)/1_000_000_000

	cw.mu.Lock()
	defer cw.mu.Unlock()
	for _, p := range pkts {
		if cw.err != nil || cw.closed || (cw.limit > 0 && cw.stats.Packets >= cw.limit) {
			cw.stats.Skipped++
			continue
		}
		if cw.backlog > 0 {
			n := len(cw.pend.b) + pcapRecordLen + ERFHeaderLen + min(len(p)+wire.VCRCLen, cw.snaplen)
			if n > cw.backlog {
				cw.stats.Dropped++
				cw.unreported++
				continue
			}
			if n > cw.backlog/2 {
				// Wake the flusher before records have to be dropped.
				select {
				case cw.full <- struct{}{}:
				default:
				}
			}
		}
		cw.writeRecord(iface, ts, sec, nsec, p)
	}
}

func (cw *CaptureWriter) writeRecord(iface uint8, ts, sec, nsec uint64, p []byte) {
	wlen := len(p) + wire.VCRCLen
	capLen := min(wlen, cw.snaplen)
	h := cw.hdr[:]
	binary.LittleEndian.PutUint32(h[0:], uint32(sec))
	binary.LittleEndian.PutUint32(h[4:], uint32(nsec))
	binary.LittleEndian.PutUint32(h[8:], uint32(ERFHeaderLen+capLen))
	binary.LittleEndian.PutUint32(h[12:], uint32(ERFHeaderLen+min(wlen, maxERFRecord-ERFHeaderLen)))
	e := h[pcapRecordLen:]
	binary.LittleEndian.PutUint64(e[0:], ts)
	e[8] = ERFTypeInfiniBand
	e[9] = iface&erfFlagIfaceMask | erfFlagVarLen
	binary.BigEndian.PutUint16(e[10:], uint16(ERFHeaderLen+capLen))
	// The loss counter: records dropped since the previous one (the rest, past 16 bits,
	// is carried to the next), so the file itself tells where a slow reader lost some.
	lctr := min(cw.unreported, 0xFFFF)
	binary.BigEndian.PutUint16(e[12:], uint16(lctr))
	binary.BigEndian.PutUint16(e[14:], uint16(min(wlen, maxERFRecord)))
	if _, err := cw.out.Write(h[:pcapRecordLen+ERFHeaderLen]); err != nil {
		cw.err = err
		return
	}
	if wire.ICRCPending(p) {
		// What a capture shows is what a wire would carry: the ICRC computed, the
		// in-process mark gone (see wire.Finalize).
		cw.scratch = append(cw.scratch[:0], p...)
		p = cw.scratch
		wire.Finalize(p)
	}
	body := p[:min(len(p), capLen)]
	if _, err := cw.out.Write(body); err != nil {
		cw.err = err
		return
	}
	if n := capLen - len(body); n > 0 {
		// The link carries no VCRC (it is per hop, IBA 7.8.2); the capture shows the one
		// this hop would have put on the wire, in wire.AppendVCRC's byte order.
		v := h[pcapRecordLen+ERFHeaderLen:]
		binary.LittleEndian.PutUint16(v, wire.VCRC(p))
		if _, err := cw.out.Write(v[:n]); err != nil {
			cw.err = err
			return
		}
	}
	cw.unreported -= lctr
	cw.stats.Packets++
	cw.stats.Bytes += uint64(capLen)
}

// Flush writes buffered records to the underlying writer. With a Backlog, recording
// goes on while Flush waits for the writer.
func (cw *CaptureWriter) Flush() error {
	cw.flushMu.Lock()
	defer cw.flushMu.Unlock()
	cw.mu.Lock()
	if cw.closed {
		cw.mu.Unlock()
		return ErrCaptureClosed
	}
	return cw.flushLocked()
}

// flushLocked flushes with flushMu and mu held; it returns with mu released.
func (cw *CaptureWriter) flushLocked() error {
	if cw.err != nil {
		cw.mu.Unlock()
		return cw.err
	}
	if cw.backlog == 0 {
		cw.err = cw.bw.Flush()
		cw.mu.Unlock()
		return cw.err
	}
	buf := cw.pend
	cw.pend, cw.spare = cw.spare, nil
	cw.out = cw.pend
	cw.mu.Unlock()
	_, err := cw.w.Write(buf.b)
	buf.b = buf.b[:0]
	cw.mu.Lock()
	cw.spare = buf
	if err != nil && cw.err == nil {
		cw.err = err
	}
	err = cw.err
	cw.mu.Unlock()
	return err
}

// Full receives when more than half the Backlog waits to be flushed: a flusher that
// wakes on it as well as on a timer writes before records have to be dropped. It never
// receives without a Backlog.
func (cw *CaptureWriter) Full() <-chan struct{} { return cw.full }

// Close flushes the capture and stops recording; later packets are skipped. It does not
// close the underlying writer. With a Backlog it first waits for a Flush in progress.
func (cw *CaptureWriter) Close() error {
	cw.flushMu.Lock()
	defer cw.flushMu.Unlock()
	cw.mu.Lock()
	if cw.closed {
		cw.mu.Unlock()
		return nil
	}
	cw.closed = true
	return cw.flushLocked()
}

// Stats returns what the writer recorded and skipped so far.
func (cw *CaptureWriter) Stats() CaptureStats {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.stats
}

// Err returns the first write error, if any.
func (cw *CaptureWriter) Err() error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.err
}

// captureLink records what it passes on.
type captureLink struct {
	inner Link
	cw    *CaptureWriter
	iface uint8
}

func (c *captureLink) Send(pkts [][]byte) {
	c.cw.WritePacketsOn(c.iface, pkts)
	c.inner.Send(pkts)
}

// NewCaptureLink wraps inner so that every packet sent through it is recorded in cw
// (on capture interface 0) before it is passed on.
func NewCaptureLink(inner Link, cw *CaptureWriter) Link {
	return &captureLink{inner: inner, cw: cw}
}

// CaptureWrapper returns a wrapper for WithLinkWrapper, WithDirectionWrapper and
// Cable.Wrap that records into cw on ERF capture interface iface (0..3).
func CaptureWrapper(cw *CaptureWriter, iface uint8) func(Link) Link {
	return func(l Link) Link { return &captureLink{inner: l, cw: cw, iface: iface & erfFlagIfaceMask} }
}

// CaptureRecord is one record of a capture read back by ReadCapture.
type CaptureRecord struct {
	Time      time.Time // the ERF timestamp
	Type      uint8     // ERF type, 21 for InfiniBand
	Flags     uint8     // ERF flags
	Interface int       // ERF capture interface, flags bits 0-1
	WireLen   int       // wlen: the packet's length on the wire, VCRC included
	Loss      int       // lctr: records the writer dropped just before this one
	Data      []byte    // captured bytes after the ERF header: packet and VCRC, maybe cut by a snaplen
}

// Truncated reports whether the record holds less than the whole packet and VCRC.
func (r CaptureRecord) Truncated() bool { return len(r.Data) < r.WireLen }

// Packet returns the packet without its VCRC (LRH through ICRC), as it crossed the link;
// nil when the record is truncated.
func (r CaptureRecord) Packet() []byte {
	if r.Truncated() || len(r.Data) < wire.VCRCLen {
		return nil
	}
	return r.Data[:len(r.Data)-wire.VCRCLen]
}

// VCRC returns the recorded VCRC; ok is false when the record is truncated.
func (r CaptureRecord) VCRC() (v uint16, ok bool) {
	if r.Truncated() || len(r.Data) < wire.VCRCLen {
		return 0, false
	}
	return binary.LittleEndian.Uint16(r.Data[len(r.Data)-wire.VCRCLen:]), true
}

// ReadCapture reads a pcap stream of ERF records such as a CaptureWriter writes
// (little-endian pcap, micro- or nanosecond magic, link type 197).
func ReadCapture(r io.Reader) ([]CaptureRecord, error) {
	var fh [pcapHeaderLen]byte
	if _, err := io.ReadFull(r, fh[:]); err != nil {
		return nil, fmt.Errorf("fabric: capture header: %w", err)
	}
	switch binary.LittleEndian.Uint32(fh[0:]) {
	case pcapMagicNanos, pcapMagicMicros:
	default:
		return nil, fmt.Errorf("fabric: not a little-endian pcap file (magic %#x)", binary.LittleEndian.Uint32(fh[0:]))
	}
	if lt := binary.LittleEndian.Uint32(fh[20:]); lt != LinkTypeERF {
		return nil, fmt.Errorf("fabric: pcap link type %d, want %d (ERF)", lt, LinkTypeERF)
	}
	var recs []CaptureRecord
	for n := 0; ; n++ {
		var rh [pcapRecordLen]byte
		if _, err := io.ReadFull(r, rh[:]); err != nil {
			if err == io.EOF {
				return recs, nil
			}
			return recs, fmt.Errorf("fabric: record %d header: %w", n, err)
		}
		incl := binary.LittleEndian.Uint32(rh[8:])
		if incl < ERFHeaderLen || incl > maxERFRecord {
			return recs, fmt.Errorf("fabric: record %d: bad length %d", n, incl)
		}
		buf := make([]byte, incl)
		if _, err := io.ReadFull(r, buf); err != nil {
			return recs, fmt.Errorf("fabric: record %d: %w", n, err)
		}
		ts := binary.LittleEndian.Uint64(buf[0:])
		nsec := ((ts&0xFFFFFFFF)*1_000_000_000 + 1<<31) >> 32
		rlen := int(binary.BigEndian.Uint16(buf[10:]))
		if rlen < ERFHeaderLen || rlen > int(incl) {
			return recs, fmt.Errorf("fabric: record %d: ERF rlen %d, pcap length %d", n, rlen, incl)
		}
		rec := CaptureRecord{
			Time:    time.Unix(int64(ts>>32), int64(nsec)),
			Type:    buf[8],
			Flags:   buf[9],
			WireLen: int(binary.BigEndian.Uint16(buf[14:])),
			Loss:    int(binary.BigEndian.Uint16(buf[12:])),
			Data:    buf[ERFHeaderLen:rlen],
		}
		rec.Interface = int(rec.Flags & erfFlagIfaceMask)
		recs = append(recs, rec)
	}
}
