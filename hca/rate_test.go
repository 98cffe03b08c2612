package hca

import "testing"

// The rate encodings as libibverbs' ibv_rate_to_mbps gives them, and the port's rate.
func TestRates(t *testing.T) {
	for rate, want := range map[uint8]int{0: 0, 2: 2500, 3: 10000, 5: 5000, 10: 120000, 16: 103125, 22: 637500, 23: 0, 255: 0} {
		if got := RateMbps(rate); got != want {
			t.Errorf("RateMbps(%d) = %d, want %d", rate, got, want)
		}
	}
	for _, c := range []struct {
		width, speed uint8
		want         int
	}{{1, 1, 2500}, {2, 2, 20000}, {8, 4, 120000}, {16, 4, 20000}, {0, 4, 0}} {
		if got := (PortAttr{ActiveWidth: c.width, ActiveSpeed: c.speed}).LinkMbps(); got != c.want {
			t.Errorf("width %d speed %d: %d Mb/s, want %d", c.width, c.speed, got, c.want)
		}
	}
	d, err := NewDevice(Config{Name: "pib_0", NodeGUID: 0x0002c90300000300})
	if err != nil {
		t.Fatal(err)
	}
	p := d.Port(1)
	link := p.Query().LinkMbps()
	for rate, want := range map[uint8]int64{0: 0, 2: 312_500_000, 3: 1_250_000_000, 10: 0, 17: 0} {
		if RateMbps(rate) >= link && rate != 0 && want != 0 {
			t.Fatalf("static rate %d is not below the port's %d Mb/s", rate, link)
		}
		if got := PaceBytesPerSec(p, rate); got != want {
			t.Errorf("PaceBytesPerSec(port of %d Mb/s, %d) = %d, want %d", link, rate, got, want)
		}
	}
}
