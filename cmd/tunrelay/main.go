// Command tunrelay joins two kernel TUN devices, each in its own network namespace, by
// copying IP packets between them in batches both ways, with no InfiniBand processing:
// the ceiling any TUN-based design (pibgw's IPoIB included) can reach on this machine.
//
//	tunrelay -a pibA:ib0:10.10.0.1/24 -b pibB:ib1:10.10.0.2/24 -mtu 2044
//
// With -udp it is one side of a UDP chain instead — the data path of a multi-host fabric
// (two hosts and a switch process) without InfiniBand, the ceiling of pibgw's UDP links:
// each segment the device reads goes to -peer in datagrams of a UDP link's sizes (4,096
// bytes behind a 42-byte header), and the datagrams arriving on -udp are written to the
// device; -forward runs the middle process, which sends each datagram on as it came:
//
//	tunrelay -forward 127.0.0.1:7000 -between 127.0.0.1:7001,127.0.0.1:7002
//	tunrelay -a pibA:ib0:10.10.0.1/24 -udp 127.0.0.1:7001 -peer 127.0.0.1:7000 -mtu 65520
//	tunrelay -a pibB:ib0:10.10.0.2/24 -udp 127.0.0.1:7002 -peer 127.0.0.1:7000 -mtu 65520
//
// Each side is netns:device:addr/prefix[,addr/prefix...] (IPv6 addresses may contain
// colons: everything after the second colon is the address list). A namespace that does
// not exist is created, and deleted again at exit. The devices get link type infiniband
// unless -infiniband=false. It runs until SIGINT or SIGTERM, then removes the devices
// (and the namespaces it created) and prints what it relayed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/pibgw/pibgw/tun"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr, nil))
}

// side is one end of the relay.
type side struct {
	netns string
	name  string
	addrs []netip.Prefix
}

func parseSide(s string) (side, error) {
	ns, rest, ok1 := strings.Cut(s, ":")
	name, addrs, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || ns == "" || name == "" {
		return side{}, fmt.Errorf("%q: want netns:device:addr/prefix[,addr/prefix...]", s)
	}
	sd := side{netns: ns, name: name}
	for _, a := range strings.Split(addrs, ",") {
		if a == "" {
			continue
		}
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return side{}, fmt.Errorf("%q: address %q: %v", s, a, err)
		}
		sd.addrs = append(sd.addrs, p)
	}
	return sd, nil
}

// run runs the relay until a signal arrives (or stop is closed, for tests) and returns
// the exit status.
func run(args []string, stderr io.Writer, stop <-chan struct{}) int {
	fs := flag.NewFlagSet("tunrelay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := fs.String("a", "", "first side: netns:device:addr/prefix[,addr/prefix...]")
	b := fs.String("b", "", "second side: netns:device:addr/prefix[,addr/prefix...]")
	mtu := fs.Int("mtu", 2044, "MTU of both devices")
	ib := fs.Bool("infiniband", true, "give the devices link type infiniband")
	gso := fs.Bool("gso", false, "relay each segment as the kernel queued it (up to 64 KiB with its offload metadata), read and written in place: no copy in the relay")
	udp := fs.String("udp", "", "UDP chain side: the local IPv4ADDR:PORT; -a's device is relayed to -peer instead of to -b")
	peer := fs.String("peer", "", "UDP chain side: where the device's segments go (the forwarder)")
	fwd := fs.String("forward", "", "UDP chain forwarder: the local IPv4ADDR:PORT; no devices")
	between := fs.String("between", "", "UDP chain forwarder: the two sides, A,B")
	crc := fs.Bool("crc", false, "UDP chain: also do a UDP link's per-byte work — checksum completion, CRC-32 and CRC-16 per datagram, checked by forwarder and receiver")
	verbose := fs.Bool("v", false, "log device events")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	specs := []string{*a, *b} // the devices: two, a UDP chain side's one, a forwarder's none
	if *udp != "" {
		specs = specs[:1]
		if *peer == "" {
			fmt.Fprintln(stderr, "tunrelay: -udp needs -peer")
			return 2
		}
	}
	if *fwd != "" {
		specs = nil
	}
	if *fwd == "" && (slices.Contains(specs, "") || fs.NArg() > 0) {
		fmt.Fprintln(stderr, "tunrelay: need -a and -b (and no other arguments)")
		fs.Usage()
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var sides []side
	for i, s := range specs {
		sd, err := parseSide(s)
		if err != nil {
			fmt.Fprintf(stderr, "tunrelay: -%c %v\n", 'a'+i, err)
			return 2
		}
		sides = append(sides, sd)
	}

	// Catch signals before creating anything, so that none leaves devices behind.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	if *fwd != "" {
		return runForward(*fwd, *between, *crc, log, stderr, sig, stop)
	}

	var created []string
	defer func() {
		for _, ns := range created {
			if err := tun.DeleteNetNS(ns); err != nil {
				log.Error("cleanup", "err", err)
			}
		}
	}()
	devs := make([]*tun.Kernel, len(sides))
	defer func() {
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}()
	for i, sd := range sides {
		if !tun.NetNSExists(sd.netns) {
			if err := tun.CreateNetNS(sd.netns); err != nil {
				fmt.Fprintf(stderr, "tunrelay: %v\n", err)
				return 1
			}
			created = append(created, sd.netns)
		}
		d, err := tun.CreateKernel(tun.KernelConfig{
			Name: sd.name, MTU: *mtu, NetNS: sd.netns, Infiniband: *ib, Addrs: sd.addrs, Up: true, Logger: log,
		})
		if err != nil {
			fmt.Fprintf(stderr, "tunrelay: %v\n", err)
			return 1
		}
		devs[i] = d
	}
	if *udp != "" {
		return runSide(devs[0], *udp, *peer, *crc, log, stderr, sig, stop)
	}
	log.Info("relaying", "a", fmt.Sprintf("%s/%s", sides[0].netns, sides[0].name),
		"b", fmt.Sprintf("%s/%s", sides[1].netns, sides[1].name), "mtu", *mtu, "batch", devs[0].BatchSize())

	var wg sync.WaitGroup
	var stats [2]tun.CopyStats
	var errs [2]error
	ended := make(chan struct{}, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if *gso {
				stats[i], errs[i] = tun.CopyGSO(devs[1-i], devs[i])
			} else {
				stats[i], errs[i] = tun.Copy(devs[1-i], devs[i])
			}
			ended <- struct{}{}
		}()
	}
	wait(log, sig, stop, ended, "a device went away")
	for _, d := range devs {
		d.Close()
	}
	wg.Wait()
	status := 0
	for i, dir := range []string{"a→b", "b→a"} {
		st := stats[i]
		fmt.Fprintf(stderr, "tunrelay: %s: %d packets, %d bytes in %d batches, %d read errors, %d write errors\n",
			dir, st.Packets, st.Bytes, st.Batches, st.ReadErrors, st.WriteErrors)
		if errs[i] != nil && !errors.Is(errs[i], tun.ErrClosed) {
			fmt.Fprintf(stderr, "tunrelay: %s: %v\n", dir, errs[i])
			status = 1
		}
	}
	return status
}

// wait returns at a signal, at stop, or when a relaying goroutine ended (logged as gone).
func wait(log *slog.Logger, sig <-chan os.Signal, stop <-chan struct{}, ended <-chan struct{}, gone string) {
	select {
	case s := <-sig:
		log.Info("stopping", "signal", s)
	case <-stop:
	case <-ended:
		log.Error(gone)
	}
}
