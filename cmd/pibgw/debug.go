package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
)

// The debugging verbs: pib's debugfs (object tables, inject_err) and the fabric's
// cables (link state, faults).

// pidFlag is --pid; def says in words what no --pid means (the help shows it once, in
// place of the flag's zero value).
func pidFlag(usage, def string) cli.Flag {
	return &cli.IntFlag{Name: "pid", Usage: usage, DefaultText: def}
}

// objectKind reads inspect's KIND argument: "qps" or "qp", "contexts" or "context", …
func objectKind(s string) (string, bool) {
	s = strings.ToLower(s)
	for _, k := range hca.Kinds {
		if s == k || s == k+"s" {
			return k, true
		}
	}
	return "", false
}

func inspectCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "list the verbs objects of the daemon and of attached processes (pib's debugfs tables)",
		ArgsUsage: "[contexts|pds|mrs|cqs|qps|srqs|ahs|mws|xrcds]",
		Description: "Prints every context, PD, MR, CQ, QP, SRQ, AH, memory window and XRC domain (or those\n" +
			"of one kind) with its owner (\"daemon\" or the attached process's pid), its creation time\n" +
			"and the fields of its kind:\n" +
			"MR address, length, keys and access; CQ size, fill, channel, notify and error state; QP\n" +
			"type, state, port, CQs, send queue (WRs outstanding/max_send_wr) and receive queue\n" +
			"(posted/max_recv_wr), current send and expected receive PSNs, destination, path MTU and\n" +
			"the RC recovery counters (ACK timeouts, packets retransmitted, RNR NAKs); SRQ depth and\n" +
			"limit; AH address vector; memory window type, R_Key and what it is bound to. Attached\n" +
			"processes answer for their own objects through the attach channel. --pid P shows only\n" +
			"P's (the daemon's pid: the daemon's own).",
		Flags: []cli.Flag{pidFlag("only the objects of process `P`", "every process"), jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef(c, "unexpected argument %q", c.Args().Get(1))
			}
			req := control.Request{Verb: control.VerbInspect, PID: c.Int("pid")}
			if a := c.Args().First(); a != "" {
				k, ok := objectKind(a)
				if !ok {
					return usagef(c, "object kind %q: want contexts, pds, mrs, cqs, qps, srqs, ahs, mws or xrcds", a)
				}
				req.Kind = k
			}
			var objs []hca.ObjectInfo
			err := client(c).Do(c.Context, req, &objs)
			// An incomplete answer (an attached process that did not answer) still lists
			// everyone else's objects; the missing ones are the error, exit status 1.
			var incomplete *control.IncompleteError
			if err != nil && !errors.As(err, &incomplete) {
				return err
			}
			if c.Bool("json") {
				if objs == nil {
					objs = []hca.ObjectInfo{}
				}
				if werr := writeJSON(e.stdout, objs); werr != nil {
					return werr
				}
			} else if perr := printObjects(e.stdout, objs, req.Kind); perr != nil {
				return perr
			}
			if incomplete != nil {
				return fmt.Errorf("not listed: %s", strings.Join(incomplete.Missing, "; "))
			}
			return nil
		},
	}
}

