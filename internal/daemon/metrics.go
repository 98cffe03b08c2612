package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The Prometheus metrics endpoint (daemon.metrics): every HCA port's counters (the
// PortCounters/PortCountersExtended ones perfquery reads, the violation counters and
// pibgw's drops by reason), every IPoIB interface's counters and the pitfall checks'
// counts, in the text exposition format (version 0.0.4), all of them counters.

// metricsServer is the running endpoint.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// ServeMetrics serves GET /metrics on addr ("127.0.0.1:9464"; port 0 picks one) until
// Close; Addr is where it listens.
func (d *Daemon) ServeMetrics(addr string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon.metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		d.writeMetrics(bw)
		bw.Flush()
	})
	m := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln}
	go m.srv.Serve(ln)
	d.log.Info("metrics endpoint", "addr", ln.Addr().String())
	return m, nil
}

// Addr is the endpoint's address.
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops the endpoint.
func (m *metricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = m.srv.Close()
	}
	return err
}

// metric is one counter family: its samples' label sets and values.
type metric struct {
	help    string
	samples []sample
}

type sample struct {
	labels string // `ca="pib_0",port="1"`, escaped
	value  uint64
}

// writeMetrics writes every family, sorted by name.
func (d *Daemon) writeMetrics(w io.Writer) {
	fams := map[string]*metric{}
	add := func(name, help, labels string, v uint64) {
		f := fams[name]
		if f == nil {
			f = &metric{help: help}
			fams[name] = f
		}
		f.samples = append(f.samples, sample{labels, v})
	}
	if f := d.Fabric; f != nil {
		for _, dev := range f.Devs {
			for _, p := range dev.Ports() {
				labels := label("ca", dev.Name()) + "," + label("port", strconv.Itoa(int(p.Num())))
				for name, v := range p.Counters().Snapshot() {
					add(portMetric(name), "HCA port counter "+name+" (pibgw stat, perfquery)", labels, v)
				}
			}
			for name, v := range dev.PitfallCounts() {
				add("pibgw_pitfalls_total", "pitfall checks that fired (pibgw manner)", label("ca", dev.Name())+","+label("check", name), v)
			}
		}
		if f.SA != nil && f.SM != nil {
			st, sm := f.SA.MulticastStats(), label("sm", f.SM.Port().Device().Name())
			add("pibgw_sa_mlid_exhausted_total", "multicast joins the SA refused: no free multicast LID", sm, st.MLIDExhausted)
			add("pibgw_sa_sendonly_refused_total", "send-only joins the SA refused: sa.DefaultMaxSendOnlyGroups groups without receivers", sm, st.SendOnlyRefused)
		}
	}
	for _, n := range d.interfaces() {
		for name, v := range n.describe().Counters {
			add("pibgw_ipoib_"+sanitize(name)+"_total", "IPoIB interface counter "+name+" (pibgw show)", label("iface", n.cfg.Name), v)
		}
	}
	names := make([]string, 0, len(fams))
	for name := range fams {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := fams[name]
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, f.help, name)
		slices.SortFunc(f.samples, func(a, b sample) int { return strings.Compare(a.labels, b.labels) })
		for _, s := range f.samples {
			fmt.Fprintf(w, "%s{%s} %d\n", name, s.labels, s.value)
		}
	}
}

// portMetric names a port counter's family: port_xmit_data → pibgw_port_xmit_data_total,
// drop_icrc → pibgw_port_drop_icrc_total.
func portMetric(name string) string {
	name = sanitize(name)
	if !strings.HasPrefix(name, "port_") {
		name = "port_" + name
	}
	return "pibgw_" + name + "_total"
}

// sanitize keeps a metric name to [a-zA-Z0-9_].
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// label is name="value" with the value escaped as the exposition format wants.
func label(name, value string) string {
	return name + `="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(value) + `"`
}
