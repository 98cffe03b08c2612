package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/pibgw/pibgw/fabric/topology"
)

// The file's shape. Leaves are decoded as `any` so that this package, not the TOML
// library, reports a value of the wrong type — with the field's full name.
type file struct {
	Daemon struct {
		Control    any `toml:"control"`
		LogLevel   any `toml:"log_level"`
		Capture    any `toml:"capture"`
		MaxProcs   any `toml:"max_procs"`
		State      any `toml:"state"`
		Attach     any `toml:"attach"`
		AttachMode any `toml:"attach_mode"`
		// The attach socket's limits (attach.Limits).
		AttachMaxProcesses any `toml:"attach_max_processes"`
		AttachMaxPerUser   any `toml:"attach_max_per_user"`
		AttachHelloTimeout any `toml:"attach_hello_timeout"`
		AttachMaxQPs       any `toml:"attach_max_qps"`
		Metrics            any `toml:"metrics"`

		MaxChildren any `toml:"max_children"`
	} `toml:"daemon"`
	Fabric struct {
		HCACount     any          `toml:"hca_count"`
		NodeGUIDBase any          `toml:"node_guid_base"`
		SwitchPorts  any          `toml:"switch_ports"`
		HCAs         []fileHCA    `toml:"hcas"`
		Uplinks      []fileUplink `toml:"uplinks"`
		Switch       any          `toml:"switch"`
		Listen       any          `toml:"listen"`
		Topology     any          `toml:"topology"`
		PSKFile      any          `toml:"psk_file"`
		Allow        any          `toml:"allow"`
		Keepalive    any          `toml:"keepalive"`
		LinkTimeout  any          `toml:"link_timeout"`
		NodeDesc     any          `toml:"node_desc"`
	} `toml:"fabric"`
	SM struct {
		Mode          any             `toml:"mode"`
		HCA           any             `toml:"hca"`
		Port          any             `toml:"port"`
		Priority      any             `toml:"priority"`
		SweepInterval any             `toml:"sweep_interval"`
		PacketLife    any             `toml:"packet_life_time"`
		Partitions    []filePartition `toml:"partitions"`
	} `toml:"sm"`
	IBSim struct {
		Enable     any `toml:"enable"`
		SocketName any `toml:"socket_name"`
		UDP        any `toml:"udp"`
		MaxClients any `toml:"max_clients"`
	} `toml:"ibsim"`
	Manner struct {
		Pitfalls          any `toml:"pitfalls"`
		LowestQPN         any `toml:"lowest_qpn"`
		RandomErrorFields any `toml:"random_error_fields"`
	} `toml:"manner"`
	Interfaces []fileInterface `toml:"interfaces"`
}

type fileUplink struct {
	Port   any `toml:"port"`
	Switch any `toml:"switch"`
}

type fileHCA struct {
	Ports    any `toml:"ports"`
	NodeGUID any `toml:"node_guid"`
}

type filePartition struct {
	Name    any `toml:"name"`
	PKey    any `toml:"pkey"`
	Members any `toml:"members"`
	Limited any `toml:"limited"`
	IPoIB   any `toml:"ipoib"`
	MTU     any `toml:"mtu"`
	QKey    any `toml:"qkey"`
}

type fileInterface struct {
	Name      any `toml:"name"`
	Parent    any `toml:"parent"`
	HCA       any `toml:"hca"`
	Port      any `toml:"port"`
	PKey      any `toml:"pkey"`
	NetNS     any `toml:"netns"`
	Addresses any `toml:"addresses"`
	Mode      any `toml:"mode"`
	Stack     any `toml:"stack"`
	MTU       any `toml:"mtu"`
	MaxNeigh  any `toml:"max_neighbors"`
	MaxGroups any `toml:"max_groups"`
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *PathError names the file
	}
	return Parse(path, data)
}

// Parse validates data, the contents of the file named name ("" for no file: the
// defaults).
func Parse(name string, data []byte) (*Config, error) {
	p := &parser{src: name}
	// First the tables' shape, so that a value where a table belongs is reported by its
	// field and not as the TOML library's mismatch with this package's Go types.
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err == nil {
		if p.shape(raw); p.err != nil {
			return nil, p.err
		}
	}
	var f file
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, p.lineErr(pe.Position.Line, pe.Message)
		}
		return nil, p.wrap(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, p.errf(und[0].String(), "unknown option (docs/configuration.md lists the options)")
	}
	c := &Config{Source: name}
	p.daemon(c, &f)
	p.fabric(c, &f)
	p.sm(c, &f)
	p.ibsim(c, &f)
	p.manner(c, &f)
	p.interfaces(c, &f, md.IsDefined("interfaces"))
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// parser keeps the first error; later checks run but report nothing.
type parser struct {
	src string
	err error
}

// FieldError is a validation error: the file, the field and why.
type FieldError struct {
	File   string
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.File == "" {
		return e.Field + ": " + e.Reason
	}
	return e.File + ": " + e.Field + ": " + e.Reason
}

func (p *parser) errf(field, format string, args ...any) error {
	err := &FieldError{File: p.src, Field: field, Reason: fmt.Sprintf(format, args...)}
	if p.err == nil {
		p.err = err
	}
	return err
}

