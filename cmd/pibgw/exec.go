package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/internal/control"
)

// ibverbsLib is the library pibgw exec puts first on the program's library path.
const ibverbsLib = "libibverbs.so.1"

func execCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run an unmodified libibverbs or librdmacm program on the daemon's HCAs",
		ArgsUsage: "-- CMD [ARGS...]",
		Description: "Runs CMD with pibgw's libibverbs.so.1 and librdmacm.so.1 (same directory) found first\n" +
			"(LD_LIBRARY_PATH) and the daemon's attach socket in PIBGW_ATTACH, so that ibv_devinfo, the\n" +
			"ibv_*_pingpong programs, perftest, rping, ucmatose, udaddy, rdma_server/rdma_client and the\n" +
			"rsockets programs (rstream, rcopy; LD_PRELOAD=librspreload.so for a sockets program) run\n" +
			"their verbs and rdma_cm on the soft fabric with no kernel module. The libraries are looked\n" +
			"for in $PIBGW_LIBDIR, next to the pibgw binary, in build/lib of pibgw's source tree\n" +
			"(bash scripts/build-libs.sh), then in /usr/local/lib/pibgw. The attach socket is --attach,\n" +
			"else $PIBGW_ATTACH, else attach.sock beside --control's socket (/run/pibgw/attach.sock).\n" +
			"\n" +
			"--umad runs a libibumad program (infiniband-diags, opensm, ibping, perftest -g) through\n" +
			"the daemon's ibsim server (on unless [ibsim] enable = false): with pibgw's libibumad.so.3 (umad/\n" +
			"beside libibverbs.so.1) found first, its devices the daemon's HCAs (PIBGW_UMAD_CAS, --node's\n" +
			"first; default the SM's), IBSIM_SOCKNAME the daemon's. --umad2sim (or no libibumad.so.3)\n" +
			"preloads ibsim-utils' libumad2sim instead ($PIBGW_UMAD2SIM names another; SIM_HOST\n" +
			"--node's: an HCA, HCA/port, node description or port GUID), which cuts SA tables to one\n" +
			"MAD and writes ./sys-PID into the working directory, which must be writable. The verbs\n" +
			"libraries and the attach socket are set too when found (perftest links both).\n" +
			"\n" +
			"CMD sees the daemon's HCAs in /sys/class/infiniband, infiniband_verbs and infiniband_mad, in\n" +
			"the kernel's formats (ibstat, ibstatus, ibv_devinfo's board_id, the IPoIB interface of a port\n" +
			"in /sys/class/infiniband/pib_0/device/net/): a tmpfs mounted over /sys/class in a mount\n" +
			"namespace of CMD's own (the rest of /sys/class bound back), kept current from the control\n" +
			"socket every 250 ms while CMD runs; CMD keeps exec's process ID. Not root, pibgw exec makes a\n" +
			"user namespace for it and runs CMD as its child (CMD keeps its user); where it cannot, or the\n" +
			"control socket does not answer, it says so in one line and runs CMD with the host's /sys.\n" +
			"--no-sysfs runs CMD without the view.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "attach", Usage: "the daemon's attach socket `PATH`", EnvVars: []string{"PIBGW_ATTACH"}},
			&cli.BoolFlag{Name: "umad", Usage: "run a libibumad program through the daemon's ibsim server (pibgw's libibumad.so.3)"},
			&cli.BoolFlag{Name: "umad2sim", Usage: "with --umad: preload ibsim-utils' libumad2sim instead of pibgw's libibumad.so.3"},
			&cli.BoolFlag{Name: "no-sysfs", Usage: "run CMD with the host's /sys, without the view of the daemon's HCAs in /sys/class/infiniband*"},
			&cli.StringFlag{Name: "node", Usage: "with --umad: the `NODE` to attach to (pib_1; libumad2sim also takes pib_1/2, a node description, a port GUID)"},
			controlFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usagef(c, "no command given (pibgw exec -- CMD [ARGS...])")
			}
			if c.String("node") != "" && !c.Bool("umad") {
				return usagef(c, "--node chooses the node of a --umad program")
			}
			if c.Bool("umad2sim") && !c.Bool("umad") {
				return usagef(c, "--umad2sim chooses how a --umad program attaches")
			}
			sock := c.String("attach")
			if sock == "" {
				sock = filepath.Join(filepath.Dir(c.String("control")), "attach.sock")
			}
			dir, searched := findLibDir()
			env := os.Environ()
			if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
				if !c.Bool("umad") {
					return fmt.Errorf("exec: no attach socket at %s (is pibgw up running? --attach or PIBGW_ATTACH choose another)", sock)
				}
			} else if dir == "" {
				if !c.Bool("umad") {
					return fmt.Errorf("exec: %s not found (looked in %s); build it with bash scripts/build-libs.sh, or set PIBGW_LIBDIR",
						ibverbsLib, strings.Join(searched, ", "))
				}
			} else {
				env = execEnv(env, dir, sock)
			}
			if c.Bool("umad") {
				var err error
				if env, err = umadEnv(c, env, dir); err != nil {
					return err
				}
			}
			args := c.Args().Slice()
			path, err := exec.LookPath(args[0])
			if err != nil {
				return fmt.Errorf("exec: %w", err)
			}
			e.log.Debug("exec", "cmd", path, "libdir", dir, "attach", sock)
			if !c.Bool("no-sysfs") {
				if status, ran := execWithSysfs(c.Context, e.stderr, c.String("control"), path, args, env); ran {
					os.Exit(status)
				}
			}
			return syscall.Exec(path, args, env)
		},
	}
}

