package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/control"
)

func statCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "stat",
		Usage:     "print the HCAs' and ports' state, as ibstat does",
		ArgsUsage: "[CA_NAME] [PORTNUM]",
		Description: "Prints the running daemon's HCAs (or, with no daemon, those of the default fabric built\n" +
			"in process) in infiniband-diags' ibstat format.",
		UseShortOptionHandling: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "list_of_cas", Aliases: []string{"l"}, Usage: "list the CA names only"},
			&cli.BoolFlag{Name: "short", Aliases: []string{"s"}, Usage: "print the CA lines only, no ports"},
			&cli.BoolFlag{Name: "port_list", Aliases: []string{"p"}, Usage: "list the port GUIDs only"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			controlFlag(), inprocFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 2 {
				return usagef(c, "unexpected argument %q", c.Args().Get(2))
			}
			o := statOptions{CA: c.Args().Get(0), Port: -1, List: c.Bool("list_of_cas"),
				Short: c.Bool("short"), PortList: c.Bool("port_list"), JSON: c.Bool("json")}
			if s := c.Args().Get(1); s != "" {
				n, err := strconv.ParseInt(s, 0, 32) // ibstat reads it with strtol(…, 0)
				if err != nil || n < 0 {
					return fmt.Errorf("stat: port %q is not a port number", s)
				}
				o.Port = int(n)
			}
			devs, err := e.devices(c, c.Bool("inproc"))
			if err != nil {
				return err
			}
			return stat(e.stdout, devs, o)
		},
	}
}

type statOptions struct {
	CA       string // "" for all
	Port     int    // -1 for all
	List     bool
	Short    bool
	PortList bool
	JSON     bool
}

// statJSON is one CA in `pibgw stat --json`: ibstat's fields, named after them.
type statJSON struct {
	CA              string         `json:"ca"`
	CAType          string         `json:"ca_type"`
	NumPorts        int            `json:"number_of_ports"`
	FirmwareVersion string         `json:"firmware_version"`
	HardwareVersion string         `json:"hardware_version"`
	NodeGUID        string         `json:"node_guid"`
	SystemImageGUID string         `json:"system_image_guid"`
	Ports           []statPortJSON `json:"ports"`
}

type statPortJSON struct {
	Port           int     `json:"port"`
	State          string  `json:"state"`
	PhysicalState  string  `json:"physical_state"`
	Rate           float64 `json:"rate"` // Gb/s, a number as ip -j prints numbers
	BaseLID        uint16  `json:"base_lid"`
	LMC            uint8   `json:"lmc"`
	SMLID          uint16  `json:"sm_lid"`
	CapabilityMask string  `json:"capability_mask"`
	PortGUID       string  `json:"port_guid"`
	LinkLayer      string  `json:"link_layer"`
}

// stat prints devs as infiniband-diags' ibstat (ibstat.c ca_dump and port_dump) does.
func stat(w io.Writer, devs []control.Device, o statOptions) error {
	if o.CA != "" {
		var sel []control.Device
		for _, d := range devs {
			if d.Name == o.CA {
				sel = append(sel, d)
			}
		}
		if sel == nil {
			return fmt.Errorf("'%s' IB device can't be found", o.CA)
		}
		devs = sel
	}
	bw := bufio.NewWriter(w)
	switch {
	case o.JSON && o.List:
		names := []string{}
		for _, d := range devs {
			names = append(names, d.Name)
		}
		return writeJSON(w, names)
	case o.JSON && o.PortList:
		guids := []string{}
		for _, d := range devs {
			for _, p := range d.Ports {
				if o.Port < 0 || p.Num == o.Port {
					guids = append(guids, hexGUID(p.Attr.GUID))
				}
			}
		}
		return writeJSON(w, guids)
	case o.JSON:
		out := []statJSON{}
		for _, d := range devs {
			j := statJSON{CA: d.Name, CAType: caType, NumPorts: d.Attr.PhysPortCnt,
				FirmwareVersion: d.Attr.FWVer, HardwareVersion: hwVer(d),
				NodeGUID: hexGUID(d.Attr.NodeGUID), SystemImageGUID: hexGUID(d.Attr.SysImageGUID),
				Ports: []statPortJSON{}}
			for _, p := range d.Ports {
				if o.Port >= 0 && p.Num != o.Port {
					continue
				}
				a := p.Attr
				j.Ports = append(j.Ports, statPortJSON{Port: p.Num, State: ibstatState(uint8(a.State)),
					PhysicalState: ibstatPhys(uint8(a.PhysState)), Rate: rateNumber(ibstatRate(a.ActiveWidth, a.ActiveSpeed)),
					BaseLID: a.LID, LMC: a.LMC, SMLID: a.SMLID, CapabilityMask: fmt.Sprintf("0x%08x", a.PortCapFlags),
					PortGUID: hexGUID(a.GUID), LinkLayer: linkLayerStr(a.LinkLayer)})
			}
			out = append(out, j)
		}
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	case o.PortList:
		for _, d := range devs {
			for _, p := range d.Ports {
				fmt.Fprintf(bw, "%s\n", hexGUID(p.Attr.GUID))
			}
		}
	case o.List:
		for _, d := range devs {
			fmt.Fprintf(bw, "%s\n", d.Name)
		}
	default:
		for _, d := range devs {
			if !o.Short && o.Port >= 0 {
				// ibstat CA PORT: one port, with the "CA: 'name'" header.
				var port *control.Port
				for i := range d.Ports {
					if d.Ports[i].Num == o.Port {
						port = &d.Ports[i]
					}
				}
				if port == nil {
					bw.Flush()
					return fmt.Errorf("CA: '%s' has no port number %d - max (%d)", d.Name, o.Port, len(d.Ports))
				}
				fmt.Fprintf(bw, "CA: '%s'\n", d.Name)
				portDump(bw, *port, true)
				continue
			}
			caDump(bw, d)
			if o.Short {
				continue
			}
			for _, p := range d.Ports {
				portDump(bw, p, false)
			}
		}
	}
	return bw.Flush()
}