func (p *parser) lineErr(line int, msg string) error {
	src := p.src
	if src == "" {
		src = "config"
	}
	return fmt.Errorf("%s:%d: %s", src, line, msg)
}

func (p *parser) wrap(err error) error {
	if p.src == "" {
		return err
	}
	return fmt.Errorf("%s: %w", p.src, err)
}

// The tables of the file, and its arrays of tables.
var (
	shapeTables = []string{"daemon", "fabric", "sm", "ibsim", "manner"}
	shapeArrays = [][2]string{{"", "interfaces"}, {"fabric", "hcas"}, {"fabric", "uplinks"}, {"sm", "partitions"}}
)

// shape checks that each table of the file is a table and each array of tables an
// array of tables.
func (p *parser) shape(raw map[string]any) {
	for _, name := range shapeTables {
		if v, ok := raw[name]; ok {
			if _, ok := v.(map[string]any); !ok {
				p.errf(name, "want a table ([%s]), got %s", name, typeName(v))
			}
		}
	}
	for _, a := range shapeArrays {
		t := raw
		field := a[1]
		if a[0] != "" {
			t, _ = raw[a[0]].(map[string]any)
			field = a[0] + "." + a[1]
		}
		v, ok := t[a[1]]
		if !ok {
			continue
		}
		switch x := v.(type) {
		case []map[string]any:
		case []any:
			for i, e := range x {
				if _, ok := e.(map[string]any); !ok {
					p.errf(fmt.Sprintf("%s[%d]", field, i), "want a table ([[%s]]), got %s", field, typeName(e))
				}
			}
		default:
			p.errf(field, "want an array of tables ([[%s]]), got %s", field, typeName(v))
		}
	}
}

// typeName names the kind of a TOML value in words.
func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date-time"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a value of another kind"
}

// str returns v as a string, def when unset.
func (p *parser) str(field string, v any, def string) string {
	switch x := v.(type) {
	case nil:
		return def
	case string:
		return x
	}
	p.errf(field, "want a string, got %s", typeName(v))
	return def
}

// intIn returns v as an integer in lo..hi, def when unset.
func (p *parser) intIn(field string, v any, def, lo, hi int64) int64 {
	switch x := v.(type) {
	case nil:
		return def
	case int64:
		if x < lo || x > hi {
			p.errf(field, "%d out of range %d..%d", x, lo, hi)
			return def
		}
		return x
	}
	p.errf(field, "want an integer, got %s", typeName(v))
	return def
}

func (p *parser) boolean(field string, v any, def bool) bool {
	switch x := v.(type) {
	case nil:
		return def
	case bool:
		return x
	}
	p.errf(field, "want true or false, got %s", typeName(v))
	return def
}

// u64 returns v as a 64-bit number: a TOML integer or a string ("0x0002c90300000000",
// needed for GUIDs with the top bit set).
func (p *parser) u64(field string, v any, def uint64) uint64 {
	switch x := v.(type) {
	case nil:
		return def
	case int64:
		if x < 0 {
			p.errf(field, "%d is negative: want a GUID such as \"0x0002c90300000000\"", x)
			return def
		}
		return uint64(x)
	case string:
		n, err := parseGUID(x)
		if err != nil {
			p.errf(field, "%q: %v", x, err)
			return def
		}
		return n
	}
	p.errf(field, "want an integer or a hex string, got %s", typeName(v))
	return def
}

func parseGUID(s string) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	t = strings.ReplaceAll(t, ":", "") // 0002:c903:0000:0301, as devinfo prints
	if t == "" {
		return 0, errors.New("not a GUID")
	}
	n, err := strconv.ParseUint(t, 16, 64)
	if err != nil {
		return 0, errors.New("not a 64-bit hexadecimal GUID")
	}
	return n, nil
}

func (p *parser) strings(field string, v any) []string {
	if v == nil {
		return nil
	}
	arr, ok := v.([]any)
	if !ok {
		if s, ok := v.(string); ok { // one value for a list of one
			return []string{s}
		}
		p.errf(field, "want an array of strings, got %s", typeName(v))
		return nil
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			p.errf(fmt.Sprintf("%s[%d]", field, i), "want a string, got %s", typeName(e))
			continue
		}
		out = append(out, s)
	}
	return out
}

