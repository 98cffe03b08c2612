package mgmt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pibgw/pibgw/internal/e2etest"
)

// TestE2EDiagsBuiltinSM: infiniband-diags, through libumad2sim and the ibsim server,
// against pibgw's own SM and SA (sm.mode "internal", the default) — what a user of the
// default configuration reads with them: saquery's IsSM ports, SMInfo, links, SwitchInfo,
// LFT, MFT, P_Key table and GUIDInfo records agree with `pibgw stat`; iblinkinfo shows every link
// Active; a query of a class no agent serves (vendstat) fails at once, as against a
// Linux host, instead of after its timeout; and `ibping` gets its pongs from an
// `ibping -S` attached at the other HCA.
func TestE2EDiagsBuiltinSM(t *testing.T) {
	e2etest.Require(t, "saquery", "iblinkinfo", "vendstat", "ibping")
	if e2etest.FindUmad2sim() == "" {
		t.Skip("needs libumad2sim.so (Debian libumad2sim0, with ibsim-utils) in /usr/lib/*/umad2sim/")
	}
	nsA, nsB := e2etest.NetNS("da"), e2etest.NetNS("db")
	sock := fmt.Sprintf("pibgwe2e-diag-%d", os.Getpid())
	body := fmt.Sprintf("[fabric]\nhca_count = 2\n\n[ibsim]\nenable = true\nsocket_name = %q\n", sock) +
		e2etest.InterfaceTOML("ib0", "pib_0", nsA, "10.30.0.1/24") + e2etest.InterfaceTOML("ib1", "pib_1", nsB, "10.30.0.2/24")
	d := e2etest.StartDaemon(t, "", body, nsA, nsB)
	e := &osmEnv{t: t, sock: sock, dir: t.TempDir()}

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.MustPibgw("stat", "pib_1"), "State: Active") {
		if time.Now().After(deadline) {
			t.Fatalf("pib_1 not Active under the built-in SM:\n%s", d.MustPibgw("stat"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Both interfaces up: they joined the broadcast group (the MFT check below).
	for show := d.Show(); !show["ib0"].Up || !show["ib1"].Up; show = d.Show() {
		if time.Now().After(deadline) {
			t.Fatalf("interfaces not up: %+v", show)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s0, s1 := d.MustPibgw("stat", "pib_0"), d.MustPibgw("stat", "pib_1")
	lid0, lid1, guid1 := e2etest.DiagField(s0, "Base lid"), e2etest.DiagField(s1, "Base lid"), e2etest.DiagField(s1, "Port GUID")

	// The SM's port: saquery -s asks for the ports with IsSM among their capabilities.
	if sm := e.diag("", "saquery", "-s"); e2etest.DiagField(sm, "base_lid") != lid0 {
		t.Errorf("saquery -s (IsSM ports): want pib_0's LID %s first\n%s", lid0, sm)
	}
	// The SM itself: MASTER, at pib_0's LID.
	if smir := e.diag("", "saquery", "SMIR"); e2etest.DiagField(smir, "LID") != lid0 || e2etest.DiagField(smir, "SMState") != "3" {
		t.Errorf("saquery SMIR: want the SM at LID %s, SMState 3 (MASTER)\n%s", lid0, smir)
	}
	// The switch's LID from its SwitchInfoRecord; pib_1's link goes to it.
	swir := e.diag("", "saquery", "SWIR")
	swLID := e2etest.DiagField(swir, "LID")
	if swLID == "" || swLID == "0" || e2etest.DiagField(swir, "LinearFDBTop") == "" {
		t.Fatalf("saquery SWIR:\n%s", swir)
	}
	if lr := e.diag("", "saquery", "-x", lid1); e2etest.DiagField(lr, "FromLID") != lid1 || e2etest.DiagField(lr, "FromPort") != "1" ||
		e2etest.DiagField(lr, "ToLID") != swLID {
		t.Errorf("saquery -x %s: want pib_1 port 1 → the switch (LID %s)\n%s", lid1, swLID, lr)
	}
	// The switch's LFT sends each HCA's LID out of the port its cable is in (pib_n on n+1).
	lft := e.diag("", "saquery", "LFTR", swLID)
	for lid, port := range map[string]string{lid0: "1", lid1: "2", swLID: "0"} {
		m := regexp.MustCompile(`(?m)^\s*` + lid + `\t(\d+)\s*$`).FindStringSubmatch(lft)
		if m == nil || m[1] != port {
			t.Errorf("saquery LFTR %s: LID %s → %v, want port %s\n%s", swLID, lid, m, port, lft)
		}
	}
	// The broadcast group (MLID 0xc000, both interfaces joined): ports 1 and 2.
	if mft := e.diag("", "saquery", "MFTR", swLID); !regexp.MustCompile(`(?m)^\s*0xc000\s+0x0006\s*$`).MatchString(mft) {
		t.Errorf("saquery MFTR %s: want MLID 0xc000 on ports 1 and 2 (0x0006)\n%s", swLID, mft)
	}
	if pk := e.diag("", "saquery", "PKTR", lid1); e2etest.DiagField(pk, "LID") != lid1 || !strings.Contains(pk, "0xffff") {
		t.Errorf("saquery PKTR %s: want pib_1's table with the default P_Key\n%s", lid1, pk)
	}
	if gir := e.diag("", "saquery", "GIR", lid1); e2etest.DiagField(gir, "GUID 0") != guid1 {
		t.Errorf("saquery GIR %s: GUID 0 want pib_1's port GUID %s\n%s", lid1, guid1, gir)
	}
	if ll := e.diag("", "iblinkinfo"); strings.Count(ll, "Active/  LinkUp") != 4 {
		t.Errorf("iblinkinfo: want both HCA links Active from both ends\n%s", ll)
	}

	// pibgw exec --umad sets the program up from the daemon's own settings (pibgw's
	// libibumad.so.3 where the libraries are built, else libumad2sim): ibaddr, attached
	// at pib_1, prints pib_1's LID.
	out, err := e2etest.UmadRun(t, func(ctx context.Context) *exec.Cmd {
		c := exec.CommandContext(ctx, d.Bin, "exec", "--control", d.Sock, "--umad", "--node", "pib_1", "--", "ibaddr")
		c.Dir = e.dir // libumad2sim, if it is the one, writes ./sys-PID
		return c
	})
	if l, _ := strconv.ParseUint(lid1, 0, 16); err != nil || !strings.Contains(string(out), fmt.Sprintf("LID start %#x ", l)) {
		t.Errorf("pibgw exec --umad --node pib_1 -- ibaddr: %v, want pib_1's LID %s\n%s", err, lid1, out)
	}

	// vendstat asks pib_1 for a vendor class's ClassPortInfo: no agent there, so the
	// port answers "unsupported" at once (it timed out after 1 s before).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	out, err = e.cmd(ctx, "", "vendstat", "-N", lid1).CombinedOutput()
	if took := time.Since(start); err == nil || took > 500*time.Millisecond || strings.Contains(string(out), "timed out") {
		t.Errorf("vendstat -N %s: %v after %v; want a failure at once, not a timeout\n%s", lid1, err, took, out)
	}

	// ibping -S attached at pib_1 answers pings to pib_1's LID from pib_0: the port hands
	// the vendor class's requests to the programs attached there (they got none before).
	if ibpingPongs(t, e, lid1) {
		return
	}
	t.Errorf("ibping -c 2 %s: no pongs from the ibping -S attached at pib_1", lid1)
}

// ibpingPongs runs `ibping -S` attached at pib_1 and `ibping -c 2 LID` from the default
// node, and reports whether both pings were answered. A program attached through
// libumad2sim may still fail in a way of its own (e2etest.UmadRun), so the pair gets three tries.
func ibpingPongs(t *testing.T, e *osmEnv, lid string) bool {
	for try := 0; try < 3; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		srv := e.cmd(ctx, "pib_1", "ibping", "-S")
		var srvOut e2etest.SyncBuffer
		srv.Stdout, srv.Stderr = &srvOut, &srvOut
		if err := srv.Start(); err != nil {
			cancel()
			t.Fatalf("ibping -S: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // attached (CONNECT) and registered
		out, err := e.cmd(ctx, "", "ibping", "-c", "2", lid).CombinedOutput()
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
		cancel()
		if err == nil && strings.Contains(string(out), "2 packets transmitted, 2 received") {
			t.Logf("ibping -c 2 %s: %s", lid, strings.TrimSpace(string(out)))
			return true
		}
		t.Logf("ibping -c 2 %s (try %d): %v\n%s\nibping -S: %s", lid, try+1, err, out, srvOut.String())
	}
	return false
}
