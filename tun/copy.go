package tun

import "errors"

// CopyStats counts what Copy moved and dropped.
type CopyStats struct {
	Packets     uint64 // packets written to dst
	Bytes       uint64 // their bytes (IP packets, no head-room)
	Batches     uint64 // reads from src that returned packets
	ReadErrors  uint64 // reads from src that failed with something other than ErrClosed
	WriteErrors uint64 // writes to dst that failed; their packets are dropped
}

// copyBufSize is the size of Copy's packet buffers past the head-room: the largest IP
// packet, so that a kernel TUN destination can coalesce segments into a buffer's spare
// capacity.
const copyBufSize = 65535

// Copy moves packets from src to dst in batches of src.BatchSize() until either device
// is closed, and returns what it moved. It returns a nil error when it stops because a
// device was closed, like io.Copy at EOF. Failed reads and writes are counted and
// skipped (a write failure drops that batch), so the two devices behave like the ends
// of a wire. Run one Copy per direction to join two devices.
func Copy(dst, src Device) (CopyStats, error) {
	var st CopyStats
	batch := max(src.BatchSize(), 1)
	bufs := make([][]byte, batch)
	pkts := make([][]byte, batch)
	sizes := make([]int, batch)
	for i := range bufs {
		bufs[i] = make([]byte, MinOffset+copyBufSize)
	}
	for {
		n, err := src.Read(bufs, sizes, MinOffset)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return st, nil
			}
			st.ReadErrors++
			if n == 0 {
				continue
			}
		}
		if n == 0 {
			continue
		}
		st.Batches++
		var bytes uint64
		for i := range n {
			pkts[i] = bufs[i][:MinOffset+sizes[i]]
			bytes += uint64(sizes[i])
		}
		if _, err := dst.Write(pkts[:n], MinOffset); err != nil {
			if errors.Is(err, ErrClosed) {
				return st, nil
			}
			st.WriteErrors++
			continue
		}
		st.Packets += uint64(n)
		st.Bytes += bytes
	}
}