// execEnv is env with dir first on LD_LIBRARY_PATH and PIBGW_ATTACH set to sock.
func execEnv(env []string, dir, sock string) []string {
	return withEnv(env, envVar{"LD_LIBRARY_PATH", dir, true}, envVar{"PIBGW_ATTACH", sock, false})
}

// envVar is a variable withEnv sets: to val, or with prepend to val before the old
// value (a colon-separated list such as LD_LIBRARY_PATH or LD_PRELOAD).
type envVar struct {
	name, val string
	prepend   bool
}

// withEnv returns env with vars set, in their order after the rest.
func withEnv(env []string, vars ...envVar) []string {
	out := make([]string, 0, len(env)+len(vars))
	vals := make([]string, len(vars))
	for i, v := range vars {
		vals[i] = v.val
	}
	for _, kv := range env {
		k, old, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(vars, func(v envVar) bool { return v.name == k })
		switch {
		case i < 0:
			out = append(out, kv)
		case vars[i].prepend && old != "":
			vals[i] += ":" + old
		}
	}
	for i, v := range vars {
		out = append(out, v.name+"="+vals[i])
	}
	return out
}

// umadEnv is env for a libibumad program attached through the daemon's ibsim server:
// pibgw's libibumad.so.3 from dir first on LD_LIBRARY_PATH with the daemon's HCAs in
// PIBGW_UMAD_CAS (--node's first), or (--umad2sim, or no such library) libumad2sim
// preloaded with SIM_HOST --node's; IBSIM_SOCKNAME the daemon's.
func umadEnv(c *cli.Context, env []string, dir string) ([]string, error) {
	var st control.Status
	if err := client(c).Do(c.Context, control.Request{Verb: control.VerbStatus}, &st); err != nil {
		return nil, fmt.Errorf("exec --umad: %w", err)
	}
	if st.IBSim == "" {
		return nil, fmt.Errorf("exec --umad: the daemon serves no ibsim protocol; set [ibsim] enable = true in its config")
	}
	if umadDir := findUmadLib(dir); umadDir != "" && !c.Bool("umad2sim") {
		cas := st.IBSimCAs
		if n := c.String("node"); n != "" {
			if !slices.Contains(cas, n) {
				return nil, fmt.Errorf("exec --umad: no HCA %q (the daemon has %s; --umad2sim attaches to a port, switch or GUID)", n, strings.Join(cas, ", "))
			}
			cas = append([]string{n}, slices.DeleteFunc(slices.Clone(cas), func(s string) bool { return s == n })...)
		}
		return withEnv(env, envVar{"LD_LIBRARY_PATH", umadDir, true}, envVar{"IBSIM_SOCKNAME", st.IBSim, false},
			envVar{"PIBGW_UMAD_CAS", strings.Join(cas, ","), false}), nil
	}
	lib := findUmad2sim()
	if lib == "" {
		return nil, fmt.Errorf("exec --umad: libumad2sim.so not found (Debian: apt install libumad2sim0; or set PIBGW_UMAD2SIM)")
	}
	if err := unix.Access(".", unix.W_OK); err != nil {
		wd, _ := os.Getwd()
		return nil, fmt.Errorf("exec --umad: libumad2sim writes ./sys-PID into the working directory, and %s is not writable: cd to one that is", wd)
	}
	vars := []envVar{{"IBSIM_SOCKNAME", st.IBSim, false}, {"LD_PRELOAD", lib, true}}
	if n := c.String("node"); n != "" {
		vars = append(vars, envVar{"SIM_HOST", n, false}) // else the user's SIM_HOST stays
	}
	return withEnv(env, vars...), nil
}

// findUmadLib returns the directory of pibgw's libibumad.so.3 (umad/ beside the verbs
// libraries, so that a program run without --umad, or with --umad2sim, keeps the
// system's): under dir, else under the first of findLibDir's places that has it; ""
// when none has.
func findUmadLib(dir string) string {
	_, searched := findLibDir()
	for _, d := range append([]string{dir}, searched...) {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "umad", "libibumad.so.3")); err == nil {
			return filepath.Join(d, "umad")
		}
	}
	return ""
}

// findUmad2sim is libumad2sim.so: $PIBGW_UMAD2SIM, else where Debian's and other
// distributions' packages put it; "" if none is there.
func findUmad2sim() string {
	cands := []string{os.Getenv("PIBGW_UMAD2SIM")}
	m, _ := filepath.Glob("/usr/lib/*/umad2sim/libumad2sim.so")
	cands = append(cands, m...)
	cands = append(cands, "/usr/lib64/umad2sim/libumad2sim.so", "/usr/lib/umad2sim/libumad2sim.so", "/usr/local/lib/umad2sim/libumad2sim.so")
	for _, p := range cands {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// findLibDir returns the first directory holding libibverbs.so.1 among $PIBGW_LIBDIR, the
// pibgw binary's directory, build/lib of the source tree (found upwards from the binary
// and from the working directory), and /usr/local/lib/pibgw; and the places it looked.
func findLibDir() (string, []string) {
	var dirs []string
	if d := os.Getenv("PIBGW_LIBDIR"); d != "" {
		dirs = append(dirs, d)
	}
	var starts []string
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			dirs = append(dirs, filepath.Dir(exe))
			starts = append(starts, filepath.Dir(exe))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, s := range starts {
		if root := sourceRoot(s); root != "" {
			dirs = append(dirs, filepath.Join(root, "build", "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/lib/pibgw")
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, ibverbsLib)); err == nil && st.Mode().IsRegular() {
			abs, err := filepath.Abs(d)
			if err != nil {
				abs = d
			}
			return abs, dirs
		}
	}
	return "", dirs
}

// sourceRoot is the directory at or above dir whose go.mod is pibgw's, or "".
func sourceRoot(dir string) string {
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/pibgw/pibgw\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
