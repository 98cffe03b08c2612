package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// The kernel's numbers for /dev/infiniband/uverbsN (drivers/infiniband/core/uverbs_main.c:
// IB_UVERBS_MAJOR 231, IB_UVERBS_BASE_MINOR 192).
const (
	uverbsMajor     = 231
	uverbsMinorBase = 192
)

// kernelVerbsDir is where the kernel lists its uverbs devices when it has any.
const kernelVerbsDir = "/sys/class/infiniband_verbs"

func devnodesCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "devnodes",
		Usage: "create /dev/infiniband/uverbsN for programs that look for them (UCX)",
		Description: "pibgw's libibverbs names its devices' nodes uverbs0, uverbs1, … as the kernel does,\n" +
			"but without an InfiniBand kernel stack /dev/infiniband/uverbsN does not exist, and some\n" +
			"programs check that it does before they use a device: UCX lists no IB device otherwise.\n" +
			"devnodes creates the nodes (character devices 231:192+N, mode 0666) for the daemon's HCAs\n" +
			"(or --count of them); nothing opens them (pibgw's library reaches the daemon through the\n" +
			"attach socket; opening one fails with ENXIO, as with no driver loaded). --remove takes\n" +
			"them away again. It refuses to run where the kernel has uverbs devices of its own\n" +
			"(" + kernelVerbsDir + "). Needs root.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Usage: "create `N` nodes", DefaultText: "one per HCA of the running daemon"},
			&cli.BoolFlag{Name: "remove", Usage: "remove the nodes instead (every uverbsN there that is one)"},
			&cli.StringFlag{Name: "dir", Value: "/dev/infiniband", Usage: "the `DIR` to create them in", Hidden: true},
			controlFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef(c, "unexpected argument %q", c.Args().First())
			}
			dir := c.String("dir")
			if _, err := os.Stat(kernelVerbsDir); err == nil && !c.IsSet("dir") {
				return fmt.Errorf("devnodes: the kernel has uverbs devices of its own (%s); pibgw's nodes would stand in their place", kernelVerbsDir)
			}
			if c.Bool("remove") {
				return removeDevNodes(e, dir)
			}
			n := c.Int("count")
			if !c.IsSet("count") {
				devs, err := e.devices(c, true)
				if err != nil {
					return err
				}
				n = len(devs)
			}
			if n < 1 || n > 64 {
				return usagef(c, "--count %d: want 1 to 64", n)
			}
			return makeDevNodes(e, dir, n)
		},
	}
}

// makeDevNodes creates dir/uverbs0 … uverbs<n-1>, keeping those that already are the node.
func makeDevNodes(e *env, dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("devnodes: %w", err)
	}
	for i := range n {
		path := filepath.Join(dir, fmt.Sprintf("uverbs%d", i))
		dev := unix.Mkdev(uverbsMajor, uint32(uverbsMinorBase+i))
		var st unix.Stat_t
		switch err := unix.Lstat(path, &st); {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == dev:
			fmt.Fprintf(e.stdout, "%s: already there\n", path)
			continue
		case err == nil:
			return fmt.Errorf("devnodes: %s exists and is not character device %d:%d", path, uverbsMajor, uverbsMinorBase+i)
		case !errors.Is(err, unix.ENOENT):
			return fmt.Errorf("devnodes: %s: %w", path, err)
		}
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(dev)); err != nil {
			return fmt.Errorf("devnodes: mknod %s: %w", path, err)
		}
		if err := os.Chmod(path, 0o666); err != nil { // past the umask
			return fmt.Errorf("devnodes: %w", err)
		}
		fmt.Fprintf(e.stdout, "%s: created (c %d:%d)\n", path, uverbsMajor, uverbsMinorBase+i)
	}
	return nil
}

// removeDevNodes removes every dir/uverbsN that is a uverbs character device, and dir
// when that leaves it empty.
func removeDevNodes(e *env, dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("devnodes: %w", err)
	}
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "uverbs") {
			continue
		}
		path := filepath.Join(dir, ent.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != uverbsMajor {
			continue
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("devnodes: %w", err)
		}
		fmt.Fprintf(e.stdout, "%s: removed\n", path)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) == 0 {
		os.Remove(dir)
	}
	return nil
}
