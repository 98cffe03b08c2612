package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
)

// The debugging verbs (pib's debugfs): inspect, inject, link and fault.

// askTimeout bounds how long the daemon waits for an attached process to answer.
const askTimeout = 5 * time.Second

// inspect lists the verbs objects of the daemon and of attached processes: owner pid
// (the daemon's own pid selects the daemon's objects), kind "" for all.
func (h *Handler) inspect(ctx context.Context, req *control.Request) (any, error) {
	d := h.D
	if d.Fabric == nil {
		return nil, errNoFabric
	}
	kind := req.Kind
	if kind != "" && !slices.Contains(hca.Kinds, kind) {
		return nil, fmt.Errorf("unknown object kind %q (want one of %s)", kind, strings.Join(hca.Kinds, ", "))
	}
	me := os.Getpid()
	out := []hca.ObjectInfo{}
	if req.PID == 0 || req.PID == me {
		for _, dev := range d.Fabric.Devs {
			objs, err := dev.Inspect(kind)
			if err != nil {
				return nil, err
			}
			for i := range objs {
				objs[i].Owner, objs[i].PID = "daemon", me
			}
			out = append(out, objs...)
		}
	}
	if req.PID != me && h.Attach != nil {
		ctx, cancel := context.WithTimeout(ctx, askTimeout)
		defer cancel()
		objs, err := h.Attach.Inspect(ctx, req.PID, kind)
		var partial *attach.PartialError
		if errors.As(err, &partial) {
			// One silent process does not hide the others' objects; the answer says
			// which processes are missing.
			out = append(out, objs...)
			hca.SortObjects(out)
			var missing []string
			for _, e := range partial.Errs {
				missing = append(missing, e.Error())
			}
			return control.Partial{Result: out, Missing: missing}, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	} else if req.PID != 0 && req.PID != me {
		return nil, fmt.Errorf("no attached process %d (see pibgw ps)", req.PID)
	}
	hca.SortObjects(out)
	return out, nil
}

// inject raises pib's injected errors: a QP (by QPN, wherever it lives: the daemon looks
// up which process owns the number) or a CQ or SRQ (by object id, of the daemon or of
// the process req.PID).
func (h *Handler) inject(ctx context.Context, req *control.Request) error {
	d := h.D
	if d.Fabric == nil {
		return errNoFabric
	}
	switch req.Kind {
	case hca.KindQP, hca.KindCQ, hca.KindSRQ:
	default:
		return fmt.Errorf("inject: kind %q: want qp, cq or srq", req.Kind)
	}
	devs := d.Fabric.Devs
	if req.Dev != "" {
		dev := d.Fabric.Device(req.Dev)
		if dev == nil {
			return fmt.Errorf("inject: no HCA %q", req.Dev)
		}
		devs = []*hca.Device{dev}
	}
	me := os.Getpid()
	type target struct {
		dev *hca.Device
		pid int // 0: the daemon's own object
		do  func()
	}
	var found []target
	for _, dev := range devs {
		if req.Kind == hca.KindQP {
			if req.PID == 0 || req.PID == me {
				if qp := dev.LookupLocalQP(req.ID); qp != nil {
					found = append(found, target{dev, 0, qp.InjectFatal})
				}
			}
			if h.Attach != nil {
				if pid := h.Attach.OwnerOfQPN(h.devIndex(dev), req.ID); pid != 0 && (req.PID == 0 || req.PID == pid) {
					found = append(found, target{dev, pid, nil})
				}
			}
			continue
		}
		if req.PID != 0 && req.PID != me {
			found = append(found, target{dev, req.PID, nil})
			continue
		}
		if req.Kind == hca.KindCQ {
			if cq := dev.LookupCQ(req.ID); cq != nil {
				found = append(found, target{dev, 0, cq.InjectError})
			}
		} else if srq := dev.LookupSRQ(req.ID); srq != nil {
			found = append(found, target{dev, 0, srq.InjectError})
		}
	}
	what := fmt.Sprintf("%s %d", strings.ToUpper(req.Kind), req.ID)
	if req.Kind == hca.KindQP {
		what = fmt.Sprintf("QP %#x", req.ID)
	}
	switch {
	case len(found) == 0:
		return fmt.Errorf("inject: no %s (see pibgw inspect)", what)
	case len(found) > 1:
		var where []string
		for _, t := range found {
			where = append(where, t.dev.Name())
		}
		return fmt.Errorf("inject: %s exists on %s: choose one with --dev", what, strings.Join(where, ", "))
	}
	t := found[0]
	if t.pid == 0 {
		t.do()
		d.log.Info("injected error", "object", what, "device", t.dev.Name())
		return nil
	}
	if h.Attach == nil {
		return fmt.Errorf("inject: no attached process %d", t.pid)
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	if err := h.Attach.Inject(ctx, t.pid, h.devIndex(t.dev), req.Kind, req.ID); err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	d.log.Info("injected error", "object", what, "device", t.dev.Name(), "pid", t.pid)
	return nil
}

func (h *Handler) devIndex(dev *hca.Device) int {
	return slices.Index(h.D.Fabric.Devs, dev)
}

// cableFault is the fault injection on one cable: a FaultLink per direction, kept across
// rewraps (capture start/stop) so that their random streams and counters continue.
type cableFault struct {
	cfg   control.Fault
	links [2]*fabric.FaultLink // by fabric.Direction
}

// cableName names a cable after its HCA end, as devinfo shows the port: "pib_0/1".
func cableName(dev string, port uint8) string { return fmt.Sprintf("%s/%d", dev, port) }

// cableRefs lists the cables with their names and switch ports, in the order
// BuildFabric plugged them (HCA by HCA, port by port, switch ports from 1).
func (f *Fabric) cableRefs() (names []string, cables []*fabric.Cable) {
	i := 0
	for _, d := range f.Devs {
		for _, p := range d.Ports() {
			if i < len(f.Cables) {
				names = append(names, cableName(d.Name(), p.Num()))
				cables = append(cables, f.Cables[i])
			}
			i++
		}
	}
	for _, nc := range f.swCables { // fabric.topology's links between switches
		names = append(names, nc.name)
		cables = append(cables, nc.c)
	}
	return names, cables
}

func (f *Fabric) cable(name string) (int, *fabric.Cable, error) {
	names, cables := f.cableRefs()
	if i := slices.Index(names, name); i >= 0 {
		return i, cables[i], nil
	}
	if len(names) == 0 {
		return 0, nil, fmt.Errorf("no cable %q: the fabric has none", name)
	}
	return 0, nil, fmt.Errorf("no cable %q (cables are named after their HCA port: %s)", name, strings.Join(names, ", "))
}

// Links describes the cable named name, or all of them.
func (f *Fabric) Links(name string) ([]control.Cable, error) {
	names, cables := f.cableRefs()
	out := []control.Cable{}
	f.capMu.Lock()
	defer f.capMu.Unlock()
	for i, c := range cables {
		if name != "" && names[i] != name {
			continue
		}
		out = append(out, f.describeLocked(names[i], i, c))
	}
	if name != "" && len(out) == 0 {
		_, _, err := f.cable(name)
		return nil, err
	}
	return out, nil
}

func (f *Fabric) describeLocked(name string, i int, c *fabric.Cable) control.Cable {
	tx, rx := c.Counters(fabric.AtoB), c.Counters(fabric.BtoA)
	sw := 0
	if i < len(f.hcaSwPorts) {
		sw = f.hcaSwPorts[i]
	}
	cc := control.Cable{Name: name, SwitchPort: sw, Up: c.Up(), Counters: map[string]uint64{
		"tx_packets": tx.Packets, "tx_bytes": tx.Bytes, "rx_packets": rx.Packets, "rx_bytes": rx.Bytes,
		"down_drops": tx.DownDrops + rx.DownDrops,
	}}
	if cf := f.faults[c]; cf != nil {
		cfg := cf.cfg
		cc.Fault = &cfg
		for _, l := range cf.links {
			if l == nil {
				continue
			}
			fc := l.Counters()
			cc.Counters["fault_lost"] += fc.Lost
			cc.Counters["fault_duplicated"] += fc.Duplicated
			cc.Counters["fault_reordered"] += fc.Reordered
			cc.Counters["fault_corrupted"] += fc.Corrupted
			cc.Counters["fault_delayed"] += fc.Delayed
		}
	}
	return cc
}

// SetLink plugs the cable named name in (up) or pulls it out; both ports see their
// physical link change, as on a real cable pull (the SM then sees the port go down).
func (f *Fabric) SetLink(name string, up bool) (control.Cable, error) {
	i, c, err := f.cable(name)
	if err != nil {
		return control.Cable{}, err
	}
	c.SetUp(up)
	f.observedChanged()
	f.log.Info("cable", "name", name, "up", up)
	f.capMu.Lock()
	defer f.capMu.Unlock()
	return f.describeLocked(name, i, c), nil
}

// SetFault sets the faults of the cable named name (both directions); a zero fault
// removes them. A new seed starts new random streams; the same seed keeps the streams
// (and counters) running with the new probabilities.
func (f *Fabric) SetFault(name string, ft control.Fault) (control.Cable, error) {
	i, c, err := f.cable(name)
	if err != nil {
		return control.Cable{}, err
	}
	for _, p := range []struct {
		n string
		v float64
	}{{"loss", ft.Loss}, {"duplicate", ft.Duplicate}, {"reorder", ft.Reorder}, {"corrupt", ft.Corrupt}} {
		if p.v < 0 || p.v > 1 || p.v != p.v {
			return control.Cable{}, fmt.Errorf("fault %s: --%s %v is not a probability (0..1)", name, p.n, p.v)
		}
	}
	if ft.Delay < 0 {
		return control.Cable{}, fmt.Errorf("fault %s: --delay %v is negative", name, ft.Delay)
	}
	f.capMu.Lock()
	defer f.capMu.Unlock()
	if f.faults == nil {
		f.faults = make(map[*fabric.Cable]*cableFault)
	}
	cf := f.faults[c]
	switch {
	case ft.Zero():
		delete(f.faults, c)
	case cf != nil && cf.cfg.Seed == ft.Seed:
		cf.cfg = ft
		for _, l := range cf.links {
			if l != nil {
				l.SetConfig(faultConfig(ft, l.Config().Seed))
			}
		}
	default:
		// The FaultLinks are made by the first rewrap below (they wrap the cable's
		// delivery, which only a wrapper is handed).
		f.faults[c] = &cableFault{cfg: ft}
	}
	f.rewrapLocked()
	defer f.observedChanged()
	f.log.Info("cable fault", "name", name, "loss", ft.Loss, "duplicate", ft.Duplicate, "reorder", ft.Reorder,
		"corrupt", ft.Corrupt, "delay", ft.Delay, "seed", ft.Seed)
	return f.describeLocked(name, i, c), nil
}

// wrapper puts the cable's FaultLink for direction dir on the cable's delivery link: the
// innermost wrapper, so that captures record packets as the ports sent them. Made once,
// then the same FaultLink is put back by every rewrap (its inner link, the delivery, is
// always the same).
func (cf *cableFault) wrapper(dir fabric.Direction) func(fabric.Link) fabric.Link {
	return func(l fabric.Link) fabric.Link {
		if cf.links[dir] == nil {
			// Each direction draws from its own stream, both fixed by the seed.
			cf.links[dir] = fabric.NewFaultLink(l, faultConfig(cf.cfg, cf.cfg.Seed*2+uint64(dir)))
		}
		return cf.links[dir]
	}
}

func faultConfig(ft control.Fault, seed uint64) fabric.FaultConfig {
	return fabric.FaultConfig{Seed: seed, Loss: ft.Loss, Duplicate: ft.Duplicate, Reorder: ft.Reorder,
		Corrupt: ft.Corrupt, Delay: ft.Delay}
}

// ParseLinkState reads `pibgw link`'s state argument.
func ParseLinkState(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "up":
		return true, nil
	case "down":
		return false, nil
	}
	return false, fmt.Errorf("link state %q: want up or down", s)
}

// HCAManner converts the [manner] section.
func HCAManner(m config.Manner) hca.Manner {
	mode, _ := hca.ParsePitfallMode(m.Pitfalls) // validated by config: "" is warn
	return hca.Manner{Pitfalls: mode, LowestQPN: m.LowestQPN, RandomErrorFields: m.RandomErrorFields}
}

// MannerInfo is what `pibgw manner` shows: the behaviour choices, the pitfall mode and
// every check with how often it fired on the daemon's HCAs.
type MannerInfo struct {
	Pitfalls          string        `json:"pitfalls"`
	LowestQPN         bool          `json:"lowest_qpn"`
	RandomErrorFields bool          `json:"random_error_fields"`
	Checks            []MannerCheck `json:"checks"`
}

// MannerCheck is one pitfall check.
type MannerCheck struct {
	hca.PitfallInfo
	Count    uint64 `json:"count"`    // on the daemon's HCAs
	Attached uint64 `json:"attached"` // in the attached processes, summed
}

// Manner describes the daemon's manner.
func (f *Fabric) Manner() MannerInfo {
	var m hca.Manner
	if len(f.Devs) > 0 {
		m = f.Devs[0].Manner()
	}
	out := MannerInfo{Pitfalls: m.Pitfalls.String(), LowestQPN: m.LowestQPN, RandomErrorFields: m.RandomErrorFields}
	for _, pi := range hca.Pitfalls() {
		c := MannerCheck{PitfallInfo: pi}
		for _, d := range f.Devs {
			c.Count += d.PitfallCounts()[pi.Name]
		}
		out.Checks = append(out.Checks, c)
	}
	return out
}
