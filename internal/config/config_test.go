package config

import (
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c := Default()
	if c.Daemon.Control != "/run/pibgw/pibgw.sock" || c.Daemon.Capture != "" {
		t.Errorf("daemon %+v", c.Daemon)
	}
	if len(c.Fabric.HCAs) != 2 || c.Fabric.SwitchPorts != 8 {
		t.Fatalf("fabric %+v", c.Fabric)
	}
	for i, want := range []uint64{0x0002_c903_0000_0300, 0x0002_c903_0000_0400} {
		h := c.Fabric.HCAs[i]
		if h.Name != HCAName(i) || h.Ports != 1 || h.NodeGUID != want {
			t.Errorf("hca %d: %+v", i, h)
		}
	}
	if c.SM.HCA != "pib_0" || c.SM.Port != 1 || c.SM.SweepInterval != 10*time.Second || c.SM.PacketLifeTime != 18 || len(c.SM.Partitions) != 0 {
		t.Errorf("sm %+v", c.SM)
	}
	want := []Interface{
		{Name: "ib0", HCA: "pib_0", Port: 1, PKey: 0xffff, NetNS: "pib0",
			Addrs: []netip.Prefix{netip.MustParsePrefix("10.10.0.1/24")}, Mode: "datagram", Stack: "kernel"},
		{Name: "ib1", HCA: "pib_1", Port: 1, PKey: 0xffff, NetNS: "pib1",
			Addrs: []netip.Prefix{netip.MustParsePrefix("10.10.0.2/24")}, Mode: "datagram", Stack: "kernel"},
	}
	if !reflect.DeepEqual(c.Interfaces, want) {
		t.Errorf("interfaces\n got %+v\nwant %+v", c.Interfaces, want)
	}
}

// configs/default.toml spells out exactly the defaults.
func TestDefaultFile(t *testing.T) {
	c, err := Load("../../configs/default.toml")
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	d.Source = c.Source
	if !reflect.DeepEqual(c, d) {
		t.Errorf("configs/default.toml\n got %+v\nwant %+v", c, d)
	}
}

func TestPartitionsFile(t *testing.T) {
	c, err := Load("../../configs/partitions.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Fabric.HCAs) != 3 || len(c.SM.Partitions) != 1 {
		t.Fatalf("%+v", c)
	}
	p := c.SM.Partitions[0]
	if p.Name != "storage" || p.PKey != 0x8001 || !p.IPoIB || p.MTU != 2048 || p.QKey != 0x0B1B ||
		!reflect.DeepEqual(p.Members, []Member{{GUID: 0x0002_c903_0000_0301, Full: true}, {GUID: 0x0002_c903_0000_0401, Full: true}}) {
		t.Errorf("partition %+v", p)
	}
	var names []string
	for _, it := range c.Interfaces {
		names = append(names, it.Name+"@"+it.NetNS)
	}
	if got := strings.Join(names, " "); got != "ib0@hosta ib0.8001@hosta ib1@hostb ib1.8001@hostb ib2@hostc ib2.8001@hostc" {
		t.Errorf("interfaces %s", got)
	}
	child, _ := c.Interface("ib1.8001")
	if child.Parent != "ib1" || child.HCA != "pib_1" || child.Port != 1 || child.PKey != 0x8001 ||
		child.Addrs[0] != netip.MustParsePrefix("10.20.0.2/24") {
		t.Errorf("child %+v", child)
	}
}