// printObjects prints one table per kind, in hca.Kinds order.
func printObjects(w io.Writer, objs []hca.ObjectInfo, only string) error {
	first := true
	for _, kind := range hca.Kinds {
		if only != "" && kind != only {
			continue
		}
		var rows []hca.ObjectInfo
		for _, o := range objs {
			if o.Kind == kind {
				rows = append(rows, o)
			}
		}
		if len(rows) == 0 && only == "" {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, objectHeader(kind))
		for _, o := range rows {
			fmt.Fprintln(tw, objectRow(o))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if first {
		fmt.Fprintln(w, "no objects")
	}
	return nil
}

func objectHeader(kind string) string {
	const common = "DEVICE\tOWNER\t"
	switch kind {
	case hca.KindContext:
		return common + "CONTEXT\tEVENTS\tLOST\tCREATED"
	case hca.KindPD:
		return common + "PD\tCONTEXT\tCREATED"
	case hca.KindMR:
		return common + "LKEY\tRKEY\tPD\tADDR\tLENGTH\tACCESS\tCREATED"
	case hca.KindCQ:
		return common + "CQ\tCQE\tFILL\tCHANNEL\tNOTIFY\tSTATE\tLOST\tEVENTS/ACKED\tCREATED"
	case hca.KindQP:
		return common + "QPN\tTYPE\tSTATE\tPORT\tSCQ\tRCQ\tSRQ\tSQ\tRQ\tSQ_PSN\tRQ_PSN\tDEST\tMTU\tTIMEOUTS\tRETRANS\tRNR_NAKS\tCREATED"
	case hca.KindSRQ:
		return common + "SRQ\tPD\tMAX_WR\tPOSTED\tLIMIT\tQPS\tCREATED"
	case hca.KindAH:
		return common + "AH\tPD\tPORT\tDLID\tSL\tDGID\tCREATED"
	case hca.KindMW:
		return common + "MW\tTYPE\tRKEY\tPD\tBOUND\tADDR\tLENGTH\tACCESS\tMR\tQPN\tCREATED"
	case hca.KindXRCD:
		return common + "XRCD\tCONTEXT\tCREATED"
	}
	return common
}

func objectRow(o hca.ObjectInfo) string {
	created := o.Created.Local().Format("15:04:05.000")
	pre := fmt.Sprintf("%s\t%s\t", o.Device, o.Owner)
	switch {
	case o.Ctx != nil:
		return pre + fmt.Sprintf("%d\t%d\t%d\t%s", o.ID, o.Ctx.EventsQueued, o.Ctx.EventsLost, created)
	case o.Kind == hca.KindPD, o.Kind == hca.KindXRCD:
		return pre + fmt.Sprintf("%d\t%d\t%s", o.ID, o.Context, created)
	case o.MW != nil:
		m := o.MW
		if !m.Bound {
			return pre + fmt.Sprintf("%d\t%d\t%#x\t%d\tno\t-\t-\t-\t-\t-\t%s", o.ID, m.Type, m.RKey, o.PD, created)
		}
		qpn := "-"
		if m.QPN != 0 {
			qpn = fmt.Sprintf("%#x", m.QPN)
		}
		return pre + fmt.Sprintf("%d\t%d\t%#x\t%d\tyes\t%#x\t%d\t%s\t%#x\t%s\t%s", o.ID, m.Type, m.RKey, o.PD, m.Addr, m.Length, m.Access, m.MR, qpn, created)
	case o.MR != nil:
		m := o.MR
		return pre + fmt.Sprintf("%#x\t%#x\t%d\t%#x\t%d\t%s\t%s", m.LKey, m.RKey, o.PD, m.Addr, m.Length, m.Access, created)
	case o.CQ != nil:
		q := o.CQ
		notify := "-"
		if q.Armed {
			notify = "next"
			if q.SolicitedOnly {
				notify = "solicited"
			}
		}
		state := "ok"
		if q.Error {
			state = "error"
		}
		return pre + fmt.Sprintf("%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d/%d\t%s", o.ID, q.CQE, q.Fill, yesNo(q.Channel), notify, state, q.Lost, q.Events, q.Acked, created)
	case o.QP != nil:
		q := o.QP
		sq := fmt.Sprintf("0/%d", q.MaxSendWR)
		sqPSN, rqPSN := q.SQPSN, q.RQPSN
		timeouts, retrans, rnr := "-", "-", "-"
		if t := q.Transport; t != nil {
			sq = fmt.Sprintf("%d/%d", t.SendQueued, q.MaxSendWR)
			sqPSN, rqPSN = t.NextPSN, t.ExpectedPSN
			timeouts, retrans, rnr = strconv.FormatUint(t.Timeouts, 10), strconv.FormatUint(t.Retransmitted, 10), strconv.FormatUint(t.RNRNAKs, 10)
		}
		srq, dest, mtu := "-", "-", "-"
		if q.SRQ != 0 {
			srq = strconv.Itoa(int(q.SRQ))
		}
		if q.DLID != 0 || q.DestQPN != 0 {
			dest = fmt.Sprintf("%#x@%d", q.DestQPN, q.DLID)
		}
		if q.PathMTU != 0 {
			mtu = strconv.Itoa(q.PathMTU)
		}
		return pre + fmt.Sprintf("%#x\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d/%d\t%#x\t%#x\t%s\t%s\t%s\t%s\t%s\t%s",
			o.ID, q.Type, q.State, q.Port, q.SendCQ, q.RecvCQ, srq, sq, q.RecvPosted, q.MaxRecvWR, sqPSN, rqPSN, dest, mtu,
			timeouts, retrans, rnr, created)
	case o.SRQ != nil:
		s := o.SRQ
		return pre + fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d\t%s", o.ID, o.PD, s.MaxWR, s.Posted, s.Limit, s.QPs, created)
	case o.AH != nil:
		a := o.AH
		dgid := "-"
		if a.IsGlobal {
			dgid = a.DGID
		}
		return pre + fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%s\t%s", o.ID, o.PD, a.Port, a.DLID, a.SL, dgid, created)
	}
	return pre + fmt.Sprintf("%d", o.ID)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func injectCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "inject",
		Usage:     "inject pib's errors into a QP, CQ or SRQ of the daemon or of an attached process",
		ArgsUsage: "qp QPN | cq ID | srq ID",
		Description: "qp QPN moves the QP to ERR, flushes its WRs with IBV_WC_WR_FLUSH_ERR and raises\n" +
			"IBV_EVENT_QP_FATAL; cq ID puts the CQ in error and raises IBV_EVENT_CQ_ERR; srq ID raises\n" +
			"IBV_EVENT_SRQ_ERR (pib's debugfs inject_err). A QP is found by number wherever it lives\n" +
			"(the daemon knows which process owns each QPN); QPNs are per HCA, so --dev chooses when\n" +
			"two HCAs have the number. CQ and SRQ IDs are those `pibgw inspect` prints: the daemon's\n" +
			"unless --pid names an attached process.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dev", Usage: "the HCA `NAME` (pib_0) the object is on"},
			pidFlag("the attached process `P` that owns the CQ or SRQ", "the daemon"),
			controlFlag(),
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() < 2:
				return usagef(c, "want qp QPN, cq ID or srq ID")
			case c.NArg() > 2:
				return usagef(c, "unexpected argument %q", c.Args().Get(2))
			}
			kind := strings.ToLower(c.Args().Get(0))
			if kind != hca.KindQP && kind != hca.KindCQ && kind != hca.KindSRQ {
				return usagef(c, "object %q: want qp, cq or srq", c.Args().Get(0))
			}
			id, err := strconv.ParseUint(c.Args().Get(1), 0, 32)
			if err != nil {
				return usagef(c, "%s number %q: %v", kind, c.Args().Get(1), err.(*strconv.NumError).Err)
			}
			req := control.Request{Verb: control.VerbInject, Kind: kind, ID: uint32(id), Dev: c.String("dev"), PID: c.Int("pid")}
			if err := client(c).Do(c.Context, req, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "injected an error into %s %s\n", kind, c.Args().Get(1))
			return nil
		},
	}
}

func linkCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "link",
		Usage:     "show the fabric's cables, or pull one out and plug it back in",
		ArgsUsage: "[CABLE [up|down]]",
		Description: "Cables are named after the HCA port at their end, as devinfo and stat show it: pib_0/1\n" +
			"is the cable from pib_0 port 1 to the switch. down pulls it out: both ports go Down\n" +
			"(Polling), packets either way are dropped and counted, the SM sees the port vanish;\n" +
			"up plugs it back in: the ports train to Init and the SM's next sweep makes them Active.\n" +
			"Without a state, prints the cable (or every cable): switch port, state, faults and\n" +
			"packets each way.",
		Flags: []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 2 {
				return usagef(c, "unexpected argument %q", c.Args().Get(2))
			}
			req := control.Request{Verb: control.VerbLink, Cable: c.Args().Get(0), State: c.Args().Get(1)}
			var cables []control.Cable
			if req.State != "" {
				if _, err := daemon.ParseLinkState(req.State); err != nil {
					return usagef(c, "%v", err)
				}
				var cb control.Cable
				if err := client(c).Do(c.Context, req, &cb); err != nil {
					return err
				}
				cables = []control.Cable{cb}
			} else if err := client(c).Do(c.Context, req, &cables); err != nil {
				return err
			}
			return printCables(e.stdout, cables, c.Bool("json"))
		},
	}
}

