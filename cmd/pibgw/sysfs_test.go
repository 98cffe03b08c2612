package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/wire"
)

// testSysfsSnapshot is two HCAs: pib_0 with port 1 Active at LID 1 (4X EDR, the SM's
// port), and an interface ib0 on it, and pib_1 port 1 Down.
func testSysfsSnapshot() sysfsSnapshot {
	attr := hca.DeviceAttr{FWVer: "1.0.0", NodeGUID: 0x0002c90300001234, SysImageGUID: 0x0002c90300000200, VendorPartID: 1, HWVer: 0xa0}
	gid := wire.GID{0xfe, 0x80, 6: 0, 7: 0, 8: 0x00, 9: 0x02, 10: 0xc9, 11: 0x03, 12: 0, 13: 0, 14: 0x12, 15: 0x35}
	p0 := control.Port{Num: 1, Attr: hca.PortAttr{State: hca.PortActive, PhysState: 5, LID: 1, SMLID: 1, SMSL: 0,
		PortCapFlags: 0x0219084a, ActiveWidth: 2, ActiveSpeed: 32, LinkLayer: "InfiniBand", GIDTblLen: 2, PKeyTblLen: 2},
		GIDs: []wire.GID{gid, {}}, PKeys: []uint16{0xffff, 0}}
	p1 := control.Port{Num: 1, Attr: hca.PortAttr{State: hca.PortDown, PhysState: 2, ActiveWidth: 1, ActiveSpeed: 1,
		LinkLayer: "InfiniBand", GIDTblLen: 1, PKeyTblLen: 1}, GIDs: []wire.GID{{}}, PKeys: []uint16{0xffff}}
	attr1 := attr
	attr1.NodeGUID = 0x0002c90300001300
	return sysfsSnapshot{
		Devices: []control.Device{
			{Name: "pib_0", NodeDesc: "pibgw HCA-1", Attr: attr, Ports: []control.Port{p0}, HCAType: control.HCAType(attr), BoardID: control.BoardID(attr)},
			{Name: "pib_1", NodeDesc: strings.Repeat("x", 70), Attr: attr1, Ports: []control.Port{p1}},
		},
		Interfaces: []control.Interface{{Name: "ib0", HCA: "pib_0", Port: 1, MTU: 2044, Up: true, Mode: "datagram", PKey: 0xffff,
			HWAddr:    "00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:12:35",
			Broadcast: "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"}},
		Perf: []control.PerfCounters{{CA: "pib_0", Port: 1, CapMask: 0x200,
			Counters: []control.PerfCounter{{Name: "SymbolErrorCounter", Value: 3}, {Name: "PortXmitData", Value: 7}, {Name: "PortXmitWait", Value: 9}},
			Extended: []control.PerfCounter{{Name: "PortXmitData", Value: 1 << 40}, {Name: "PortMulticastRcvPkts", Value: 5}}},
			{CA: "pib_1", Port: 1, Counters: []control.PerfCounter{{Name: "PortXmitData", Value: 11}}}},
	}
}

