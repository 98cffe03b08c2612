package config

import (
	"strings"
	"testing"
)

func TestParsePKey(t *testing.T) {
	for in, want := range map[string]uint16{
		"0x8001": 0x8001, "8001": 0x8001, "0X8001": 0x8001, "1": 0x8001, "0x0001": 0x8001,
		"7fff": 0xffff, "0xffff": 0xffff, "0x7FFF": 0xffff, "0x1234": 0x9234,
	} {
		got, err := ParsePKey(in)
		if err != nil || got != want {
			t.Errorf("ParsePKey(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"0":                   `invalid P_Key "0": partition number 0 is reserved`,
		"0x0":                 `invalid P_Key "0x0": partition number 0 is reserved`,
		"0x8000":              `invalid P_Key "0x8000": partition number 0 is reserved`,
		"8000":                `invalid P_Key "8000": partition number 0 is reserved`,
		"0x10000":             `invalid P_Key "0x10000": more than 16 bits`,
		"1ffffffffffffffffff": `invalid P_Key "1ffffffffffffffffff": more than 16 bits`,
		"zz":                  `invalid P_Key "zz": want a hexadecimal number`,
		"":                    `invalid P_Key "": want a hexadecimal number`,
		"0x":                  `invalid P_Key "0x": want a hexadecimal number`,
		"-1":                  `invalid P_Key "-1": want a hexadecimal number`,
		"0x8001x":             `invalid P_Key "0x8001x": want a hexadecimal number`,
	} {
		_, err := ParsePKey(in)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParsePKey(%q) error %v, want %q", in, err, want)
		}
	}
}

func TestChildName(t *testing.T) {
	for _, tc := range []struct {
		parent string
		pkey   uint16
		want   string
	}{{"ib0", 0x8001, "ib0.8001"}, {"ib0", 0x0001, "ib0.8001"}, {"ib1", 0xabcd, "ib1.abcd"}} {
		if got := ChildName(tc.parent, tc.pkey); got != tc.want {
			t.Errorf("ChildName(%s, %#x) = %s, want %s", tc.parent, tc.pkey, got, tc.want)
		}
	}
}

func TestParseAddr(t *testing.T) {
	for _, ok := range []string{"10.20.0.1/24", "fd00::1/64", "fe80::1/64", "192.168.1.1/32"} {
		if _, err := ParseAddr(ok); err != nil {
			t.Errorf("ParseAddr(%q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"10.20.0.1":      `address "10.20.0.1" has no prefix length`,
		"10.20.0.300/24": `malformed address "10.20.0.300/24"`,
		"10.20.0.1/33":   `malformed address "10.20.0.1/33"`,
		"hello":          `malformed address "hello"`,
		"0.0.0.0/0":      `address "0.0.0.0/0" cannot be an interface address`,
		"224.0.0.1/4":    `address "224.0.0.1/4" cannot be an interface address`,
	} {
		_, err := ParseAddr(in)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseAddr(%q) error %v, want %q", in, err, want)
		}
	}
}