func (p *parser) daemon(c *Config, f *file) {
	d := &f.Daemon
	c.Daemon.Control = p.str("daemon.control", d.Control, DefaultControl)
	if c.Daemon.Control == "" {
		p.errf("daemon.control", "empty path: want the path of the control socket, e.g. %q", DefaultControl)
	} else if len(c.Daemon.Control) > 107 { // sockaddr_un.sun_path
		p.errf("daemon.control", "%q is longer than a unix socket path may be (107 bytes)", c.Daemon.Control)
	}
	lvl := p.str("daemon.log_level", d.LogLevel, "info")
	if err := c.Daemon.LogLevel.UnmarshalText([]byte(lvl)); err != nil {
		p.errf("daemon.log_level", "%q: want debug, info, warn or error", lvl)
	}
	c.Daemon.Capture = p.str("daemon.capture", d.Capture, "")
	c.Daemon.Metrics = p.str("daemon.metrics", d.Metrics, "")
	if m := c.Daemon.Metrics; m != "" {
		if _, port, err := net.SplitHostPort(m); err != nil || port == "" {
			p.errf("daemon.metrics", "%q: want host:port, e.g. \"127.0.0.1:9464\"", m)
		}
	}
	c.Daemon.MaxProcs = int(p.intIn("daemon.max_procs", d.MaxProcs, 0, 0, 4096))
	c.Daemon.MaxChildren = int(p.intIn("daemon.max_children", d.MaxChildren, DefaultMaxChildren, 0, MaxChildrenLimit))
	c.Daemon.State = p.str("daemon.state", d.State, "")
	c.Daemon.Attach = p.str("daemon.attach", d.Attach, "")
	if len(c.Daemon.Attach) > 107 {
		p.errf("daemon.attach", "%q is longer than a unix socket path may be (107 bytes)", c.Daemon.Attach)
	}
	mode := p.str("daemon.attach_mode", d.AttachMode, "0666")
	if m, err := strconv.ParseUint(mode, 8, 32); err != nil || m > 0o777 {
		p.errf("daemon.attach_mode", "%q: want permission bits in octal, e.g. \"0666\" or \"0660\"", mode)
		c.Daemon.AttachMode = 0o666
	} else {
		c.Daemon.AttachMode = os.FileMode(m)
	}
	// The defaults are attach.Limits'; the maxima what a session ID (4095 processes)
	// and a device (max_qp 131072) allow.
	c.Daemon.AttachMaxProcesses = int(p.intIn("daemon.attach_max_processes", d.AttachMaxProcesses, 1024, 1, 4095))
	c.Daemon.AttachMaxPerUser = int(p.intIn("daemon.attach_max_per_user", d.AttachMaxPerUser, 256, 1, 4095))
	if c.Daemon.AttachMaxPerUser > c.Daemon.AttachMaxProcesses {
		if d.AttachMaxPerUser == nil { // only the total set, below the default per user
			c.Daemon.AttachMaxPerUser = c.Daemon.AttachMaxProcesses
		} else {
			p.errf("daemon.attach_max_per_user", "%d is more than daemon.attach_max_processes (%d): want at most that",
				c.Daemon.AttachMaxPerUser, c.Daemon.AttachMaxProcesses)
		}
	}
	c.Daemon.AttachHelloTimeout = p.duration("daemon.attach_hello_timeout", d.AttachHelloTimeout, 5*time.Second, 100*time.Millisecond, time.Minute)
	c.Daemon.AttachMaxQPs = int(p.intIn("daemon.attach_max_qps", d.AttachMaxQPs, 16384, 1, 131072))
}

func (p *parser) fabric(c *Config, f *file) {
	fb := &f.Fabric
	c.Fabric.NodeGUIDBase = p.u64("fabric.node_guid_base", fb.NodeGUIDBase, DefaultNodeGUIDBase)
	if b := c.Fabric.NodeGUIDBase; b == 0 || b&0xFFFF != 0 {
		p.errf("fabric.node_guid_base", "%#016x: must be non-zero with the low 16 bits zero (they number HCAs and ports)", b)
	}
	n := int(p.intIn("fabric.hca_count", fb.HCACount, DefaultHCACount, 1, MaxHCAs))
	if fb.HCAs != nil {
		if fb.HCACount != nil && n != len(fb.HCAs) {
			p.errf("fabric.hca_count", "%d, but %d [[fabric.hcas]] are listed (give one or the other)", n, len(fb.HCAs))
		}
		n = len(fb.HCAs)
		if n == 0 || n > MaxHCAs {
			p.errf("fabric.hcas", "%d HCAs out of range 1..%d", n, MaxHCAs)
		}
	}
	guids := map[uint64]string{}
	total := 0
	for i := 0; i < n; i++ {
		h := HCA{Name: HCAName(i), Ports: 1, NodeGUID: NodeGUID(c.Fabric.NodeGUIDBase, i)}
		if i < len(fb.HCAs) {
			field := fmt.Sprintf("fabric.hcas[%d]", i)
			h.Ports = int(p.intIn(field+".ports", fb.HCAs[i].Ports, 1, 1, MaxHCAPorts))
			h.NodeGUID = p.u64(field+".node_guid", fb.HCAs[i].NodeGUID, h.NodeGUID)
			if h.NodeGUID == 0 || h.NodeGUID&0xFF != 0 {
				p.errf(field+".node_guid", "%#016x: must be non-zero with the low byte zero (it numbers ports)", h.NodeGUID)
			}
			if prev, dup := guids[h.NodeGUID]; dup {
				p.errf(field+".node_guid", "%#016x already used by %s: want a node GUID of its own", h.NodeGUID, prev)
			}
		}
		guids[h.NodeGUID] = h.Name
		total += h.Ports
		c.Fabric.HCAs = append(c.Fabric.HCAs, h)
	}
	c.Fabric.NodeDesc = p.str("fabric.node_desc", fb.NodeDesc, "")
	if err := CheckNodeDesc(c.Fabric.NodeDesc); err != nil {
		p.errf("fabric.node_desc", "%q: %v", c.Fabric.NodeDesc, err)
	}
	def := int64(max(DefaultSwitchPorts, total))
	c.Fabric.SwitchPorts = int(p.intIn("fabric.switch_ports", fb.SwitchPorts, def, 1, MaxSwitchPorts))
	if c.Fabric.SwitchPorts < total {
		p.errf("fabric.switch_ports", "%d ports cannot take the %d HCA ports configured", c.Fabric.SwitchPorts, total)
	}
	p.remote(c, f)
}

