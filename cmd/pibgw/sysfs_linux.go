package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// How `pibgw exec` gives its command the view. As root, on the thread that will execve
// the command: it unshares its mount namespace, makes / a slave of the host's (nothing
// mounted here propagates back; the host's /sys never changes), mounts a tmpfs over
// /sys/class with the real classes bound back into it and the view's infiniband,
// infiniband_mad and infiniband_verbs beside them, starts a refresher (pibgw again, in a
// session of its own, detached: not a child of the command) that keeps the files current
// from the daemon until the command exits, and execs the command, which keeps exec's
// process ID as before. Not root, a mount namespace needs a user namespace, which a
// multi-threaded process cannot enter: exec starts itself again (a supervisor) in new
// user and mount namespaces — the caller the only user, with CAP_SYS_ADMIN there — and
// the supervisor mounts the view, runs the command as its child with no capabilities,
// refreshes the files and exits with the command's status. Either namespace goes with
// the processes in it.

// sysfsHelperEnv marks pibgw started as one of the view's helpers: "supervise" (it
// answers on fd 4 "ok" or why the view could not be made), "launch" (it starts the
// refresher and exits) or "refresh" (the command's pidfd on fd 4). The configuration
// comes on fd 3.
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
	switch os.Getenv(sysfsHelperEnv) {
	case "":
	case "launch":
		os.Exit(sysfsLaunch())
	case "refresh":
		os.Exit(sysfsRefresher())
	default:
		os.Exit(sysfsHelper())
	}
}

// fetchSysfsSnapshot asks the daemon for the view's values.
func fetchSysfsSnapshot(ctx context.Context, cl *control.Client) (sysfsSnapshot, error) {
	var s sysfsSnapshot
	if err := cl.Do(ctx, control.Request{Verb: control.VerbDevinfo}, &s.Devices); err != nil {
		return s, err
	}
	var all []control.Interface
	if err := cl.Do(ctx, control.Request{Verb: control.VerbShow}, &all); err != nil {
		return s, err
	}
	for _, ifc := range all {
		if netdevHere(ifc) {
			s.Interfaces = append(s.Interfaces, ifc)
		}
	}
	if err := cl.Do(ctx, control.Request{Verb: control.VerbPerf}, &s.Perf); err != nil {
		return s, err
	}
	return s, nil
}

// netdevHere says whether the IPoIB interface ifc is a network device of this process's
// network namespace: one of its name there with link type infiniband (ARPHRD_INFINIBAND,
// 32; the TUN device has no hardware address to compare). The kernel's sysfs lists under a
// device's net/ only the netdevs of the reading namespace, so a program that maps a device
// to its netdev finds one it can use (`ip addr show`): not a userspace interface inside the
// daemon, nor a TUN device in another namespace.
func netdevHere(ifc control.Interface) bool {
	if ifc.Stack != "kernel" {
		return false
	}
	if _, err := net.InterfaceByName(ifc.Name); err != nil {
		return false
	}
	typ, err := os.ReadFile("/sys/class/net/" + ifc.Name + "/type")
	return err == nil && strings.TrimSpace(string(typ)) == "32"
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
	cfg := sysfsHelperConfig{Control: controlSock, Path: path, Args: args, Env: env, Snap: snap}
	if os.Geteuid() == 0 {
		execInSysfsView(w, self, cfg) // returns only when the view could not be made
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
	helper := &exec.Cmd{Path: self, Args: []string{"pibgw-exec-sysfs"}, Env: append(os.Environ(), sysfsHelperEnv+"=supervise"),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{cfgR, stW}}
	// A user namespace with the caller as its only user, and CAP_SYS_ADMIN (ambient, so
	// that it survives the helper's execve) to mount in the mount namespace it owns.
	uid, gid := os.Geteuid(), os.Getegid()
	helper.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		AmbientCaps:                []uintptr{unix.CAP_SYS_ADMIN}}
	err = helper.Start()
	cfgR.Close()
	stW.Close()
	if err != nil {
		cfgW.Close()
		sysfsNote(w, "not root, and no user namespace: "+err.Error())
		return 0, false
	}
	json.NewEncoder(cfgW).Encode(cfg)
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

// execInSysfsView mounts the view in a mount namespace of this thread's own and execs
// cfg's command from it, with a refresher started; it returns, after one line on w
// saying why, when the view cannot be made — back in the mount namespace it started in.
func execInSysfsView(w io.Writer, self string, cfg sysfsHelperConfig) {
	runtime.LockOSThread() // never unlocked: this thread's namespace is the command's
	orig, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		sysfsNote(w, err.Error())
		return
	}
	defer unix.Close(orig)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		sysfsNote(w, "a mount namespace: "+err.Error())
		return
	}
	if _, err := mountSysfsView(sysfsTree(cfg.Snap)); err != nil {
		unix.Setns(orig, unix.CLONE_NEWNS)
		sysfsNote(w, err.Error())
		return
	}
	if err := startRefresher(self, cfg); err != nil {
		fmt.Fprintf(w, "pibgw exec: the view of /sys/class/infiniband keeps the values of now: %v\n", err)
	}
	err = syscall.Exec(cfg.Path, cfg.Args, cfg.Env)
	fmt.Fprintf(w, "pibgw exec: %s: %v\n", cfg.Path, err)
	os.Exit(127)
}