// configs/opensm.toml: the default fabric with the ibsim server on and the built-in SM off.
func TestOpenSMFile(t *testing.T) {
	c, err := Load("../../configs/opensm.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := IBSim{Enable: true, MaxClients: DefaultIBSimClients}
	if c.SM.Mode != SMExternal || c.IBSim != want || len(c.Fabric.HCAs) != 2 || len(c.Interfaces) != 2 {
		t.Errorf("sm %+v ibsim %+v", c.SM, c.IBSim)
	}
	if d := Default(); d.SM.Mode != SMInternal || !d.IBSim.Enable || d.IBSim.Name(d.Daemon.Control) != DefaultIBSimSocket {
		t.Errorf("defaults: sm %+v ibsim %+v", d.SM, d.IBSim)
	}
}

// The ibsim server's socket name is derived from the control socket: "sim" for the
// default one, a name of its own for every other, so that two daemons never clash;
// socket_name overrides it.
func TestIBSimSocketName(t *testing.T) {
	d := Default()
	if !d.IBSim.Enable {
		t.Error("the ibsim server is off by default: pibgw exec --umad needs a configuration")
	}
	a, b := d.IBSim.Name("/run/pibgw/host-a/pibgw.sock"), d.IBSim.Name("/run/pibgw/host-b/pibgw.sock")
	if a == b || a == DefaultIBSimSocket || !strings.HasPrefix(a, "pibgw-") || len(a) != len("pibgw-")+12 {
		t.Errorf("socket names %q and %q for two control sockets", a, b)
	}
	if n := d.IBSim.Name(DefaultControl); n != "sim" {
		t.Errorf("default control socket: %q, want sim", n)
	}
	if n := (IBSim{SocketName: "mine"}).Name("/x.sock"); n != "mine" {
		t.Errorf("socket_name: %q", n)
	}
}

func TestOptions(t *testing.T) {
	c, err := Parse("x.toml", []byte(`
[daemon]
control = "/tmp/p.sock"
log_level = "debug"
capture = "/tmp/f.pcap"
max_procs = 3
[fabric]
node_guid_base = "0x0011223300000000"
switch_ports = 12
[[fabric.hcas]]
ports = 2
[[fabric.hcas]]
node_guid = "0x8000000000000100"
[sm]
hca = "pib_0"
port = 2
priority = 5
sweep_interval = "off"
[[sm.partitions]]
name = "Default"
pkey = "7fff"
members = ["ALL"]
[[sm.partitions]]
name = "p2"
pkey = 2
members = "pib_0/2"
limited = ["0002:c903:0000:0301", "all"]
ipoib = false
mtu = 4096
qkey = 0x1234
[[interfaces]]
name = "ib0"
hca = "pib_0"
port = 2
pkey = "0x0002"
addresses = ["fd00::1/64", "10.1.0.1/16"]
stack = "userspace"
mtu = 4092
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Daemon.Control != "/tmp/p.sock" || c.Daemon.LogLevel.String() != "DEBUG" || c.Daemon.Capture != "/tmp/f.pcap" || c.Daemon.MaxProcs != 3 {
		t.Errorf("daemon %+v", c.Daemon)
	}
	if c.Fabric.HCAs[0].NodeGUID != 0x0011_2233_0000_0300 || c.Fabric.HCAs[0].Ports != 2 ||
		c.Fabric.HCAs[1].NodeGUID != 0x8000_0000_0000_0100 || c.Fabric.SwitchPorts != 12 {
		t.Errorf("fabric %+v", c.Fabric)
	}
	if c.SM.Port != 2 || c.SM.Priority != 5 || c.SM.SweepInterval != 0 {
		t.Errorf("sm %+v", c.SM)
	}
	p := c.SM.Partitions[1]
	wantM := []Member{{GUID: 0x0011_2233_0000_0302, Full: true}, {GUID: 0x0002_c903_0000_0301}, {All: true}}
	if p.PKey != 0x8002 || p.IPoIB || p.MTU != 4096 || p.QKey != 0x1234 || !reflect.DeepEqual(p.Members, wantM) {
		t.Errorf("partition %+v", p)
	}
	it := c.Interfaces[0]
	if it.PKey != 0x8002 || it.Stack != StackUserspace || it.MTU != 4092 || len(it.Addrs) != 2 || it.NetNS != "" {
		t.Errorf("interface %+v", it)
	}
}

// Every error names the file, the field and the reason.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{"[fabric]\n[[fabric.hcas]]\n[[fabric.hcas]]\nports = 40\n", "x.toml: fabric.hcas[1].ports: 40 out of range 1..32"},
		{"[fabric]\nhca_count = 0\n", "x.toml: fabric.hca_count: 0 out of range 1..64"},
		{"[fabric]\nhca_count = \"two\"\n", "x.toml: fabric.hca_count: want an integer, got a string"},
		{"[fabric]\nhca_count = 3\n[[fabric.hcas]]\n", "x.toml: fabric.hca_count: 3, but 1 [[fabric.hcas]] are listed"},
		{"[fabric]\nnode_guid_base = 0x1234\n", "x.toml: fabric.node_guid_base: 0x0000000000001234: must be non-zero with the low 16 bits zero"},
		{"[fabric]\nnode_guid_base = \"xyz\"\n", "x.toml: fabric.node_guid_base: \"xyz\": not a 64-bit hexadecimal GUID"},
		{"[fabric]\nhca_count = 9\nswitch_ports = 4\n", "x.toml: fabric.switch_ports: 4 ports cannot take the 9 HCA ports configured"},
		{"[fabric]\nswitch_ports = 300\n", "x.toml: fabric.switch_ports: 300 out of range 1..254"},
		{"[[fabric.hcas]]\nnode_guid = 0x0002c90300000300\n[[fabric.hcas]]\nnode_guid = 0x0002c90300000300\n", "x.toml: fabric.hcas[1].node_guid: 0x0002c90300000300 already used by pib_0"},
		{"[[fabric.hcas]]\nnode_guid = 0x0002c90300000301\n", "x.toml: fabric.hcas[0].node_guid: 0x0002c90300000301: must be non-zero with the low byte zero"},
		{"[fabric]\nfoo = 1\n", "x.toml: fabric.foo: unknown option"},
		{"[fabric]\nnode_desc = \"%h %n\"\n", "x.toml: fabric.node_desc: \"%h %n\": %n: only %h (host name), %d (device name) and %% are known"},
		{"[fabric]\nnode_desc = \"x %\"\n", "x.toml: fabric.node_desc: \"x %\": ends in a lone %"},
		{"[daemon]\nlog_level = \"loud\"\n", "x.toml: daemon.log_level: \"loud\": want debug, info, warn or error"},
		{"[daemon]\ncontrol = \"\"\n", "x.toml: daemon.control: empty path"},
		{"[sm]\nhca = \"pib_7\"\n", "x.toml: sm.hca: \"pib_7\": no such HCA (have pib_0, pib_1)"},
		{"[sm]\nmode = \"opensm\"\n", "x.toml: sm.mode: \"opensm\": want \"internal\" (the built-in SM and SA run here) or \"external\" (the SM runs elsewhere: opensm through the ibsim server, or a multi-host fabric's switch process)"},
		{"[sm]\nmode = \"external\"\n[ibsim]\nenable = false\n", "x.toml: sm.mode: \"external\" needs ibsim.enable = true (opensm reaches the fabric through the ibsim server) or a multi-host fabric"},
		{"[ibsim]\nudp = \"localhost\"\n", "x.toml: ibsim.udp: \"localhost\": want address:port, e.g. \"127.0.0.1:7070\""},
		{"[ibsim]\nmax_clients = 0\n", "x.toml: ibsim.max_clients: 0 out of range 1..4096"},
		{"[ibsim]\nenable = 1\n", "x.toml: ibsim.enable: want true or false, got an integer"},
		{"[manner]\npitfalls = \"loud\"\n", "x.toml: manner.pitfalls: \"loud\": want \"warn\", \"strict\" or \"off\""},
		{"[manner]\nlowest_qpn = \"yes\"\n", "x.toml: manner.lowest_qpn: want true or false, got a string"},
		{"[manner]\nstrict = true\n", "x.toml: manner.strict: unknown option"},
		{"[sm]\nport = 2\n", "x.toml: sm.port: 2 out of range 1..1 (pib_0 has 1)"},
		{"[sm]\npriority = 16\n", "x.toml: sm.priority: 16 out of range 0..15"},
		{"[sm]\npacket_life_time = 20\n", "x.toml: sm.packet_life_time: 20 out of range 1..19"},
		{"[daemon]\nmax_procs = -1\n", "x.toml: daemon.max_procs: -1 out of range 0..4096"},
		{"[sm]\nsweep_interval = \"soon\"\n", "x.toml: sm.sweep_interval: \"soon\": want a duration"},
		{"[[sm.partitions]]\npkey = 0x8001\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[0].name: missing"},
		{"[[sm.partitions]]\nname = \"a\"\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[0].pkey: missing"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 0x8000\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[0].pkey: invalid P_Key 0x8000: partition number 0 is reserved"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 0x10001\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[0].pkey: invalid P_Key 0x10001: more than 16 bits"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 1\nmembers = [\"ALL\"]\n[[sm.partitions]]\nname = \"b\"\npkey = 0x8001\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[1].pkey: 0x8001 already used by partition \"a\""},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 1\nmembers = [\"pib_9\"]\n", "x.toml: sm.partitions[0].members[0]: \"pib_9\": no such HCA"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 1\nmembers = [\"pib_0/3\"]\n", "x.toml: sm.partitions[0].members[0]: \"pib_0/3\": port \"3\" out of range 1..1"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 1\nlimited = [\"nobody\"]\n", "x.toml: sm.partitions[0].limited[0]: \"nobody\": want \"ALL\", a port GUID"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 1\n", "x.toml: sm.partitions[0].members: partition \"a\" has no members"},
		{"[[sm.partitions]]\nname = \"a\"\npkey = 1\nmembers = [\"ALL\"]\nmtu = 3000\n", "x.toml: sm.partitions[0].mtu: 3000: want 256, 512, 1024, 2048 or 4096"},
		{"[[interfaces]]\nhca = \"pib_0\"\n", "x.toml: interfaces[0].name: missing"},
		{"[[interfaces]]\nname = \"ib0\"\n", "x.toml: interfaces[0].hca: missing: want an HCA's name (have pib_0, pib_1)"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_5\"\n", "x.toml: interfaces[0].hca: \"pib_5\": no such HCA"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nport = 2\n", "x.toml: interfaces[0].port: 2 out of range 1..1"},
		{"[[interfaces]]\nname = \"a very long name\"\nhca = \"pib_0\"\n", "x.toml: interfaces[0].name: \"a very long name\" is not a valid interface name"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\n[[interfaces]]\nname = \"ib0\"\nhca = \"pib_1\"\n", "x.toml: interfaces[1].name: \"ib0\" used twice"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\n[[interfaces]]\nname = \"ib9\"\nhca = \"pib_0\"\n", "x.toml: interfaces[1].pkey: pib_0 port 1 already has interface \"ib0\" on P_Key 0xffff"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\npkey = \"zz\"\n", "x.toml: interfaces[0].pkey: invalid P_Key \"zz\": want a hexadecimal number"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\npkey = 0\n", "x.toml: interfaces[0].pkey: invalid P_Key 0x0: partition number 0 is reserved"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\naddresses = [\"10.1.2.300/24\"]\n", "x.toml: interfaces[0].addresses[0]: malformed address \"10.1.2.300/24\""},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\naddresses = [\"10.1.2.3\"]\n", "x.toml: interfaces[0].addresses[0]: address \"10.1.2.3\" has no prefix length"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\naddresses = [1]\n", "x.toml: interfaces[0].addresses[0]: want a string, got an integer"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nmode = \"bonded\"\n", "x.toml: interfaces[0].mode: \"bonded\": want \"datagram\" or \"connected\""},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nmode = \"connected\"\nmtu = 65521\n", "x.toml: interfaces[0].mtu: 65521 out of range 0..65520"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nmode = \"connected\"\nmtu = 1000\n", "x.toml: interfaces[0].mtu: 1000 out of range 1280..65520 for connected mode"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nstack = \"dpdk\"\n", "x.toml: interfaces[0].stack: \"dpdk\": want \"kernel\" or \"userspace\""},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nnetns = \"a/b\"\n", "x.toml: interfaces[0].netns: \"a/b\" is not a valid namespace name"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nmtu = 9000\n", "x.toml: interfaces[0].mtu: 9000 out of range 1280..4092"},
		{"[[interfaces]]\nparent = \"ib0\"\npkey = 0x8001\n", "x.toml: interfaces[0].parent: \"ib0\": no such interface before this one"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\n[[interfaces]]\nparent = \"ib0\"\n", "x.toml: interfaces[1].pkey: missing: a child needs its partition's P_Key"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nnetns = \"a\"\n[[interfaces]]\nparent = \"ib0\"\npkey = 2\nnetns = \"b\"\n", "x.toml: interfaces[1].netns: \"b\": a child lives in its parent's namespace \"a\""},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\n[[interfaces]]\nparent = \"ib0\"\npkey = 2\nhca = \"pib_1\"\n", "x.toml: interfaces[1].hca: a child runs on its parent's HCA port"},
		{"[fabric]\nswitch = \"10.0.0.1\"\n", "x.toml: fabric.switch: \"10.0.0.1\": want HOST:PORT"},
		{"[fabric]\nswitch = \"10.0.0.1:8432\"\nswitch_ports = 4\n", "x.toml: fabric.switch_ports: not used with fabric.switch"},
		{"[fabric]\nswitch = \"10.0.0.1:8432\"\nlisten = \":8432\"\n", "x.toml: fabric.listen: a fabric with fabric.switch has no switch"},
		{"[fabric]\nlisten = \"8432\"\n", "x.toml: fabric.listen: \"8432\": want [HOST]:PORT"},
		{"[fabric]\npsk_file = \"/nonexistent/psk\"\n", "x.toml: fabric.psk_file: open /nonexistent/psk"},
		{"[fabric]\nallow = [\"10.0.0.0/33\"]\n", "x.toml: fabric.allow[0]: \"10.0.0.0/33\": want an address or a prefix"},
		{"[fabric]\nkeepalive = \"1s\"\nlink_timeout = \"1s\"\n", "x.toml: fabric.link_timeout: 1s is shorter than two keepalives (2s)"},
		{"[fabric]\nkeepalive = \"-1s\"\n", "x.toml: fabric.keepalive: \"-1s\": want a duration from 10ms to 1m0s, such as \"250ms\""},
		// Issue 43 item 11: every duration has a minimum and a maximum, said in the error.
		{"[sm]\nsweep_interval = \"1ns\"\n", "x.toml: sm.sweep_interval: \"1ns\": want a duration from 1s to 24h0m0s, such as \"10s\", or \"off\""},
		{"[sm]\nsweep_interval = \"999ms\"\n", "x.toml: sm.sweep_interval: \"999ms\": want a duration from 1s"},
		{"[sm]\nsweep_interval = \"25h\"\n", "x.toml: sm.sweep_interval: \"25h\": want a duration from 1s to 24h0m0s"},
		{"[sm]\nsweep_interval = 10\n", "x.toml: sm.sweep_interval: want a string, got an integer"},
		{"[fabric]\nkeepalive = \"1ns\"\n", "x.toml: fabric.keepalive: \"1ns\": want a duration from 10ms to 1m0s"},
		{"[fabric]\nkeepalive = \"2m\"\nlink_timeout = \"5m\"\n", "x.toml: fabric.keepalive: \"2m\": want a duration from 10ms to 1m0s"},
		{"[fabric]\nlink_timeout = \"11m\"\n", "x.toml: fabric.link_timeout: \"11m\": want a duration from 20ms to 10m0s, such as \"2s\""},
		{"[fabric]\nkeepalive = \"10ms\"\nlink_timeout = \"1ns\"\n", "x.toml: fabric.link_timeout: \"1ns\": want a duration from 20ms"},
		{"[sm]\nsweep_interval = 1979-05-27T07:32:00Z\n", "x.toml: sm.sweep_interval: want a string, got a date-time"},
		// The same address on two interfaces of one namespace (rdma_cm binds by address).
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\naddresses = [\"10.0.0.1/24\"]\n[[interfaces]]\nname = \"ib1\"\nhca = \"pib_1\"\naddresses = [\"10.0.0.1/16\"]\n",
			"x.toml: interfaces[1].addresses[0]: 10.0.0.1 is already an address of interface \"ib0\" in the daemon's namespace: want addresses unique within a namespace"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nnetns = \"a\"\naddresses = [\"fd00::1/64\"]\n[[interfaces]]\nparent = \"ib0\"\npkey = 2\naddresses = [\"fd00::1/64\"]\n",
			"x.toml: interfaces[1].addresses[0]: fd00::1 is already an address of interface \"ib0\" in namespace \"a\""},
		// Zones: the hint no longer reads fe80::1%eth0/64/24.
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\naddresses = [\"fe80::1%eth0/64\"]\n", "x.toml: interfaces[0].addresses[0]: address \"fe80::1%eth0/64\": zones are not allowed: want CIDR without %zone such as fe80::1/64"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\naddresses = [\"fd00::2\"]\n", "x.toml: interfaces[0].addresses[0]: address \"fd00::2\" has no prefix length: want CIDR such as fd00::2/64"},
		// A value where a table belongs is named by its field, not by Go types.
		{"daemon = 1\n", "x.toml: daemon: want a table ([daemon]), got an integer"},
		{"fabric = \"x\"\n", "x.toml: fabric: want a table ([fabric]), got a string"},
		{"sm = []\n", "x.toml: sm: want a table ([sm]), got an array"},
		{"interfaces = 1\n", "x.toml: interfaces: want an array of tables ([[interfaces]]), got an integer"},
		{"interfaces = [1]\n", "x.toml: interfaces[0]: want a table ([[interfaces]]), got an integer"},
		{"[fabric]\nhcas = [{}, \"x\"]\n", "x.toml: fabric.hcas[1]: want a table ([[fabric.hcas]]), got a string"},
		{"[fabric]\nuplinks = \"a\"\n", "x.toml: fabric.uplinks: want an array of tables ([[fabric.uplinks]]), got a string"},
		{"[sm]\npartitions = 3\n", "x.toml: sm.partitions: want an array of tables ([[sm.partitions]]), got an integer"},
		// Every error says what is wanted.
		{"[daemon]\ncontrol = \"\"\n", "x.toml: daemon.control: empty path: want the path of the control socket"},
		{"[fabric]\nnode_guid_base = -1\n", "x.toml: fabric.node_guid_base: -1 is negative: want a GUID such as \"0x0002c90300000000\""},
		{"[[sm.partitions]]\npkey = 0x8001\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[0].name: missing: want the partition's name"},
		{"[[sm.partitions]]\nname = \"a\"\nmembers = [\"ALL\"]\n", "x.toml: sm.partitions[0].pkey: missing: want the partition's P_Key"},
		{"[[interfaces]]\nhca = \"pib_0\"\n", "x.toml: interfaces[0].name: missing: want an interface name"},
		{"[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\nnetns = \".x\"\n", "x.toml: interfaces[0].netns: \".x\" is not a valid namespace name (1-64 letters"},
		{"[fabric]\n[[fabric.uplinks]]\nswitch = \"10.0.0.1:8432\"\n", "x.toml: fabric.uplinks[0].port: missing"},
		{"[fabric]\n[[fabric.uplinks]]\nport = 9\nswitch = \"10.0.0.1:8432\"\n", "x.toml: fabric.uplinks[0].port: 9 out of range 1..8 (switch_ports)"},
		{"[fabric]\n[[fabric.uplinks]]\nport = 7\nswitch = \"10.0.0.1\"\n", "x.toml: fabric.uplinks[0].switch: \"10.0.0.1\": want HOST:PORT"},
		{"[fabric]\n[[fabric.uplinks]]\nport = 7\nswitch = \"a:1\"\n[[fabric.uplinks]]\nport = 7\nswitch = \"a:1\"\n", "x.toml: fabric.uplinks[1].port: port 7 has two uplinks"},
		{"[fabric]\nswitch = \"10.0.0.1:8432\"\n[[fabric.uplinks]]\nport = 7\nswitch = \"a:1\"\n", "x.toml: fabric.uplinks[0]: uplinks join this process's one switch"},
		{"[fabric]\ntopology = \"/nonexistent.ibnd\"\n", "x.toml: fabric.topology: open /nonexistent.ibnd"},
		{"[sm]\nenabled = true\n", "x.toml: sm.enabled: unknown option"},
		{"[fabric\n", "x.toml:2: "},
		{"a = 1\n", "x.toml: a: unknown option"},
	} {
		_, err := Parse("x.toml", []byte(tc.toml))
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.toml, tc.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %q\nwant %q…", tc.toml, err, tc.want)
		}
	}
}

// A host of a multi-host fabric: the switch process's address, a PSK file relative to
// the configuration, an allow-list; the SM is off unless asked for.
func TestRemoteSwitch(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/psk", []byte("  0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse(dir+"/h.toml", []byte("[fabric]\nswitch = \"10.0.0.1:8432\"\npsk_file = \"psk\"\nallow = [\"10.0.0.0/24\", \"10.1.0.1\"]\nkeepalive = \"100ms\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Fabric
	if f.Switch != "10.0.0.1:8432" || string(f.PSK) != "0123456789abcdef0123" || c.SM.Mode != SMExternal ||
		!reflect.DeepEqual(f.Allow, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.1.0.1/32")}) ||
		f.Keepalive != 100*time.Millisecond || f.LinkTimeout != DefaultLinkTimeout {
		t.Fatalf("fabric %+v sm %+v", f, c.SM)
	}
	if Default().SM.Mode != SMInternal {
		t.Fatal("the SM is off by default with the built-in switch")
	}
	// NodeDescription: rdma-ndd's "%h %d" on a host of a multi-host fabric, pib's names
	// in one process, a configured format anywhere.
	if d := f.NodeDescription(0, "hostA"); d != "hostA pib_0" {
		t.Fatalf("host's NodeDescription %q", d)
	}
	if d := Default().Fabric.NodeDescription(1, "hostA"); d != "pibgw HCA-2" {
		t.Fatalf("one-process NodeDescription %q", d)
	}
	c, err = Parse(dir+"/h.toml", []byte("[fabric]\nnode_desc = \"%d on %h, 100%%\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Fabric.NodeDescription(1, "hostA"); d != "pib_1 on hostA, 100%" {
		t.Fatalf("configured NodeDescription %q", d)
	}
	if d := c.Fabric.NodeDescription(0, strings.Repeat("h", 80)); len(d) != NodeDescLen {
		t.Fatalf("NodeDescription of %d bytes, want it cut to %d", len(d), NodeDescLen)
	}
	if err := os.WriteFile(dir+"/short", []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(dir+"/h.toml", []byte("[fabric]\npsk_file = \"short\"\n")); err == nil || !strings.Contains(err.Error(), "need at least 16") {
		t.Fatalf("short key: %v", err)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load("/nonexistent/pibgw.toml")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/pibgw.toml") || !os.IsNotExist(err) {
		t.Errorf("err %v", err)
	}
}

func TestChildNaming(t *testing.T) {
	c, err := Parse("", []byte("[[interfaces]]\nname = \"ib0\"\nhca = \"pib_0\"\n[[interfaces]]\nparent = \"ib0\"\npkey = \"1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Interfaces[1].Name != "ib0.8001" || c.Interfaces[1].PKey != 0x8001 {
		t.Errorf("%+v", c.Interfaces[1])
	}
}

// The multi-host examples parse, their PSK file (fabric.psk, as pibgw genkey makes it)
// found next to them.
func TestMultiHostExamples(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/fabric.psk", []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"switch", "host-a", "host-b"} {
		b, err := os.ReadFile("../../configs/" + name + ".toml")
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(dir+"/"+name+".toml", b)
		if err != nil {
			t.Fatal(err)
		}
		if c.Fabric.PSK == nil || (name == "switch") != (c.Fabric.Listen != "") || (name == "switch") != (c.SM.Mode == SMInternal) {
			t.Errorf("%s: fabric %+v sm %+v", name, c.Fabric, c.SM)
		}
	}
}

func TestManner(t *testing.T) {
	if m := Default().Manner; m.Pitfalls != PitfallsWarn || m.LowestQPN || m.RandomErrorFields {
		t.Errorf("default manner %+v", m)
	}
	c, err := Parse("x.toml", []byte("[manner]\npitfalls = \"strict\"\nlowest_qpn = true\nrandom_error_fields = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Manner; m.Pitfalls != PitfallsStrict || !m.LowestQPN || !m.RandomErrorFields {
		t.Errorf("manner %+v", m)
	}
}
