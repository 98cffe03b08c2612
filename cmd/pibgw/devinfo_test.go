package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/internal/control"
	"github.com/pibgw/pibgw/internal/daemon"
)

// pibgw runs the command line and returns stdout, stderr and the exit status. The note
// devinfo and stat print on stderr when no daemon runs is left out (TestInProcessNote
// checks it).
func pibgw(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	out, errs, code := pibgwRaw(args...)
	return out, inProcessNote.ReplaceAllString(errs, ""), code
}

var inProcessNote = regexp.MustCompile(`(?m)^pibgw: no daemon at \S+; showing the default fabric built in process\n`)

func pibgwRaw(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(append([]string{"pibgw"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := pibgw(t, args...)
	if code != 0 {
		t.Fatalf("pibgw %s: exit %d, stderr %q", strings.Join(args, " "), code, errs)
	}
	if errs != "" {
		t.Errorf("pibgw %s: unexpected stderr %q", strings.Join(args, " "), errs)
	}
	return out
}

// wantPib0 is ibv_devinfo's output for a single-port HCA the SM has brought up, byte for
// byte (tabs as rdma-core's libibverbs/examples/devinfo.c prints them). The SM runs on
// pib_0 port 1, which gets LID 1; the switch gets 2, pib_1 3.
const wantPib0 = "hca_id:\tpib_0\n" +
	"\ttransport:\t\t\tInfiniBand (0)\n" +
	"\tfw_ver:\t\t\t\t1.0.0\n" +
	"\tnode_guid:\t\t\t0002:c903:0000:0300\n" +
	"\tsys_image_guid:\t\t\t0002:c903:0000:0200\n" +
	"\tvendor_id:\t\t\t0x0001\n" +
	"\tvendor_part_id:\t\t\t1\n" +
	"\thw_ver:\t\t\t\t0x0\n" +
	"\tboard_id:\t\t\tPIB_0000000001\n" +
	"\tphys_port_cnt:\t\t\t1\n" +
	"\t\tport:\t1\n" +
	"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n" +
	"\t\t\tmax_mtu:\t\t4096 (5)\n" +
	"\t\t\tactive_mtu:\t\t4096 (5)\n" +
	"\t\t\tsm_lid:\t\t\t1\n" +
	"\t\t\tport_lid:\t\t1\n" +
	"\t\t\tport_lmc:\t\t0x00\n" +
	"\t\t\tlink_layer:\t\tInfiniBand\n" +
	"\n"

func TestDevinfoDefaultFabric(t *testing.T) {
	out := mustRun(t, "devinfo")
	want := wantPib0 + strings.NewReplacer("pib_0", "pib_1", "0000:0300", "0000:0400",
		"port_lid:\t\t1", "port_lid:\t\t3").Replace(wantPib0)
	compareLines(t, out, want)
}

func TestDevinfoSelectDevice(t *testing.T) {
	out := mustRun(t, "devinfo", "-d", "pib_0")
	compareLines(t, out, wantPib0)
	out = mustRun(t, "devinfo", "--ib-dev", "pib_1")
	if !strings.HasPrefix(out, "hca_id:\tpib_1\n") || strings.Contains(out, "pib_0") {
		t.Errorf("--ib-dev pib_1 printed:\n%s", out)
	}
}

func TestDevinfoUnknownDevice(t *testing.T) {
	out, errs, code := pibgw(t, "devinfo", "-d", "pib_7")
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	if want := "pibgw: IB device 'pib_7' wasn't found\n"; errs != want {
		t.Errorf("stderr %q, want %q", errs, want)
	}
}

var guidRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$`)

func TestDevinfoFieldFormats(t *testing.T) {
	out := mustRun(t, "devinfo")
	var states, guids int
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := field(line)
		if !ok {
			continue
		}
		switch k {
		case "node_guid", "sys_image_guid":
			guids++
			if !guidRE.MatchString(v) {
				t.Errorf("%s %q is not xxxx:xxxx:xxxx:xxxx", k, v)
			}
		case "state":
			states++
			// The built-in SM has swept: every cabled port is Active.
			if v != "PORT_ACTIVE (4)" {
				t.Errorf("state %q, want PORT_ACTIVE (4)", v)
			}
			if !strings.HasPrefix(line, "\t\t\tstate:\t\t\t") {
				t.Errorf("state line %q: want three tabs, the name, three tabs", line)
			}
		case "port_lid", "sm_lid":
			if v == "0" {
				t.Errorf("%s %q after the SM's sweep, want a LID", k, v)
			}
		}
	}
	if states != 2 || guids != 4 {
		t.Errorf("found %d state and %d GUID lines, want 2 and 4", states, guids)
	}
}

func TestDevinfoVerbose(t *testing.T) {
	out := mustRun(t, "devinfo", "-v", "-d", "pib_0")
	a := mustDefault(t).Device("pib_0").Query()
	for _, want := range []string{
		"\tphys_port_cnt:\t\t\t1\n\tmax_mr_size:\t\t\t0x",
		"\tmax_qp:\t\t\t\t131072\n",
		"\tmax_qp_wr:\t\t\t16351\n",
		"\tdevice_cap_flags:\t\t0x",
		"\t\t\t\t\tBAD_PKEY_CNTR\n",
		"\tmax_sge:\t\t\t32\n",
		"\tmax_cqe:\t\t\t4194303\n",
		"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
		"\tmax_total_mcast_qp_attach:\t1048576\n",
		"\tmax_srq_wr:\t\t\t16351\n",
		"\tmax_pkeys:\t\t\t32\n",
		"\tlocal_ca_ack_delay:\t\t15\n\t\tport:\t1\n",
		"\t\t\tlink_layer:\t\tInfiniBand\n\t\t\tmax_msg_sz:\t\t0x40000000\n",
		"\t\t\tport_cap_flags:\t\t0x",
		"\t\t\tmax_vl_num:\t\t1 (1)\n",
		"\t\t\tbad_pkey_cntr:\t\t0x0\n",
		"\t\t\tqkey_viol_cntr:\t\t0x0\n",
		"\t\t\tsm_sl:\t\t\t0\n",
		"\t\t\tpkey_tbl_len:\t\t32\n",
		"\t\t\tgid_tbl_len:\t\t16\n",
		"\t\t\tsubnet_timeout:\t\t18\n",
		"\t\t\tinit_type_reply:\t0\n",
		"\t\t\tactive_width:\t\t12X (8)\n",
		"\t\t\tactive_speed:\t\t10.0 Gbps (4)\n",
		"\t\t\tphys_state:\t\tLINK_UP (5)\n",
		// GID 0 is fe80:: + the port GUID (node GUID | 1); the other entries are null
		// and devinfo skips them.
		"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0002:c903:0000:0301\n\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo -v lacks %q", want)
		}
	}
	if n := strings.Count(out, "GID["); n != 1 {
		t.Errorf("%d GID lines, want 1", n)
	}
	// The flag names are exactly the set bits, in devinfo.c's order.
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "\t\t\t\t\t") {
			names = append(names, strings.TrimPrefix(line, "\t\t\t\t\t"))
		}
	}
	if got, want := strings.Join(names, ","), strings.Join(capFlagNames(a.DeviceCapFlags), ","); got != want {
		t.Errorf("cap flag lines %q, want %q", got, want)
	}
	// Without -v none of that appears.
	if out := mustRun(t, "devinfo"); strings.Contains(out, "max_qp") || strings.Contains(out, "GID[") {
		t.Errorf("devinfo without -v printed verbose fields:\n%s", out)
	}
}

func TestDevinfoPortAndList(t *testing.T) {
	out := mustRun(t, "devinfo", "-i", "1", "-d", "pib_1")
	if !strings.Contains(out, "\t\tport:\t1\n") {
		t.Errorf("-i 1 lost port 1:\n%s", out)
	}
	if _, errs, code := pibgw(t, "devinfo", "-i", "2"); code != 1 || !strings.Contains(errs, "invalid port 2") {
		t.Errorf("-i 2 on single-port HCAs: exit %d, stderr %q", code, errs)
	}
	if out := mustRun(t, "devinfo", "-l"); out != "2 HCAs found:\n\tpib_0\n\tpib_1\n\n" {
		t.Errorf("-l printed %q", out)
	}
}

func TestDevinfoJSON(t *testing.T) {
	out := mustRun(t, "devinfo", "--json")
	var devs []map[string]any
	if err := json.Unmarshal([]byte(out), &devs); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(devs) != 2 {
		t.Fatalf("%d devices, want 2", len(devs))
	}
	for i, d := range devs {
		if want := []string{"pib_0", "pib_1"}[i]; d["hca_id"] != want {
			t.Errorf("device %d hca_id %v, want %s", i, d["hca_id"], want)
		}
		if g, _ := d["node_guid"].(string); !guidRE.MatchString(g) {
			t.Errorf("node_guid %v", d["node_guid"])
		}
		if d["max_qp"] != float64(hca.MaxQP) || d["phys_port_cnt"] != float64(1) {
			t.Errorf("max_qp %v phys_port_cnt %v", d["max_qp"], d["phys_port_cnt"])
		}
		ports, _ := d["ports"].([]any)
		if len(ports) != 1 {
			t.Fatalf("ports %v", d["ports"])
		}
		p := ports[0].(map[string]any)
		if p["state"] != "PORT_ACTIVE" || p["port_lid"] != float64([]int{1, 3}[i]) || p["max_mtu"] != float64(4096) ||
			p["active_mtu"] != float64(4096) || p["phys_state"] != "LINK_UP" || p["sm_lid"] != float64(1) {
			t.Errorf("port %v", p)
		}
		if gids, _ := p["gids"].([]any); len(gids) != 1 || !strings.HasPrefix(gids[0].(string), "fe80:0000:0000:0000:") {
			t.Errorf("gids %v", p["gids"])
		}
	}
	// -d filters JSON too; the typed form round-trips.
	var typed []devJSON
	if err := json.Unmarshal([]byte(mustRun(t, "devinfo", "--json", "-d", "pib_1")), &typed); err != nil {
		t.Fatal(err)
	}
	if len(typed) != 1 || typed[0].HCAID != "pib_1" || typed[0].NodeGUID != "0002:c903:0000:0400" {
		t.Errorf("--json -d pib_1: %+v", typed)
	}
}

// A port's own state changes show: devinfo prints what the device reports, not a
// cached picture.
func TestDevinfoActivePort(t *testing.T) {
	f := mustDefault(t)
	p := f.Device("pib_1").Port(1)
	p.SetActiveMTU(hca.MTU2048)
	var out bytes.Buffer
	if err := devinfo(&out, f.Devices(), devinfoOptions{Device: "pib_1"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t2048 (4)\n",
		"\t\t\tsm_lid:\t\t\t1\n",
		"\t\t\tport_lid:\t\t3\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	var snap control.Device = f.Devices()[1]
	if snap.Name != "pib_1" || snap.Ports[0].Attr.LID != 3 {
		t.Errorf("snapshot %+v", snap)
	}
}

func TestGlobalFlags(t *testing.T) {
	if _, errs, code := pibgw(t, "--log-level", "loud", "devinfo"); code != 2 || !strings.Contains(errs, "--log-level") {
		t.Errorf("bad --log-level: exit %d, stderr %q", code, errs)
	}
	out, errs, code := pibgw(t, "--log-level", "debug", "devinfo", "-d", "pib_0")
	if code != 0 || !strings.HasPrefix(out, "hca_id:\tpib_0\n") {
		t.Errorf("--log-level debug: exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errs, "level=DEBUG") {
		t.Errorf("--log-level debug logged nothing: %q", errs)
	}
	if _, _, code := pibgw(t, "nosuchverb"); code == 0 {
		t.Error("unknown verb exited 0")
	}
}

func TestGUIDStr(t *testing.T) {
	for g, want := range map[uint64]string{
		0:                     "0000:0000:0000:0000",
		0x0002_c903_0000_0301: "0002:c903:0000:0301",
		0xffff_eeee_dddd_cccc: "ffff:eeee:dddd:cccc",
	} {
		if got := guidStr(g); got != want {
			t.Errorf("guidStr(%#x) = %q, want %q", g, got, want)
		}
	}
}

func TestCapFlagNames(t *testing.T) {
	got := capFlagNames(1<<1 | 1<<10 | 1<<11 | 1<<12 | 1<<30)
	want := []string{"BAD_PKEY_CNTR", "PORT_ACTIVE_EVENT", "SYS_IMAGE_GUID", "RC_RNR_NAK_GEN", "Unknown flags: 0x40000000"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func mustDefault(t *testing.T) *daemon.Fabric {
	t.Helper()
	f, err := inProcessFabric(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// field splits a devinfo line "\tname:\t\tvalue" into name and value.
func field(line string) (k, v string, ok bool) {
	k, v, ok = strings.Cut(strings.TrimLeft(line, "\t"), ":")
	return k, strings.TrimLeft(v, "\t"), ok
}

// compareLines reports the first differing lines, with tabs visible.
func compareLines(t *testing.T, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Errorf("line %d: got %q, want %q", i+1, gl, wl)
		}
	}
}