// remote reads the options of a fabric whose switch is another process (pibgw switch).
func (p *parser) remote(c *Config, f *file) {
	fb := &f.Fabric
	c.Fabric.Switch = p.str("fabric.switch", fb.Switch, "")
	c.Fabric.Listen = p.str("fabric.listen", fb.Listen, "")
	if path := p.str("fabric.topology", fb.Topology, ""); path != "" {
		if c.Fabric.Switch != "" {
			p.errf("fabric.topology", "a fabric with fabric.switch has no switches of its own")
		}
		if fb.SwitchPorts != nil {
			p.errf("fabric.switch_ports", "not used with fabric.topology (the file gives each switch its ports)")
		}
		c.Fabric.TopologyFile = path
		if !filepath.IsAbs(path) && p.src != "" {
			path = filepath.Join(filepath.Dir(p.src), path)
		}
		t, err := LoadTopology(path)
		if err != nil {
			p.errf("fabric.topology", "%v", err)
		} else {
			c.Fabric.Topology = t
			n := 0
			for _, h := range c.Fabric.HCAs {
				n += h.Ports
			}
			if slots := len(TopologyHCAPorts(t)); slots < n {
				p.errf("fabric.topology", "%s has %d HCA ports for the %d of this configuration's HCAs", path, slots, n)
			}
		}
	}
	if l := c.Fabric.Listen; l != "" {
		if c.Fabric.Switch != "" {
			p.errf("fabric.listen", "a fabric with fabric.switch has no switch of its own to serve")
		}
		if _, port, err := net.SplitHostPort(l); err != nil || port == "" {
			p.errf("fabric.listen", "%q: want [HOST]:PORT, e.g. \":%d\"", l, DefaultSwitchUDPPort)
		}
	}
	if sw := c.Fabric.Switch; sw != "" {
		host, port, err := net.SplitHostPort(sw)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
			p.errf("fabric.switch", "%q: want HOST:PORT, e.g. \"10.0.0.1:%d\"", sw, DefaultSwitchUDPPort)
		}
		if fb.SwitchPorts != nil {
			p.errf("fabric.switch_ports", "not used with fabric.switch (the switch process has the ports)")
		}
	}
	if path := p.str("fabric.psk_file", fb.PSKFile, ""); path != "" {
		c.Fabric.PSKFile = path
		if !filepath.IsAbs(path) && p.src != "" {
			path = filepath.Join(filepath.Dir(p.src), path)
		}
		k, err := ReadPSK(path)
		if err != nil {
			p.errf("fabric.psk_file", "%v", err)
		}
		c.Fabric.PSK = k
	}
	for i, s := range p.strings("fabric.allow", fb.Allow) {
		pf, err := ParsePrefixOrAddr(s)
		if err != nil {
			p.errf(fmt.Sprintf("fabric.allow[%d]", i), "%q: want an address or a prefix such as \"10.0.0.0/24\"", s)
			continue
		}
		c.Fabric.Allow = append(c.Fabric.Allow, pf)
	}
	used := map[int]bool{}
	for i, u := range fb.Uplinks {
		field := fmt.Sprintf("fabric.uplinks[%d]", i)
		if c.Fabric.Switch != "" || c.Fabric.Topology != nil {
			p.errf(field, "uplinks join this process's one switch to another switch process (not with fabric.switch or fabric.topology)")
			break
		}
		port := int(p.intIn(field+".port", u.Port, 0, 1, MaxSwitchPorts))
		if port == 0 {
			p.errf(field+".port", "missing: the switch port to plug into the other switch")
		} else if port > c.Fabric.SwitchPorts {
			p.errf(field+".port", "%d out of range 1..%d (switch_ports)", port, c.Fabric.SwitchPorts)
		} else if used[port] {
			p.errf(field+".port", "port %d has two uplinks: want one uplink a port", port)
		}
		used[port] = true
		sw := p.str(field+".switch", u.Switch, "")
		if _, pt, err := net.SplitHostPort(sw); err != nil || pt == "" {
			p.errf(field+".switch", "%q: want HOST:PORT of the other switch process", sw)
		}
		c.Fabric.Uplinks = append(c.Fabric.Uplinks, Uplink{Port: port, Switch: sw})
	}
	c.Fabric.Keepalive = p.duration("fabric.keepalive", fb.Keepalive, DefaultKeepalive, MinKeepalive, MaxKeepalive)
	c.Fabric.LinkTimeout = p.duration("fabric.link_timeout", fb.LinkTimeout, DefaultLinkTimeout, MinLinkTimeout, MaxLinkTimeout)
	if c.Fabric.LinkTimeout < 2*c.Fabric.Keepalive {
		p.errf("fabric.link_timeout", "%v is shorter than two keepalives (%v): want at least that", c.Fabric.LinkTimeout, 2*c.Fabric.Keepalive)
	}
}

