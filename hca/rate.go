package hca

import "time"

// Static rate control (IBA 9.11): an address vector's StaticRate caps how fast packets
// to that destination leave, below the link's rate. The encoding is the one of
// PathRecord:Rate (IBA 15.2.5.16) and libibverbs' enum ibv_rate.

// rateMbps lists each rate encoding's data rate in Mb/s, as libibverbs'
// ibv_rate_to_mbps gives it.
var rateMbps = [...]int{
	2: 2500, 3: 10000, 4: 30000, 5: 5000, 6: 20000, 7: 40000, 8: 60000, 9: 80000, 10: 120000,
	11: 14062, 12: 56250, 13: 112500, 14: 168750, 15: 25781, 16: 103125, 17: 206250,
	18: 309375, 19: 28125, 20: 53125, 21: 425000, 22: 637500,
}

// RateMbps is the data rate of a rate encoding in Mb/s; 0 for 0 (IBV_RATE_MAX: the
// port's rate) and for a value no rate has.
func RateMbps(rate uint8) int {
	if int(rate) < len(rateMbps) {
		return rateMbps[rate]
	}
	return 0
}

// LinkMbps is the port's active data rate in Mb/s (LinkRateMbps of its active width
// and speed).
func (a PortAttr) LinkMbps() int { return LinkRateMbps(a.ActiveWidth, a.ActiveSpeed) }

// LinkRateMbps is the data rate of a link in Mb/s from PortInfo's LinkWidthActive and
// LinkSpeedActive (IBA 14.2.5.6): its lanes times the rate of one, before 8b/10b
// encoding (4x SDR = 10,000, 12x QDR = 120,000); 0 for an encoding it does not know.
func LinkRateMbps(width, speed uint8) int {
	lanes, perLane := WidthLanes(width), 0
	switch speed {
	case 1:
		perLane = 2500
	case 2:
		perLane = 5000
	case 4:
		perLane = 10000
	}
	return lanes * perLane
}

// WidthLanes is the number of lanes of PortInfo's LinkWidthActive encoding (IBA 14.2.5.6:
// 1 1x, 2 4x, 4 8x, 8 12x, 16 2x; the kernel's ib_width_enum_to_int), 0 for another value.
func WidthLanes(width uint8) int {
	switch width {
	case 1:
		return 1
	case 2:
		return 4
	case 4:
		return 8
	case 8:
		return 12
	case 16:
		return 2
	}
	return 0
}

// PaceBytesPerSec is the rate, in bytes per second, at which a QP sending over a path
// with this static rate on port p must pace its packets: 0 when the static rate is the
// port's (0) or not below the link's.
func PaceBytesPerSec(p *Port, staticRate uint8) int64 {
	m := RateMbps(staticRate)
	if m == 0 {
		return 0
	}
	if link := p.Query().LinkMbps(); link > 0 && m >= link {
		return 0
	}
	return int64(m) * 1e6 / 8
}

// PaceLead is how far ahead of its static rate a Pacer lets a sender run, and how far
// behind it lets it catch up: it sends in bursts of up to this much time's worth of
// packets, so a timer that fires late (a Go timer, on a loaded machine) costs no
// throughput while its lateness stays below twice that.
const PaceLead = 2 * time.Millisecond

// Pacer keeps a sender to a static rate: the time by which what it sent would have left
// at that rate. Its owner serializes the calls.
type Pacer struct{ next time.Time }

// Wait is how long the sender must wait before it sends more: 0 while it is less than
// PaceLead ahead of its rate.
func (p *Pacer) Wait(now time.Time) time.Duration {
	if !p.next.After(now.Add(PaceLead)) { // (a zero next is long past)
		return 0
	}
	return p.next.Sub(now) - PaceLead
}

// Charge accounts for n bytes sent at rate bytes per second. A sender behind its rate —
// its timer fired late, or it was idle — catches up by at most PaceLead.
func (p *Pacer) Charge(now time.Time, n int, rate int64) {
	if floor := now.Add(-PaceLead); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(int64(n) * int64(time.Second) / rate))
}