// startRefresher starts, from this thread (so in its mount namespace), pibgw in "launch"
// mode, which starts the refresher and exits, and waits for it: the refresher is no
// child of the command.
func startRefresher(self string, cfg sysfsHelperConfig) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := &exec.Cmd{Path: self, Args: []string{"pibgw-exec-sysfs-launch"}, Env: append(os.Environ(), sysfsHelperEnv+"=launch"),
		ExtraFiles: []*os.File{r}}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	cfg.Env, cfg.Args = nil, nil // the refresher needs the daemon and the values only
	json.NewEncoder(w).Encode(cfg)
	w.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("starting the refresher: %w", err)
	}
	return nil
}

// sysfsLaunch is the "launch" helper: it opens a pidfd of its parent (exec, about to
// become the command) and starts the refresher with it, in a session of its own.
func sysfsLaunch() int {
	cfg, err := io.ReadAll(os.NewFile(3, "config"))
	if err != nil {
		return 1
	}
	pidfd, err := unix.PidfdOpen(os.Getppid(), 0)
	if err != nil {
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 1
	}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{"pibgw-exec-sysfs-refresh"}, Env: append(os.Environ(), sysfsHelperEnv+"=refresh"),
		ExtraFiles: []*os.File{r, os.NewFile(uintptr(pidfd), "pidfd")}, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		return 1
	}
	w.Write(cfg)
	w.Close()
	cmd.Process.Release()
	return 0
}

// sysfsRefresher is the "refresh" helper: it rewrites the view's files from the daemon
// every sysfsRefresh until the command (its pidfd on fd 4) exits.
func sysfsRefresher() int {
	var cfg sysfsHelperConfig
	if err := json.NewDecoder(os.NewFile(3, "config")).Decode(&cfg); err != nil {
		return 1
	}
	root, err := unix.Open("/sys/class", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 1
	}
	v := &sysfsView{root: root, files: sysfsTree(cfg.Snap)}
	cl := control.NewClient(cfg.Control)
	pfd := []unix.PollFd{{Fd: 4, Events: unix.POLLIN}}
	for {
		if n, err := unix.Poll(pfd, int(sysfsRefresh/time.Millisecond)); n > 0 || err != nil && !errors.Is(err, unix.EINTR) {
			return 0 // the command exited
		}
		v.refresh(context.Background(), cl)
	}
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

// sysfsHelper is the "supervise" helper (not root, in its user and mount namespaces): it
// mounts the view, runs the command and keeps the view current.
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
		v.refresh(ctx, cl)
	}
}

// refresh rewrites the view from the daemon's values now; a daemon that does not
// answer leaves the last ones.
func (v *sysfsView) refresh(ctx context.Context, cl *control.Client) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	snap, err := fetchSysfsSnapshot(ctx, cl)
	cancel()
	if err == nil {
		v.apply(sysfsTree(snap))
	}
}
