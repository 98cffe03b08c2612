package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/trace"
)

// errEnough ends a trace after its count of records.
var errEnough = errors.New("enough")

func traceCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "trace",
		Usage: "stream the trace of the daemon and of attached processes: verbs calls, packets, drops, retries, completions, events, CM",
		Description: "Prints events as they happen, until Ctrl-C (or -c N events): verbs calls (api), packets\n" +
			"a port sent or received with their headers decoded (packet; CM messages as cm), packets\n" +
			"dropped with the reason — the counter they incremented (drop), RC retransmissions\n" +
			"after an ACK timeout, a sequence NAK or an RNR NAK (retry), work completions\n" +
			"(completion), async events (event) and bookmarks (mark). Each process records into its\n" +
			"own ring of 65,536 events (pib's) only while someone traces; the daemon merges them,\n" +
			"processes that attach later included. --qp N keeps the events of QP N (and packets\n" +
			"to or from it), --lid L packets from or to LID L, --kind a comma-separated list of\n" +
			"kinds, --pid P the events of process P (the daemon's pid: the daemon's own).\n" +
			"--mark TEXT puts a bookmark into every trace and exits.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "qp", Usage: "only QP `N` (decimal or 0x hex)"},
			&cli.UintFlag{Name: "lid", Usage: "only packets from or to `LID`"},
			&cli.StringFlag{Name: "kind", Usage: "only these `KINDS`: api,packet,drop,retry,completion,event,cm,mark"},
			pidFlag("only the events of process `P`", "every process"),
			&cli.StringFlag{Name: "mark", Usage: "insert a bookmark `TEXT` and exit"},
			&cli.IntFlag{Name: "count", Aliases: []string{"c"}, Usage: "stop after `N` events"},
			jsonFlag(), controlFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			cl := client(c)
			if c.IsSet("mark") {
				return cl.Do(c.Context, control.Request{Verb: control.VerbMark, Mark: c.String("mark")}, nil)
			}
			req := control.Request{PID: c.Int("pid"), Kinds: c.String("kind")}
			if _, err := trace.ParseKinds(req.Kinds); err != nil {
				return usagef(c, "--kind: %v", err)
			}
			if s := c.String("qp"); s != "" {
				n, err := strconv.ParseUint(s, 0, 24)
				if err != nil {
					return usagef(c, "--qp %q: want a QP number (24 bits)", s)
				}
				req.ID = uint32(n)
			}
			if l := c.Uint("lid"); l > 0xFFFF {
				return usagef(c, "--lid %d: more than 16 bits", l)
			} else {
				req.LID = uint16(l)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			left := c.Int("count")
			err := cl.Trace(ctx, req, func(rec trace.Record) error {
				if c.Bool("json") {
					if err := writeJSONLine(e.stdout, rec); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(e.stdout, "%s %-7s %s\n", rec.Time.Local().Format("15:04:05.000000"), rec.Owner, rec.Text)
				}
				if left > 0 {
					if left--; left == 0 {
						return errEnough
					}
				}
				return nil
			})
			if errors.Is(err, errEnough) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
