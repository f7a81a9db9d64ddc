package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
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
		"--unshare-net", "--unshare-cgroup-try", "--hostname", "sandbox"}
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
// first instruction; online, slirp4netns gives its namespace the internet
// before the command runs.
func (l *Local) startIsolated(sb Sandbox, p *execPlan, r *running, stdout, stderr *os.File) error {
	fds := &fdArgs{}
	defer fds.done()
	var infoR, blockW *os.File
	var args []string
	var err error
	if !p.offline {
		infoR, blockW, err = netPipes(fds, &args)
		if err != nil {
			return errorf(CodeExecFailed, err, "pipe")
		}
		defer infoR.Close()
		defer blockW.Close()
	}
	more, err := l.bwrapArgs(sb, p, fds)
	if err != nil {
		return errorf(CodeExecFailed, err, "prepare the sandbox's mounts")
	}
	args = append(args, more...)
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return errorf(CodeProvisioningFailed, err, "bwrap")
	}
	argv := append(append(append([]string{bwrap}, args...), "--"), p.argv...)
	path := bwrap
	if r.group != nil && !r.group.v2 {
		argv, path = shim(r.group.procsFiles(), argv), "/bin/sh"
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: "/", Env: p.env, Stdout: stdout, Stderr: stderr, ExtraFiles: fds.files,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	closeFD, err := useCgroupFD(cmd, r.group)
	if err != nil {
		return errorf(CodeExecFailed, err, "open the command's cgroup")
	}
	defer closeFD()
	goruntime.LockOSThread() // Pdeathsig follows the forking thread
	err = cmd.Start()
	goruntime.UnlockOSThread()
	if err != nil {
		return errorf(CodeExecFailed, err, "start %q", p.argv[0])
	}
	r.cmd = cmd
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	r.waitc = waitc
	fds.done()
	if !p.offline {
		if r.net, err = connect(infoR, blockW); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return errorf(CodeProvisioningFailed, err, "give the sandbox its network")
		}
	}
	return nil
}

// netPipes adds bwrap's info and block descriptors to args.
func netPipes(fds *fdArgs, args *[]string) (infoR, blockW *os.File, err error) {
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		infoR.Close()
		infoW.Close()
		return nil, nil, err
	}
	*args = append(*args, "--info-fd", fds.add(infoW, true), "--block-fd", fds.add(blockR, true))
	return infoR, blockW, nil
}

// connect reads the sandbox's pid from bwrap, attaches slirp4netns to its
// network namespace (host loopback disabled), makes private ranges and the
// host's addresses unreachable there, then lets the command run.
func connect(infoR, blockW *os.File) (*exec.Cmd, error) {
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	_ = infoR.SetReadDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPid == 0 {
		return nil, fmt.Errorf("bwrap did not report its sandbox (%v)", err)
	}
	if err := waitLoopback(info.ChildPid); err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	slirp := exec.Command("slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp",
		"--ready-fd=3", strconv.Itoa(info.ChildPid), "tap0")
	slirp.ExtraFiles = []*os.File{readyW}
	var serr bytes.Buffer
	slirp.Stderr = &serr
	slirp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	goruntime.LockOSThread()
	err = slirp.Start()
	goruntime.UnlockOSThread()
	readyW.Close()
	if err != nil {
		return nil, err
	}
	_ = readyR.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := readyR.Read(make([]byte, 1)); n != 1 {
		_ = slirp.Process.Kill()
		_ = slirp.Wait()
		return slirp, fmt.Errorf("slirp4netns: %v: %s", err, strings.TrimSpace(serr.String()))
	}
	if err := blockHost(info.ChildPid); err != nil {
		_ = slirp.Process.Kill()
		_ = slirp.Wait()
		return slirp, err
	}
	if _, err := blockW.Write([]byte{1}); err != nil {
		return slirp, err
	}
	return slirp, nil
}

// blockHost adds unreachable routes in pid's network namespace for the
// private ranges and every address of the host.
func blockHost(pid int) error {
	var batch strings.Builder
	for _, r := range blockedRanges {
		fmt.Fprintf(&batch, "route add unreachable %s\n", r)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			fmt.Fprintf(&batch, "route add unreachable %s/32\n", ipn.IP)
		}
	}
	cmd := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--net", "--", "ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("block the host's addresses in the sandbox (nsenter, ip): %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// waitLoopback waits until bwrap has set up the namespace's loopback (it
// does so while slirp4netns could already be configuring it otherwise).
func waitLoopback(pid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/fib_trie", pid))
		if err != nil {
			return fmt.Errorf("the sandbox ended before it had a network: %w", err)
		}
		if bytes.Contains(data, []byte("127.0.0.1")) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the sandbox's loopback did not come up")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
