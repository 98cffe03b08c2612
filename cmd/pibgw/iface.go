package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
)

func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print JSON"} }

func showCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show the daemon's IPoIB interfaces",
		ArgsUsage: "[IFACE]",
		Description: "Prints each interface's namespace, stack, mode, MTU, 20-byte hardware and broadcast\n" +
			"addresses, P_Key, QPN and Q_Key, state (with the reason when it is down), addresses\n" +
			"and counters.",
		Flags: []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef(c, "unexpected argument %q", c.Args().Get(1))
			}
			var ifs []control.Interface
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbShow, Iface: c.Args().First()}, &ifs); err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e.stdout, ifs)
			}
			bw := bufio.NewWriter(e.stdout)
			for i, it := range ifs {
				if i > 0 {
					fmt.Fprintln(bw)
				}
				printInterface(bw, it)
			}
			return bw.Flush()
		},
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// interfaceLine is the first line of pibgw show's block: name, where, mode, MTU, state
// (and why it is down). child add prints it alone.
func interfaceLine(it control.Interface) string {
	state := "UP"
	if !it.Up {
		state = "DOWN"
		if it.Reason != "" {
			state += " (" + it.Reason + ")"
		}
	}
	name := it.Name
	if it.Parent != "" {
		name += "@" + it.Parent
	}
	where := "netns " + it.NetNS
	switch {
	case it.Stack == config.StackUserspace:
		where = "userspace netstack"
	case it.NetNS == "":
		where = "host namespace"
	}
	return fmt.Sprintf("%s: %s, %s mode, mtu %d, state %s", name, where, it.Mode, it.MTU, state)
}

// printInterface prints one interface in the spirit of `ip -d -s link show`.
func printInterface(w io.Writer, it control.Interface) {
	fmt.Fprintln(w, interfaceLine(it))
	if it.MTURefused != "" {
		fmt.Fprintf(w, "    %s\n", it.MTURefused)
	}
	fmt.Fprintf(w, "    link/infiniband %s\n", it.HWAddr)
	fmt.Fprintf(w, "    brd %s\n", it.Broadcast)
	fmt.Fprintf(w, "    pkey %#04x qpn 0x%06x qkey 0x%08x on %s port %d\n", it.PKey, it.QPN, it.QKey, it.HCA, it.Port)
	for _, a := range it.Addrs {
		fam := "inet"
		if strings.Contains(a, ":") {
			fam = "inet6"
		}
		fmt.Fprintf(w, "    %s %s\n", fam, a)
	}
	if len(it.Counters) > 0 {
		names := make([]string, 0, len(it.Counters))
		for k := range it.Counters {
			names = append(names, k)
		}
		slices.Sort(names)
		fmt.Fprintf(w, "    counters:\n")
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		for i, k := range names {
			sep := "\t"
			if i%3 == 2 || i == len(names)-1 {
				sep = "\n"
			}
			if i%3 == 0 {
				fmt.Fprint(tw, "      ")
			}
			fmt.Fprintf(tw, "%s %d%s", k, it.Counters[k], sep)
		}
		tw.Flush()
	}
}

func neighCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "neigh",
		Usage:     "show the IPoIB neighbour caches (IP → 20-byte hardware address)",
		ArgsUsage: "[IFACE]",
		Flags:     []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef(c, "unexpected argument %q", c.Args().Get(1))
			}
			var ns []control.Neighbor
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbNeigh, Iface: c.Args().First()}, &ns); err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e.stdout, ns)
			}
			return printNeighbors(e.stdout, ns)
		},
	}
}

// printNeighbors prints the caches; CM is the connected-mode connection toward the
// neighbour: its state and QPNs (ours→theirs), "-" when there is none.
func printNeighbors(w io.Writer, ns []control.Neighbor) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "IFACE\tADDRESS\tHWADDR\tQPN\tGID\tSTATE\tCM")
	for _, n := range ns {
		cm := "-"
		switch {
		case n.CM == "connected":
			cm = fmt.Sprintf("connected 0x%06x→0x%06x", n.CMQPN, n.CMRemoteQ)
		case n.CM != "":
			cm = n.CM
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t0x%06x\t%s\t%s\t%s\n", n.Iface, n.IP, n.HWAddr, n.QPN, n.GID, n.State, cm)
	}
	return tw.Flush()
}

func modeCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "mode",
		Usage:     "show or switch an interface's IPoIB mode (like /sys/class/net/IFACE/mode)",
		ArgsUsage: "IFACE [datagram|connected]",
		Description: "With MODE, switches IFACE while traffic flows, as writing /sys/class/net/IFACE/mode\n" +
			"does: connected mode (RFC 4755) sends unicast over RC connections made on demand and\n" +
			"sets the MTU to 65520; datagram mode puts the MTU back to the broadcast group's − 4\n" +
			"and closes the connections. Without MODE, prints the current one.",
		Flags: []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() == 0:
				return usagef(c, "no interface given")
			case c.NArg() > 2:
				return usagef(c, "unexpected argument %q", c.Args().Get(2))
			}
			iface, mode := c.Args().Get(0), c.Args().Get(1)
			req := control.Request{Verb: control.VerbShow, Iface: iface}
			if mode != "" {
				if mode != config.ModeDatagram && mode != config.ModeConnected {
					return usagef(c, "mode %q: want %q or %q", mode, config.ModeDatagram, config.ModeConnected)
				}
				req = control.Request{Verb: control.VerbMode, Iface: iface, Mode: mode}
			}
			var it control.Interface
			if mode != "" {
				if err := client(c).Do(c.Context, req, &it); err != nil {
					return err
				}
			} else {
				var ifs []control.Interface
				if err := client(c).Do(c.Context, req, &ifs); err != nil {
					return err
				}
				it = ifs[0]
			}
			if c.Bool("json") {
				return writeJSON(e.stdout, map[string]any{"iface": it.Name, "mode": it.Mode, "mtu": it.MTU})
			}
			fmt.Fprintf(e.stdout, "%s: %s mode, mtu %d\n", it.Name, it.Mode, it.MTU)
			return nil
		},
	}
}

func childCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "child",
		Usage: "add or delete P_Key child interfaces (like /sys/class/net/IFACE/create_child)",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "create IFACE's child for partition PKEY (hex; 0x8000 is ORed in)",
				ArgsUsage: "IFACE PKEY",
				Description: "Creates IFACE.XXXX (e.g. ib0.8001) on IFACE's port, in IFACE's namespace, with its own\n" +
					"TUN device, UD QP and broadcast group. It is down until the SM puts PKEY in the\n" +
					"port's P_Key table (pibgw partition add PKEY). --addr gives it addresses (repeatable).\n" +
					"Prints the child's name and state on one line; pibgw show IFACE.PKEY has the rest.",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "addr", Usage: "address `CIDR` for the child (e.g. 10.20.0.1/24); repeatable"},
					jsonFlag(), controlFlag(),
				},
				Action: func(c *cli.Context) error {
					iface, pk, err := childArgs(c)
					if err != nil {
						return err
					}
					req := control.Request{Verb: control.VerbChildAdd, Iface: iface, PKey: pk}
					for _, a := range c.StringSlice("addr") {
						if _, err := config.ParseAddr(a); err != nil {
							return err
						}
						req.Addrs = append(req.Addrs, a)
					}
					var it control.Interface
					if err := client(c).Do(c.Context, req, &it); err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSON(e.stdout, it)
					}
					// One line, as ip link add prints nothing: the block is pibgw show IFACE's.
					fmt.Fprintln(e.stdout, interfaceLine(it))
					return nil
				},
			},
			{
				Name:      "del",
				Usage:     "delete IFACE's child for partition PKEY (or the child ib0.8001 by its name, as ip link del); IFACE is untouched",
				ArgsUsage: "IFACE PKEY | IFACE.PKEY",
				Flags:     []cli.Flag{jsonFlag(), controlFlag()},
				Action: func(c *cli.Context) error {
					iface, pk, err := childArgs(c)
					if err != nil {
						return err
					}
					if err := client(c).Do(c.Context, control.Request{Verb: control.VerbChildDel, Iface: iface, PKey: pk}, nil); err != nil {
						return err
					}
					k, _ := config.ParsePKey(pk)
					name := config.ChildName(iface, k)
					if c.Bool("json") {
						return writeJSON(e.stdout, struct {
							Name    string `json:"name"`
							Parent  string `json:"parent"`
							PKey    uint16 `json:"pkey"`
							Deleted bool   `json:"deleted"`
						}{name, iface, k | 0x8000, true})
					}
					fmt.Fprintf(e.stdout, "%s deleted\n", name)
					return nil
				},
			},
		},
	}
}

// childArgs reads IFACE PKEY, checking the P_Key before any daemon is asked. child del
// also takes the child's name, IFACE.PKEY (ipoib's name for it: ib0.8001).
func childArgs(c *cli.Context) (string, string, error) {
	iface, pk := c.Args().Get(0), c.Args().Get(1)
	if dot := strings.LastIndexByte(iface, '.'); c.NArg() == 1 && c.Command.Name == "del" && dot > 0 {
		iface, pk = iface[:dot], iface[dot+1:]
	} else if c.NArg() != 2 {
		return "", "", usagef(c, "want IFACE PKEY (e.g. ib0 0x8001), got %d arguments", c.NArg())
	}
	if !config.ValidIfName(iface) {
		return "", "", fmt.Errorf("%q is not an interface name", iface)
	}
	// A bad value is an error in its own right (exit 1, one line), not a usage error.
	if _, err := config.ParsePKey(pk); err != nil {
		return "", "", err
	}
	return iface, pk, nil
}
