package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pibgw/pibgw/internal/control"
)

// How `pibgw exec` gives its command the view: it starts itself again (sysfsHelperEnv
// set) in a mount namespace of its own — and, not root, in a user namespace whose only
// user is the caller, with CAP_SYS_ADMIN there — and that process, the helper, mounts a
// tmpfs over /sys/class with the real classes bound back into it and the view's
// infiniband, infiniband_mad and infiniband_verbs beside them, starts the command in
// that namespace, keeps the files current from the daemon until the command exits, and
// exits with its status. The namespace goes with the two processes; the host's /sys is
// never touched (the namespace's mounts are slaves of the host's, nothing propagates
// back).

// sysfsHelperEnv marks the helper process; its configuration comes on fd 3, and it
// answers on fd 4 "ok" or why the view could not be made.
const sysfsHelperEnv = "PIBGW_SYSFS_HELPER"

// sysfsRefresh is how often the helper rereads the daemon's values.
const sysfsRefresh = 250 * time.Millisecond

// sysfsHelperConfig is what `pibgw exec` passes the helper.
type sysfsHelperConfig struct {
	Control string        // the daemon's control socket
	Path    string        // the command
	Args    []string      // its argv
	Env     []string      // its environment
	Snap    sysfsSnapshot // the daemon's values when exec started
}

func init() {
	if os.Getenv(sysfsHelperEnv) != "" {
		os.Exit(sysfsHelper())
	}
}

// fetchSysfsSnapshot asks the daemon for the view's values.
func fetchSysfsSnapshot(ctx context.Context, cl *control.Client) (sysfsSnapshot, error) {
	var s sysfsSnapshot
	if err := cl.Do(ctx, control.Request{Verb: control.VerbDevinfo}, &s.Devices); err != nil {
		return s, err
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbShow}, &s.Interfaces); err != nil {
		return s, err
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbPerf}, &s.Perf); err != nil {
		return s, err
	}
	return s, nil
}

// sysfsNote is the line exec prints when its command runs without the view.
func sysfsNote(w io.Writer, why string) {
	fmt.Fprintf(w, "pibgw exec: no /sys/class/infiniband view for the command (%s); it runs anyway: "+
		"verbs and rdma_cm through the attach socket work, sysfs readers (ibstat, ibstatus, ibv_devinfo's board_id) see the host's /sys\n", why)
}

// execWithSysfs runs path under the view and returns its exit status, or ran false
// (after one line on w saying why) when the view cannot be made: then nothing ran.
func execWithSysfs(ctx context.Context, w io.Writer, controlSock, path string, args, env []string) (status int, ran bool) {
	snap, err := fetchSysfsSnapshot(ctx, control.NewClient(controlSock))
	if err != nil {
		sysfsNote(w, "the daemon's control socket: "+err.Error())
		return 0, false
	}
	if len(snap.Devices) == 0 {
		sysfsNote(w, "the daemon has no HCAs")
		return 0, false
	}
	self, err := os.Executable()
	if err != nil {
		sysfsNote(w, err.Error())
		return 0, false
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		sysfsNote(w, err.Error())
		return 0, false
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		sysfsNote(w, err.Error())
		return 0, false
	}
	defer stR.Close()
	helper := &exec.Cmd{Path: self, Args: []string{"pibgw-exec-sysfs"}, Env: append(os.Environ(), sysfsHelperEnv+"=1"),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{cfgR, stW}}
	sp := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if uid, gid := os.Geteuid(), os.Getegid(); uid != 0 {
		// A user namespace with the caller as its only user, and CAP_SYS_ADMIN (ambient,
		// so that it survives the helper's execve) to mount in the mount namespace it owns.
		sp.Cloneflags |= syscall.CLONE_NEWUSER
		sp.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		sp.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		sp.GidMappingsEnableSetgroups = false
		sp.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	helper.SysProcAttr = sp
	err = helper.Start()
	cfgR.Close()
	stW.Close()
	if err != nil {
		cfgW.Close()
		why := err.Error()
		if os.Geteuid() != 0 {
			why = "not root, and no user namespace: " + why
		}
		sysfsNote(w, why)
		return 0, false
	}
	json.NewEncoder(cfgW).Encode(sysfsHelperConfig{Control: controlSock, Path: path, Args: args, Env: env, Snap: snap})
	cfgW.Close()
	line, _ := bufio.NewReader(stR).ReadString('\n')
	if line = strings.TrimSpace(line); line != "ok" {
		helper.Wait()
		if line == "" {
			line = "the helper process failed"
		}
		sysfsNote(w, line)
		return 0, false
	}
	return waitForwarding(helper), true
}

// forwardedSignals are passed on to the command (a terminal's Ctrl-C reaches every
// process of the foreground group anyway).
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT}

// waitForwarding waits for cmd, passing it the signals this process gets, and returns its
// exit status (128 + the signal that killed it, as a shell reports it).
func waitForwarding(cmd *exec.Cmd) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	return exitStatus(cmd, err)
}

