package main

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
)

// The sysfs view `pibgw exec` mounts over /sys/class/infiniband* for its command: the
// files the kernel's InfiniBand core (drivers/infiniband/core/sysfs.c), uverbs
// (uverbs_main.c), umad (user_mad.c) and IPoIB (ulp/ipoib) write for a device, in their
// formats, built from what the daemon's control socket says.

// The kernel's ABI versions: IB_USER_VERBS_ABI_VERSION (the infiniband_verbs class's
// abi_version), IB_USER_MAD_ABI_VERSION (infiniband_mad's), and the per-device
// uverbs ABI a driver gives (mlx5's MLX5_IB_UVERBS_ABI_VERSION is 1).
const (
	uverbsABIVersion    = 6
	umadABIVersion      = 5
	pibUverbsABIVersion = 1
)

// sysfsClasses are the /sys/class directories the view stands in for.
var sysfsClasses = []string{"infiniband", "infiniband_mad", "infiniband_verbs"}

// sysfsSnapshot is what the view is made of: the daemon's HCAs, its IPoIB interfaces and
// its ports' PMA counters.
type sysfsSnapshot struct {
	Devices    []control.Device
	Interfaces []control.Interface
	Perf       []control.PerfCounters
}

// sysfsTree returns the view's files, by path under /sys/class ("infiniband/pib_0/
// node_guid"), with their contents.
func sysfsTree(s sysfsSnapshot) map[string]string {
	t := map[string]string{}
	put := func(p, format string, args ...any) { t[p] = fmt.Sprintf(format, args...) }
	put("infiniband_verbs/abi_version", "%d\n", uverbsABIVersion)
	put("infiniband_mad/abi_version", "%d\n", umadABIVersion)
	for i, d := range s.Devices {
		dir := "infiniband/" + d.Name
		a := d.Attr
		// sysfs.c: node_type_show, node_guid_show, sys_image_guid_show, fw_ver_show,
		// node_desc_show ("%.64s").
		put(dir+"/node_type", "%d: %s\n", 1, "CA") // RDMA_NODE_IB_CA
		put(dir+"/node_guid", "%s\n", guidStr(a.NodeGUID))
		put(dir+"/sys_image_guid", "%s\n", guidStr(a.SysImageGUID))
		put(dir+"/fw_ver", "%s\n", a.FWVer)
		desc := d.NodeDesc
		if len(desc) > 64 {
			desc = desc[:64]
		}
		put(dir+"/node_desc", "%s\n", desc)
		// The driver's attributes (mlx5_ib main.c: hca_type_show "%s\n", hw_rev_show
		// "%x\n", board_id_show "%.*s\n").
		if d.HCAType != "" {
			put(dir+"/hca_type", "%s\n", d.HCAType)
		}
		put(dir+"/hw_rev", "%x\n", a.HWVer)
		if d.BoardID != "" {
			put(dir+"/board_id", "%s\n", d.BoardID)
		}
		for _, p := range d.Ports {
			sysfsPort(t, fmt.Sprintf("%s/ports/%d", dir, p.Num), p, perfOf(s.Perf, d.Name, p.Num))
		}
		for _, ifc := range s.Interfaces {
			if ifc.HCA == d.Name {
				sysfsNetdev(t, dir+"/device/net/"+ifc.Name, ifc)
			}
		}
		// uverbs_main.c: ibdev_show, abi_version_show; dev is the char device's
		// MAJOR:MINOR (IB_UVERBS_MAJOR 231, minors from 192).
		vdir := fmt.Sprintf("infiniband_verbs/uverbs%d", i)
		put(vdir+"/ibdev", "%s\n", d.Name)
		put(vdir+"/abi_version", "%d\n", pibUverbsABIVersion)
		put(vdir+"/dev", "%d:%d\n", uverbsMajor, uverbsMinorBase+i)
	}
	return t
}

func perfOf(perf []control.PerfCounters, ca string, port int) *control.PerfCounters {
	for i := range perf {
		if perf[i].CA == ca && perf[i].Port == port {
			return &perf[i]
		}
	}
	return nil
}

