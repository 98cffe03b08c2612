package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
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
			"ibv_*_pingpong programs, perftest, rping, ucmatose, udaddy and rdma_server/rdma_client run\n" +
			"their verbs and rdma_cm on the soft fabric with no kernel module. The libraries are looked\n" +
			"for in $PIBGW_LIBDIR, next to the pibgw binary, in build/lib of pibgw's source tree\n" +
			"(bash scripts/build-libs.sh), then in /usr/local/lib/pibgw. The attach socket is --attach,\n" +
			"else $PIBGW_ATTACH, else attach.sock beside --control's socket (/run/pibgw/attach.sock).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "attach", Usage: "the daemon's attach socket `PATH`", EnvVars: []string{"PIBGW_ATTACH"}},
			controlFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usagef(c, "no command given (pibgw exec -- CMD [ARGS...])")
			}
			sock := c.String("attach")
			if sock == "" {
				sock = filepath.Join(filepath.Dir(c.String("control")), "attach.sock")
			}
			if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
				return fmt.Errorf("exec: no attach socket at %s (is pibgw up running? --attach or PIBGW_ATTACH choose another)", sock)
			}
			dir, searched := findLibDir()
			if dir == "" {
				return fmt.Errorf("exec: %s not found (looked in %s); build it with bash scripts/build-libs.sh, or set PIBGW_LIBDIR",
					ibverbsLib, strings.Join(searched, ", "))
			}
			args := c.Args().Slice()
			path, err := exec.LookPath(args[0])
			if err != nil {
				return fmt.Errorf("exec: %w", err)
			}
			env := execEnv(os.Environ(), dir, sock)
			e.log.Debug("exec", "cmd", path, "libdir", dir, "attach", sock)
			return syscall.Exec(path, args, env)
		},
	}
}

// execEnv is env with dir first on LD_LIBRARY_PATH and PIBGW_ATTACH set to sock.
func execEnv(env []string, dir, sock string) []string {
	var out []string
	ld := dir
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "LD_LIBRARY_PATH="):
			if old := strings.TrimPrefix(kv, "LD_LIBRARY_PATH="); old != "" {
				ld += ":" + old
			}
		case strings.HasPrefix(kv, "PIBGW_ATTACH="):
		default:
			out = append(out, kv)
		}
	}
	return append(out, "LD_LIBRARY_PATH="+ld, "PIBGW_ATTACH="+sock)
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
