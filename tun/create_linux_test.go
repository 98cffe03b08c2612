package tun

import (
	"os"
	"testing"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return len(ents)
}

// A TUN whose name is taken fails without leaving its /dev/net/tun descriptor open
// (wireguard's CreateTUN leaked one per failure: issue 43, item 7b).
func TestKernelCreateFailureClosesFD(t *testing.T) {
	needRoot(t)
	ns := testNetNS(t)
	testKernel(t, KernelConfig{Name: "ib0", NetNS: ns})
	// A first failure warms up whatever the path opens once (the netns handle is
	// opened and closed per call).
	if _, err := CreateKernel(KernelConfig{Name: "ib0", NetNS: ns}); err == nil {
		t.Fatal("duplicate device accepted")
	}
	before := openFDs(t)
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := CreateKernel(KernelConfig{Name: "ib0", NetNS: ns}); err == nil {
			t.Fatal("duplicate device accepted")
		}
	}
	// The leak was one per failure; one descriptor more (seen once beside two CPU-bound
	// processes) is something else of the process's, opened meanwhile.
	if after := openFDs(t); after-before >= n/2 {
		t.Errorf("%d failed creates left %d descriptors open (%d → %d)", n, after-before, before, after)
	}
}
