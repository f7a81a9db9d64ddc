package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// insideRoot is where an isolated command sees its workspace (its HOME).
const insideRoot = "/workspace"

// slirpResolver is the DNS forwarder slirp4netns offers the namespace.
const slirpResolver = "10.0.2.3"

// blockedRanges are unreachable from an online sandbox: private, shared and
// link-local addresses (the host's own addresses are added per start).
var blockedRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "0.0.0.0/8"}

// fdArgs collects the files a bwrap command inherits and names them.
type fdArgs struct {
	files []*os.File
	close []*os.File
}

// add passes f to the child and returns its descriptor number there.
func (a *fdArgs) add(f *os.File, closeAfter bool) string {
	a.files = append(a.files, f)
	if closeAfter {
		a.close = append(a.close, f)
	}
	return strconv.Itoa(3 + len(a.files) - 1)
}

// data passes content as a file: a memfd (no inode made on the data
// directory's file system, whose inode allocator gets slow with the files
// made and removed per command), or an unlinked file in dir where the
// kernel has no memfd.
func (a *fdArgs) data(dir string, content []byte) (string, error) {
	var f *os.File
	if fd, err := unix.MemfdCreate("bwrap-data", unix.MFD_CLOEXEC); err == nil {
		f = os.NewFile(uintptr(fd), "bwrap-data")
	} else {
		if f, err = os.CreateTemp(dir, ".bwrap-data-*"); err != nil {
			return "", err
		}
		_ = os.Remove(f.Name())
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return "", err
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return "", err
	}
	return a.add(f, true), nil
}

func (a *fdArgs) done() {
	for _, f := range a.close {
		f.Close()
	}
}

// bwrapArgs are the namespaces and mounts of a command: one unprivileged
// bwrap, started as the sandbox's host user (no capabilities, no groups),
// makes the command's user namespace (where it is the step's user, with no
// capability: bwrap drops them all and sets no-new-privileges) and in it
// new mount, PID, IPC, UTS and cgroup namespaces (the network: joinNet's
// namespace, which belongs to the host's user namespace). The command sees
// the system view read-only, its workspace (at /workspace) and the
// sandbox's /tmp read-write, and a root that is read-only. The sources of
// its mounts that the host user could not reach (the data directory is
// 0700 root) are bound at st's staging directory first (stage.mount).
func (l *Local) bwrapArgs(sb Sandbox, p *execPlan, fds *fdArgs, st *stage) ([]string, error) {
	inside := strconv.Itoa(p.uid)
	args := []string{"--unshare-user", "--uid", inside, "--gid", inside, "--die-with-parent", "--new-session",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"}
	if p.asPid1 {
		args = append(args, "--as-pid-1")
	}
	args = append(args, systemView()...)
	args = append(args, "--proc", "/proc", "--dev-bind", st.addDev(), "/dev", "--bind", st.add(l.tmpDir(sb.Name)), "/tmp",
		"--bind", st.add(sb.Root), insideRoot, "--dir", "/var/tmp")
	for _, f := range p.readOnly {
		f = filepath.Clean(f)
		var parents []string
		for d := filepath.Dir(f); d != "/" && d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents { // traversable whatever the umask
			args = append(args, "--perms", "0755", "--dir", d)
		}
		args = append(args, "--ro-bind", st.add(f), f)
	}
	for _, b := range p.binds[1:] { // [0] is the workspace
		if err := chownTree(b[0], sb.HostUID); err != nil {
			return nil, err
		}
		args = append(args, "--bind", st.add(b[0]), b[1])
	}
	if len(p.sockets) > 0 { // traversable by the step's user
		args = append(args, "--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", ServiceSocketDir)
	}
	for _, s := range p.sockets {
		args = append(args, "--bind", st.add(s[0]), s[1])
	}
	for _, f := range []struct {
		path    string
		content []byte
	}{{"/etc/passwd", p.passwd}, {"/etc/group", p.group}, {"/etc/resolv.conf", []byte("nameserver " + slirpResolver + "\n")}} {
		fd, err := fds.data(l.root, f.content)
		if err != nil {
			return nil, err
		}
		args = append(args, "--perms", "0644", "--ro-bind-data", fd, f.path)
	}
	// The root (a tmpfs of bwrap's, owned by the step's user) and what
	// was made on it: read-only, as the system view. (/dev is root's.)
	args = append(args, "--remount-ro", "/", "--chdir", p.insideDir)
	return args, nil
}

// startIsolated starts an isolated command in its cgroup from the first
// instruction and in the network namespace n: in the sandbox's holder when
// it has one for the command's mounts (holder.go), else under a bwrap of
// its own, and then, when another command follows soon, a holder is made.
func (l *Local) startIsolated(sb Sandbox, p *execPlan, r *running, n *sandboxNet, stdout, stderr *os.File) error {
	key := l.holderKey(sb, p, r)
	if h := l.holderFor(sb, key); h != nil {
		if err := l.startEntered(p, r, h, n, stdout, stderr); err != nil {
			h.release()
			return err
		}
		r.holder = h
		return nil
	}
	if err := l.startBwrap(sb, p, r, n, stdout, stderr); err != nil {
		return err
	}
	if key != "" && r.nextSoon {
		l.makeHolder(sb, p, n, key)
	}
	return nil
}

// startBwrap starts a command under a bwrap of its own.
func (l *Local) startBwrap(sb Sandbox, p *execPlan, r *running, n *sandboxNet, stdout, stderr *os.File) error {
	fds := &fdArgs{}
	defer fds.done()
	st := &stage{}
	args, err := l.bwrapArgs(sb, p, fds, st)
	if err != nil {
		return errorf(CodeExecFailed, err, "prepare the sandbox's mounts")
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return errorf(CodeProvisioningFailed, err, "bwrap")
	}
	argv := append(append(append([]string{bwrap}, args...), "--"), p.argv...)
	path := bwrap
	host := uint32(sb.HostUID)
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: host, Gid: host}} // no supplementary groups
	env := p.env
	if r.group.needsShim() {
		// The shim writes into root's cgroup files, so it runs as root
		// and setpriv makes it the host user before bwrap. Both get none of
		// the step's variables (LD_PRELOAD would choose what a root process
		// loads, the sandbox's own files included): env sets them for bwrap
		// once setpriv made it the host user.
		id := strconv.Itoa(sb.HostUID)
		priv := []string{"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--inh-caps=-all",
			"--bounding-set=-all", "--no-new-privs", "--", enterEnv, "-i", "--"}
		argv = append(append(priv, p.env...), argv...)
		argv, path, attr.Credential = shim(r.group.procsFiles(), argv), "/bin/sh", nil
		env = []string{"PATH=/usr/bin:/bin"}
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: "/", Env: env, Stdout: stdout, Stderr: stderr, ExtraFiles: fds.files,
		SysProcAttr: attr}
	return startIn(cmd, n, r, p.argv[0], st.mount)
}
