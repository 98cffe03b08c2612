package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/pibgw/pibgw/attach"
	"github.com/pibgw/pibgw/internal/config"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/wire"
)

// Handler answers the control API for d. ControlPath is reported by status.
type Handler struct {
	D           *Daemon
	ControlPath string
	// Attach serves the attach socket (nil when it is off): ps lists its processes.
	Attach *attach.Server
	// AttachPath is the attach socket's path, reported by status.
	AttachPath string
	// LogWriteErrors, if set, counts the log lines that could not be written, reported
	// by status.
	LogWriteErrors func() uint64
}

var _ control.Handler = (*Handler)(nil)

// Handle implements control.Handler.
func (h *Handler) Handle(ctx context.Context, req *control.Request) (any, error) {
	d := h.D
	switch req.Verb {
	case control.VerbStatus:
		st := control.Status{Protocol: control.Protocol, PID: os.Getpid(), Config: d.cfg.Source,
			Started: d.started, Control: h.ControlPath, Attach: h.AttachPath}
		if h.LogWriteErrors != nil {
			st.LogWriteErrors = h.LogWriteErrors()
		}
		if h.Attach != nil {
			a := h.Attach.Stats()
			st.AttachConns = &control.AttachConns{Open: a.Connections, MaxProcesses: a.MaxProcesses, MaxPerUser: a.MaxPerUser,
				Refused: a.Refused, RefusedUser: a.RefusedUser, HelloTimeouts: a.HelloTimeouts, AcceptErrors: a.AcceptErrors}
		}
		if d.Fabric != nil && d.Fabric.SA != nil {
			m := d.Fabric.SA.MulticastStats()
			st.Multicast = &control.MulticastStatus{Groups: m.Groups, SendOnlyGroups: m.SendOnlyGroups,
				MLIDExhausted: m.MLIDExhausted, SendOnlyRefused: m.SendOnlyRefused}
		}
		if d.cfg.IBSim.Enable && d.Fabric != nil && d.Fabric.IBSim != nil { // not if its name was taken
			st.IBSim, st.IBSimUDP = d.cfg.IBSim.Name(d.cfg.Daemon.Control), d.cfg.IBSim.UDP
			st.IBSimCAs = d.Fabric.IBSim.CAs()
		}
		return st, nil
	case control.VerbPS:
		if h.Attach == nil {
			return []attach.SessionInfo{}, nil
		}
		return h.Attach.Sessions(), nil
	case control.VerbInspect:
		return h.inspect(ctx, req)
	case control.VerbInject:
		return nil, h.inject(ctx, req)
	case control.VerbPerf:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		return d.Fabric.PerfCounters(req.Dev, int(req.ID))
	case control.VerbManner:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		m := d.Fabric.Manner()
		if h.Attach != nil {
			ctx, cancel := context.WithTimeout(ctx, askTimeout)
			defer cancel()
			counts, err := h.Attach.PitfallCounts(ctx)
			if err != nil {
				return nil, err
			}
			for i := range m.Checks {
				m.Checks[i].Attached = counts[m.Checks[i].Name]
			}
		}
		return m, nil
	case control.VerbMark:
		h.mark(req.Mark)
		return nil, nil
	case control.VerbLink:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		if req.State == "" {
			return d.Fabric.Links(req.Cable)
		}
		up, err := ParseLinkState(req.State)
		if err != nil {
			return nil, err
		}
		if req.Cable == "" {
			return nil, fmt.Errorf("link: no cable given")
		}
		return d.Fabric.SetLink(req.Cable, up)
	case control.VerbFault:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		if req.Cable == "" || req.Fault == nil {
			return nil, fmt.Errorf("fault: no cable or fault given")
		}
		return d.Fabric.SetFault(req.Cable, *req.Fault)
	case control.VerbShow:
		return d.Show(req.Iface)
	case control.VerbNeigh:
		return d.Neighbors(req.Iface)
	case control.VerbDevinfo:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		return d.Fabric.Devices(), nil
	case control.VerbNodes:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		return d.Fabric.UDPLinks(), nil
	case control.VerbCounters:
		if d.Fabric == nil {
			return nil, errNoFabric
		}
		return d.Fabric.LinkCounters(), nil
	case control.VerbMode:
		if req.Iface == "" {
			return nil, fmt.Errorf("%s: no interface given", req.Verb)
		}
		if err := d.SetMode(req.Iface, req.Mode); err != nil {
			return nil, err
		}
		infos, err := d.Show(req.Iface)
		if err != nil {
			return nil, err
		}
		return infos[0], nil
	case control.VerbPartitionAdd, control.VerbPartitionDel, control.VerbPartitionList:
		return h.partition(ctx, req)
	case control.VerbChildAdd, control.VerbChildDel:
		if req.Iface == "" {
			return nil, fmt.Errorf("%s: no interface given", req.Verb)
		}
		pkey, err := config.ParsePKey(req.PKey)
		if err != nil {
			return nil, err
		}
		if req.Verb == control.VerbChildDel {
			_, err := d.DelChild(req.Iface, pkey)
			return nil, err
		}
		var addrs []netip.Prefix
		for _, s := range req.Addrs {
			a, err := config.ParseAddr(s)
			if err != nil {
				return nil, err
			}
			addrs = append(addrs, a)
		}
		name, err := d.AddChild(req.Iface, pkey, addrs)
		if err != nil {
			return nil, err
		}
		infos, err := d.Show(name)
		if err != nil {
			return nil, err
		}
		return infos[0], nil
	}
	return nil, fmt.Errorf("unknown verb %q", req.Verb)
}

