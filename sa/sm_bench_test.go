package sa_test

import (
	"testing"
	"time"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
)

// BenchmarkSMFatTree648 times the SM from Start to every port Active on the 648-HCA fat
// tree (36 leaf + 18 spine switches of 36 ports), and reports the SMPs it sent.
func BenchmarkSMFatTree648(b *testing.B) {
	var smps, secs float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		f := satest.FatTree648(b, satest.Options{})
		cfg := sa.Config{Port: f.HCAs[0].Port(1), Clock: f.Clock}
		sm, err := sa.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := sm.Start(); err != nil {
			b.Fatal(err)
		}
		secs += time.Since(start).Seconds()
		b.StopTimer()
		for _, p := range f.Ports() {
			if p.State() != hca.PortActive {
				b.Fatalf("%s not Active", p.Device().Name())
			}
		}
		smps += float64(sm.Stats().SMPsSent)
		sm.Close()
		b.StartTimer()
	}
	b.ReportMetric(smps/float64(b.N), "SMPs/op")
	b.ReportMetric(secs/float64(b.N)*1e3, "ms-to-active")
}
