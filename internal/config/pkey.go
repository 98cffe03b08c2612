package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParsePKey reads a P_Key as /sys/class/net/ib0/create_child does: hexadecimal with or
// without 0x ("0x8001", "8001"), 0x8000 (full membership) ORed in. 0 and 0x8000 — a
// partition number of zero — are rejected, as the kernel's ipoib rejects them.
func ParsePKey(s string) (uint16, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0x"), "0X")
	if t == "" || strings.ContainsAny(t, "+-_") {
		return 0, fmt.Errorf("invalid P_Key %q: want a hexadecimal number such as 0x8001", s)
	}
	n, err := strconv.ParseUint(t, 16, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("invalid P_Key %q: more than 16 bits (at most 0xffff)", s)
		}
		return 0, fmt.Errorf("invalid P_Key %q: want a hexadecimal number such as 0x8001", s)
	}
	return pkeyValue(strconv.Quote(s), n)
}

// PKeyFromInt is ParsePKey for a number (a TOML integer).
func PKeyFromInt(n int64) (uint16, error) {
	s := fmt.Sprintf("%#x", n)
	if n < 0 {
		return 0, fmt.Errorf("invalid P_Key %d: negative", n)
	}
	return pkeyValue(s, uint64(n))
}

func pkeyValue(s string, n uint64) (uint16, error) {
	if n > 0xFFFF {
		return 0, fmt.Errorf("invalid P_Key %s: more than 16 bits (at most 0xffff)", s)
	}
	if n&0x7FFF == 0 {
		return 0, fmt.Errorf("invalid P_Key %s: partition number 0 is reserved (0 and 0x8000 are not allowed)", s)
	}
	return uint16(n) | 0x8000, nil
}

// ChildName is the name Linux gives a P_Key child: parent.XXXX, the P_Key in four hex
// digits with 0x8000 set ("ib0.8001").
func ChildName(parent string, pkey uint16) string {
	return fmt.Sprintf("%s.%04x", parent, pkey|0x8000)
}