// Capture implements control.Handler: the capture and trace streams.
func (h *Handler) Capture(ctx context.Context, req *control.Request) (func(context.Context, io.Writer) error, error) {
	if req.Verb == control.VerbTrace {
		return h.traceStream(req)
	}
	f := h.D.Fabric
	if f == nil {
		return nil, errNoFabric
	}
	if req.Snaplen < 0 {
		return nil, fmt.Errorf("snaplen %d is negative", req.Snaplen)
	}
	return func(ctx context.Context, w io.Writer) error {
		return f.streamCapture(ctx, w, req.Count, req.Snaplen)
	}, nil
}

// Show describes the interface named name, or all of them.
func (d *Daemon) Show(name string) ([]control.Interface, error) {
	var out []control.Interface
	for _, n := range d.interfaces() {
		if name != "" && n.cfg.Name != name {
			continue
		}
		it := n.describe()
		if note, ok := mtuRefused.Load(n); ok {
			it.MTURefused = note.(string)
		}
		out = append(out, it)
	}
	if name != "" && len(out) == 0 {
		return nil, d.unknownInterface(name)
	}
	if out == nil {
		out = []control.Interface{}
	}
	return out, nil
}

func (n *netif) describe() control.Interface {
	info := n.ipo.Info()
	ic := n.cfg
	ci := control.Interface{
		Name: ic.Name, Parent: ic.Parent, HCA: ic.HCA, Port: ic.Port, NetNS: ic.NetNS,
		Stack: ic.Stack, Mode: modeName(info.Mode), MTU: info.MTU,
		HWAddr: control.HWAddrString(info.HWAddr[:]), Broadcast: control.HWAddrString(info.Broadcast[:]),
		PKey: info.PKey, QPN: info.QPN, QKey: info.QKey,
		Up: info.State.Up, Reason: info.State.Reason, Addrs: []string{}, Counters: info.Counters,
	}
	if info.PKey == 0 {
		ci.PKey = ic.PKey
	}
	if ci.MTU == 0 {
		ci.MTU = n.dev.MTU()
	}
	if ic.Stack != config.StackKernel {
		ci.NetNS = ""
	}
	for _, a := range info.Addrs {
		ci.Addrs = append(ci.Addrs, a.String())
	}
	if ci.Counters == nil {
		ci.Counters = map[string]uint64{}
	}
	return ci
}

func modeName(m ipoib.Mode) string {
	if m == ipoib.Connected {
		return config.ModeConnected
	}
	return config.ModeDatagram
}

// Neighbors lists the neighbour caches of the interface named name, or of all.
func (d *Daemon) Neighbors(name string) ([]control.Neighbor, error) {
	out := []control.Neighbor{}
	found := name == ""
	for _, n := range d.interfaces() {
		if name != "" && n.cfg.Name != name {
			continue
		}
		found = true
		for _, nb := range n.ipo.Neighbors() {
			out = append(out, neighbor(n.cfg.Name, nb))
		}
	}
	if !found {
		return nil, d.unknownInterface(name)
	}
	return out, nil
}

func neighbor(iface string, nb ipoib.Neighbor) control.Neighbor {
	var gid wire.GID
	copy(gid[:], nb.HWAddr[4:])
	return control.Neighbor{
		Iface: iface, IP: nb.IP.String(), HWAddr: control.HWAddrString(nb.HWAddr[:]),
		QPN: binary.BigEndian.Uint32(nb.HWAddr[0:4]) & 0xFFFFFF, GID: gid.String(),
		State: nb.State, AgeMS: nb.Age.Milliseconds(),
		CM: nb.CMState, CMQPN: nb.QPN, CMRemoteQ: nb.RemoteQPN,
	}
}
