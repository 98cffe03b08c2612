package rc

import "time"

// PSNs are 24-bit sequence numbers compared modulo 2^24 (IBA 9.7.1).
const psnMask = 0xFFFFFF

func psnAdd(p, n uint32) uint32 { return (p + n) & psnMask }

// psnDiff returns a-b as a signed distance in the 24-bit PSN space.
func psnDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// ackTimeout is the local ACK timeout, 4.096 µs × 2^timeout; 0 means infinite (IBA
// 9.7.6.1.3, C9-141).
func ackTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

// rnrTimes is IBA 9.7.5.2.8 table 45: the minimum RNR NAK timer field encoding, in µs.
var rnrTimes = [32]float64{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

func rnrDelay(code uint8) time.Duration {
	return time.Duration(rnrTimes[code&31] * float64(time.Microsecond))
}
