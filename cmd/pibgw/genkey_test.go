package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/pibgw/pibgw/internal/config"
)

// TestGenkey: `pibgw genkey > FILE` makes a key file that fabric.psk_file and pibgw
// switch --psk take, 32 random bytes in base64 on one line, a new one each time.
func TestGenkey(t *testing.T) {
	out, errs, code := pibgwRaw("genkey")
	if code != 0 || errs != "" {
		t.Fatalf("pibgw genkey: exit %d, stderr %q", code, errs)
	}
	k, err := base64.StdEncoding.DecodeString(out[:len(out)-1])
	if err != nil || len(k) != 32 || out[len(out)-1] != '\n' {
		t.Fatalf("pibgw genkey printed %q: want 32 bytes in base64 and a newline (%v)", out, err)
	}
	file := filepath.Join(t.TempDir(), "fabric.psk")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	psk, err := config.ReadPSK(file)
	if err != nil || string(psk) != out[:len(out)-1] {
		t.Fatalf("config.ReadPSK of genkey's output: %q, %v", psk, err)
	}
	if again, _, _ := pibgwRaw("genkey"); again == out {
		t.Fatalf("two keys alike: %q", out)
	}
	if _, _, code := pibgwRaw("genkey", "extra"); code != 2 {
		t.Errorf("pibgw genkey extra: exit %d, want 2 (usage)", code)
	}
}
