package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/internal/control"
)

func captureCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "capture",
		Usage: "capture the running fabric's packets into a pcap file (Wireshark, tshark)",
		Description: "Records every packet on every cable of the daemon's fabric until -c packets were captured\n" +
			"or Ctrl-C. Packets leaving an HCA are on capture interface 0, packets arriving at one\n" +
			"on interface 1; a packet crossing the switch is recorded at both ends.\n" +
			"The fabric never waits for a capture: what is not read in time (a slow disk or pipe)\n" +
			"is dropped, counted in the next record's ERF loss counter, and reported at the end.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "write", Aliases: []string{"w"}, Usage: "write the capture to `FILE` (- for stdout); required"},
			&cli.Uint64Flag{Name: "count", Aliases: []string{"c"}, Usage: "stop after `N` packets", DefaultText: "until Ctrl-C"},
			&cli.IntFlag{Name: "snaplen", Aliases: []string{"s"}, Usage: "keep at most `BYTES` of each packet", DefaultText: "all"},
			jsonFlag(), controlFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			if c.String("write") == "" {
				return usagef(c, "-w FILE is required (- for stdout)")
			}
			if c.Int("snaplen") < 0 {
				return fmt.Errorf("capture: --snaplen %d is negative", c.Int("snaplen"))
			}
			cl := client(c)
			// Ask the daemon first, so that no file is left behind when none runs.
			if err := cl.Do(c.Context, control.Request{Verb: control.VerbStatus}, nil); err != nil {
				return err
			}
			path := c.String("write")
			var w io.Writer = e.stdout
			if path != "-" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			cw := &countingWriter{w: w}
			if _, err := cl.Capture(ctx, control.Request{Count: c.Uint64("count"), Snaplen: c.Int("snaplen")}, cw); err != nil {
				return err
			}
			switch {
			case c.Bool("json"):
				// The summary goes to stderr when the capture itself is on stdout.
				out := e.stdout
				if path == "-" {
					out = e.stderr
				}
				return writeJSON(out, struct {
					File    string `json:"file"`
					Packets int    `json:"packets"`
					Dropped uint64 `json:"dropped"`
				}{path, cw.records, cw.dropped})
			case path != "-":
				fmt.Fprintf(e.stderr, "%d packets captured to %s\n", cw.records, path)
			}
			if cw.dropped > 0 && !c.Bool("json") {
				// As tcpdump's "packets dropped by kernel": the capture was not read fast enough.
				fmt.Fprintf(e.stderr, "%d packets dropped by the daemon (not read in time)\n", cw.dropped)
			}
			return nil
		},
	}
}

// countingWriter counts the pcap records written (the stream arrives in whole records,
// after a 24-byte file header), and the packets the daemon dropped before them (each
// ERF record's loss counter).
type countingWriter struct {
	w       io.Writer
	hdr     bool
	records int
	dropped uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	b := p
	if !c.hdr && len(b) >= 24 {
		c.hdr, b = true, b[24:]
	}
	for len(b) >= 16 {
		incl := int(uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16 | uint32(b[11])<<24)
		if len(b) < 16+incl {
			break
		}
		c.records++
		if incl >= 16 {
			c.dropped += uint64(b[16+12])<<8 | uint64(b[16+13]) // ERF lctr, big-endian
		}
		b = b[16+incl:]
	}
	return c.w.Write(p)
}
