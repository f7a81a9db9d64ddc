package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
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

// data passes content as a file (an unlinked temporary file).
func (a *fdArgs) data(dir string, content []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".bwrap-data-*")
	if err != nil {
		return "", err
	}
	_ = os.Remove(f.Name())
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

// bwrapArgs are the namespaces and mounts of a command. bwrap runs as
// root, so it can bind the workspace from the data directory (0700): the
// system view read-only, the workspace (at /workspace) and the
// sandbox's /tmp read-write, new PID, network, IPC, UTS and cgroup
// namespaces. Inside, setpriv becomes the sandbox's host user (no
// capabilities, no new privileges) and a second, unprivileged bwrap gives
// the command its own user namespace, where it is the step's user.
func (l *Local) bwrapArgs(sb Sandbox, p *execPlan, fds *fdArgs) ([]string, error) {
	args := []string{"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--unshare-cgroup-try", "--hostname", "sandbox"} // the network: joinNet's namespace
	args = append(args, systemView()...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--bind", l.tmpDir(sb.Name), "/tmp", "--bind", sb.Root, insideRoot,
		"--dir", "/var/tmp")
	for _, f := range p.readOnly {
		f = filepath.Clean(f)
		var parents []string
		for d := filepath.Dir(f); d != "/" && d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents { // traversable whatever the umask
			args = append(args, "--perms", "0755", "--dir", d)
		}
		args = append(args, "--ro-bind", f, f)
	}
	for _, b := range p.binds[1:] { // [0] is the workspace
		if err := chownTree(b[0], sb.HostUID); err != nil {
			return nil, err
		}
		args = append(args, "--bind", b[0], b[1])
	}
	if len(p.sockets) > 0 { // traversable by the step's user
		args = append(args, "--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", ServiceSocketDir)
	}
	for _, s := range p.sockets {
		args = append(args, "--bind", s[0], s[1])
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
	host := strconv.Itoa(sb.HostUID)
	inside := strconv.Itoa(p.uid)
	args = append(args, "--", "setpriv", "--reuid="+host, "--regid="+host, "--clear-groups", "--inh-caps=-all",
		"--bounding-set=-all", "--no-new-privs", "--", "bwrap", "--unshare-user", "--uid", inside, "--gid", inside,
		"--die-with-parent", "--dev-bind", "/", "/", "--chdir", p.insideDir)
	return args, nil
}

// startIsolated starts a command under bwrap, in its cgroup from the
// first instruction and in the network namespace n.
func (l *Local) startIsolated(sb Sandbox, p *execPlan, r *running, n *sandboxNet, stdout, stderr *os.File) error {
	fds := &fdArgs{}
	defer fds.done()
	args, err := l.bwrapArgs(sb, p, fds)
	if err != nil {
		return errorf(CodeExecFailed, err, "prepare the sandbox's mounts")
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return errorf(CodeProvisioningFailed, err, "bwrap")
	}
	argv := append(append(append([]string{bwrap}, args...), "--"), p.argv...)
	path := bwrap
	if r.group != nil && !r.group.v2 && !traceJoin(r.group) {
		argv, path = shim(r.group.procsFiles(), argv), "/bin/sh"
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: "/", Env: p.env, Stdout: stdout, Stderr: stderr, ExtraFiles: fds.files,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	closeFD, err := useCgroupFD(cmd, r.group)
	if err != nil {
		return errorf(CodeExecFailed, err, "open the command's cgroup")
	}
	defer closeFD()
	r.cmd = cmd
	return startOn(cmd, n, r, p.argv[0])
}