// TestSysfsTree: the files and their contents, in the formats of the kernel's
// drivers/infiniband/core/sysfs.c, uverbs_main.c, net-sysfs.c and IPoIB.
func TestSysfsTree(t *testing.T) {
	tree := sysfsTree(testSysfsSnapshot())
	want := map[string]string{
		"infiniband/pib_0/node_type":                              "1: CA\n",
		"infiniband/pib_0/node_guid":                              "0002:c903:0000:1234\n",
		"infiniband/pib_0/sys_image_guid":                         "0002:c903:0000:0200\n",
		"infiniband/pib_0/fw_ver":                                 "1.0.0\n",
		"infiniband/pib_0/hca_type":                               "PIB1\n",
		"infiniband/pib_0/hw_rev":                                 "a0\n",
		"infiniband/pib_0/board_id":                               "PIB_0000000001\n",
		"infiniband/pib_0/node_desc":                              "pibgw HCA-1\n",
		"infiniband/pib_1/node_desc":                              strings.Repeat("x", 64) + "\n",
		"infiniband/pib_0/ports/1/state":                          "4: ACTIVE\n",
		"infiniband/pib_0/ports/1/phys_state":                     "5: LinkUp\n",
		"infiniband/pib_0/ports/1/lid":                            "0x1\n",
		"infiniband/pib_0/ports/1/lid_mask_count":                 "0\n",
		"infiniband/pib_0/ports/1/sm_lid":                         "0x1\n",
		"infiniband/pib_0/ports/1/sm_sl":                          "0\n",
		"infiniband/pib_0/ports/1/cap_mask":                       "0x0219084a\n",
		"infiniband/pib_0/ports/1/rate":                           "100 Gb/sec (4X EDR)\n",
		"infiniband/pib_0/ports/1/link_layer":                     "InfiniBand\n",
		"infiniband/pib_0/ports/1/gids/0":                         "fe80:0000:0000:0000:0002:c903:0000:1235\n",
		"infiniband/pib_0/ports/1/gids/1":                         "0000:0000:0000:0000:0000:0000:0000:0000\n",
		"infiniband/pib_0/ports/1/gid_attrs/types/0":              "IB/RoCE v1\n",
		"infiniband/pib_0/ports/1/pkeys/0":                        "0xffff\n",
		"infiniband/pib_0/ports/1/pkeys/1":                        "0x0000\n",
		"infiniband/pib_0/ports/1/counters/symbol_error":          "3\n",
		"infiniband/pib_0/ports/1/counters/port_xmit_data":        "1099511627776\n", // PortCountersExtended's
		"infiniband/pib_0/ports/1/counters/port_xmit_wait":        "9\n",
		"infiniband/pib_0/ports/1/counters/multicast_rcv_packets": "5\n",
		"infiniband/pib_1/ports/1/state":                          "1: DOWN\n",
		"infiniband/pib_1/ports/1/phys_state":                     "2: Polling\n",
		"infiniband/pib_1/ports/1/rate":                           "2.5 Gb/sec (1X SDR)\n",
		"infiniband/pib_1/ports/1/counters/port_xmit_data":        "11\n", // no extended width: PortCounters'
		"infiniband/pib_0/device/net/ib0/dev_id":                  "0x0\n",
		"infiniband/pib_0/device/net/ib0/dev_port":                "0\n",
		"infiniband/pib_0/device/net/ib0/type":                    "32\n",
		"infiniband/pib_0/device/net/ib0/addr_len":                "20\n",
		"infiniband/pib_0/device/net/ib0/mtu":                     "2044\n",
		"infiniband/pib_0/device/net/ib0/operstate":               "up\n",
		"infiniband/pib_0/device/net/ib0/pkey":                    "0xffff\n",
		"infiniband/pib_0/device/net/ib0/mode":                    "datagram\n",
		"infiniband/pib_0/device/net/ib0/address":                 "00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:12:35\n",
		"infiniband_verbs/abi_version":                            "6\n",
		"infiniband_verbs/uverbs0/ibdev":                          "pib_0\n",
		"infiniband_verbs/uverbs1/ibdev":                          "pib_1\n",
		"infiniband_verbs/uverbs1/dev":                            "231:193\n",
		"infiniband_mad/abi_version":                              "5\n",
	}
	for p, w := range want {
		if got, ok := tree[p]; !ok {
			t.Errorf("%s missing", p)
		} else if got != w {
			t.Errorf("%s = %q, want %q", p, got, w)
		}
	}
	for _, p := range []string{
		"infiniband/pib_1/hca_type", "infiniband/pib_1/board_id", // a driver without them
		"infiniband/pib_1/ports/1/counters/unicast_xmit_packets", // pma_attrs: no extended counters
		"infiniband/pib_1/device/net", "infiniband/pib_1/device/net/ib0/dev_id",
	} {
		if _, ok := tree[p]; ok {
			t.Errorf("%s present", p)
		}
	}
	n := 0
	for p := range tree {
		if strings.HasPrefix(p, "infiniband/pib_0/ports/1/counters/") {
			n++
		}
	}
	if n != 21 { // sysfs.c's pma_attrs_ext
		t.Errorf("%d counters in pib_0's port 1, want pma_attrs_ext's 21", n)
	}
}

func TestSysfsRate(t *testing.T) {
	for _, c := range []struct {
		speed, width uint8
		want         string
	}{
		{1, 1, "2.5 Gb/sec (1X SDR)\n"}, {1, 2, "10 Gb/sec (4X SDR)\n"}, {2, 2, "20 Gb/sec (4X DDR)\n"},
		{4, 8, "120 Gb/sec (12X QDR)\n"}, {16, 2, "56 Gb/sec (4X FDR)\n"}, {8, 2, "40 Gb/sec (4X FDR10)\n"},
		{32, 2, "100 Gb/sec (4X EDR)\n"}, {64, 16, "100 Gb/sec (2X HDR)\n"}, {128, 2, "400 Gb/sec (4X NDR)\n"},
		{0, 2, "10 Gb/sec (4X SDR)\n"}, // rate_show: SDR for what it does not know
	} {
		if got := sysfsRate(c.speed, c.width); got != c.want {
			t.Errorf("speed %d width %d: %q, want %q", c.speed, c.width, got, c.want)
		}
	}
}

// TestSysfsViewApply: the files written under a directory, a change rewritten, an
// interface gone taken away with its directories, no temporary file left.
func TestSysfsViewApply(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	v := &sysfsView{root: fd, files: map[string]string{}}
	s := testSysfsSnapshot()
	if err := v.apply(sysfsTree(s)); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	if got := read("infiniband/pib_0/ports/1/state"); got != "4: ACTIVE\n" {
		t.Errorf("state %q", got)
	}
	s.Devices[0].Ports[0].Attr.State = hca.PortDown
	s.Devices[0].Ports[0].Attr.LID = 0x12
	s.Interfaces = nil
	if err := v.apply(sysfsTree(s)); err != nil {
		t.Fatal(err)
	}
	if got := read("infiniband/pib_0/ports/1/state"); got != "1: DOWN\n" {
		t.Errorf("state after the change %q", got)
	}
	if got := read("infiniband/pib_0/ports/1/lid"); got != "0x12\n" {
		t.Errorf("lid after the change %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "infiniband/pib_0/device")); !os.IsNotExist(err) {
		t.Errorf("device/ left after the interface went: %v", err)
	}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(fi.Name(), ".pibgw-") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}
