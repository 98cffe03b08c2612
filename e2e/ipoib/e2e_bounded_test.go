package ipoib

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestFloodHelper is TestE2EBoundedState's sender, run inside a namespace of the test's
// (ip netns exec): one UDP datagram to each of $PIBGW_E2E_FLOOD distinct addresses of
// 10.10.0.0/16 that nobody has.
func TestFloodHelper(t *testing.T) {
	spec := os.Getenv("PIBGW_E2E_FLOOD")
	if spec == "" {
		t.Skip("the sender of TestE2EBoundedState, run by it")
	}
	n, err := strconv.Atoi(spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The TUN device's queue holds 500 packets; one the daemon has not read when it is
	// full is dropped by the kernel — the real peer's ping among them. So the sender
	// keeps at most 250 of its own in the queue: the device counts a packet sent once the
	// daemon has read it (tx_packets), which a pause of 2 ms per 250 did not ensure
	// beside two CPU-bound processes (one ping in 50 lost).
	txPackets := func() int {
		b, err := os.ReadFile("/sys/class/net/ib0/statistics/tx_packets") // the namespace's sysfs (ip netns exec)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return v
	}
	base := txPackets()
	for k := 0; k < n; k++ {
		dst := &net.UDPAddr{IP: net.IPv4(10, 10, byte(1+k/250), byte(1+k%250)), Port: 9}
		c.WriteTo([]byte("anyone?"), dst) // a full device queue (ENOBUFS) is the kernel's drop
		if k%250 == 249 {
			for deadline := time.Now().Add(10 * time.Second); txPackets()-base < k+1-250 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// vmRSS is a process's resident set in bytes (/proc/PID/status).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestE2EBoundedState is issue 9's acceptance point 3: sends to 50,000 distinct
// unresolvable addresses of a /16 never grow the neighbour table past its limit, the
// daemon's RSS stays within 20 MB of idle, pings to a real peer are unaffected during
// and after, and the overflow counter says how many were refused.
func TestE2EBoundedState(t *testing.T) {
	e2etest.Require(t, "ping")
	nsA, nsB := e2etest.NetNS("ba"), e2etest.NetNS("bb")
	d := e2etest.StartDaemon(t, "", e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.10.0.1/16")+
		e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.10.0.2/16"), nsA, nsB)
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Fatalf("ping before:\n%s", out)
	}
	time.Sleep(500 * time.Millisecond)
	idle := vmRSS(t, d.Cmd.Process.Pid)

	// A real peer, pinged all through the scan.
	pinger := exec.Command("ip", "netns", "exec", nsA, "ping", "-c", "50", "-i", "0.2", "-W", "2", "10.10.0.2")
	var pingOut e2etest.SyncBuffer
	pinger.Stdout, pinger.Stderr = &pingOut, &pingOut
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	pinged := make(chan error, 1)
	go func() { pinged <- pinger.Wait() }()
	t.Cleanup(func() { pinger.Process.Kill() })

	flood := exec.Command("ip", "netns", "exec", nsA, os.Args[0], "-test.run=^TestFloodHelper$", "-test.count=1")
	flood.Env = append(os.Environ(), "PIBGW_E2E_FLOOD=50000")
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	flooded := make(chan error, 1)
	go func() { flooded <- flood.Wait() }()
	most, peak := 0, idle
	sample := func() {
		var ns []control.Neighbor
		d.JSON(&ns, "neigh", "ib0")
		most = max(most, len(ns))
		peak = max(peak, vmRSS(t, d.Cmd.Process.Pid))
	}
	for waiting := true; waiting; {
		select {
		case err := <-flooded:
			if err != nil {
				t.Fatalf("the sender: %v", err)
			}
			waiting = false
		case <-time.After(200 * time.Millisecond):
			sample()
		}
	}
	for k := 0; k < 20; k++ { // the last resolutions fail and are collected
		sample()
		time.Sleep(200 * time.Millisecond)
	}
	if err := <-pinged; err != nil || !strings.Contains(pingOut.String(), " 0% packet loss") {
		t.Errorf("ping to the real peer during the scan: %v\n%s", err, pingOut.String())
	}
	c := d.Show()["ib0"].Counters
	t.Logf("neighbour table at most %d entries; RSS idle %d MB, peak %d MB; counters: drop_neigh_overflow %d, neighbors_failed %d, tx_arp %d",
		most, idle>>20, peak>>20, c["drop_neigh_overflow"], c["neighbors_failed"], c["tx_arp"])
	if most > 1024 {
		t.Errorf("neighbour table reached %d entries, limit 1024", most)
	}
	if c["drop_neigh_overflow"] == 0 {
		t.Error("drop_neigh_overflow is 0 after 50,000 unresolvable addresses")
	}
	if peak-idle > 20<<20 {
		t.Errorf("RSS grew by %d MB (idle %d MB, peak %d MB), want at most 20", (peak-idle)>>20, idle>>20, peak>>20)
	}
	if ok, out := e2etest.PingNS(nsA, "10.10.0.2", 3); !ok {
		t.Errorf("ping after the scan:\n%s", out)
	}
	d.StopAndCheckClean(map[string]string{"ib0": nsA, "ib1": nsB})
}