// sysfsPort writes a port's directory: sysfs.c's port_default_attrs, gids, gid_attrs/
// types, pkeys and the PMA counters.
func sysfsPort(t map[string]string, dir string, p control.Port, pc *control.PerfCounters) {
	a := p.Attr
	t[dir+"/state"] = fmt.Sprintf("%d: %s\n", a.State, sysfsPortState(a.State))
	t[dir+"/phys_state"] = fmt.Sprintf("%d: %s\n", a.PhysState, sysfsPhysState(a.PhysState))
	t[dir+"/lid"] = fmt.Sprintf("0x%x\n", a.LID)
	t[dir+"/lid_mask_count"] = fmt.Sprintf("%d\n", a.LMC)
	t[dir+"/sm_lid"] = fmt.Sprintf("0x%x\n", a.SMLID)
	t[dir+"/sm_sl"] = fmt.Sprintf("%d\n", a.SMSL)
	t[dir+"/cap_mask"] = fmt.Sprintf("0x%08x\n", a.PortCapFlags)
	t[dir+"/rate"] = sysfsRate(a.ActiveSpeed, a.ActiveWidth)
	ll := "InfiniBand"
	if a.LinkLayer == "Ethernet" {
		ll = "Ethernet"
	}
	t[dir+"/link_layer"] = ll + "\n"
	for k, g := range p.GIDs {
		t[fmt.Sprintf("%s/gids/%d", dir, k)] = gidStr(g) + "\n" // show_port_gid: "%pI6"
		t[fmt.Sprintf("%s/gid_attrs/types/%d", dir, k)] = "IB/RoCE v1\n"
	}
	for k, key := range p.PKeys {
		t[fmt.Sprintf("%s/pkeys/%d", dir, k)] = control.PKeyString(key) + "\n"
	}
	if pc != nil {
		for name, v := range sysfsCounters(pc) {
			t[dir+"/counters/"+name] = fmt.Sprintf("%d\n", v)
		}
	}
}

// sysfsCounters maps the PMA's counters to sysfs.c's counter files: pma_attrs, or with
// ClassPortInfo's IsExtendedWidthSupported (0x200) pma_attrs_ext, whose data and packet
// counters are PortCountersExtended's, or with IsExtendedWidthSupportedNoIETF (0x400)
// pma_attrs_noietf (get_counter_table).
func sysfsCounters(pc *control.PerfCounters) map[string]uint64 {
	val := func(list []control.PerfCounter, name string) uint64 {
		for _, c := range list {
			if c.Name == name {
				return c.Value
			}
		}
		return 0
	}
	basic := func(name string) uint64 { return val(pc.Counters, name) }
	out := map[string]uint64{
		"symbol_error":                    basic("SymbolErrorCounter"),
		"link_error_recovery":             basic("LinkErrorRecoveryCounter"),
		"link_downed":                     basic("LinkDownedCounter"),
		"port_rcv_errors":                 basic("PortRcvErrors"),
		"port_rcv_remote_physical_errors": basic("PortRcvRemotePhysicalErrors"),
		"port_rcv_switch_relay_errors":    basic("PortRcvSwitchRelayErrors"),
		"port_xmit_discards":              basic("PortXmitDiscards"),
		"port_xmit_constraint_errors":     basic("PortXmitConstraintErrors"),
		"port_rcv_constraint_errors":      basic("PortRcvConstraintErrors"),
		"local_link_integrity_errors":     basic("LocalLinkIntegrityErrors"),
		"excessive_buffer_overrun_errors": basic("ExcessiveBufferOverrunErrors"),
		"VL15_dropped":                    basic("VL15Dropped"),
		"port_xmit_data":                  basic("PortXmitData"),
		"port_rcv_data":                   basic("PortRcvData"),
		"port_xmit_packets":               basic("PortXmitPkts"),
		"port_rcv_packets":                basic("PortRcvPkts"),
		"port_xmit_wait":                  basic("PortXmitWait"),
	}
	const extWidth, extWidthNoIETF = 0x200, 0x400 // IB_PMA_CLASS_CAP_EXT_WIDTH{,_NOIETF}
	if pc.CapMask&(extWidth|extWidthNoIETF) == 0 {
		return out
	}
	ext := func(name string) uint64 { return val(pc.Extended, name) }
	out["port_xmit_data"] = ext("PortXmitData")
	out["port_rcv_data"] = ext("PortRcvData")
	out["port_xmit_packets"] = ext("PortXmitPkts")
	out["port_rcv_packets"] = ext("PortRcvPkts")
	if pc.CapMask&extWidth != 0 {
		out["unicast_xmit_packets"] = ext("PortUnicastXmitPkts")
		out["unicast_rcv_packets"] = ext("PortUnicastRcvPkts")
		out["multicast_xmit_packets"] = ext("PortMulticastXmitPkts")
		out["multicast_rcv_packets"] = ext("PortMulticastRcvPkts")
	}
	return out
}

