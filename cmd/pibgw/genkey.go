package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/urfave/cli/v2"
)

// genkeyCommand prints a new pre-shared key for a multi-host fabric (fabric.psk_file,
// pibgw switch --psk): 32 random bytes in base64, as wg genkey. The key file's text is
// the key (config.ReadPSK trims white space around it), so it is printed as text.
func genkeyCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "genkey",
		Usage: "print a new pre-shared key for the UDP links of a multi-host fabric",
		Description: "Prints 32 random bytes in base64 on one line: the form fabric.psk_file takes.\n" +
			"Make the key once and give every host and the switch the same file:\n" +
			"  umask 077; pibgw genkey > configs/fabric.psk",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "genkey takes no arguments (got %q)", c.Args().First())
			}
			var k [32]byte
			if _, err := rand.Read(k[:]); err != nil {
				return err
			}
			_, err := fmt.Fprintln(e.stdout, base64.StdEncoding.EncodeToString(k[:]))
			return err
		},
	}
}
