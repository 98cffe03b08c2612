package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 5's acceptance point 6, bad input: every error is one line naming the offending
// value. TestBadArguments and TestShowNeighChild cover the CLI verbs (and
// TestE2EPartitions the same against a real daemon); this covers the P_Key spellings
// they do not and the configuration file's interfaces and partitions.
func TestBadInputNamesValue(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"child", "add", "ib0", "zz"}, `pibgw: invalid P_Key "zz": want a hexadecimal number such as 0x8001`},
		{[]string{"child", "add", "ib0", "0x0"}, `pibgw: invalid P_Key "0x0": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "8000"}, `pibgw: invalid P_Key "8000": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "ffff0"}, `pibgw: invalid P_Key "ffff0": more than 16 bits (at most 0xffff)`},
		{[]string{"child", "del", "ib0", "0x8000"}, `pibgw: invalid P_Key "0x8000": partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{[]string{"child", "add", "ib0", "8001", "--addr", "10.20.0.300/24"}, `pibgw: malformed address "10.20.0.300/24": want CIDR such as 10.20.0.1/24 or fd00::1/64`},
		{[]string{"child", "add", "ib0", "8001", "--addr", "10.20.0.1/24", "--addr", "fd00::zz/64"}, `pibgw: malformed address "fd00::zz/64": want CIDR such as 10.20.0.1/24 or fd00::1/64`},
	} {
		out, errs, code := pibgw(t, append(tc.args, "--control", sock)...)
		if code != 1 || out != "" || errs != tc.want+"\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}

	const ib0 = "[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\n"
	for _, tc := range []struct{ body, want string }{
		{"[[sm.partitions]]\nname = \"x\"\npkey = 0x8000\nmembers = [\"ALL\"]\n",
			`sm.partitions[0].pkey: invalid P_Key 0x8000: partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{ib0 + "pkey = 0\n", `interfaces[0].pkey: invalid P_Key 0x0: partition number 0 is reserved (0 and 0x8000 are not allowed)`},
		{ib0 + "pkey = 0x10000\n", `interfaces[0].pkey: invalid P_Key 0x10000: more than 16 bits (at most 0xffff)`},
		{ib0 + "pkey = \"zz\"\n", `interfaces[0].pkey: invalid P_Key "zz": want a hexadecimal number such as 0x8001`},
		{ib0 + "addresses = [\"10.1.2.300/24\"]\n",
			`interfaces[0].addresses[0]: malformed address "10.1.2.300/24": want CIDR such as 10.20.0.1/24 or fd00::1/64`},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_7\"\n", `interfaces[0].hca: "pib_7": no such HCA (have pib_0, pib_1)`},
		{ib0 + "[[interfaces]]\nparent = \"ib0\"\npkey = 0x8001\n[[interfaces]]\nparent = \"ib0\"\npkey = \"8001\"\n",
			`interfaces[2].name: "ib0.8001" used twice: want a name of its own`},
		{ib0 + "[[interfaces]]\nparent = \"nosuch\"\npkey = 0x8001\n", `interfaces[1].parent: "nosuch": no such interface before this one`},
		{ib0 + "[[interfaces]]\nname = \"ib0\"\nhca = \"pib_1\"\n", `interfaces[1].name: "ib0" used twice: want a name of its own`},
	} {
		cfg := filepath.Join(t.TempDir(), "bad.toml")
		if err := os.WriteFile(cfg, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := pibgw(t, "up", "--config", cfg, "--control", sock)
		if want := "pibgw: " + cfg + ": " + tc.want + "\n"; code != 1 || out != "" || errs != want {
			t.Errorf("config\n%s: exit %d, stdout %q, stderr %q; want %q", tc.body, code, out, errs, want)
		}
	}
}