func printCables(w io.Writer, cables []control.Cable, asJSON bool) error {
	if asJSON {
		return writeJSON(w, cables)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CABLE\tSWITCH_PORT\tSTATE\tFAULT\tTX_PACKETS\tRX_PACKETS\tDOWN_DROPS\tFAULT_LOST")
	for _, cb := range cables {
		state := "up"
		if !cb.Up {
			state = "down"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", cb.Name, cb.SwitchPort, state, faultString(cb.Fault),
			cb.Counters["tx_packets"], cb.Counters["rx_packets"], cb.Counters["down_drops"], cb.Counters["fault_lost"])
	}
	return tw.Flush()
}

func faultString(f *control.Fault) string {
	if f == nil {
		return "-"
	}
	var parts []string
	for _, p := range []struct {
		n string
		v float64
	}{{"loss", f.Loss}, {"duplicate", f.Duplicate}, {"reorder", f.Reorder}, {"corrupt", f.Corrupt}} {
		if p.v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%g%%", p.n, p.v*100))
		}
	}
	if f.Delay != 0 {
		parts = append(parts, "delay="+f.Delay.String())
	}
	parts = append(parts, fmt.Sprintf("seed=%d", f.Seed))
	return strings.Join(parts, ",")
}

// parseProbability reads "0.01" or "1%".
func parseProbability(s string) (float64, error) {
	scale := 1.0
	if t, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = t, 0.01
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	v *= scale
	if v < 0 || v > 1 || v != v {
		return 0, fmt.Errorf("%g is not a probability (0..1, or 0%%..100%%)", v)
	}
	return v, nil
}

func faultCommand(e *env) *cli.Command {
	prob := func(name, what string) cli.Flag {
		return &cli.StringFlag{Name: name, Usage: "`P` of packets " + what + " (0.01 or 1%)"}
	}
	return &cli.Command{
		Name:      "fault",
		Usage:     "inject loss, delay, reordering, duplication or corruption on a cable of the running fabric",
		ArgsUsage: "CABLE",
		Description: "Sets the faults of CABLE (named as `pibgw link` lists them, pib_0/1) in both\n" +
			"directions, from the next packet on; with no fault option, removes them. Decisions are\n" +
			"pseudo-random from --seed, each direction with its own stream: the same seed and the\n" +
			"same traffic give the same faults. Changing the probabilities with the same seed keeps\n" +
			"the streams going; another seed starts them anew. Corruption flips one bit after the\n" +
			"LRH, so the packet still routes and the receiver drops it for its ICRC. Captures record\n" +
			"packets as the ports sent them, before the cable's faults.",
		Flags: []cli.Flag{
			prob("loss", "dropped"), prob("duplicate", "delivered twice"),
			prob("reorder", "held back behind the next one"), prob("corrupt", "with one bit flipped"),
			&cli.DurationFlag{Name: "delay", Usage: "deliver every packet `D` later (10ms)"},
			&cli.Uint64Flag{Name: "seed", Usage: "`S` seeds the pseudo-random decisions"},
			jsonFlag(), controlFlag(),
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() == 0:
				return usagef(c, "no cable given (see pibgw link)")
			case c.NArg() > 1:
				return usagef(c, "unexpected argument %q", c.Args().Get(1))
			}
			ft := control.Fault{Delay: c.Duration("delay"), Seed: c.Uint64("seed")}
			for _, p := range []struct {
				name string
				dst  *float64
			}{{"loss", &ft.Loss}, {"duplicate", &ft.Duplicate}, {"reorder", &ft.Reorder}, {"corrupt", &ft.Corrupt}} {
				if !c.IsSet(p.name) {
					continue
				}
				v, err := parseProbability(c.String(p.name))
				if err != nil {
					return usagef(c, "--%s: %v", p.name, err)
				}
				*p.dst = v
			}
			if ft.Delay < 0 {
				return usagef(c, "--delay %v is negative", ft.Delay)
			}
			var cb control.Cable
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbFault, Cable: c.Args().First(), Fault: &ft}, &cb); err != nil {
				return err
			}
			return printCables(e.stdout, []control.Cable{cb}, c.Bool("json"))
		},
	}
}

func mannerCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "manner",
		Usage: "show pib's behaviour choices and the pitfall checks, with how often each fired",
		Description: "Prints the [manner] configuration the daemon's HCAs and attached processes' use:\n" +
			"pitfalls warn (log the object and the rule), strict (also fail the verb with EINVAL)\n" +
			"or off; lowest_qpn (always the lowest free QP number); random_error_fields (random\n" +
			"values in the undefined fields of error completions); then every check with its rule\n" +
			"and how often it fired on the daemon's HCAs and in the attached processes (which also\n" +
			"warn on their stderr).",
		Flags: []cli.Flag{jsonFlag(), controlFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			var m daemon.MannerInfo
			if err := client(c).Do(c.Context, control.Request{Verb: control.VerbManner}, &m); err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e.stdout, m)
			}
			fmt.Fprintf(e.stdout, "pitfalls %s, lowest_qpn %v, random_error_fields %v\n\n", m.Pitfalls, m.LowestQPN, m.RandomErrorFields)
			tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "CHECK\tDAEMON\tATTACHED\tRULE")
			for _, ch := range m.Checks {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", ch.Name, ch.Count, ch.Attached, ch.Rule)
			}
			return tw.Flush()
		},
	}
}

// perfCounters is `pibgw counters CA [PORT]`: perfquery's PortCounters and, after them,
// perfquery -x's PortCountersExtended.
func perfCounters(c *cli.Context, e *env) error {
	if c.NArg() > 2 {
		return usagef(c, "unexpected argument %q", c.Args().Get(2))
	}
	req := control.Request{Verb: control.VerbPerf, Dev: c.Args().Get(0)}
	if s := c.Args().Get(1); s != "" {
		n, err := strconv.ParseUint(s, 10, 8)
		if err != nil || n == 0 {
			return usagef(c, "port %q: want a port number (1..32)", s)
		}
		req.ID = uint32(n)
	}
	var ps []control.PerfCounters
	if err := client(c).Do(c.Context, req, &ps); err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(e.stdout, ps)
	}
	for i, p := range ps {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		fmt.Fprintf(e.stdout, "# Port counters: %s Lid %d port %d (CapMask: 0x%04X)\n", p.CA, p.LID, p.Port, p.CapMask)
		printPerf(e.stdout, p.Counters)
		fmt.Fprintf(e.stdout, "# Port extended counters: %s Lid %d port %d (CapMask: 0x%04X)\n", p.CA, p.LID, p.Port, p.CapMask)
		printPerf(e.stdout, p.Extended)
	}
	return nil
}

// printPerf prints fields as infiniband-diags does: the name and a colon padded with
// dots to 33 columns, then the value.
func printPerf(w io.Writer, fields []control.PerfCounter) {
	for _, f := range fields {
		name := f.Name + ":"
		if n := 33 - len(name); n > 0 {
			name += strings.Repeat(".", n)
		}
		if f.Hex > 0 {
			fmt.Fprintf(w, "%s0x%0*x\n", name, f.Hex, f.Value)
		} else {
			fmt.Fprintf(w, "%s%d\n", name, f.Value)
		}
	}
}