// sysfsNetdev writes an IPoIB interface's directory as the device's net/ lists it
// (SET_NETDEV_DEV to the HCA's parent): net-sysfs.c's attributes (dev_id "%#x",
// dev_port "%d", address and broadcast "%*phC", type ARPHRD_INFINIBAND 32) and IPoIB's
// pkey and mode. ipoib_intf_init sets dev_port and dev_id to the port number less one.
func sysfsNetdev(t map[string]string, dir string, ifc control.Interface) {
	t[dir+"/dev_id"] = fmt.Sprintf("0x%x\n", ifc.Port-1) // the kernel's %#x prints 0 as 0x0
	t[dir+"/dev_port"] = fmt.Sprintf("%d\n", ifc.Port-1)
	t[dir+"/address"] = ifc.HWAddr + "\n"
	t[dir+"/broadcast"] = ifc.Broadcast + "\n"
	t[dir+"/addr_len"] = "20\n" // INFINIBAND_ALEN
	t[dir+"/type"] = "32\n"     // ARPHRD_INFINIBAND
	t[dir+"/mtu"] = fmt.Sprintf("%d\n", ifc.MTU)
	oper := "down"
	if ifc.Up {
		oper = "up"
		t[dir+"/carrier"] = "1\n" // reading it on a device that is down fails (EINVAL)
	}
	t[dir+"/operstate"] = oper + "\n"
	t[dir+"/pkey"] = control.PKeyString(ifc.PKey) + "\n" // ipoib's show_pkey
	mode := "datagram"
	if ifc.Mode == "connected" {
		mode = "connected"
	}
	t[dir+"/mode"] = mode + "\n"
}

// sysfsPortState is sysfs.c's state_show name (IB_PORT_NOP … IB_PORT_ACTIVE_DEFER).
func sysfsPortState(s hca.PortState) string {
	names := []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if int(s) >= 0 && int(s) < len(names) {
		return names[s]
	}
	return "UNKNOWN"
}

// sysfsPhysState is sysfs.c's phys_state_to_str.
func sysfsPhysState(s hca.PhysState) string {
	names := []string{"<unknown>", "Sleep", "Polling", "Disabled", "PortConfigurationTraining",
		"LinkUp", "LinkErrorRecovery", "Phy Test"}
	if int(s) >= 0 && int(s) < len(names) {
		return names[s]
	}
	return "<unknown>"
}

// sysfsRate is sysfs.c's rate_show: the lane rate by ActiveSpeed (IB_SPEED_*, SDR for
// values it does not know) times the lanes of ActiveWidth (ib_width_enum_to_int).
func sysfsRate(speed, width uint8) string {
	name, rate := " SDR", 25 // deci-Gb/s a lane
	switch speed {
	case 2:
		name, rate = " DDR", 50
	case 4:
		name, rate = " QDR", 100
	case 8:
		name, rate = " FDR10", 100
	case 16:
		name, rate = " FDR", 140
	case 32:
		name, rate = " EDR", 250
	case 64:
		name, rate = " HDR", 500
	case 128:
		name, rate = " NDR", 1000
	}
	lanes := hca.WidthLanes(width)
	if lanes == 0 {
		return "" // ib_width_enum_to_int's -1: the read fails (EINVAL)
	}
	rate *= lanes
	half := ""
	if rate%10 != 0 {
		half = ".5"
	}
	return fmt.Sprintf("%d%s Gb/sec (%dX%s)\n", rate/10, half, lanes, name)
}

// sysfsDirs returns the directories of tree t, parents before children.
func sysfsDirs(t map[string]string) []string {
	seen := map[string]bool{}
	for p := range t {
		for d := path.Dir(p); d != "." && !seen[d]; d = path.Dir(d) {
			seen[d] = true
		}
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool {
		if a, b := strings.Count(dirs[i], "/"), strings.Count(dirs[j], "/"); a != b {
			return a < b
		}
		return dirs[i] < dirs[j]
	})
	return dirs
}
