package main

import (
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/control"
)

func nodesCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "nodes",
		Usage: "list the UDP links of a multi-host fabric",
		Description: "On a switch process (pibgw switch), one line per switch port a host has had: the\n" +
			"host port's GUID, its address while connected, the switch port's state and the\n" +
			"packets of the session. On a host (fabric.switch), one line per HCA port: the switch,\n" +
			"the switch port it got, the HCA port's state and LID, and the switch's last refusal.",
		Flags: []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			var ls []control.Link
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbNodes}, &ls); err != nil {
				return err
			}
			if c.Bool("json") {
				if ls == nil {
					ls = []control.Link{}
				}
				return writeJSON(e.stdout, ls)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "SWITCH_PORT\tPORT_GUID\tADDR\tSESSION\tSTATE\tLID\tRX\tTX\tNOTE")
			for _, l := range ls {
				sess := "down"
				if l.Up {
					sess = "up"
				}
				lid := "-"
				if l.LID != 0 {
					lid = fmt.Sprint(l.LID)
				}
				note := l.Refusal
				if note == "" && !l.LastRx.IsZero() {
					note = "last rx " + time.Since(l.LastRx).Round(time.Millisecond).String() + " ago"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", l.SwitchPort, l.PortGUID, l.Addr, sess, l.State, lid,
					l.RxPackets, l.TxPackets, note)
			}
			return tw.Flush()
		},
	}
}

func countersCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "counters",
		Usage:     "print an HCA port's counters like perfquery (CA [PORT]), or the UDP links' and switch ports' counters",
		ArgsUsage: "[CA [PORT] | --all]",
		Description: "With CA (pib_0) and optionally PORT, or --all for every HCA port, prints the port's\n" +
			"PortCounters and PortCountersExtended as its PMA answers perfquery, in perfquery's\n" +
			"format. Without: prints the counters of the process's UDP links, summed: datagrams and packets each\n" +
			"way, sessions opened, refusals, peers declared dead, and every drop by reason\n" +
			"(drop_auth: a tag that does not verify — a wrong PSK; drop_not_allowed: a source\n" +
			"outside the allow-list; drop_replay; drop_truncated …), then the counters of this\n" +
			"process's switch ports (a one-process fabric's switch too): switch_port_N_xmit_pkts,\n" +
			"_rcv_pkts, _xmit_discards, _rcv_errors and its drops by reason (_drop_no_route,\n" +
			"_drop_no_mft, … — what perfquery's PortRcvSwitchRelayErrors sums).",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "all", Usage: "every HCA port's counters"}, jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 || c.Bool("all") {
				return perfCounters(c, e)
			}
			var m control.LinkCounters
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbCounters}, &m); err != nil {
				return err
			}
			if c.Bool("json") {
				if m == nil {
					m = control.LinkCounters{}
				}
				return writeJSON(e.stdout, m)
			}
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%d\n", k, m[k])
			}
			return tw.Flush()
		},
	}
}
