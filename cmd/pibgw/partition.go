package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/urfave/cli/v2"
)

// partitionCommand changes the built-in SM's partitions on a running daemon: the SM
// reprograms the ports' P_Key tables, and P_Key children come up or go down.
func partitionCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "partition",
		Usage: "add, delete or list the built-in SM's partitions on a running daemon",
		Description: "The SM reprograms every port's P_Key table at once; the P_Key children of a\n" +
			"partition come up when their port gets it and go down when it loses it:\n" +
			"  pibgw child add ib0 0x8001 --addr 10.20.0.1/24   # down: 0x8001 is in no table\n" +
			"  pibgw partition add 0x8001                       # every port a full member: ib0.8001 comes up\n" +
			"The configuration's [[sm.partitions]] are the partitions at start; these changes last\n" +
			"until the daemon stops. With sm.mode = \"external\" the SM elsewhere owns the partitions.",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "add partition PKEY (hex; 0x8000 is ORed in), every port a full member unless --member says otherwise",
				ArgsUsage: "PKEY",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "member", Usage: "a member: `ALL` or a port GUID, with =full (the default) or =limited (e.g. 0x0002c90300000301=limited); repeatable", DefaultText: "ALL=full"},
					jsonFlag(), controlFlag(),
				},
				Action: func(c *cli.Context) error {
					pk, err := partitionArg(c)
					if err != nil {
						return err
					}
					var p control.Partition
					req := control.Request{Verb: control.VerbPartitionAdd, PKey: pk, Members: c.StringSlice("member")}
					if err := client(c).Do(c.Context, req, &p); err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSON(e.stdout, p)
					}
					fmt.Fprintf(e.stdout, "partition %s added: %s\n", control.PKeyString(p.PKey|0x8000), strings.Join(p.Members, " "))
					return nil
				},
			},
			{
				Name:      "del",
				Usage:     "delete partition PKEY: every port's P_Key table loses it, its children go down",
				ArgsUsage: "PKEY",
				Flags:     []cli.Flag{jsonFlag(), controlFlag()},
				Action: func(c *cli.Context) error {
					pk, err := partitionArg(c)
					if err != nil {
						return err
					}
					if err := client(c).Do(c.Context, control.Request{Verb: control.VerbPartitionDel, PKey: pk}, nil); err != nil {
						return err
					}
					k, _ := config.ParsePKey(pk)
					if c.Bool("json") {
						return writeJSON(e.stdout, struct {
							PKey    uint16 `json:"pkey"`
							Deleted bool   `json:"deleted"`
						}{k & 0x7FFF, true})
					}
					fmt.Fprintf(e.stdout, "partition %s deleted\n", control.PKeyString(k|0x8000))
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list the partitions the SM programs, the default one first",
				Flags: []cli.Flag{jsonFlag(), controlFlag()},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef(c, "list takes no arguments (got %q)", c.Args().First())
					}
					var ps []control.Partition
					if err := client(c).Do(c.Context, control.Request{Verb: control.VerbPartitionList}, &ps); err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSON(e.stdout, ps)
					}
					tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
					fmt.Fprintln(tw, "PKEY\tNAME\tIPOIB\tMEMBERS")
					for _, p := range ps {
						fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", control.PKeyString(p.PKey|0x8000), p.Name, p.IPoIB, strings.Join(p.Members, " "))
					}
					return tw.Flush()
				},
			},
		},
	}
}

// partitionArg reads PKEY, checking it before any daemon is asked.
func partitionArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usagef(c, "want PKEY (e.g. 0x8001), got %d arguments", c.NArg())
	}
	pk := c.Args().First()
	if _, err := config.ParsePKey(pk); err != nil {
		return "", err
	}
	return pk, nil
}