// Bounds of the durations.
const (
	// A UDP link sends a keepalive to each peer every fabric.keepalive: more often than
	// every 10 ms is a load of its own; less often than every minute and a dead peer
	// keeps its ports Active for minutes.
	MinKeepalive = 10 * time.Millisecond
	MaxKeepalive = time.Minute
	// fabric.link_timeout: at least two keepalives (checked apart) and at most 10 min.
	MinLinkTimeout = 2 * MinKeepalive
	MaxLinkTimeout = 10 * time.Minute
	// sm.sweep_interval: each light sweep queries every port of the fabric (opensm's
	// sweep_interval counts whole seconds); below a second the SM would keep a core busy.
	MinSweep = time.Second
	MaxSweep = 24 * time.Hour
)

// duration returns v as a duration ("250ms") in lo..hi, def when unset.
func (p *parser) duration(field string, v any, def, lo, hi time.Duration) time.Duration {
	if v == nil {
		return def
	}
	s := p.str(field, v, "")
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		p.errf(field, "%q: want a duration from %v to %v, such as \"%v\"", s, lo, hi, def)
		return def
	}
	return d
}

// ParsePrefixOrAddr parses "10.0.0.0/24" or a single address ("10.0.0.1": a /32).
func ParsePrefixOrAddr(s string) (netip.Prefix, error) {
	if pf, err := netip.ParsePrefix(s); err == nil {
		return pf.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// PSKMinLen is the shortest pre-shared key accepted.
const PSKMinLen = 16

// ReadPSK reads a pre-shared key file: its contents with surrounding white space
// trimmed, at least PSKMinLen bytes.
func ReadPSK(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k := []byte(strings.TrimSpace(string(b)))
	if len(k) < PSKMinLen {
		return nil, fmt.Errorf("%s: the pre-shared key is %d bytes, need at least %d", path, len(k), PSKMinLen)
	}
	return k, nil
}

func (p *parser) sm(c *Config, f *file) {
	s := &f.SM
	def := SMInternal
	if c.Fabric.Switch != "" {
		def = SMExternal // the switch process runs the SM
	}
	c.SM.Mode = p.str("sm.mode", s.Mode, def)
	if c.SM.Mode != SMInternal && c.SM.Mode != SMExternal {
		p.errf("sm.mode", "%q: want %q (the built-in SM and SA run here) or %q (the SM runs elsewhere: opensm through the ibsim server, or a multi-host fabric's switch process)",
			c.SM.Mode, SMInternal, SMExternal)
	}
	c.SM.HCA = p.str("sm.hca", s.HCA, HCAName(0))
	h, ok := c.HCA(c.SM.HCA)
	if !ok {
		p.errf("sm.hca", "%q: no such HCA (have %s)", c.SM.HCA, hcaNames(c))
	}
	c.SM.Port = int(p.intIn("sm.port", s.Port, 1, 1, MaxHCAPorts))
	if ok && c.SM.Port > h.Ports {
		p.errf("sm.port", "%d out of range 1..%d (%s has %d)", c.SM.Port, h.Ports, h.Name, h.Ports)
	}
	c.SM.Priority = uint8(p.intIn("sm.priority", s.Priority, 0, 0, 15))
	c.SM.SweepInterval = DefaultSweep
	if s.SweepInterval != nil {
		v := p.str("sm.sweep_interval", s.SweepInterval, "off")
		if v == "off" {
			c.SM.SweepInterval = 0
		} else if d, err := time.ParseDuration(v); err != nil || d < MinSweep || d > MaxSweep {
			p.errf("sm.sweep_interval", "%q: want a duration from %v to %v, such as \"10s\", or \"off\"", v, MinSweep, MaxSweep)
		} else {
			c.SM.SweepInterval = d
		}
	}
	// opensm's packet_life_time: the SA's PathRecord PacketLifeTime (IBA 15.2.5.16), from
	// which rdma_cm and IPoIB-CM set the RC Local ACK Timeout (PacketLifeTime + 1).
	c.SM.PacketLifeTime = uint8(p.intIn("sm.packet_life_time", s.PacketLife, DefaultPacketLifeTime, 1, 19))
	names := map[string]bool{}
	keys := map[uint16]string{}
	for i, fp := range s.Partitions {
		field := fmt.Sprintf("sm.partitions[%d]", i)
		part := Partition{
			Name:  p.str(field+".name", fp.Name, ""),
			IPoIB: p.boolean(field+".ipoib", fp.IPoIB, true),
			MTU:   int(p.intIn(field+".mtu", fp.MTU, DefaultPartitionMTU, 256, 4096)),
			QKey:  uint32(p.intIn(field+".qkey", fp.QKey, 0x0B1B, 1, math.MaxUint32)),
		}
		if part.Name == "" {
			p.errf(field+".name", "missing: want the partition's name, e.g. \"storage\"")
		} else if names[part.Name] {
			p.errf(field+".name", "%q used twice: want a name of its own", part.Name)
		}
		names[part.Name] = true
		if fp.PKey == nil {
			p.errf(field+".pkey", "missing: want the partition's P_Key, e.g. 0x8001")
		} else {
			part.PKey = p.pkey(field+".pkey", fp.PKey)
			if prev, dup := keys[part.PKey&0x7FFF]; dup && part.PKey != 0 {
				p.errf(field+".pkey", "%#04x already used by partition %q: want a partition number (the low 15 bits) of its own", part.PKey, prev)
			}
			keys[part.PKey&0x7FFF] = part.Name
		}
		switch part.MTU {
		case 256, 512, 1024, 2048, 4096:
		default:
			p.errf(field+".mtu", "%d: want 256, 512, 1024, 2048 or 4096", part.MTU)
		}
		for _, kind := range []struct {
			key  string
			v    any
			full bool
		}{{"members", fp.Members, true}, {"limited", fp.Limited, false}} {
			for j, spec := range p.strings(field+"."+kind.key, kind.v) {
				m, err := parseMember(c, spec)
				if err != nil {
					p.errf(fmt.Sprintf("%s.%s[%d]", field, kind.key, j), "%q: %v", spec, err)
					continue
				}
				m.Full = kind.full
				part.Members = append(part.Members, m)
			}
		}
		if len(part.Members) == 0 && part.PKey&0x7FFF != 0x7FFF {
			p.errf(field+".members", "partition %q has no members: want members or limited (\"ALL\", HCA ports or port GUIDs)", part.Name)
		}
		c.SM.Partitions = append(c.SM.Partitions, part)
	}
}

// parseMember reads "ALL", a port GUID, or an HCA port "pib_1" (port 1) / "pib_1/2".
func parseMember(c *Config, spec string) (Member, error) {
	if strings.EqualFold(spec, "ALL") {
		return Member{All: true}, nil
	}
	if strings.HasPrefix(spec, "pib_") {
		name, port, hasPort := strings.Cut(spec, "/")
		h, ok := c.HCA(name)
		if !ok {
			return Member{}, fmt.Errorf("no such HCA (have %s)", hcaNames(c))
		}
		n := 1
		if hasPort {
			var err error
			if n, err = strconv.Atoi(port); err != nil || n < 1 || n > h.Ports {
				return Member{}, fmt.Errorf("port %q out of range 1..%d", port, h.Ports)
			}
		}
		return Member{GUID: h.PortGUID(n)}, nil
	}
	g, err := parseGUID(spec)
	if err != nil || g == 0 {
		return Member{}, errors.New(`want "ALL", a port GUID (0x0002c90300000301) or an HCA port (pib_1, pib_1/2)`)
	}
	return Member{GUID: g}, nil
}

func hcaNames(c *Config) string {
	var names []string
	for _, h := range c.Fabric.HCAs {
		names = append(names, h.Name)
	}
	return strings.Join(names, ", ")
}

// pkey reads a P_Key: a TOML integer (0x8001) or a string ("0x8001", "8001").
func (p *parser) manner(c *Config, f *file) {
	m := &f.Manner
	c.Manner.Pitfalls = p.str("manner.pitfalls", m.Pitfalls, PitfallsWarn)
	if !slices.Contains([]string{PitfallsWarn, PitfallsOff, PitfallsStrict}, c.Manner.Pitfalls) {
		p.errf("manner.pitfalls", "%q: want %q, %q or %q", c.Manner.Pitfalls, PitfallsWarn, PitfallsStrict, PitfallsOff)
	}
	c.Manner.LowestQPN = p.boolean("manner.lowest_qpn", m.LowestQPN, false)
	c.Manner.RandomErrorFields = p.boolean("manner.random_error_fields", m.RandomErrorFields, false)
}

func (p *parser) ibsim(c *Config, f *file) {
	s := &f.IBSim
	c.IBSim.Enable = p.boolean("ibsim.enable", s.Enable, true)
	c.IBSim.SocketName = p.str("ibsim.socket_name", s.SocketName, "") // "": IBSimSocketFor the control socket
	// sockaddr_un's 108 bytes hold a NUL, the name, ":out" and a slot number, and a NUL.
	if n := len(c.IBSim.SocketName); n > 90 || strings.ContainsRune(c.IBSim.SocketName, 0) {
		p.errf("ibsim.socket_name", "%q: want at most 90 bytes and no NUL", c.IBSim.SocketName)
	}
	c.IBSim.UDP = p.str("ibsim.udp", s.UDP, "")
	if c.IBSim.UDP != "" {
		ap, err := netip.ParseAddrPort(c.IBSim.UDP)
		if err != nil || ap.Port() == 0 {
			p.errf("ibsim.udp", "%q: want address:port, e.g. \"127.0.0.1:7070\"", c.IBSim.UDP)
		}
	}
	c.IBSim.MaxClients = int(p.intIn("ibsim.max_clients", s.MaxClients, DefaultIBSimClients, 1, 4096))
	if c.SM.Mode == SMExternal && !c.IBSim.Enable && c.Fabric.Switch == "" && c.Fabric.Listen == "" {
		p.errf("sm.mode", "%q needs ibsim.enable = true (opensm reaches the fabric through the ibsim server) or a multi-host fabric (fabric.switch, fabric.listen) whose other process runs the SM", SMExternal)
	}
}

func (p *parser) pkey(field string, v any) uint16 {
	var (
		k   uint16
		err error
	)
	switch x := v.(type) {
	case int64:
		k, err = PKeyFromInt(x)
	case string:
		k, err = ParsePKey(x)
	default:
		p.errf(field, "want a P_Key such as 0x8001, got %s", typeName(v))
		return 0
	}
	if err != nil {
		p.errf(field, "%v", err)
	}
	return k
}

// ifNameRE is what Linux accepts as an interface name (dev_valid_name) and `ip` can type.
var ifNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)

// netnsRE is a namespace name `ip netns` accepts (a file name under /run/netns).
var netnsRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// ValidIfName reports whether name can be a Linux interface name.
func ValidIfName(name string) bool { return ifNameRE.MatchString(name) }

// ValidNetNS reports whether name can be a named network namespace.
func ValidNetNS(name string) bool { return netnsRE.MatchString(name) && name != "." && name != ".." }

func (p *parser) interfaces(c *Config, f *file, defined bool) {
	fis := f.Interfaces
	if !defined {
		// The default: one interface per HCA on its port 1, each in its own namespace.
		for i, h := range c.Fabric.HCAs {
			c.Interfaces = append(c.Interfaces, Interface{
				Name: fmt.Sprintf("ib%d", i), HCA: h.Name, Port: 1, PKey: DefaultPKey,
				NetNS: fmt.Sprintf("pib%d", i),
				Addrs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 10, 0, byte(i + 1)}), 24)},
				Mode:  ModeDatagram, Stack: StackKernel,
			})
		}
		return
	}
	seen := map[string]int{}
	type key struct {
		hca  string
		port int
		pkey uint16
	}
	ports := map[key]string{}
	// An address names one interface of its namespace: rdma_cm binds and resolves by
	// address (the kernel's cma_acquire_dev_by_src_ip takes the first netdev that has it).
	type nsAddr struct {
		netns string
		addr  netip.Addr
	}
	addrs := map[nsAddr]string{}
	children := 0
	for i, fi := range fis {
		field := fmt.Sprintf("interfaces[%d]", i)
		it := Interface{
			Name:   p.str(field+".name", fi.Name, ""),
			Parent: p.str(field+".parent", fi.Parent, ""),
			Mode:   p.str(field+".mode", fi.Mode, ModeDatagram),
			Stack:  p.str(field+".stack", fi.Stack, StackKernel),
			MTU:    int(p.intIn(field+".mtu", fi.MTU, 0, 0, 65520)),
			PKey:   DefaultPKey,
			// Linux's gc_thresh3 and a like bound for the multicast groups; 0 is the
			// default (1024 each).
			MaxNeighbors: int(p.intIn(field+".max_neighbors", fi.MaxNeigh, 0, 8, 1<<20)),
			MaxGroups:    int(p.intIn(field+".max_groups", fi.MaxGroups, 0, 8, 1<<20)),
		}
		if fi.PKey != nil {
			it.PKey = p.pkey(field+".pkey", fi.PKey)
		}
		if it.Parent != "" {
			if children++; children == c.Daemon.MaxChildren+1 {
				p.errf(field+".parent", "one child more than daemon.max_children (%d) allows: raise it or configure fewer children",
					c.Daemon.MaxChildren)
			}
			j, ok := seen[it.Parent]
			if !ok {
				p.errf(field+".parent", "%q: no such interface before this one", it.Parent)
			} else {
				par := c.Interfaces[j]
				if par.Parent != "" {
					p.errf(field+".parent", "%q is itself a child; children hang off a parent interface", it.Parent)
				}
				if fi.HCA != nil || fi.Port != nil {
					p.errf(field+".hca", "a child runs on its parent's HCA port; leave hca and port out")
				}
				it.HCA, it.Port = par.HCA, par.Port
				it.NetNS = p.str(field+".netns", fi.NetNS, par.NetNS)
				if it.NetNS != par.NetNS {
					p.errf(field+".netns", "%q: a child lives in its parent's namespace %q", it.NetNS, par.NetNS)
				}
				if fi.Stack == nil {
					it.Stack = par.Stack
				}
				if fi.PKey == nil {
					p.errf(field+".pkey", "missing: a child needs its partition's P_Key")
				}
				if it.Name == "" {
					it.Name = ChildName(it.Parent, it.PKey)
				}
			}
		} else {
			it.HCA = p.str(field+".hca", fi.HCA, "")
			it.Port = int(p.intIn(field+".port", fi.Port, 1, 1, MaxHCAPorts))
			it.NetNS = p.str(field+".netns", fi.NetNS, "")
			if it.HCA == "" {
				p.errf(field+".hca", "missing: want an HCA's name (have %s)", hcaNames(c))
			} else if h, ok := c.HCA(it.HCA); !ok {
				p.errf(field+".hca", "%q: no such HCA (have %s)", it.HCA, hcaNames(c))
			} else if it.Port > h.Ports {
				p.errf(field+".port", "%d out of range 1..%d (%s has %d)", it.Port, h.Ports, h.Name, h.Ports)
			}
		}
		switch {
		case it.Name == "":
			p.errf(field+".name", "missing: want an interface name such as \"ib0\"")
		case !ValidIfName(it.Name):
			p.errf(field+".name", "%q is not a valid interface name (1-15 letters, digits, '.', '-', '_')", it.Name)
		default:
			if _, dup := seen[it.Name]; dup {
				p.errf(field+".name", "%q used twice: want a name of its own", it.Name)
			}
		}
		if it.NetNS != "" && !ValidNetNS(it.NetNS) {
			p.errf(field+".netns", "%q is not a valid namespace name (1-64 letters, digits, '.', '-', '_', not starting with '.' or '-')", it.NetNS)
		}
		switch it.Mode {
		case ModeDatagram, ModeConnected:
		default:
			p.errf(field+".mode", "%q: want %q or %q", it.Mode, ModeDatagram, ModeConnected)
		}
		switch it.Stack {
		case StackKernel, StackUserspace:
		default:
			p.errf(field+".stack", "%q: want %q or %q", it.Stack, StackKernel, StackUserspace)
		}
		switch {
		case it.Mode == ModeConnected && it.MTU != 0 && (it.MTU < 1280 || it.MTU > 65520):
			p.errf(field+".mtu", "%d out of range 1280..65520 for connected mode (0 takes 65520)", it.MTU)
		case it.Mode != ModeConnected && it.MTU != 0 && (it.MTU < 1280 || it.MTU > 4092):
			p.errf(field+".mtu", "%d out of range 1280..4092 for datagram mode (0 takes the broadcast group's)", it.MTU)
		}
		for j, s := range p.strings(field+".addresses", fi.Addresses) {
			pf, err := ParseAddr(s)
			if err != nil {
				p.errf(fmt.Sprintf("%s.addresses[%d]", field, j), "%v", err)
				continue
			}
			if slices.Contains(it.Addrs, pf) {
				p.errf(fmt.Sprintf("%s.addresses[%d]", field, j), "%s listed twice: want each address once", pf)
			} else if prev, dup := addrs[nsAddr{it.NetNS, pf.Addr()}]; dup {
				p.errf(fmt.Sprintf("%s.addresses[%d]", field, j), "%s is already an address of interface %q in %s: want addresses unique within a namespace",
					pf.Addr(), prev, nsName(it.NetNS))
			} else {
				addrs[nsAddr{it.NetNS, pf.Addr()}] = it.Name
			}
			it.Addrs = append(it.Addrs, pf)
		}
		k := key{it.HCA, it.Port, it.PKey}
		if prev, dup := ports[k]; dup && it.PKey != 0 {
			p.errf(field+".pkey", "%s port %d already has interface %q on P_Key %#04x: want one interface a port and P_Key", it.HCA, it.Port, prev, it.PKey)
		}
		ports[k] = it.Name
		seen[it.Name] = len(c.Interfaces)
		c.Interfaces = append(c.Interfaces, it)
	}
}