func exitStatus(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return 127
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// sysfsHelper is the helper process: it mounts the view, runs the command and keeps the
// view current.
func sysfsHelper() int {
	cfgF, stF := os.NewFile(3, "config"), os.NewFile(4, "status")
	var cfg sysfsHelperConfig
	if err := json.NewDecoder(cfgF).Decode(&cfg); err != nil {
		fmt.Fprintf(stF, "the helper's configuration: %v\n", err)
		return 125
	}
	cfgF.Close()
	v, err := mountSysfsView(sysfsTree(cfg.Snap))
	if err != nil {
		fmt.Fprintf(stF, "mounting the view: %v\n", err)
		return 125
	}
	// The command starts from this thread, whose credentials it inherits: without the
	// ambient CAP_SYS_ADMIN a user namespace gave the helper.
	runtime.LockOSThread()
	if os.Geteuid() != 0 {
		dropCaps()
	}
	cmd := &exec.Cmd{Path: cfg.Path, Args: cfg.Args, Env: cfg.Env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stF, "starting %s: %v\n", cfg.Path, err)
		return 127
	}
	fmt.Fprintln(stF, "ok")
	stF.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go v.keepCurrent(ctx, control.NewClient(cfg.Control))
	return waitForwarding(cmd)
}

// dropCaps clears this thread's ambient and inheritable capabilities, so that a command
// started from it has none.
func dropCaps() {
	unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		unix.Capset(&hdr, &data[0])
	}
}

// sysfsView is the mounted view: the tmpfs over /sys/class (root, an fd of its mount)
// and the files it holds now.
type sysfsView struct {
	root  int
	files map[string]string
}

// mountSysfsView mounts tree over /sys/class in this process's mount namespace.
func mountSysfsView(tree map[string]string) (*sysfsView, error) {
	// Nothing mounted here may propagate to the namespace it was copied from.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return nil, fmt.Errorf("making / a slave mount: %w", err)
	}
	ents, err := os.ReadDir("/sys/class")
	if err != nil {
		return nil, err
	}
	// The real classes, cloned before the tmpfs hides them, to be bound back into it.
	keep := map[string]int{}
	defer func() {
		for _, fd := range keep {
			unix.Close(fd)
		}
	}()
	for _, e := range ents {
		if slices.Contains(sysfsClasses, e.Name()) {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/sys/class/"+e.Name(), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return nil, fmt.Errorf("open_tree /sys/class/%s: %w", e.Name(), err)
		}
		keep[e.Name()] = fd
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "mode", "0755"); err != nil {
		return nil, fmt.Errorf("tmpfs mode: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("creating the tmpfs: %w", err)
	}
	root, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsmount: %w", err)
	}
	v := &sysfsView{root: root, files: map[string]string{}}
	for name := range keep {
		if err := unix.Mkdirat(root, name, 0o755); err != nil {
			return nil, err
		}
	}
	if err := v.apply(tree); err != nil {
		return nil, err
	}
	if err := unix.MoveMount(root, "", unix.AT_FDCWD, "/sys/class", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("mounting the tmpfs on /sys/class: %w", err)
	}
	for name, fd := range keep {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, "/sys/class/"+name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return nil, fmt.Errorf("binding /sys/class/%s back: %w", name, err)
		}
	}
	return v, nil
}

// apply makes the view's files tree's: new and changed files are written beside their
// place under a dot name and renamed over it (a reader sees the old or the new content,
// whole), files and directories gone are removed.
func (v *sysfsView) apply(tree map[string]string) error {
	for _, d := range sysfsDirs(tree) {
		if err := unix.Mkdirat(v.root, d, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	for p, content := range tree {
		if old, ok := v.files[p]; ok && old == content {
			continue
		}
		tmp := path.Join(path.Dir(p), ".pibgw-"+path.Base(p))
		fd, err := unix.Openat(v.root, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		_, err = unix.Write(fd, []byte(content))
		unix.Close(fd)
		if err == nil {
			err = unix.Renameat(v.root, tmp, v.root, p)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		v.files[p] = content
	}
	var gone []string
	for p := range v.files {
		if _, ok := tree[p]; !ok {
			gone = append(gone, p)
		}
	}
	if len(gone) > 0 {
		oldDirs := sysfsDirs(v.files)
		for _, p := range gone {
			unix.Unlinkat(v.root, p, 0)
			delete(v.files, p)
		}
		now := map[string]bool{}
		for _, d := range sysfsDirs(v.files) {
			now[d] = true
		}
		sort.Sort(sort.Reverse(sort.StringSlice(oldDirs))) // children before parents
		for _, d := range oldDirs {
			if !now[d] && !slices.Contains(sysfsClasses, d) {
				unix.Unlinkat(v.root, d, unix.AT_REMOVEDIR)
			}
		}
	}
	return nil
}

// keepCurrent rereads the daemon's values every sysfsRefresh until ctx ends; a daemon
// that stopped answering leaves the last values.
func (v *sysfsView) keepCurrent(ctx context.Context, cl *control.Client) {
	t := time.NewTicker(sysfsRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		snap, err := fetchSysfsSnapshot(rctx, cl)
		cancel()
		if err == nil {
			v.apply(sysfsTree(snap))
		}
	}
}
