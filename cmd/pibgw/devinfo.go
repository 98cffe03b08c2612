package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/wire"
)

func devinfoCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "devinfo",
		Usage: "print the HCAs' attributes, as ibv_devinfo does",
		Description: "Prints the running daemon's HCAs in ibv_devinfo's format. With no daemon running it\n" +
			"builds the default fabric (pib_0 and pib_1 on one switch, the built-in SM) in\n" +
			"process, so the ports show PORT_ACTIVE with the LIDs the SM assigned.",
		UseShortOptionHandling: true, // -vd pib_0, as getopt allows
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "ib-dev", Aliases: []string{"d"}, Usage: "print only device `NAME`", DefaultText: "all devices"},
			&cli.IntFlag{Name: "ib-port", Aliases: []string{"i"}, Usage: "print only port `N` of the device(s)", DefaultText: "all ports"},
			&cli.BoolFlag{Name: "list", Aliases: []string{"l"}, Usage: "print only the device names"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print all the attributes of the device(s)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON (always every attribute, as -v)"},
			controlFlag(), inprocFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			devs, err := e.devices(c, c.Bool("inproc"))
			if err != nil {
				return err
			}
			return devinfo(e.stdout, devs, devinfoOptions{
				Device:  c.String("ib-dev"),
				Port:    c.Int("ib-port"),
				List:    c.Bool("list"),
				Verbose: c.Bool("verbose"),
				JSON:    c.Bool("json"),
			})
		},
	}
}

type devinfoOptions struct {
	Device  string // "" for all
	Port    int    // 0 for all
	List    bool
	Verbose bool
	JSON    bool
}

// devinfo prints devs as ibv_devinfo (rdma-core libibverbs/examples/devinfo.c) does.
func devinfo(w io.Writer, devs []control.Device, o devinfoOptions) error {
	if o.Port < 0 {
		return fmt.Errorf("devinfo: port %d: ports are numbered from 1", o.Port)
	}
	if o.Device != "" {
		var sel []control.Device
		for _, d := range devs {
			if d.Name == o.Device {
				sel = append(sel, d)
			}
		}
		if sel == nil {
			return fmt.Errorf("IB device '%s' wasn't found", o.Device)
		}
		devs = sel
	} else if len(devs) == 0 {
		return fmt.Errorf("no IB devices found")
	}
	for _, d := range devs {
		if o.Port > len(d.Ports) {
			return fmt.Errorf("devinfo: %s: invalid port %d requested (the device has %d)", d.Name, o.Port, len(d.Ports))
		}
	}
	bw := bufio.NewWriter(w)
	switch {
	case o.JSON && o.List:
		names := []string{}
		for _, d := range devs {
			names = append(names, d.Name)
		}
		return writeJSON(w, names)
	case o.JSON:
		out := make([]devJSON, 0, len(devs))
		for _, d := range devs {
			out = append(out, deviceJSON(d, o.Port))
		}
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	case o.List:
		s := "s"
		if len(devs) == 1 {
			s = ""
		}
		fmt.Fprintf(bw, "%d HCA%s found:\n", len(devs), s)
		for _, d := range devs {
			fmt.Fprintf(bw, "\t%s\n", d.Name)
		}
		fmt.Fprintln(bw)
	default:
		for _, d := range devs {
			printDevice(bw, d, o.Port, o.Verbose)
		}
	}
	return bw.Flush()
}

