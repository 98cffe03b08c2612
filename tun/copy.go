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

// CopyGSO moves segments from src to dst as the kernel queued them — up to 64 KiB of TCP
// or UDP with its virtio-net metadata, one per read and one per write, in one buffer that
// is neither split nor copied — until either device is closed. It is Copy for devices
// with offloads (Offloader), the cheapest relay a TUN pair allows: two kernel copies per
// segment and none in user space.
func CopyGSO(dst, src Offloader) (CopyStats, error) {
	var st CopyStats
	if !dst.Offloads() || !src.Offloads() {
		return st, errors.New("tun: CopyGSO needs devices with offloads")
	}
	buf := make([]byte, MinOffset+copyBufSize)
	for {
		n, g, err := src.ReadGSO(buf, MinOffset)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return st, nil
			}
			st.ReadErrors++
			continue
		}
		st.Batches++
		if err := dst.WriteGSO(buf[:MinOffset+n], MinOffset, g, nil); err != nil {
			if errors.Is(err, ErrClosed) {
				return st, nil
			}
			st.WriteErrors++
			continue
		}
		st.Packets++
		st.Bytes += uint64(n)
	}
}
