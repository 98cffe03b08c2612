package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/internal/control"
)

func psCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list the processes attached to the daemon's HCAs",
		Description: "Prints each process that uses the daemon's HCAs through the attach socket (attach.Dial,\n" +
			"pibgw exec): its pid and user, its QPs, the service IDs it listens on, the packets it\n" +
			"sent and received, and the packets the daemon dropped for it (policing, full ring).\n" +
			"--json adds every counter.",
		Flags: []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			var ss []attach.SessionInfo
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbPS}, &ss); err != nil {
				return err
			}
			if c.Bool("json") {
				if ss == nil {
					ss = []attach.SessionInfo{}
				}
				return writeJSON(e.stdout, ss)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tPID\tUSER\tQPS\tLISTENS\tTX\tRX\tDROPPED\tSINCE")
			for _, s := range ss {
				fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.ID, s.PID, s.User, len(s.QPs), s.Listens,
					s.Counters["tx_packets"], s.Counters["rx_packets"], sessionDropped(s.Counters), s.Since.Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

// sessionDropped is what ps's DROPPED column counts: the packets the daemon dropped for a
// session, by policing (police_*) or for a full ring (drop_*) — not the others, such as
// direct_tx_packets, which count packets sent.
func sessionDropped(counters map[string]uint64) uint64 {
	var n uint64
	for k, v := range counters {
		if strings.HasPrefix(k, "police_") || strings.HasPrefix(k, "drop_") {
			n += v
		}
	}
	return n
}
