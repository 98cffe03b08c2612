package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/sa"
)

// Partitions at run time (pibgw partition add, del, list): the built-in SM takes the new
// set, its next heavy sweep reprograms every port's P_Key table, and the IPoIB children
// of a P_Key that appears in (or leaves) their port's table come up (or go down) as
// they do when the SM changes the table for any reason.

// partition answers partition-add, partition-del and partition-list.
func (h *Handler) partition(ctx context.Context, req *control.Request) (any, error) {
	d := h.D
	if d.Fabric == nil {
		return nil, errNoFabric
	}
	sm := d.Fabric.SM
	if sm == nil {
		return nil, fmt.Errorf("the SM runs elsewhere (sm.mode = %q): partitions are its to change (opensm's partitions.conf, or the switch process's configuration)", d.cfg.SM.Mode)
	}
	if req.Verb == control.VerbPartitionList {
		return controlPartitions(sm.Partitions()), nil
	}
	pkey, err := config.ParsePKey(req.PKey)
	if err != nil {
		return nil, err
	}
	pkey &= 0x7FFF
	parts := sm.Partitions()
	i := slices.IndexFunc(parts, func(p sa.Partition) bool { return p.PKey == pkey })
	switch req.Verb {
	case control.VerbPartitionAdd:
		if i >= 0 {
			return nil, fmt.Errorf("partition %#04x exists already (%q): del it first", pkey|0x8000, parts[i].Name)
		}
		p := sa.Partition{Name: fmt.Sprintf("%#04x", pkey|0x8000), PKey: pkey, IPoIB: true}
		members := req.Members
		if len(members) == 0 {
			members = []string{"ALL"}
		}
		for _, s := range members {
			m, err := parseMember(s)
			if err != nil {
				return nil, err
			}
			p.Members = append(p.Members, m)
		}
		parts = append(parts, p)
	case control.VerbPartitionDel:
		if pkey == sa.DefaultPKey {
			return nil, fmt.Errorf("partition 0xffff is the default partition, which every port needs to reach the SA")
		}
		if i < 0 {
			return nil, fmt.Errorf("no partition %#04x", pkey|0x8000)
		}
		parts = slices.Delete(parts, i, i+1)
	default:
		return nil, fmt.Errorf("unknown verb %q", req.Verb)
	}
	done, err := sm.SetPartitions(parts)
	if err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.log.Info("partitions changed", "verb", req.Verb, "pkey", fmt.Sprintf("%#04x", pkey|0x8000), "members", req.Members)
	if req.Verb == control.VerbPartitionDel {
		return nil, nil
	}
	for _, p := range controlPartitions(sm.Partitions()) {
		if p.PKey == pkey {
			return p, nil
		}
	}
	return nil, fmt.Errorf("partition %#04x not programmed by the SM's sweep", pkey|0x8000)
}

// parseMember parses "ALL" or a port GUID, with "=full" (the default) or "=limited".
func parseMember(s string) (sa.Member, error) {
	who, kind, _ := strings.Cut(s, "=")
	m := sa.Member{Full: true}
	switch strings.ToLower(kind) {
	case "", "full":
	case "limited":
		m.Full = false
	default:
		return m, fmt.Errorf("member %q: want ALL or a port GUID, with =full or =limited", s)
	}
	if strings.EqualFold(who, "ALL") {
		m.All = true
		return m, nil
	}
	g, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(who), "0x"), 16, 64)
	if err != nil || g == 0 {
		return m, fmt.Errorf("member %q: want ALL or a port GUID such as 0x0002c90300000301, with =full or =limited", s)
	}
	m.GUID = g
	return m, nil
}

func controlPartitions(ps []sa.Partition) []control.Partition {
	out := make([]control.Partition, 0, len(ps))
	for _, p := range ps {
		cp := control.Partition{Name: p.Name, PKey: p.PKey, IPoIB: p.IPoIB, Members: []string{}}
		for _, m := range p.Members {
			who := "ALL"
			if !m.All {
				who = fmt.Sprintf("%#016x", m.GUID)
			}
			kind := "full"
			if !m.Full {
				kind = "limited"
			}
			cp.Members = append(cp.Members, who+"="+kind)
		}
		out = append(out, cp)
	}
	return out
}