// caType is what ibstat prints as "CA type": the kernel's hca_type, which soft devices
// (rxe, pib) leave empty.
const caType = ""

func hexGUID(g uint64) string { return fmt.Sprintf("0x%016x", g) }

// hwVer is sysfs hw_rev as drivers print it: hexadecimal.
func hwVer(d control.Device) string { return fmt.Sprintf("%x", d.Attr.HWVer) }

func caDump(w io.Writer, d control.Device) {
	fmt.Fprintf(w, "CA '%s'\n", d.Name)
	fmt.Fprintf(w, "\tCA type: %s\n", caType)
	fmt.Fprintf(w, "\tNumber of ports: %d\n", d.Attr.PhysPortCnt)
	fmt.Fprintf(w, "\tFirmware version: %s\n", d.Attr.FWVer)
	fmt.Fprintf(w, "\tHardware version: %s\n", hwVer(d))
	fmt.Fprintf(w, "\tNode GUID: %s\n", hexGUID(d.Attr.NodeGUID))
	fmt.Fprintf(w, "\tSystem image GUID: %s\n", hexGUID(d.Attr.SysImageGUID))
}

func portDump(w io.Writer, p control.Port, alone bool) {
	pre, hdrpre := "\t\t", "\t"
	if alone {
		pre, hdrpre = "", ""
	}
	a := p.Attr
	fmt.Fprintf(w, "%sPort %d:\n", hdrpre, p.Num)
	fmt.Fprintf(w, "%sState: %s\n", pre, ibstatState(uint8(a.State)))
	fmt.Fprintf(w, "%sPhysical state: %s\n", pre, ibstatPhys(uint8(a.PhysState)))
	fmt.Fprintf(w, "%sRate: %s\n", pre, ibstatRate(a.ActiveWidth, a.ActiveSpeed))
	fmt.Fprintf(w, "%sBase lid: %d\n", pre, a.LID)
	fmt.Fprintf(w, "%sLMC: %d\n", pre, a.LMC)
	fmt.Fprintf(w, "%sSM lid: %d\n", pre, a.SMLID)
	fmt.Fprintf(w, "%sCapability mask: 0x%08x\n", pre, a.PortCapFlags)
	fmt.Fprintf(w, "%sPort GUID: %s\n", pre, hexGUID(a.GUID))
	fmt.Fprintf(w, "%sLink layer: %s\n", pre, linkLayerStr(a.LinkLayer))
}

// ibstat.c's port_state_str and port_phy_state_str.
var (
	ibstatStates     = []string{"???", "Down", "Initializing", "Armed", "Active"}
	ibstatPhysStates = []string{"No state change", "Sleep", "Polling", "Disabled",
		"PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "PhyTest"}
)

func ibstatState(s uint8) string {
	if int(s) < len(ibstatStates) {
		return ibstatStates[s]
	}
	return "???"
}

func ibstatPhys(s uint8) string {
	if int(s) < len(ibstatPhysStates) {
		return ibstatPhysStates[s]
	}
	return "???"
}

// ibstatRate is the port's rate in Gb/s as ibstat prints it: the leading number of sysfs
// "rate" (e.g. "120 Gb/sec (12X QDR)"), 2.5 for 1X SDR.
func ibstatRate(width, speed uint8) string {
	lanes := map[uint8]float64{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
	gbps := map[uint8]float64{1: 2.5, 2: 5, 4: 10, 8: 10, 16: 14, 32: 25, 64: 50, 128: 100}[speed]
	r := lanes * gbps
	if r == 2.5 {
		return "2.5"
	}
	return strconv.Itoa(int(r))
}

// rateNumber reads ibstat's rate text ("120", "2.5") as a number.
func rateNumber(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