// printDevice is devinfo.c's print_hca_cap, tabs and all. Lines devinfo.c prints only for
// extended verbs (ODP, TSO, RSS, tag matching, …) that a pibgw HCA does not implement
// are left out.
func printDevice(w io.Writer, d control.Device, onlyPort int, verbose bool) {
	a := d.Attr
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("hca_id:\t%s\n", d.Name)
	p("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0) // IBV_TRANSPORT_IB
	if a.FWVer != "" {
		p("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	p("\tnode_guid:\t\t\t%s\n", guidStr(a.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", guidStr(a.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	if d.BoardID != "" { // devinfo.c reads it from sysfs: pibgw exec's view has it
		p("\tboard_id:\t\t\t%s\n", d.BoardID)
	}
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		p("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		p("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		p("\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
		for _, name := range capFlagNames(a.DeviceCapFlags) {
			p("\t\t\t\t\t%s\n", name)
		}
		p("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		p("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		p("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		p("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		p("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		p("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		p("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		p("\tmax_ee_rd_atom:\t\t\t%d\n", a.MaxEECRdAtom)
		p("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
		p("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		p("\tmax_ee_init_rd_atom:\t\t%d\n", a.MaxEEInitRdAtom)
		p("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapStr(a.AtomicCap), a.AtomicCap)
		p("\tmax_ee:\t\t\t\t%d\n", a.MaxEE)
		p("\tmax_rdd:\t\t\t%d\n", a.MaxRDD)
		p("\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		p("\tmax_raw_ipv6_qp:\t\t%d\n", a.MaxRawIPv6QP)
		p("\tmax_raw_ethy_qp:\t\t%d\n", a.MaxRawEthyQP)
		p("\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
		p("\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
		p("\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
		p("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		p("\tmax_fmr:\t\t\t%d\n", a.MaxFMR)
		if a.MaxFMR != 0 {
			p("\tmax_map_per_fmr:\t\t%d\n", a.MaxMapPerFMR)
		}
		p("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			p("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			p("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
	}
	for _, port := range d.Ports {
		n := port.Num
		if onlyPort != 0 && n != onlyPort {
			continue
		}
		pa := port.Attr
		p("\t\tport:\t%d\n", n)
		p("\t\t\tstate:\t\t\t%s (%d)\n", portStateStr(pa.State), pa.State)
		p("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuStr(pa.MaxMTU), pa.MaxMTU)
		p("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuStr(pa.ActiveMTU), pa.ActiveMTU)
		p("\t\t\tsm_lid:\t\t\t%d\n", pa.SMLID)
		p("\t\t\tport_lid:\t\t%d\n", pa.LID)
		p("\t\t\tport_lmc:\t\t0x%02x\n", pa.LMC)
		p("\t\t\tlink_layer:\t\t%s\n", linkLayerStr(pa.LinkLayer))
		if verbose {
			p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSz)
			p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
			// pibgw ports do not set IsCapabilityMask2Supported, so CapabilityMask2 is 0.
			p("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
			p("\t\t\tmax_vl_num:\t\t%s (%d)\n", vlStr(pa.MaxVLNum), pa.MaxVLNum)
			p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", pa.BadPKeyCntr)
			p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", pa.QKeyViolCntr)
			p("\t\t\tsm_sl:\t\t\t%d\n", pa.SMSL)
			p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			p("\t\t\tsubnet_timeout:\t\t%d\n", pa.SubnetTimeout)
			p("\t\t\tinit_type_reply:\t%d\n", pa.InitTypeReply)
			p("\t\t\tactive_width:\t\t%sX (%d)\n", widthStr(pa.ActiveWidth), pa.ActiveWidth)
			p("\t\t\tactive_speed:\t\t%s (%d)\n", speedStr(pa.ActiveSpeed), pa.ActiveSpeed)
			p("\t\t\tphys_state:\t\t%s (%d)\n", physStateStr(pa.PhysState), pa.PhysState)
			for i, g := range port.GIDs {
				if g.InterfaceID() != 0 { // devinfo.c's null_gid: only the interface ID counts
					p("\t\t\tGID[%3d]:\t\t%s\n", i, gidStr(g))
				}
			}
		}
		p("\n")
	}
}

// guidStr is devinfo.c's guid_str: four groups of four hex digits.
func guidStr(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// gidStr prints a GID as devinfo.c does for IB (type "IB/RoCE v1"): eight groups of four
// hex digits, zeros kept.
func gidStr(g wire.GID) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15])
}

// The string tables below are devinfo.c's, keyed by libibverbs' numeric values (verbs.h).

func portStateStr(s hca.PortState) string {
	switch s {
	case hca.PortDown:
		return "PORT_DOWN"
	case hca.PortInit:
		return "PORT_INIT"
	case hca.PortArmed:
		return "PORT_ARMED"
	case hca.PortActive:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

func physStateStr(s hca.PhysState) string {
	switch s {
	case 1:
		return "SLEEP"
	case 2:
		return "POLLING"
	case 3:
		return "DISABLED"
	case 4:
		return "PORT_CONFIGURATION TRAINNING" // sic, as devinfo.c spells it
	case 5:
		return "LINK_UP"
	case 6:
		return "LINK_ERROR_RECOVERY"
	case 7:
		return "PHY TEST"
	}
	return "invalid physical state"
}

func mtuStr(m hca.MTU) string {
	if m.Bytes() == 0 {
		return "invalid MTU"
	}
	return fmt.Sprint(m.Bytes())
}

func atomicCapStr(c int) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

func widthStr(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

func speedStr(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

func vlStr(n uint8) string {
	switch n {
	case 1:
		return "1"
	case 2:
		return "2"
	case 3:
		return "4"
	case 4:
		return "8"
	case 5:
		return "15"
	}
	return "invalid value"
}

func linkLayerStr(s string) string {
	switch s {
	case "InfiniBand", "Ethernet":
		return s
	case "":
		return "Unspecified"
	}
	return "Unknown"
}

// deviceCapFlags are ibv_device_cap_flags (verbs.h) in devinfo.c's print order.
var deviceCapFlags = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"},
	{1 << 1, "BAD_PKEY_CNTR"},
	{1 << 2, "BAD_QKEY_CNTR"},
	{1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"},
	{1 << 5, "CHANGE_PHY_PORT"},
	{1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"},
	{1 << 8, "SHUTDOWN_PORT"},
	{1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"},
	{1 << 11, "SYS_IMAGE_GUID"},
	{1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"},
	{1 << 14, "N_NOTIFY_CQ"},
	{1 << 17, "MEM_WINDOW"},
	{1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"},
	{1 << 21, "MEM_MGT_EXTENSIONS"},
	{1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"},
	{1 << 25, "RC_IP_CSUM"},
	{1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

// capFlagNames names the set flags, then "Unknown flags: 0x…" for the rest, as devinfo.c.
func capFlagNames(flags uint32) []string {
	var names []string
	known := uint32(0)
	for _, f := range deviceCapFlags {
		known |= f.bit
		if flags&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if u := flags &^ known; u != 0 {
		names = append(names, fmt.Sprintf("Unknown flags: 0x%X", u))
	}
	return names
}
