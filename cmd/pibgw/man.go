package main

// The command reference as man pages, made from the commands' own definitions (names,
// usage lines, descriptions, flags with their defaults and environment variables), so the
// reference cannot say something the CLI does not do. `pibgw man` prints pibgw(1);
// `pibgw man --dir DIR` writes pibgw.1 and one pibgw-VERB.1 per command, which is how
// scripts/gen-docs.sh makes docs/man/ (checked by TestManPagesCurrent).

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/urfave/cli/v2"
)

func manCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:   "man",
		Hidden: true,
		Usage:  "print pibgw(1), or write every man page into a directory",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Usage: "write pibgw.1 and pibgw-VERB.1 into `DIR` (stale pibgw*.1 there are removed)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			pages := manPages(c.App)
			dir := c.String("dir")
			if dir == "" {
				_, err := e.stdout.Write(pages["pibgw.1"])
				return err
			}
			return writeManPages(dir, pages)
		},
	}
}

// writeManPages replaces the pibgw*.1 files of dir with pages.
func writeManPages(dir string, pages map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "pibgw*.1"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, ok := pages[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, b := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// manPages renders pibgw.1 and a pibgw-VERB.1 for each visible command of app, keyed by
// file name.
func manPages(app *cli.App) map[string][]byte {
	var verbs []*cli.Command
	for _, c := range app.Commands {
		if !c.Hidden && c.Name != "help" {
			verbs = append(verbs, c)
		}
	}
	pages := map[string][]byte{"pibgw.1": md2man.Render([]byte(mainPage(app, verbs)))}
	for _, c := range verbs {
		pages["pibgw-"+c.Name+".1"] = md2man.Render([]byte(verbPage(c)))
	}
	return pages
}

func mainPage(app *cli.App, verbs []*cli.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%% PIBGW 1 \"\" \"pibgw\" \"pibgw manual\"\n\n")
	fmt.Fprintf(&b, "# NAME\n\npibgw - %s\n\n", mdEscape(app.Usage))
	b.WriteString("# SYNOPSIS\n\n**pibgw** [*global options*] *command* [*command options*] [*arguments*...]\n\n")
	b.WriteString("# DESCRIPTION\n\n" +
		"pibgw is a software InfiniBand fabric in one binary, and a gateway from that fabric to IP: " +
		"soft HCAs, switches and a subnet manager speak the InfiniBand wire protocol to each other, " +
		"and IPoIB interfaces over them show up in Linux as ib0-style devices. " +
		"**pibgw up** runs the fabric; the other commands talk to it over its control socket. " +
		"Each command has a page of its own, **pibgw-**_command_(1); **pibgw help** _command_ prints the same usage.\n\n")
	b.WriteString("# GLOBAL OPTIONS\n\n")
	writeFlags(&b, app.VisibleFlags())
	b.WriteString("# COMMANDS\n\n")
	for _, c := range verbs {
		fmt.Fprintf(&b, "**%s**\n:   %s (**pibgw-%s**(1))\n\n", c.Name, mdEscape(c.Usage), c.Name)
	}
	b.WriteString("# EXIT STATUS\n\n0 on success, 1 when the command failed (one line on standard error says why), " +
		"2 for a usage error (a missing or extra argument, an unknown flag or command).\n\n")
	writeSeeAlso(&b, "")
	return b.String()
}

func verbPage(c *cli.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%% PIBGW-%s 1 \"\" \"pibgw\" \"pibgw manual\"\n\n", strings.ToUpper(c.Name))
	fmt.Fprintf(&b, "# NAME\n\npibgw-%s - %s\n\n", c.Name, mdEscape(c.Usage))
	b.WriteString("# SYNOPSIS\n\n")
	if len(c.Subcommands) == 0 {
		writeSynopsis(&b, "pibgw "+c.Name, c)
	} else {
		for _, s := range c.Subcommands {
			if !s.Hidden {
				writeSynopsis(&b, "pibgw "+c.Name+" "+s.Name, s)
			}
		}
	}
	if c.Description != "" {
		fmt.Fprintf(&b, "# DESCRIPTION\n\n%s\n\n", mdText(c.Description))
	}
	if fl := c.VisibleFlags(); len(fl) > 0 && len(c.Subcommands) == 0 {
		b.WriteString("# OPTIONS\n\n")
		writeFlags(&b, fl)
	}
	for _, s := range c.Subcommands {
		if s.Hidden {
			continue
		}
		fmt.Fprintf(&b, "# pibgw %s %s\n\n%s\n\n", c.Name, s.Name, mdEscape(s.Usage))
		if s.Description != "" {
			fmt.Fprintf(&b, "%s\n\n", mdText(s.Description))
		}
		writeFlags(&b, s.VisibleFlags())
	}
	writeSeeAlso(&b, c.Name)
	return b.String()
}

func writeSynopsis(b *strings.Builder, path string, c *cli.Command) {
	fmt.Fprintf(b, "**%s**", path)
	if len(c.VisibleFlags()) > 0 {
		b.WriteString(" [*options*]")
	}
	if c.ArgsUsage != "" {
		fmt.Fprintf(b, " %s", mdEscape(c.ArgsUsage))
	}
	b.WriteString("\n\n")
}

// writeFlags lists flags as the help does (cli.FlagStringer: names, value placeholder,
// usage, default, environment variables), as a definition list.
func writeFlags(b *strings.Builder, flags []cli.Flag) {
	var lines [][2]string
	for _, f := range flags {
		term, desc, _ := strings.Cut(cli.FlagStringer(f), "\t")
		lines = append(lines, [2]string{term, desc})
	}
	sort.Slice(lines, func(i, j int) bool {
		return strings.TrimLeft(lines[i][0], "-") < strings.TrimLeft(lines[j][0], "-")
	})
	for _, l := range lines {
		fmt.Fprintf(b, "**%s**\n:   %s\n\n", mdEscape(l[0]), mdEscape(l[1]))
	}
}

// writeSeeAlso points a command's page to pibgw(1), which lists every command (so that a new
// command changes pibgw.1 and adds its own page, not every page), and to the guides.
func writeSeeAlso(b *strings.Builder, self string) {
	b.WriteString("# SEE ALSO\n\n")
	if self != "" {
		b.WriteString("**pibgw**(1), which lists every command.\n\n")
	}
	b.WriteString("The guides in the docs/ directory of pibgw's source tree: " +
		"configuration.md (the configuration reference), daemon.md, ipoib.md, partitions.md, rdma-cm-go.md, " +
		"c-programs.md, management.md, multi-host.md, debugging.md.\n")
}

// mdText renders a command's Description: its lines are wrapped for the terminal, so a
// single newline joins lines and a blank line separates paragraphs.
func mdText(s string) string {
	return mdEscape(s)
}

// mdEscape keeps text literal in markdown: names such as pib_0 and [manner] must not turn
// into emphasis or links.
func mdEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\\', '*', '_', '[', ']', '<', '>', '`', '#', '|':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