func nsName(netns string) string {
	if netns == "" {
		return "the daemon's namespace"
	}
	return fmt.Sprintf("namespace %q", netns)
}

// ParseAddr reads an interface address in CIDR form ("10.20.0.1/24", "fd00::1/64").
func ParseAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "%") {
		// The interface is the address's zone; netip would take "%eth0/64" for a zone.
		return netip.Prefix{}, fmt.Errorf("address %q: zones are not allowed: want CIDR without %%zone such as fe80::1/64 (the interface is the zone)", s)
	}
	pf, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			bits := 24
			if a.Is6() {
				bits = 64
			}
			return netip.Prefix{}, fmt.Errorf("address %q has no prefix length: want CIDR such as %s/%d", s, s, bits)
		}
		return netip.Prefix{}, fmt.Errorf("malformed address %q: want CIDR such as 10.20.0.1/24 or fd00::1/64", s)
	}
	a := pf.Addr()
	if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
		return netip.Prefix{}, fmt.Errorf("address %q cannot be an interface address", s)
	}
	return pf, nil
}

// LogLevel parses a slog level name.
func LogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// LoadTopology reads an ibsim net file (fabric.topology, pibgw switch --topology).
func LoadTopology(path string) (*topology.Topology, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := topology.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(t.Switches()) == 0 {
		return nil, fmt.Errorf("%s: no switch", path)
	}
	return t, nil
}

// TopologyHCAPorts lists the switch ports the HCA ports of a topology are linked to,
// HCA by HCA in file order, port by port: the local HCAs' ports take the first ones, the
// hosts of a switch process the rest.
func TopologyHCAPorts(t *topology.Topology) []topology.End {
	var out []topology.End
	for _, h := range t.HCAs() {
		for p := 1; p <= h.Ports; p++ {
			if e, ok := h.Links[p]; ok {
				out = append(out, e)
			}
		}
	}
	return out
}
